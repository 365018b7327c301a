"""tests/scripted_cli.py under an audit hook (`sys.addaudithook`): every file the process opens
and every folder it lists, one JSON line each, appended to the file `INFILL_AUDIT_FILE` names
(opened before the hook, so that its own opening is not in it). For the test that the language
server reads nothing of the user's disk (tests/lsp_server/test_audited_e2e.py)."""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

_RECORD = open(os.environ["INFILL_AUDIT_FILE"], "a", encoding="utf-8", buffering=1)  # noqa: SIM115
#: The events that touch the disk by name: opening a file, listing or walking a folder.
_EVENTS = {"open", "os.listdir", "os.scandir", "glob.glob", "os.walk", "shutil.copyfile"}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _EVENTS or not args:
        return
    where = args[0]
    if isinstance(where, int) or where is None:
        return  # a descriptor already open (os.fdopen), or the current folder's listing
    _RECORD.write(json.dumps({"event": event, "path": os.fsdecode(where)}) + "\n")


if __name__ == "__main__":
    sys.addaudithook(_hook)
    sys.argv[0] = str(Path(__file__).with_name("scripted_cli.py"))
    runpy.run_path(sys.argv[0], run_name="__main__")
