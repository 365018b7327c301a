"""The language server end to end: the real server process over stdio, the real default model (Gemma
3 270M through llama.cpp), spoken to by pytest-lsp with the capabilities recorded from real editors:
VS Code 1.65.2 (says nothing about position encodings: UTF-16) and Neovim 0.11.0 (offers UTF-8
first).

Every test runs in both encodings. The pytest-lsp client parses every byte the server writes
to stdout as protocol, so these tests also hold the server to "stdout is the protocol".
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsp_helpers import (
    INLINE,
    SERVER_COMMAND,
    Session,
    answer,
    apply_changes,
    client_units,
    document_jobs,
    generating,
    load_recording,
    lsp_lines,
    lsp_session,
    plain_json,
    plain_text,
    request_json,
    server_env,
    wait_until,
)
from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities
from scripted_lsp import scripted_command, write_script

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

CLIENTS = {
    "visual_studio_code@v1.65.2": types.PositionEncodingKind.Utf16,
    "neovim@v0.11.0": types.PositionEncodingKind.Utf8,
}
#: Short suggestions keep the suite fast on a laptop CPU. No other documents' snippets in the
#: prompt: the tests share a server, and each one's answer must not depend on which documents
#: the tests before it left open (INFILL_TEST_ORDER=reverse found one that did).
FAST = {
    "infill": {
        "maxTokensSingleLine": 16,
        "maxTokensMultiLine": 48,
        "debounceMs": 10,
        "contextTokens": 0,
    }
}

INVALID_PARAMS = -32602
REQUEST_CANCELLED = -32800
REQUEST_FAILED = -32803

ENGINE_JOB = re.compile(
    r"completion \S+: prompt \d+ tokens \(\d+ evaluated\), generated (\d+), .* finish (\w+)"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(CLIENTS))
async def session(request: pytest.FixtureRequest) -> AsyncIterator[Session]:
    """One server per recorded client, shared by the tests that leave its settings as they
    found them."""
    async with lsp_session(client_capabilities(request.param), FAST) as s:
        status = await s.until_loaded()
        assert status["status"] == "ready", status
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(CLIENTS))
async def tolerant_session(request: pytest.FixtureRequest) -> AsyncIterator[Session]:
    """A server started with one invalid setting among valid ones, and room for long
    multi-line suggestions (so that one is still running when it is cancelled)."""
    options = {
        "infill": {"maxTokensSingleLine": "lots", "maxTokensMultiLine": 2000, "contextTokens": 0}
    }
    async with lsp_session(client_capabilities(request.param), options) as s:
        status = await s.until_loaded()
        assert status["status"] == "ready", status
        yield s


@pytest_asyncio.fixture(loop_scope="module", params=list(CLIENTS))
async def session_without_model_yet(request: pytest.FixtureRequest) -> AsyncIterator[Session]:
    """A server just initialized: its model is still loading."""
    async with lsp_session(client_capabilities(request.param), FAST) as s:
        yield s


async def expect_error(awaitable: Awaitable[Any], code: int) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as caught:
        await answer(awaitable)
    assert caught.value.code == code, caught.value
    return caught.value


def engine_jobs(session: Session, since: int) -> list[tuple[int, str]]:
    """(generated tokens, finish reason) of each engine job logged after log message `since`."""
    jobs = []
    for message in session.client.log_messages[since:]:
        if match := ENGINE_JOB.search(message.message):
            jobs.append((int(match.group(1)), match.group(2)))
    return jobs


# --- initialization and status ----------------------------------------------------------------


async def test_initialize_advertises_inline_completion_incremental_sync_and_the_encoding(
    session: Session, request: pytest.FixtureRequest
) -> None:
    capabilities = session.initialize_result.capabilities
    assert capabilities.inline_completion_provider is not None
    sync = capabilities.text_document_sync
    assert isinstance(sync, types.TextDocumentSyncOptions)
    assert sync.open_close
    assert sync.change == types.TextDocumentSyncKind.Incremental
    client = request.node.callspec.params["session"]
    assert capabilities.position_encoding == CLIENTS[client]


async def test_status_reports_the_loaded_default_model(session: Session) -> None:
    status = await session.status()
    assert status["status"] == "ready"
    assert status["last_error"] is None
    assert status["backend"] == "llama.cpp"
    assert "gemma" in status["model"].lower()
    assert status["model_path"].endswith(".gguf")
    assert status["context_size"] == 4096
    assert status["fim_family"] is None  # Gemma 3 base has no FIM tokens: prefix fallback
    assert (status["device"], status["gpu"], status["warnings"]) == ("cpu", None, [])
    kv_cache = plain_json(status["kv_cache"])
    assert set(kv_cache) == {
        "documents",
        "tokens",
        "bytes",
        "budget_bytes",
        "live_tokens",
        "restored",
        "evicted",
    }
    assert all(isinstance(v, int) and v >= 0 for v in kv_cache.values()), kv_cache
    assert kv_cache["bytes"] <= kv_cache["budget_bytes"]


async def test_answers_given_while_the_model_loads_reach_the_client(
    session_without_model_yet: Session,
) -> None:
    """The user types before the model is ready: the superseded request's empty answer and
    the status answers are sent while the model loads, and none is lost."""
    session = session_without_model_yet
    text = "def half(x):\n    return \n"
    params = session.inline_params(session.open(text), session.position(text, 1, 11))
    _, first = session.send(INLINE, params)
    _, second = session.send(INLINE, params)
    seen = [(await session.status())["status"]]
    assert await answer(first) == []
    while seen[-1] == "loading":
        seen.append((await session.status())["status"])
    assert seen[0] == "loading"
    assert seen[-1] == "ready"
    (item,) = await answer(second)
    assert item.insert_text.strip()


async def test_the_server_logs_to_the_client_and_never_the_document_text(
    session: Session,
) -> None:
    await wait_until(
        lambda: any(
            m.type == types.MessageType.Info and "loaded" in m.message
            for m in session.client.log_messages
        ),
        "the model-loaded log message",
    )
    text = "def zebra_quartz_secret(x):\n    return x + \n"
    uri = session.open(text)
    await session.inline(uri, session.position(text, 1, 15))
    logged = [m.message for m in session.client.log_messages]
    assert any("inline" in m for m in logged)  # each completion is logged ...
    assert not any("zebra_quartz_secret" in m for m in logged)  # ... without the code


#: One message's header: its length, an optional content type.
FRAMING = re.compile(rb"Content-Length: (\d+)\r\n(Content-Type: [^\r\n]*\r\n)?\r\n")


@pytest.mark.parametrize("models", ["real", "scripted"])
async def test_stdout_carries_nothing_but_protocol_messages(models: str, tmp_path: Path) -> None:
    """Every byte the server writes to stdout, from start to exit (a model load and a
    completion included), is a framed JSON-RPC message. The pygls client would skip stray
    lines between messages, so this reads the stream itself. With the scripted model the
    suggestion is known too."""
    command = SERVER_COMMAND
    if models == "scripted":
        coder = write_script(tmp_path, "coder", ["x * 3\n"])
        command = scripted_command(coder, write_script(tmp_path, "chat", ["-"]))
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=server_env(),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def send(message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async def response(msg_id: int) -> dict[str, Any]:
        while True:
            header = await answer(stdout.readuntil(b"\r\n\r\n"))
            framing = FRAMING.fullmatch(header)
            assert framing is not None, header
            message: dict[str, Any] = json.loads(await stdout.readexactly(int(framing.group(1))))
            assert message["jsonrpc"] == "2.0"
            if "method" in message and "id" in message:  # the server asks: answer it
                send({"id": message["id"], "result": None})
            elif message.get("id") == msg_id:
                return message

    capabilities = get_converter().unstructure(client_capabilities("neovim@v0.11.0"))
    text = "def triple(x):\n    return \n"
    uri = "file:///e2e/stdout.py"
    try:
        send({"id": 1, "method": "initialize", "params": {"capabilities": capabilities}})
        assert "result" in await response(1)
        send({"method": "initialized", "params": {}})
        document = {"uri": uri, "languageId": "python", "version": 1, "text": text}
        send({"method": "textDocument/didOpen", "params": {"textDocument": document}})
        position = {"line": 1, "character": 11}
        inline = {"textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 2}}
        send({"id": 2, "method": INLINE, "params": inline})
        (item,) = (await response(2))["result"]
        assert item["insertText"].strip()
        if models == "scripted":
            assert item["insertText"] == "x * 3"
        send({"id": 3, "method": "shutdown"})
        assert (await response(3))["result"] is None
        send({"method": "exit"})
        await stdin.drain()
        # After the answer to shutdown, only whole notifications (the log of a request the
        # shutdown cancelled reaches the client too), nothing unframed.
        rest = await answer(stdout.read())
        while rest:
            framing = FRAMING.match(rest)
            assert framing is not None, rest
            end = framing.end() + int(framing.group(1))
            message = json.loads(rest[framing.end() : end])
            assert message["jsonrpc"] == "2.0"
            assert "method" in message, message
            assert "id" not in message, message
            rest = rest[end:]
        assert await answer(process.wait()) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# --- suggestions ------------------------------------------------------------------------------

FIBONACCI = (
    "def fibonacci(n: int) -> int:\n"
    '    """Return the n-th Fibonacci number."""\n'
    "    if n < 2:\n"
    "        return n\n"
    "    \n"  # the cursor: the user has typed the indentation
)


async def test_a_suggestion_for_a_function_body_inserts_at_the_cursor(session: Session) -> None:
    uri = session.open(FIBONACCI)
    cursor = session.position(FIBONACCI, 4, 4)
    (item,) = await session.inline(uri, cursor)
    assert isinstance(item.insert_text, str)
    assert item.insert_text.strip()
    assert item.range == types.Range(start=cursor, end=cursor)
    # The user typed the block's indentation: later lines keep it, none leaves the block.
    for line in item.insert_text.splitlines()[1:]:
        assert line.startswith("    ") or not line.strip(), item.insert_text


def emoji_document(label: str) -> tuple[str, int]:
    """A function whose second line holds `label` before the cursor and after it; and the
    cursor's column in code points (inside `len()`)."""
    line = f'    label = "{label}"; total = len()  # {label} chars'
    return f"def describe(user):\n{line}\n    return total\n", line.index("len(") + 4


