"""Reload, shutdown and engine failures end to end: the real server process, with the real default
models where the situation can be made with them (a reload, a shutdown, a prompt too long for the
context), and with the scripted backend where it cannot (a model that raises while it generates:
`fault_server.py`).

What is held: every request gets exactly one answer; an engine failure is a RequestFailed
error naming its cause, never an internal error with a traceback; after a reload the new
model serves the next request; Explain reports progress on the client's `workDoneToken` when
the request carries one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
import pytest_asyncio
from fault_server import GENERATING, fault_server_command
from lsp_helpers import (
    INLINE,
    MERGE,
    MERGE_RANGE,
    SERVER_COMMAND,
    Session,
    answer,
    client_feature,
    lsp_session,
    plain_json,
    plain_text,
    wait_until,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient, client_capabilities

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

VSCODE = "visual_studio_code@v1.65.2"
EXECUTE = types.WORKSPACE_EXECUTE_COMMAND
EXPLAIN_CHUNK = "infill/explainChunk"
REQUEST_FAILED = -32803
INVALID_REQUEST = -32600
REQUEST_CANCELLED = -32800

FAST = {"debounceMs": 10, "maxTokensSingleLine": 16, "maxTokensMultiLine": 48}

#: A list goes on and on: a multi-line suggestion here runs to its token limit.
NUMBERS = "NUMBERS = [\n    1,\n    2,\n    3,\n    4,\n    5,\n    "
SHORT = "def double(x):\n    return \n"


@dataclass
class Editor:
    session: Session
    chunks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def client(self) -> LanguageClient:
        return self.session.client

    def explain(self, uri: str, **extra: Any) -> Awaitable[Any]:
        """`infill.explain` on the MERGE function, sent now."""
        params = {"command": "infill.explain", "arguments": [{"uri": uri, "range": MERGE_RANGE}]}
        return self.session.send_raw(EXECUTE, {**params, **extra})

    async def first_chunk(self, since: int) -> dict[str, Any]:
        await wait_until(lambda: len(self.chunks) > since, "the first explain chunk")
        return self.chunks[since]

    async def short_inline(self) -> list[types.InlineCompletionItem]:
        return await answer(self.session.inline(self.session.open(SHORT), self.position(SHORT)))

    def position(self, text: str) -> types.Position:
        lines = text.split("\n")
        line = len(lines) - 1 if lines[-1] else len(lines) - 2
        return self.session.position(text, line, len(text.split("\n")[line]))


class StartEditor(Protocol):
    """The `editor_factory` fixture: a server started with these `infill` settings (the real
    one unless a command is given), ready, as an editor."""

    def __call__(
        self, options: dict[str, Any], command: list[str] | None = None
    ) -> Awaitable[Editor]: ...


@pytest_asyncio.fixture(loop_scope="module")
async def editor_factory() -> AsyncIterator[StartEditor]:
    """Start a server (the real one unless a command is given) and wrap it as an editor."""
    stack: list[contextlib.AbstractAsyncContextManager[Session]] = []

    async def start(options: dict[str, Any], command: list[str] | None = None) -> Editor:
        context = lsp_session(
            client_capabilities(VSCODE), {"infill": options}, command or SERVER_COMMAND
        )
        session = await context.__aenter__()
        stack.append(context)
        editor = Editor(session)

        @client_feature(session.client, EXPLAIN_CHUNK)
        def explain_chunk(_: LanguageClient, params: Any) -> None:
            editor.chunks.append(plain_json(params))

        status = await session.until_loaded()
        assert status["status"] == "ready", status
        return editor

    yield start
    for context in reversed(stack):
        await context.__aexit__(None, None, None)


async def outcome(awaitable: Awaitable[Any]) -> Any:
    """The result, or the JsonRpcException the request was answered with."""
    try:
        return await answer(awaitable)
    except JsonRpcException as e:
        return e


def assert_failed_naming(result: Any, *words: str) -> None:
    assert isinstance(result, JsonRpcException), result
    assert result.code == REQUEST_FAILED, result
    assert all(word in str(result) for word in words), result
    assert "Traceback" not in str(result)


# --- reload and shutdown ----------------------------------------------------------------------


async def test_a_model_reload_during_inline_completions_and_an_explain_answers_every_request(
    editor_factory: StartEditor,
) -> None:
    """A settings change that swaps the models while an Explain streams and an inline
    completion runs: both are answered (the running ones with an error saying the models
    are being reloaded), the server does not crash, and the new model serves what follows."""
    editor = await editor_factory({**FAST, "maxTokensMultiLine": 400})
    session = editor.session
    assert (await session.status())["context_size"] == 4096

    # The inline request first: by the explain's first chunk its model is at work.
    uri = session.open(NUMBERS)
    _, inline = session.send(INLINE, session.inline_params(uri, editor.position(NUMBERS)))
    explained = editor.explain(session.open(MERGE))
    first = await editor.first_chunk(0)
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {**FAST, "contextSize": 2048}})
    )

    explain_result = await outcome(explained)
    inline_result = await outcome(inline)
    if isinstance(explain_result, JsonRpcException):
        assert_failed_naming(explain_result, "reloaded")
    else:
        assert explain_result.strip()
    if isinstance(inline_result, JsonRpcException):
        assert_failed_naming(inline_result, "reloaded")
    chunks = [c for c in editor.chunks if c["token"] == first["token"]]
    assert chunks[-1]["done"] is True  # the stream was closed for the editor either way
    assert isinstance(explain_result, JsonRpcException) or isinstance(
        inline_result, JsonRpcException
    ), "neither request was still running at the reload"

    # The new models serve the next requests.
    status = await session.until_loaded()
    assert (status["status"], status["context_size"]) == ("ready", 2048)
    (item,) = await editor.short_inline()
    assert plain_text(item).strip()
    since = len(editor.chunks)
    again = await answer(editor.explain(session.open(MERGE)))
    assert again.strip()
    assert again == "".join(c["text"] for c in editor.chunks[since:])


async def test_shutdown_during_inline_completions_and_an_explain_answers_every_request(
    editor_factory: StartEditor,
) -> None:
    """`shutdown` while an Explain streams and an inline completion runs: both are answered
    with an error saying the server is shutting down, then `shutdown` itself; a request after
    it is refused with InvalidRequest, and the process exits cleanly on `exit` (the models
    freed after their workers ended, no crash)."""
    editor = await editor_factory({**FAST, "maxTokensMultiLine": 400})
    session = editor.session
    client = session.client
    uri = session.open(NUMBERS)
    _, inline = session.send(INLINE, session.inline_params(uri, editor.position(NUMBERS)))
    explained = editor.explain(session.open(MERGE))
    await editor.first_chunk(0)
    _, shutdown = session.send(types.SHUTDOWN, None)

    assert_failed_naming(await outcome(explained), "shutting down")
    inline_result = await outcome(inline)
    if isinstance(inline_result, JsonRpcException):  # it may have ended before the shutdown
        assert_failed_naming(inline_result, "shutting down")
    assert await answer(shutdown) is None
    refused = await outcome(session.status())
    assert isinstance(refused, JsonRpcException)
    assert refused.code == INVALID_REQUEST, refused  # answered, as LSP asks, not dropped
    client.exit(None)
    server = client._server
    assert server is not None
    assert await asyncio.wait_for(server.wait(), 60) == 0
    client.capabilities = None  # shut down already: the fixture must not ask again


async def test_shutdown_with_a_model_that_hangs_is_answered_and_the_server_exits(
    editor_factory: StartEditor,
) -> None:
    """The scripted model takes 30 s over a token (it hangs) and closing waits 0.5 s for its
    worker: `shutdown` is answered all the same, the running request is answered too, a
    request after it is InvalidRequest, and the process exits cleanly: the model is left
    loaded, never freed under its thread."""
    command = fault_server_command(fail_after="", step_seconds="30", close_timeout="0.5")
    editor = await editor_factory(FAST, command)
    session = editor.session
    client = session.client
    text = "def f(value):\n    return "
    uri = session.open(text)
    _, inline = session.send(INLINE, session.inline_params(uri, editor.position(text)))
    await wait_until(
        lambda: any(GENERATING in m.message for m in client.log_messages),
        "the scripted model at work",
    )
    _, shutdown = session.send(types.SHUTDOWN, None)
    assert await answer(shutdown) is None
    stuck = await outcome(inline)  # its job waits for the token: pygls cancels the request
    assert isinstance(stuck, JsonRpcException)
    assert stuck.code == REQUEST_CANCELLED, stuck
    await wait_until(  # the models are freed behind the answer: there, it gives up
        lambda: any("did not stop" in m.message for m in client.log_messages),
        "closing to give up on the hanging worker",
    )
    refused = await outcome(session.status())  # a request after shutdown, exactly
    assert isinstance(refused, JsonRpcException)
    assert refused.code == INVALID_REQUEST, refused
    client.exit(None)
    server = client._server
    assert server is not None
    assert await asyncio.wait_for(server.wait(), 60) == 0
    client.capabilities = None  # shut down already: the fixture must not ask again


async def test_shutdown_while_the_model_loads_is_answered_at_once_and_exit_ends_the_process() -> (
    None
):
    """Clients wait briefly for `shutdown` and then kill the server (lsp-mode 0.5 s, eglot
    1.5 s), often right after starting it: with a load that takes a minute, `shutdown` is
    answered while it still runs, and `exit` ends the process with status 0 without waiting
    for it."""
    command = fault_server_command(load_seconds="60")
    async with lsp_session(client_capabilities(VSCODE), {"infill": FAST}, command) as session:
        client = session.client
        status = await session.status()
        assert status["status"] == "loading", status
        # Far below the load's minute: the answer did not wait for it.
        _, shutdown = session.send(types.SHUTDOWN, None)
        assert await asyncio.wait_for(answer(shutdown), 20) is None
        client.exit(None)
        server = client._server
        assert server is not None
        assert await asyncio.wait_for(server.wait(), 20) == 0
        client.capabilities = None  # shut down already: the session must not ask again


# --- errors -----------------------------------------------------------------------------------


async def test_a_prompt_longer_than_the_context_is_request_failed_naming_the_sizes(
    editor_factory: StartEditor,
) -> None:
    """With a 256-token context and a prefix budget far above it, the real models refuse the
    prompt: every request (one per keystroke) is answered RequestFailed naming the context,
    never an internal error, and the server keeps serving."""
    editor = await editor_factory({**FAST, "contextSize": 256, "prefixTokens": 4000})
    session = editor.session
    long_text = "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(200)) + "x = "
    uri = session.open(long_text)
    for _ in range(2):
        result = await outcome(session.inline(uri, editor.position(long_text)))
        assert_failed_naming(result, "context holds 256")
    since = len(editor.chunks)
    long_merge = MERGE * 8
    explain_uri = session.open(long_merge)
    params = {
        "command": "infill.explain",
        "arguments": [
            {
                "uri": explain_uri,
                "range": {
                    "start": {"line": 0, "character": 0},
                    "end": {"line": 104, "character": 0},
                },
            }
        ],
    }
    assert_failed_naming(await outcome(session.send_raw(EXECUTE, params)), "context holds 256")
    assert [c["done"] for c in editor.chunks[since:]] == [True]
    (item,) = await editor.short_inline()  # a short prompt still fits
    assert plain_text(item).strip()


async def test_a_model_that_fails_while_generating_is_request_failed_naming_the_error(
    editor_factory: StartEditor,
) -> None:
    """The scripted backend raises after three tokens: inline completions (each keystroke),
    Explain and Rewrite are answered RequestFailed naming the backend's error, with no
    partial suggestion and no traceback in the answer (the log has it once)."""
    editor = await editor_factory(FAST, fault_server_command(fail_after="3"))
    session = editor.session
    text = "def f(value):\n    return "
    uri = session.open(text)
    for _ in range(2):
        result = await outcome(session.inline(uri, editor.position(text)))
        assert_failed_naming(result, "the completion model failed", "simulated backend failure")
    await session.wait_for_messages()
    logged = [m.message for m in session.client.log_messages if "generation failed" in m.message]
    assert len(logged) == 2  # the worker's line for each request...
    assert sum("Traceback" in m for m in logged) == 1  # ...with the traceback only once

    explain_result = await outcome(editor.explain(session.open(MERGE)))
    assert_failed_naming(explain_result, "the chat model failed", "simulated backend failure")
    assert editor.chunks[-1]["done"] is True
    end = session.client.progress_reports[editor.chunks[-1]["token"]][-1]
    assert isinstance(end, types.WorkDoneProgressEnd)
    assert str(end.message).startswith("failed: ")

    rewrite = {
        "command": "infill.rewrite",
        "arguments": [{"uri": session.open(MERGE), "range": MERGE_RANGE, "instruction": "x"}],
    }
    rewrite_result = await outcome(session.send_raw(EXECUTE, rewrite))
    assert_failed_naming(rewrite_result, "the chat model failed", "simulated backend failure")


@pytest.mark.parametrize("token", ["editor-explain-1", 0])
async def test_explain_reports_progress_on_the_clients_work_done_token(
    editor_factory: StartEditor, token: str | int
) -> None:
    """A `workDoneToken` in `workspace/executeCommand` (a string or an integer, even 0) is the
    Explain's progress token and its chunks' token; the server creates no token of its own."""
    editor = await editor_factory(FAST)
    session = editor.session
    client = session.client
    client.progress_reports.setdefault(token, [])  # the editor knows the token it sent
    tokens = set(client.progress_reports)  # the client adds each token the server creates
    result = await answer(editor.explain(session.open(MERGE), workDoneToken=token))

    assert result.strip()
    assert {c["token"] for c in editor.chunks} == {token}
    assert result == "".join(c["text"] for c in editor.chunks)
    begin, *_, end = client.progress_reports[token]
    assert isinstance(begin, types.WorkDoneProgressBegin)
    assert begin.cancellable is True
    assert isinstance(end, types.WorkDoneProgressEnd)
    assert end.message == "done"
    assert set(client.progress_reports) == tokens

    # Without a token the server creates one, as before.
    since = len(editor.chunks)
    await answer(editor.explain(session.open(MERGE)))
    (created,) = set(client.progress_reports) - tokens
    assert {c["token"] for c in editor.chunks[since:]} == {created}
