"""One engine per machine, through the real server with the default models: language servers
started as editors start them (`engine` left at `auto`) find or start one shared engine process,
each window is served by it, a killed engine is replaced and a killed language server leaves it
serving the others, and it exits after its last window left.

Each test has a runtime folder of its own (`XDG_RUNTIME_DIR`), so its engines are its own, and
stops whatever engine is left there at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import (
    Session,
    answer,
    lsp_session,
    plain_json,
    plain_text,
    poll_until,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities

from engine.shared import ping, stop_engines

VS_CODE = client_capabilities("visual-studio-code")
FUNCTION = "def add(a, b):\n    return "
#: A prompt whose answer takes a while on a CPU: room to kill the engine while it writes.
LONG = "# A list of the first hundred prime numbers, one per line\nPRIMES = [\n"


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A runtime folder of the test's own (short: a socket's path is bounded), with the
    engines started there stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    yield folder
    stop_engines(folder, signal.SIGKILL)


def _engine_processes(folder: Path) -> list[int]:
    """The processes whose command line names a socket in `folder`: the engines started there."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"engine.api" in command and any(str(folder).encode() in part for part in command):
            found.append(int(entry.name))
    return found


def _exists(path: Path) -> bool:
    return path.exists()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; its parent has not read its status yet


@contextlib.asynccontextmanager
async def window(runtime: Path, **settings: Any) -> AsyncIterator[Session]:
    """A language server as an editor window starts it, with the engine left at `auto`."""
    env = {"XDG_RUNTIME_DIR": str(runtime), "INFILL_ENGINE": "auto"}
    async with lsp_session(VS_CODE, {"infill": settings} if settings else None, env=env) as s:
        yield s


async def _loaded(session: Session) -> dict[str, Any]:
    status = plain_json(await session.until_loaded())
    assert status["status"] == "ready", status
    return dict(status)


async def _suggest(session: Session, text: str = FUNCTION) -> str:
    uri = session.open(text)
    lines = text.split("\n")
    result = await session.inline(uri, session.position(text, len(lines) - 1, len(lines[-1])))
    assert result is not None
    items = result if isinstance(result, list) else result.items
    return plain_text(items[0]) if items else ""


async def test_three_windows_share_one_engine_with_the_model_loaded_once(runtime: Path) -> None:
    """Three windows opening at once: one engine process (the lock let one start it), each
    window's status names it, its model was loaded once, and each window gets suggestions."""
    async with contextlib.AsyncExitStack() as stack:
        sessions = await asyncio.gather(
            *(stack.enter_async_context(window(runtime)) for _ in range(3))
        )
        statuses = await asyncio.gather(*(_loaded(s) for s in sessions))
        engines = [s["engine"] for s in statuses]
        assert {e["mode"] for e in engines} == {"shared"}
        assert len({e["pid"] for e in engines}) == 1
        assert len({e["socket"] for e in engines}) == 1
        assert _engine_processes(runtime) == [engines[0]["pid"]]
        health = ping(Path(engines[0]["socket"]))
        assert health is not None
        assert len(health["engine"]["clients"]) == 3
        (completion,) = [m for m in health["models"] if "completion" in m["roles"]]
        assert completion["loads"] == 1
        suggestions = await asyncio.gather(*(_suggest(s) for s in sessions))
        assert all(s.strip() for s in suggestions), suggestions


async def test_a_killed_engine_answers_its_request_once_and_the_next_is_served(
    runtime: Path,
) -> None:
    """`kill -9` of the engine while it writes a suggestion: that request is answered once
    (an error naming the failure, or no item), a new engine is started, the next request is
    served by it, and the status counts the restart."""
    async with window(runtime, maxTokensMultiLine=400, minConfidence=0) as session:
        status = await _loaded(session)
        first = status["engine"]["pid"]
        uri = session.open(LONG)
        request = asyncio.ensure_future(
            answer(session.inline(uri, session.position(LONG, 2, 0)), give_up_after=120)
        )
        await asyncio.sleep(0.5)
        os.kill(first, signal.SIGKILL)
        # Answered once: with an error naming the failure, or with what was written before
        # the kill (a small model may end its list first).
        with contextlib.suppress(JsonRpcException):
            await request
        started = time.monotonic()
        suggestion = ""
        while not suggestion.strip():
            assert time.monotonic() - started < 120, "no suggestion after the engine was killed"
            with contextlib.suppress(JsonRpcException):
                suggestion = await _suggest(session)
            if not suggestion.strip():
                await asyncio.sleep(0.2)

        async def restarted() -> dict[str, Any]:
            return dict(plain_json(await session.status())["engine"])

        engine = await poll_until(
            restarted, lambda e: e["restarts"] >= 1 and e["pid"] != first, "the restart"
        )
        assert not _alive(first)
        assert _engine_processes(runtime) == [engine["pid"]]


