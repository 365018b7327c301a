"""The real server (`infill-lsp serve`) with the scripted backend in place of each model, for
the faults the real models cannot be made to show: a backend that raises while it generates.

Started by the tests as a process of its own (`FAULT_SERVER_COMMAND`); the environment says
what the scripted models do: `INFILL_TEST_FAIL_AFTER` tokens, then a RuntimeError.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engine import models
from engine.backends.fake import FakeBackend
from lsp_server import cli

#: A chat template, so that the scripted model can serve the chat role too.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

#: Run from the repository root (the tests' working directory), which `-c` puts on sys.path.
FAULT_SERVER_COMMAND = [
    sys.executable,
    "-c",
    f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__')",
]


def scripted_backend(spec: models.ModelSpec) -> FakeBackend:
    """What `engine.models.load_backend` returns in this server, whatever the spec names."""
    return FakeBackend(
        script=["value + 1 if value else 0\n"],
        fail_after=int(os.environ.get("INFILL_TEST_FAIL_AFTER", "3")),
        template=CHAT_TEMPLATE,
        name=spec.path.name,
    )


if __name__ == "__main__":
    models.load_backend = scripted_backend
    sys.exit(cli.main(["serve"]))
