"""`infill-lsp` with the scripted backend offered: the command the tests start the real server
(or `generate`, `doctor`, `engine`) with on scripted models, `python tests/scripted_cli.py
serve --backend scripted --model coder.json --chat-model chat.json` (tests/scripted_lsp.py
builds it).

It registers tests/scripted_backend.py with the model loader (engine/models.py
`register_backend`) and runs the real command line, whose `--backend` then takes `scripted`;
the shipped `infill-lsp` never offers it, and the editors' settings never do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scripted_backend import SCRIPTED_BACKEND, load_scripted_model

from engine.models import register_backend
from lsp_server import cli


def check(argv: Sequence[str]) -> None:
    """What the command line cannot know of the scripted backend: its models are script
    files, and there is no default script, so both roles must name one. A usage error of the
    real command (status 2) when they do not."""
    flags = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in ("--backend", "--model", "--chat-model"):
        flags.add_argument(flag)
    args, _ = flags.parse_known_args(argv)
    if args.backend == SCRIPTED_BACKEND and not (args.model and args.chat_model):
        cli.build_parser().error("--backend scripted needs --model and --chat-model (script files)")


def main(argv: Sequence[str] | None = None) -> int:
    """`infill-lsp ARGV` with `--backend scripted` offered (already registered, in a test's own
    process, or registered here)."""
    register_backend(SCRIPTED_BACKEND, load_scripted_model)
    argv = list(sys.argv[1:] if argv is None else argv)
    check(argv)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