async def test_emoji_and_cjk_before_the_cursor_get_the_suggestion_ascii_gets(
    session: Session,
) -> None:
    """A position in the wrong unit lands elsewhere on the line (inside the string, or in the
    comment) or past its end: a different suggestion, none, or an error."""
    results = []
    for label in ("abc def", "日本語 👩🏽‍💻"):
        text, column = emoji_document(label)
        cursor = session.position(text, 1, column)
        (item,) = await session.inline(session.open(text), cursor)
        assert item.range is not None
        assert item.range.start == cursor
        # The text the item replaces, read back through the same encoding.
        line = lsp_lines(text)[1]
        end = session.codec.position_from_client_units(
            [line], types.Position(line=0, character=item.range.end.character)
        ).character
        results.append((item.insert_text, line[column:end].replace(label, "<label>")))
    (ascii_text, ascii_replaced), (unicode_text, unicode_replaced) = results
    assert ascii_text
    assert unicode_text == ascii_text
    assert unicode_replaced == ascii_replaced


async def test_the_range_belongs_to_the_document_the_request_was_made_on(
    session: Session,
) -> None:
    """An edit that arrives while a request runs changes neither its text nor its range: the
    range that absorbs the `)` after the cursor is measured on the request's snapshot."""
    text = "def describe(user):\n    total = len()\n    return total\n"
    uri = session.open(text)
    cursor = session.position(text, 1, 16)  # inside `len()`
    _, pending = session.send(INLINE, session.inline_params(uri, cursor))
    # The user goes on typing at the cursor, before the answer comes.
    at = {"line": cursor.line, "character": cursor.character}
    session.change(uri, 2, [{"range": {"start": at, "end": at}, "text": "👩🏽‍💻"}])
    result = await answer(pending)
    (item,) = result.items if isinstance(result, types.InlineCompletionList) else result
    assert item.range == types.Range(
        start=cursor, end=types.Position(line=1, character=cursor.character + 1)
    )