async def test_a_killed_language_server_leaves_the_engine_serving_the_others(
    runtime: Path,
) -> None:
    async with window(runtime) as one, window(runtime) as other:
        pid = (await _loaded(one))["engine"]["pid"]
        await _loaded(other)
        server = one.client._server
        assert server is not None
        server.kill()
        await server.wait()
        assert (await _suggest(other)).strip()
        assert plain_json(await other.status())["engine"]["pid"] == pid
        assert _alive(pid)


async def test_the_engine_exits_its_idle_time_after_the_last_window_left(runtime: Path) -> None:
    async with window(runtime, engineIdleExit=1) as session:
        engine = (await _loaded(session))["engine"]
    pid, sock = engine["pid"], Path(engine["socket"])
    started = time.monotonic()
    while _alive(pid):
        assert time.monotonic() - started < 30, "the engine is still running"
        await asyncio.sleep(0.2)
    assert not _exists(sock)  # it removed its socket


async def test_engine_here_loads_the_models_in_the_language_server(runtime: Path) -> None:
    async with window(runtime, engine="here") as session:
        status = await _loaded(session)
        assert status["engine"]["mode"] == "here"
        assert status["backend"] == "llama.cpp"
        assert _engine_processes(runtime) == []


async def test_the_shared_engines_status_says_where_and_what(runtime: Path) -> None:
    async with window(runtime) as session:
        status = await _loaded(session)
        engine = status["engine"]
        assert engine["socket"].startswith(str(runtime))
        assert engine["clients"] >= 1
        assert engine["resident_bytes"] > 50 << 20
        assert engine["error"] is None
        assert engine["mode"] == "shared"


#: Prompts of the kinds the features see: a line in a function, an argument list, a block to
#: open, a docstring'd function's body.
PROMPTS = (
    FUNCTION,
    "import os\n\ndef read(path):\n    with open(path) as f:\n        return ",
    "def fib(n):\n    if n < 2:\n        return n\n    return ",
    'def greet(name: str) -> str:\n    """Say hello."""\n    ',
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
    "        ",
)


async def _answers(session: Session, *, invoked: bool) -> list[list[str]]:
    out = []
    for text in PROMPTS:
        uri = session.open(text)
        lines = text.split("\n")
        position = session.position(text, len(lines) - 1, len(lines[-1]))
        items = await session.inline(uri, position, invoked=invoked)
        out.append([plain_text(i) for i in items])
    return out


async def test_a_window_on_the_shared_engine_answers_as_one_with_the_models_here(
    runtime: Path,
) -> None:
    """The same requests to a window whose models run here and to one on the shared engine:
    the confidence gate shows and hides the same automatic suggestions (it reads the model's
    log-probabilities through the engine), an invoked request gets alternatives (greedy
    branches through the engine) after the same first one, no feature is off, and Explain
    answers."""
    settings = {"minConfidence": 0.15, "speculativeSuggestions": 0}
    async with (
        window(runtime, engine="here", **settings) as here,
        window(runtime, **settings) as shared,
    ):
        status_here, status_shared = await _loaded(here), await _loaded(shared)
        assert status_shared["engine"]["mode"] == "shared"
        assert status_shared["features_off"] == status_here["features_off"] == []
        automatic = await _answers(here, invoked=False)
        assert await _answers(shared, invoked=False) == automatic
        assert any(automatic), "the gate hid every suggestion: nothing to compare"
        invoked, through = await _answers(here, invoked=True), await _answers(shared, invoked=True)
        # The greedy answer is the same; the alternatives come from branches the engine
        # process writes in batches of its own, where a near-tie between two tokens may fall
        # the other way (seen once in five prompts), so each window's are checked for being
        # alternatives at all.
        assert [items[:1] for items in through] == [items[:1] for items in invoked]
        assert [len(items) for items in through] == [len(items) for items in invoked]
        assert max(map(len, through)) >= 2, "no alternatives"
        assert all(len(set(items)) == len(items) for items in through)
        explain = {
            "command": "infill.explain",
            "arguments": [{"uri": shared.open(FUNCTION + "a + b\n"), "range": _whole(FUNCTION)}],
        }
        text = await answer(shared.send_raw(types.WORKSPACE_EXECUTE_COMMAND, explain))
        assert isinstance(text, str)
        assert text.strip()


def _whole(text: str) -> dict[str, Any]:
    lines = text.split("\n")
    return {
        "start": {"line": 0, "character": 0},
        "end": {"line": len(lines) - 1, "character": len(lines[-1])},
    }
