"""The real server (`infill-lsp serve`) with the scripted backend in place of each model, for
the faults the real models cannot be made to show: a backend that raises while it generates.

Started by the tests as a process of its own (`fault_server_command`); the environment says
what the scripted models do: `INFILL_TEST_FAIL_AFTER` tokens, then a RuntimeError (default
3; empty: never); `INFILL_TEST_STEP_SECONDS` per token (a token that takes longer than the
engine waits for its worker is a backend that hangs); `INFILL_TEST_CLOSE_TIMEOUT`, how long
closing waits for a worker; `INFILL_TEST_LOAD_SECONDS` that a model's load takes (a load
in progress when the client shuts the server down).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Generator, Sequence
from pathlib import Path

from fake_backend import FakeBackend

from engine import engine, models
from engine.specs import ModelSpec
from engine.types import SamplingParams
from lsp_server import cli

#: A chat template, so that the scripted model can serve the chat role too.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def fault_server_command(**environ: str) -> list[str]:
    """The command that starts this server with `environ` (`fail_after="3"` sets
    INFILL_TEST_FAIL_AFTER), run from the repository root (the tests' working directory),
    which `-c` puts on sys.path; tests/ goes there too, for the fake backend."""
    variables = {f"INFILL_TEST_{name.upper()}": value for name, value in environ.items()}
    script = Path(__file__).resolve()
    return [
        sys.executable,
        "-c",
        f"import os, runpy, sys; sys.path.insert(1, {str(script.parent)!r}); "
        f"os.environ.update({variables!r}); runpy.run_path({str(script)!r}, run_name='__main__')",
    ]


#: Logged (and so sent to the client) when the scripted model starts generating.
GENERATING = "scripted model: generating"


class ScriptedBackend(FakeBackend):
    """The scripted backend, saying when it starts to generate (a test waits for that)."""

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        logging.getLogger("engine.fault_server").info(GENERATING)
        return FakeBackend.iter_token_ids(
            self, prompt_ids, sampling, cancelled, cache_key=cache_key
        )


def scripted_backend(spec: ModelSpec, progress: object = None) -> FakeBackend:
    """What `engine.models.load_backend` returns in this server, whatever the spec names (a
    load's progress, which only a hub model has, is not told)."""
    fail_after = os.environ.get("INFILL_TEST_FAIL_AFTER", "3")
    time.sleep(float(os.environ.get("INFILL_TEST_LOAD_SECONDS", "0")))
    return ScriptedBackend(
        script=["value + 1 if value else 0\n"],
        fail_after=int(fail_after) if fail_after else None,
        step_seconds=float(os.environ.get("INFILL_TEST_STEP_SECONDS", "0")),
        template=CHAT_TEMPLATE,
        name=spec.path.name,
    )


if __name__ == "__main__":
    models.load_backend = scripted_backend
    if timeout := os.environ.get("INFILL_TEST_CLOSE_TIMEOUT"):
        engine.CLOSE_TIMEOUT = float(timeout)
    sys.exit(cli.main(["serve"]))