#: Document URIs as editors send them: VS Code escapes a drive's colon and every non-ASCII
#: byte; Neovim escapes spaces but keeps the drive's colon; unsaved buffers are `untitled:`.
EDITOR_URIS = [
    "file:///ws/my%20dir/x.py",
    "file:///ws/caf%C3%A9/%E6%97%A5%E6%9C%AC.py",
    "file:///c%3A/Users/me/My%20Project/main.py",
    "file:///C:/Users/me/My%20Project/main.py",
    "file:///ws/a%23b/c%3Fd.py",
    "untitled:Untitled-",
]


@pytest.mark.parametrize("uri", EDITOR_URIS)
async def test_documents_are_found_however_the_editor_escapes_their_uri(
    session: Session, uri: str
) -> None:
    """A completion and the code actions for a document whose URI holds %-escapes, a drive
    letter or another scheme; the edit a rewrite would make names the URI the editor sent."""
    text = "def double(x):\n    return x * 2\n\n\ndef triple(x):\n    return \n"
    # A fresh document per encoding's session: no earlier request's state applies.
    n = next(session._names)
    unique = f"{uri}{n}" if uri.startswith("untitled:") else uri.replace(".py", f"-{n}.py")
    session.open(text, uri=unique)
    cursor = session.position(text, 5, 11)
    items = await session.inline(unique, cursor)
    assert len(items) == 1
    assert items[0].range is not None
    assert items[0].range.start == cursor
    at = {"line": cursor.line, "character": cursor.character}
    params = {
        "textDocument": {"uri": unique},
        "range": {"start": at, "end": at},
        "context": {"diagnostics": []},
    }
    actions = await request_json(session, types.TEXT_DOCUMENT_CODE_ACTION, params)
    explain = next(a for a in actions if a["title"] == "Explain")
    assert explain["command"]["arguments"][0]["uri"] == unique


