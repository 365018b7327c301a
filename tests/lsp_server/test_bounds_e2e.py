"""Bounds, so that no document, line or selection an editor sends can make the server use memory or
model time without limit, through the real server and the real default models: a huge document is
not completed, a huge cursor line is clipped, a huge selection is refused before any model work, and
a closed document's state is forgotten."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lsp_helpers import (
    STATS,
    Session,
    answer,
    document_jobs,
    lsp_lines,
    lsp_session,
    request_json,
    settled_jobs,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities

from lsp_server.client import insert_text_of

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

FAST = {"maxTokensSingleLine": 16, "maxTokensMultiLine": 48, "debounceMs": 10}
INVALID_PARAMS = -32602


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[Session]:
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    async with lsp_session(capabilities, {"infill": FAST}) as s:
        status = await s.until_loaded()
        assert status["status"] == "ready", status
        yield s


def end_of(session: Session, text: str) -> types.Position:
    lines = lsp_lines(text)
    return session.position(text, len(lines) - 1, len(lines[-1]))


def configure(session: Session, **settings: Any) -> None:
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": settings})
    )


def typing_at_the_end(session: Session, text: str, typed: str) -> dict[str, Any]:
    """The content change that types `typed` at the end of `text`."""
    end = end_of(session, text)
    point = {"line": end.line, "character": end.character}
    return {"range": {"start": point, "end": point}, "text": typed}


async def engine_jobs(session: Session, role: str) -> int:
    """How many jobs the `role` model has run (0 while it is not loaded)."""
    report = await request_json(session, STATS, None)
    return sum(e["total_jobs"] for e in report["engines"] if role in e["roles"])


async def test_a_document_over_the_size_limit_gets_empty_answers_and_one_log_line(
    session: Session,
) -> None:
    since = len(session.client.log_messages)
    text = "x = compute(a, b)  # one line of a generated file\n" * 90_000 + "total = "
    assert len(text.encode()) > 4 << 20  # the default maxDocumentBytes
    uri = session.open(text)
    for version in range(2, 5):  # the user types on: each keystroke answered at once, empty
        session.change(uri, version, [typing_at_the_end(session, text, "1")])
        text += "1"
        assert await answer(session.inline(uri, end_of(session, text))) == []
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 3, "character": 0}}
    params = {"textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": []}}
    assert await request_json(session, "textDocument/codeAction", params) == []
    await session.wait_for_messages()
    logged = [
        m.message for m in session.client.log_messages[since:] if "maxDocumentBytes" in m.message
    ]
    assert len(logged) == 1, logged

    # Over a higher limit the same document, edits applied, is completed as any other.
    configure(session, maxDocumentBytes=8 << 20)
    try:
        items = await answer(session.inline(uri, end_of(session, text), invoked=True))
        assert isinstance(items, list)
    finally:
        configure(session, maxDocumentBytes=4 << 20)
    session.client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


async def test_a_cursor_line_longer_than_the_prompt_budget_is_clipped(session: Session) -> None:
    """A minified file's one line: every keystroke is answered, none fails as too long for
    the model."""
    text = "data = [" + "1, " * 100_000
    uri = session.open(text)
    for version in range(2, 4):
        items = await answer(session.inline(uri, end_of(session, text)))
        assert isinstance(items, list)
        session.change(uri, version, [typing_at_the_end(session, text, "2, ")])
        text += "2, "
    assert (await session.status())["status"] == "ready"


@pytest.mark.parametrize(
    ("command", "arguments"),
    [("infill.explain", {}), ("infill.rewrite", {"instruction": "Use a loop"})],
)
async def test_explain_and_rewrite_over_the_selection_limit_are_refused_before_model_work(
    session: Session, command: str, arguments: dict[str, Any]
) -> None:
    code = "".join(f"value_{i} = {i} * 2\n" for i in range(1000))
    assert len(code) > 16_000  # the default maxSelectionChars
    uri = session.open(code)
    jobs = await engine_jobs(session, "chat")
    selection = {"start": {"line": 0, "character": 0}, "end": {"line": 1000, "character": 0}}
    params = {"command": command, "arguments": [{"uri": uri, "range": selection, **arguments}]}
    with pytest.raises(JsonRpcException) as caught:
        await answer(session.send_raw("workspace/executeCommand", params))
    assert caught.value.code == INVALID_PARAMS
    assert "over infill.maxSelectionChars (16,000)" in str(caught.value)
    assert await engine_jobs(session, "chat") == jobs


async def test_closing_a_document_forgets_its_type_ahead_answer(session: Session) -> None:
    """Typing along a suggestion is answered without the model; after the document is
    closed and opened again, the same keystroke asks the model."""
    text = "def add(a, b):\n    return "
    uri = session.open(text)
    items = await answer(session.inline(uri, end_of(session, text)))
    assert items, "the default model suggests something after `return `"
    suggestion = insert_text_of(items[0])
    assert len(suggestion) >= 2, suggestion
    jobs = len(await settled_jobs(session, uri, 0))

    typed = text + suggestion[0]
    session.change(uri, 2, [typing_at_the_end(session, text, suggestion[0])])
    cached = await answer(session.inline(uri, end_of(session, typed)))
    assert [insert_text_of(i) for i in cached][:1] == [suggestion[1:]]
    _, finished = await document_jobs(session, uri, lambda running, _: not running, "no job")
    assert len(finished) == jobs  # no model call

    session.client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    session.open(typed, uri=uri)
    await answer(session.inline(uri, end_of(session, typed)))
    await settled_jobs(session, uri, jobs)  # the model was asked again
