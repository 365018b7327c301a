"""The real server with the scripted model (`serve --backend scripted`, see
tests/scripted_backend.py): script files written for one test, the command that starts the
server on them (through tests/scripted_cli.py, which offers the scripted backend), and what the
scripted model recorded of each call it served."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsp_helpers import wait_until

#: `infill-lsp serve` with the scripted backend offered. Run as a script, not with `-P -m` as
#: the shipped server is (lsp_server/client.py): Python puts the script's own folder, tests/,
#: first on sys.path, where the launcher finds the scripted backend.
SCRIPTED_SERVER_COMMAND = (
    sys.executable,
    str(Path(__file__).with_name("scripted_cli.py")),
    "serve",
)


@dataclass(frozen=True)
class ScriptedModel:
    """One script file (one model) and the file where it records its calls."""

    path: Path
    record: Path

    def events(self) -> list[dict[str, Any]]:
        """What the model recorded so far: a "start" and an "end" event per call."""
        if not self.record.exists():
            return []
        with self.record.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def starts(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == "start"]

    def release(self, hold: str) -> None:
        """Let an entry held on `hold` answer (`{"hold": name}` in the script)."""
        (self.path.parent / hold).touch()

    async def ended(self, calls: int) -> list[dict[str, Any]]:
        """The events once `calls` calls have ended (the worker may close a call just after
        the response that needed it went out)."""
        await wait_until(
            lambda: sum(e["event"] == "end" for e in self.events()) >= calls,
            f"{calls} scripted calls to end",
        )
        return self.events()


def write_script(folder: Path, name: str, entries: Sequence[Any], **options: Any) -> ScriptedModel:
    """A script file `name`.json in `folder` that plays `entries` (tests/scripted_backend.py
    says what an entry and each option may be) and records its calls beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    record = f"{name}.calls.jsonl"
    path.write_text(
        json.dumps({"name": name, "script": list(entries), "record": record, **options}),
        encoding="utf-8",
    )
    return ScriptedModel(path=path, record=folder / record)


def scripted_command(completion: ScriptedModel, chat: ScriptedModel | None = None) -> list[str]:
    """The server with `completion` and `chat` as its models (the same file twice, or no
    chat: one model serving both roles)."""
    chat = chat or completion
    return [
        *SCRIPTED_SERVER_COMMAND,
        "--backend",
        "scripted",
        "--model",
        str(completion.path),
        "--chat-model",
        str(chat.path),
    ]