# --- document synchronization -------------------------------------------------------------------


async def test_the_recorded_neovim_session_keeps_the_document_exact(third_party_data: Path) -> None:
    """Replay the document sync of a recorded Neovim 0.9.5 session (lsp-devtools), with its own
    capabilities (no position encodings: UTF-16), and compare the server's view of every line
    with the text the edits give when applied independently."""
    messages = load_recording(
        third_party_data / "lsp-devtools-recording" / "example-to-file-output.json"
    )
    initialize = next(m for m in messages if m.get("method") == "initialize")
    opened = next(m for m in messages if m.get("method") == "textDocument/didOpen")
    changes = [m for m in messages if m.get("method") == "textDocument/didChange"]
    assert any(len(m["params"]["contentChanges"]) > 1 for m in changes)
    capabilities = get_converter().structure(
        initialize["params"]["capabilities"], types.ClientCapabilities
    )
    document = opened["params"]["textDocument"]
    expected = document["text"]
    for change in changes:
        expected = apply_changes(expected, change["params"]["contentChanges"], "utf-16")
    # What the recorded edits did, by hand: an indented line opened after line 3, then its
    # three spaces deleted again one by one.
    original = lsp_lines(document["text"])
    assert lsp_lines(expected) == [*original[:4], "", *original[4:]]

    async with lsp_session(capabilities, FAST) as session:
        assert session.encoding == types.PositionEncodingKind.Utf16
        session.client.text_document_did_open(
            get_converter().structure(opened["params"], types.DidOpenTextDocumentParams)
        )
        for change in changes:
            session.client.text_document_did_change(
                get_converter().structure(change["params"], types.DidChangeTextDocumentParams)
            )
        widths = await session.line_widths(document["uri"])
        assert widths == [client_units(line, "utf-16") for line in lsp_lines(expected)]
        # Lines 4 and 5 are empty now (the edits opened line 4 and emptied it again): a
        # position past their end is refused; the start of line 6 is a valid position, where
        # a suggestion is a line of its own, inserted right there.
        await expect_error(
            session.inline(document["uri"], types.Position(line=4, character=1)), INVALID_PARAMS
        )
        # The default model answers this position (greedy: always the same answer), so an
        # empty answer is a failure, not a pass with nothing checked.
        (item,) = await session.inline(document["uri"], types.Position(line=6, character=0))
        assert item.range is not None
        assert (item.range.start.line, item.range.start.character) == (6, 0)
        assert item.range.end == item.range.start  # inserted, nothing replaced
        assert str(item.insert_text).endswith("\n")
        assert str(item.insert_text).strip()
        # Not a copy of the line it goes above (that would be a no-op for the user).
        assert str(item.insert_text) != lsp_lines(expected)[6] + "\n"


