"""Next edit suggestions through the real server with the real default models, in GitHub
Copilot language server's shapes: after a rename or a changed literal, the same change at the
other places, applied as the client applies them; nothing inside strings or comments, nothing
after an undo, nothing for a stale version; the accept command and the shown / rejected
notifications counted in `infill/stats`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from lsp_helpers import Session, lsp_session, request_json
from lsprotocol import types
from next_edit_client import INLINE_EDIT, Document
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

INVALID_PARAMS = -32602


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["neovim", "vscode"])
async def session(request: pytest.FixtureRequest) -> AsyncIterator[Session]:
    """Neovim negotiates UTF-8 positions; VS Code keeps UTF-16."""
    name = "neovim" if request.param == "neovim" else "visual_studio_code@v1.65.2"
    async with lsp_session(client_capabilities(name), {"infill": {"debounceMs": 0}}) as s:
        status = await s.until_loaded()
        assert status["status"] == "ready", status
        yield s


RENAMES = [
    (
        "python",
        "file:///work/my%20project/caf%C3%A9.py",
        "def area(count):\n    # count is how many\n    total = count * 2  # ½\n"
        "    return total + count\n",
        "count",
        "items",
        "def area(items):\n    # count is how many\n    total = items * 2  # ½\n"
        "    return total + items\n",
    ),
    (
        "typescript",
        "file:///c%3A/Users/me/src/app.ts",
        "function sum(values: number[]): number {\n  let total = 0;\n"
        "  for (const v of values) total += v;\n"
        '  console.log("values:", total);\n  return total;\n}\n',
        "total",
        "acc",
        "function sum(values: number[]): number {\n  let acc = 0;\n"
        "  for (const v of values) acc += v;\n"
        '  console.log("values:", acc);\n  return acc;\n}\n',
    ),
    (
        "go",
        "untitled:Untitled-1",
        'func Port() int {\n\tport := 8080 // π\n\tlog.Printf("port %d", port)\n\treturn port\n}\n',
        "port",
        "p",
        'func Port() int {\n\tp := 8080 // π\n\tlog.Printf("port %d", p)\n\treturn p\n}\n',
    ),
    (
        "rust",
        "file:///home/me/r%C3%A9sum%C3%A9/src/lib.rs",
        "fn scale(width: u32) -> u32 {\n    let w2 = width * 2; // width twice\n"
        "    w2 + width\n}\n",
        "width",
        "w",
        "fn scale(w: u32) -> u32 {\n    let w2 = w * 2; // width twice\n    w2 + w\n}\n",
    ),
]


@pytest.mark.parametrize(("language", "uri", "text", "old", "new", "expected"), RENAMES)
async def test_a_rename_is_proposed_at_the_other_uses_and_applies_exactly(
    session: Session, language: str, uri: str, text: str, old: str, new: str, expected: str
) -> None:
    """The first occurrence renamed as Neovim types it: every other use in the function is
    proposed (not those inside strings or comments), and the edits, applied as the client
    applies them, leave the file renamed everywhere it should be."""
    document = Document(
        session, text, uri.replace("app.ts", f"app-{session.encoding}.ts"), language
    )
    document.replace_as_neovim_types(old, new)
    edits = await document.next_edits(cursor=document.text.index(new) + len(new))
    assert edits, "no next edit after a rename"
    assert all(e["command"]["command"] == "infill.acceptNextEdit" for e in edits)
    document.accept(edits)
    assert document.text == expected


async def test_a_changed_literal_is_proposed_where_the_same_literal_stands(
    session: Session,
) -> None:
    text = "TIMEOUT = 30\nretry(timeout=30)\nsleep(300)\nwait(30)\n"
    document = Document(session, text, f"file:///e2e/literal-{session.encoding}.py", "python")
    document.replace_as_neovim_types("30", "45")
    edits = await document.next_edits(cursor=document.text.index("45") + 2)
    document.accept(edits)
    assert document.text == "TIMEOUT = 45\nretry(timeout=45)\nsleep(300)\nwait(45)\n"


async def test_after_an_undo_nothing_is_proposed(session: Session) -> None:
    text = "def f(count):\n    return count + count\n"
    document = Document(session, text, f"file:///e2e/undo-{session.encoding}.py", "python")
    document.replace_as_neovim_types("count", "n")
    assert await document.next_edits(cursor=document.text.index("n)") + 1)
    document.replace_as_neovim_types("n", "count")  # the user takes the rename back
    assert await document.next_edits(cursor=document.text.index("count") + 5) == []


async def test_a_stale_version_gets_no_edits(session: Session) -> None:
    text = "x = 1\nprint(x)\nprint(x + 1)\n"
    document = Document(session, text, f"file:///e2e/stale-{session.encoding}.py", "python")
    document.replace_as_neovim_types("x", "y")
    cursor = document.text.index("y") + 1
    assert await document.next_edits(cursor) != []
    assert await document.next_edits(cursor, version=document.version - 1) == []
    assert await document.next_edits(cursor, version=document.version + 1) == []


async def test_bad_params_are_invalid_params_and_the_server_goes_on(session: Session) -> None:
    document = Document(session, "a = 1\n", f"file:///e2e/bad-{session.encoding}.py", "python")
    for params in (
        {},
        {"textDocument": {"uri": document.uri}},
        {
            "textDocument": {"uri": document.uri, "version": "2"},
            "position": {"line": 0, "character": 0},
        },
        {"textDocument": {"uri": document.uri}, "position": {"line": -1, "character": 0}},
        {"textDocument": {"uri": document.uri}, "position": {"line": 9, "character": 0}},
        {
            "textDocument": {"uri": "file:///never/opened.py"},
            "position": {"line": 0, "character": 0},
        },
    ):
        with pytest.raises(JsonRpcException) as error:
            await request_json(session, INLINE_EDIT, params)
        assert error.value.code == INVALID_PARAMS, params
    assert await document.next_edits(cursor=0) == []  # still serving


async def test_outcomes_are_counted_per_source_in_stats(session: Session) -> None:
    text = "def g(size):\n    return size * size + size\n"
    document = Document(session, text, f"file:///e2e/count-{session.encoding}.py", "python")
    before = (await request_json(session, "infill/stats", {}))["next_edits"]["propagation"]
    document.replace_as_neovim_types("size", "s")
    edits = await document.next_edits(cursor=document.text.index("s)") + 1)
    assert len(edits) == 3
    ids = [e["command"]["arguments"][0] for e in edits]
    protocol = session.client.protocol
    protocol.notify("textDocument/didShowInlineEdit", {"item": edits[0]})
    protocol.notify("textDocument/didFocus", {"textDocument": {"uri": document.uri}})
    protocol.notify("textDocument/didFocus", {"uri": document.uri})
    protocol.notify("textDocument/didFocus", {})
    protocol.notify("textDocument/didShowCompletion", {"item": {"insertText": "x"}})
    protocol.notify("textDocument/didPartiallyAcceptCompletion", {"item": {}, "acceptedLength": 1})
    # Accepted as a request (sidekick.nvim) and as a notification; rejected by our clients.
    await request_json(
        session,
        "workspace/executeCommand",
        {"command": "infill.acceptNextEdit", "arguments": [ids[0]]},
    )
    # A notification, as JSON on the wire: pygls's client refuses to send a request method
    # without an id.
    protocol._send_data(
        {
            "jsonrpc": "2.0",
            "method": "workspace/executeCommand",
            "params": {"command": "infill.acceptNextEdit", "arguments": [ids[1]]},
        }
    )
    protocol.notify("infill/didRejectNextEdit", {"id": ids[2]})
    protocol.notify("infill/didRejectNextEdit", {"id": "not-an-id"})
    after = (await request_json(session, "infill/stats", {}))["next_edits"]["propagation"]
    assert {k: after[k] - before[k] for k in after} == {"shown": 3, "accepted": 2, "rejected": 1}
    # Asked again about the same version: the same edits under the same ids, less the one
    # the user rejected.
    again = await document.next_edits(cursor=document.text.index("s)") + 1)
    assert [e["command"]["arguments"][0] for e in again] == ids[:2]


async def test_a_change_to_a_closed_document_is_no_error(session: Session) -> None:
    """A didChange that races its own didClose (VS Code's revert-and-close of an untitled
    document) is dropped: no "Error in server" shown, and the server serves on."""
    document = Document(session, "x = 1\n", "untitled:Untitled-7", "python")
    session.client.text_document_did_close(
        types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=document.uri)
        )
    )
    shown = len(session.client.messages)
    document.replace("x", "y")
    reopened = Document(session, "y = 1\n", document.uri, "python")
    assert await reopened.next_edits(cursor=0) == []
    assert session.client.messages[shown:] == []


async def test_the_capability_is_advertised(session: Session) -> None:
    capabilities = session.initialize_result.capabilities
    assert capabilities.experimental is not None
    assert capabilities.experimental["nextEditSuggestions"] == {"request": INLINE_EDIT}
    assert capabilities.execute_command_provider is not None
    assert "infill.acceptNextEdit" in capabilities.execute_command_provider.commands
