"""`python -m engine.api`: a shared engine, as `engine.shared` starts one for the language
servers of the user's editor windows (not a command users type: `infill-lsp engine` is).

It takes the model options as one JSON object (the fields of `ModelOptions`), so that what the
starting language server settled is what the engine loads, with no second parsing of flags; it
listens on the Unix domain socket it is given, and exits `--idle-exit` seconds after its last
client left.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from engine.specs import ModelOptions

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.api")
    parser.add_argument("--socket", type=Path, required=True, help="the Unix socket to listen on")
    parser.add_argument("--idle-exit", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--options", default="{}", help="ModelOptions' fields as JSON")
    args = parser.parse_args(argv)
    try:
        given = json.loads(args.options)
        known = {f.name for f in dataclasses.fields(ModelOptions)}
        if not isinstance(given, dict) or not set(given) <= known:
            raise ValueError(f"the options must be an object with keys among {sorted(known)}")
        options = ModelOptions(**given)
    except (ValueError, TypeError) as e:
        parser.error(f"--options: {e}")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=LOG_FORMAT)
    from engine.api.serve import run_server

    return run_server(options, socket_path=args.socket, idle_exit=args.idle_exit)


if __name__ == "__main__":
    sys.exit(main())