async def test_several_changes_in_one_notification_keep_the_document_exact(
    session: Session,
) -> None:
    """CRLF line ends and a U+2028 inside a line (not a line break in LSP), edited by one
    notification whose changes each apply to the result of the one before."""
    text = "def greet(name):\r\n    note = 'x\u2028y'; who = name\r\n    return who"
    uri = session.open(text)
    encoding = session.encoding
    steps = [
        # After the U+2028 on its line: `who = name` -> `who = name.title()`.
        (1, "    note = 'x\u2028y'; who = name", 0, ".title()"),
        # Before it: an emoji and CJK.
        (1, "    note = 'x", 0, "👩🏽‍💻 日本"),
        # A new line after line 1.
        (1, "    note = 'x👩🏽‍💻 日本\u2028y'; who = name.title()", 0, "\r\n    who += '!'"),
        # On the old last line, now line 3: replace `who` with `who  # 日本`.
        (3, "    return ", 3, "who  # 日本"),
    ]
    changes = []
    current = text
    for line, before, length, new in steps:
        assert lsp_lines(current)[line].startswith(before)
        start = {"line": line, "character": client_units(before, encoding)}
        end = {"line": line, "character": client_units(before, encoding) + length}
        change = {"range": {"start": start, "end": end}, "text": new}
        changes.append(change)
        current = apply_changes(current, [change], encoding)
    assert current == (
        "def greet(name):\r\n"
        "    note = 'x👩🏽‍💻 日本\u2028y'; who = name.title()\r\n"
        "    who += '!'\r\n"
        "    return who  # 日本"
    )
    session.change(uri, 2, changes)
    assert await session.line_widths(uri) == [
        client_units(line, encoding) for line in lsp_lines(current)
    ]
    # Right after the U+2028 is a word character: a valid position with nothing to suggest.
    after_separator = lsp_lines(current)[1].index("\u2028") + 1
    assert await session.inline(uri, session.position(current, 1, after_separator)) == []


# --- latest wins, cancellation ------------------------------------------------------------------


async def test_a_newer_request_for_the_document_supersedes_the_older_one(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    text = "def area(width, height):\n    return \n"
    uri = session.open(text)
    cursor = session.position(text, 1, 11)
    _, first = session.send(INLINE, session.inline_params(uri, cursor))
    _, second = session.send(INLINE, session.inline_params(uri, cursor))
    assert await answer(first) == []
    newest = await answer(second)
    assert len(newest) == 1
    assert newest[0].insert_text.strip()
    # Every request gets exactly one response: no stray answer follows.
    await session.wait_for_messages()
    assert "unknown message id" not in caplog.text


#: A list goes on and on: with room for 2000 tokens, the model is still writing it when a
#: cancel or a newer request comes.
NUMBERS = "NUMBERS = [\n    1,\n    2,\n    3,\n    4,\n    5,\n    "


async def test_cancelling_a_running_completion_answers_request_cancelled_and_stops_the_engine(
    tolerant_session: Session,
) -> None:
    session = tolerant_session
    uri = session.open(NUMBERS)
    msg_id, pending = session.send(
        INLINE, session.inline_params(uri, session.position(NUMBERS, 6, 4))
    )
    job = await generating(session, uri)  # the model is at work on it...
    session.cancel(msg_id)  # ...when the cancel comes
    await expect_error(pending, REQUEST_CANCELLED)

    # The cancelled job stopped within one token after the cancel (the engine's own count)...
    _, (ended,) = await document_jobs(
        session, uri, lambda running, finished: not running and finished, "the job's end"
    )
    assert ended["request_id"] == job["request_id"]
    assert ended["finish_reasons"] == ["cancelled"]
    assert ended["tokens_after_cancel"] in (0, 1)
    # ...and the next request is served.
    other = "def double(x):\n    return \n"
    (item,) = await session.inline(session.open(other), session.position(other, 1, 11))
    assert plain_text(item).strip()


async def test_a_superseded_completion_stops_the_model_within_one_token(
    tolerant_session: Session,
) -> None:
    """README: a new request for a document answers the older one with an empty list at once
    and stops its model work within one token, counted by the engine (`infill/stats`)."""
    session = tolerant_session
    uri = session.open(NUMBERS)
    cursor = session.position(NUMBERS, 6, 4)
    _, older = session.send(INLINE, session.inline_params(uri, cursor))
    superseded = await generating(session, uri)
    # The user types on: `7` after the cursor, and the editor asks again (a single line now,
    # so that the newer request is short).
    at = {"line": 6, "character": cursor.character}
    session.change(uri, 2, [{"range": {"start": at, "end": at}, "text": "7"}])
    after = types.Position(line=6, character=cursor.character + 1)
    _, newer = session.send(INLINE, session.inline_params(uri, after))
    assert await answer(older) == []
    await answer(newer)  # whatever the model writes: this test is about the older job

    _, finished = await document_jobs(
        session,
        uri,
        lambda running, finished: not running and len(finished) >= 2,
        "both jobs' ends",
    )
    (ended,) = [job for job in finished if job["request_id"] == superseded["request_id"]]
    assert ended["finish_reasons"] == ["cancelled"]
    assert ended["tokens_after_cancel"] in (0, 1)


# --- bad input ----------------------------------------------------------------------------------


async def test_an_unknown_document_is_an_invalid_params_error(session: Session) -> None:
    error = await expect_error(
        session.inline("file:///e2e/never-opened.py", types.Position(line=0, character=0)),
        INVALID_PARAMS,
    )
    assert "never-opened.py" in str(error)
    await _still_serving(session)


@pytest.mark.parametrize(
    ("line", "character", "says"),
    [
        (0, 13, "past the end of line 0"),  # the line has 12 characters
        (0, 10_000, "past the end of line 0"),
        (1, 1, "past the end of line 1"),  # the empty line after the final line break
        (2, 0, "past the end of the document"),
        (2_000_000_000, 0, "past the end of the document"),
    ],
)
async def test_a_position_outside_the_document_is_an_invalid_params_error(
    session: Session, line: int, character: int, says: str
) -> None:
    uri = session.open("x = compute(\n")
    error = await expect_error(
        session.inline(uri, types.Position(line=line, character=character)), INVALID_PARAMS
    )
    assert says in str(error)
    await _still_serving(session)


DOCUMENT = {"uri": "file:///e2e/x.py"}
CONTEXT = {"triggerKind": 2}
MALFORMED = {
    "negative line": {
        "textDocument": DOCUMENT,
        "position": {"line": -1, "character": 0},
        "context": CONTEXT,
    },
    "line not a number": {
        "textDocument": DOCUMENT,
        "position": {"line": "one", "character": 0},
        "context": CONTEXT,
    },
    "uri an object": {
        "textDocument": {"uri": {"path": "/e2e/x.py"}},
        "position": {"line": 0, "character": 0},
        "context": CONTEXT,
    },
    "no document": {"position": {"line": 0, "character": 0}, "context": CONTEXT},
    "no position": {"textDocument": DOCUMENT, "context": CONTEXT},
    "params a list": [],
    "params a string": "hello",
}


@pytest.mark.parametrize("params", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_params_get_an_invalid_params_error(session: Session, params: Any) -> None:
    await expect_error(session.send_raw(INLINE, params), INVALID_PARAMS)
    await _still_serving(session)


async def _still_serving(session: Session) -> None:
    text = "def square(x):\n    return x * \n"
    (item,) = await session.inline(session.open(text), session.position(text, 1, 15))
    assert plain_text(item).strip()


# --- settings -----------------------------------------------------------------------------------


async def test_a_bad_setting_is_named_in_a_warning_and_completions_still_work(
    tolerant_session: Session,
) -> None:
    warnings = [m for m in tolerant_session.client.messages if "maxTokensSingleLine" in m.message]
    assert len(warnings) == 1
    assert warnings[0].type == types.MessageType.Warning
    assert "'lots'" in warnings[0].message
    await _still_serving(tolerant_session)


async def test_changed_configuration_applies_to_the_next_request(session: Session) -> None:
    """`workspace/didChangeConfiguration` takes effect without a restart: with
    maxTokensSingleLine 2 the engine stops after two tokens where it wrote more before."""
    text = "def mean(values):\n    return \n"
    cursor = session.position(text, 1, 11)
    since_logs = len(session.client.log_messages)
    since_messages = len(session.client.messages)
    (before,) = await session.inline(session.open(text), cursor)
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {"maxTokensSingleLine": 2}})
    )
    try:
        after = await session.inline(session.open(text), cursor)
        jobs = await wait_until(
            lambda: len(engine_jobs(session, since_logs)) == 2 and engine_jobs(session, since_logs),
            "both engine jobs' log lines",
        )
    finally:
        session.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings=FAST)
        )
        await session.wait_for_messages()
    (generated_before, _), (generated_after, finish_after) = jobs
    assert generated_before > 2
    assert (generated_after, finish_after) == (2, "length")
    assert all(plain_text(before).startswith(plain_text(item)) for item in after)
    assert session.client.messages[since_messages:] == []  # valid settings: no complaint


async def test_a_longer_debounce_from_the_configuration_holds_requests_back(
    session: Session,
) -> None:
    """A request made with a 10 s debounce (the most there is) is still waiting after a later
    request, made with the short debounce again, has gone through the model: cancelling it
    answers RequestCancelled, and the engine never saw it."""
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"infill": {"debounceMs": 10_000}})
    )
    try:
        text = "def total(prices):\n    return \n"
        uri = session.open(text)
        msg_id, held = session.send(
            INLINE, session.inline_params(uri, session.position(text, 1, 11))
        )
    finally:
        session.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings=FAST)
        )
    other = "def double(x):\n    return \n"
    other_uri = session.open(other)
    (item,) = await session.inline(other_uri, session.position(other, 1, 11))
    assert plain_text(item).strip()
    await document_jobs(session, other_uri, lambda _, finished: finished, "the later request's job")
    assert not held.done()
    session.cancel(msg_id)
    await expect_error(held, REQUEST_CANCELLED)
    await session.wait_for_messages()
    running, finished = await document_jobs(session, uri, lambda *_: True, "the stats")
    assert (running, finished) == ([], [])


# --- a model that cannot be loaded --------------------------------------------------------------


@pytest.mark.parametrize("client", list(CLIENTS))
async def test_a_model_that_cannot_be_loaded_is_reported_once_and_named_by_every_request(
    client: str,
) -> None:
    path = "/nonexistent/model.gguf"
    options = {"infill": {"model": path}}
    async with lsp_session(client_capabilities(client), options) as session:
        status = await session.until_loaded()
        assert status["status"] == "error"
        assert path in status["last_error"]
        await wait_until(lambda: session.client.messages, "the failure's window/showMessage")

        text = "x = \n"
        uri = session.open(text)
        for _ in range(2):
            error = await expect_error(
                session.inline(uri, session.position(text, 0, 4)), REQUEST_FAILED
            )
            assert path in str(error)
        await session.wait_for_messages()
        (shown,) = session.client.messages
        assert shown.type == types.MessageType.Error
        assert path in shown.message
