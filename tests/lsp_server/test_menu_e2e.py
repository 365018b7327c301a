"""The completion menu through the real server, as the clients without inline completion ask
for it: with the scripted model where each answer must be known (the bounded wait, typing on,
a cancel, the usage counts), and with the real default model for what a user sees.

A client applies an item by replacing the range of its `textEdit` with its `newText`; these
tests apply it the same way (`apply`), in the encoding the session negotiated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import (
    Session,
    answer,
    apply_changes,
    lsp_session,
    poll_until,
    ready_session,
    request_json,
)
from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities
from scripted_lsp import ScriptedModel, scripted_command, write_script

from lsp_server.commands import ACCEPT_COMPLETION_COMMAND

pytestmark = pytest.mark.asyncio(loop_scope="module")

COMPLETION = types.TEXT_DOCUMENT_COMPLETION
REQUEST_CANCELLED = -32800


def vscode_capabilities() -> types.ClientCapabilities:
    """VS Code's (a recording of 1.65), with the inline completion that its language client
    declares since it took LSP 3.18's (vscode-languageclient 9)."""
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    assert capabilities.text_document is not None
    capabilities.text_document.inline_completion = types.InlineCompletionClientCapabilities(
        dynamic_registration=True
    )
    return capabilities


def eglot_capabilities() -> types.ClientCapabilities:
    """What eglot 1.9 (Emacs 28) declares for completion: no inline completion, no
    insert-replace edits, no position encodings (so UTF-16)."""
    return types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            completion=types.CompletionClientCapabilities(
                completion_item=types.ClientCompletionItemOptions(snippet_support=False),
                context_support=True,
            )
        )
    )


def lsp_mode_capabilities() -> types.ClientCapabilities:
    """What lsp-mode 8 declares for completion: insert-replace edits and insertTextMode, no
    inline completion, no position encodings (though it counts columns in code points)."""
    return types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            completion=types.CompletionClientCapabilities(
                completion_item=types.ClientCompletionItemOptions(
                    snippet_support=False, insert_replace_support=True
                ),
                context_support=True,
            )
        )
    )


def utf8_capabilities() -> types.ClientCapabilities:
    """A menu client that offers UTF-8 positions (as Neovim and Helix do)."""
    capabilities = eglot_capabilities()
    capabilities.general = types.GeneralClientCapabilities(
        position_encodings=[types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16]
    )
    return capabilities


def completion_params(
    uri: str, position: types.Position, *, invoked: bool = True
) -> types.CompletionParams:
    kind = (
        types.CompletionTriggerKind.Invoked
        if invoked
        else types.CompletionTriggerKind.TriggerForIncompleteCompletions
    )
    return types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=position,
        context=types.CompletionContext(trigger_kind=kind),
    )


async def menu(session: Session, uri: str, position: types.Position) -> types.CompletionList:
    result = await answer(
        session.client.text_document_completion_async(completion_params(uri, position))
    )
    assert isinstance(result, types.CompletionList), result
    return result


def apply(session: Session, text: str, item: types.CompletionItem) -> str:
    """The document once the client has applied `item` (its edit's insert range where it has
    two, as clients do by default)."""
    edit = item.text_edit
    assert edit is not None, item
    range_ = edit.range if isinstance(edit, types.TextEdit) else edit.insert
    change = {"range": get_converter().unstructure(range_), "text": edit.new_text}
    return apply_changes(text, [change], session.encoding)


def type_at(session: Session, uri: str, version: int, position: types.Position, text: str) -> None:
    where = {"line": position.line, "character": position.character}
    session.change(uri, version, [{"range": {"start": where, "end": where}, "text": text}])


@asynccontextmanager
async def scripted(
    tmp_path: Path,
    entries: list[Any],
    capabilities: types.ClientCapabilities | None = None,
    client_name: str = "infill-lsp tests",
    flags: Sequence[str] = (),
    **options: Any,
) -> AsyncIterator[tuple[Session, ScriptedModel]]:
    model = write_script(tmp_path, "coder", entries)
    settings = {"debounceMs": 0, "completionMenuWaitMs": 10_000, **options}
    async with lsp_session(
        capabilities or eglot_capabilities(),
        {"infill": settings},
        [*scripted_command(model), *flags],
        client_name=client_name,
    ) as session:
        yield session, model


TYPED = "def add(a, b):\n    retu"
AT_WORD_END = types.Position(line=1, character=8)


async def test_an_item_replaces_the_typed_word_with_the_whole_suggestion(tmp_path: Path) -> None:
    async with scripted(tmp_path, ["rn a + b\n"]) as (session, _):
        uri = session.open(TYPED)
        result = await menu(session, uri, AT_WORD_END)
        assert result.is_incomplete  # every client asks again as the user types
        (item,) = result.items
        assert item.label.startswith("retu")
        assert item.filter_text is not None
        assert item.filter_text.startswith("retu")
        assert apply(session, TYPED, item) == "def add(a, b):\n    return a + b"


async def test_an_item_leaves_the_closer_after_the_cursor_where_it_is(tmp_path: Path) -> None:
    """The model closes the bracket that follows the cursor: the item stops before it, so that
    a client inserting up to the cursor (as Neovim's menus do) does not write it twice."""
    text = "def add(a, b):\n    return max(a, )"
    cursor = types.Position(line=1, character=len("    return max(a, "))
    for capabilities in (eglot_capabilities(), client_capabilities("neovim@v0.11.0")):
        async with scripted(tmp_path, ["b)\n"], capabilities) as (session, _):
            uri = session.open(text)
            (item,) = (await menu(session, uri, cursor)).items
            edit = item.text_edit
            assert edit is not None
            assert edit.new_text == "b"
            end = edit.range.end if isinstance(edit, types.TextEdit) else edit.replace.end
            assert end == cursor
            assert apply(session, text, item) == "def add(a, b):\n    return max(a, b)"


async def test_the_wait_is_bounded_and_the_generation_goes_on_for_the_next_request(
    tmp_path: Path,
) -> None:
    """The model holds its answer: the menu request is answered empty and incomplete within
    its wait, the one generation goes on, and the request after the next keystroke gets the
    rest of its suggestion (typed along), with no second call to the model."""
    entries = [{"text": "rn a + b\n", "hold": "go"}]
    async with scripted(tmp_path, entries, completionMenuWaitMs=50) as (session, model):
        uri = session.open(TYPED)
        first = await menu(session, uri, AT_WORD_END)
        assert first.is_incomplete
        assert not first.items
        type_at(session, uri, 2, AT_WORD_END, "r")
        typed = TYPED + "r"
        after = types.Position(line=1, character=9)
        second = await menu(session, uri, after)  # still held: empty again, nothing stale
        assert second.is_incomplete
        assert not second.items
        model.release("go")

        async def items() -> list[types.CompletionItem]:
            return list((await menu(session, uri, after)).items)

        (item,) = await poll_until(items, bool, "the held suggestion")
        assert apply(session, typed, item) == "def add(a, b):\n    return a + b"
        assert len(model.starts()) == 1


async def test_typing_on_never_lands_text_made_for_an_older_word(tmp_path: Path) -> None:
    """`retu` gets `return a + b`; the user types `r` (agreeing): the item is the same
    suggestion over `retur`; then `x` (disagreeing): no item carries the old text, and the new
    suggestion is made for `returx`."""
    async with scripted(tmp_path, ["rn a + b\n", "_value\n"]) as (session, model):
        uri = session.open(TYPED)
        (first,) = (await menu(session, uri, AT_WORD_END)).items
        assert apply(session, TYPED, first) == "def add(a, b):\n    return a + b"
        type_at(session, uri, 2, AT_WORD_END, "r")
        agreeing = TYPED + "r"
        (same,) = (await menu(session, uri, types.Position(line=1, character=9))).items
        assert apply(session, agreeing, same) == "def add(a, b):\n    return a + b"
        assert len(model.starts()) == 1
        type_at(session, uri, 3, types.Position(line=1, character=9), "x")
        diverging = agreeing + "x"
        result = await menu(session, uri, types.Position(line=1, character=10))
        for each in result.items:
            applied = apply(session, diverging, each)
            assert applied.startswith("def add(a, b):\n    returx"), applied
            assert "a + b" not in applied
        assert [apply(session, diverging, i) for i in result.items] == [
            "def add(a, b):\n    returx_value"
        ]


async def test_a_cancelled_request_is_answered_once_and_its_generation_serves_the_next(
    tmp_path: Path,
) -> None:
    entries = [{"text": "rn a + b\n", "hold": "go"}]
    async with scripted(tmp_path, entries) as (session, model):
        uri = session.open(TYPED)
        msg_id, pending = session.send(COMPLETION, completion_params(uri, AT_WORD_END))
        await poll_until(lambda: _started(model), bool, "the model's call")
        session.cancel(msg_id)
        with pytest.raises(JsonRpcException) as cancelled:
            await answer(pending)
        assert cancelled.value.code == REQUEST_CANCELLED
        model.release("go")
        (item,) = (await menu(session, uri, AT_WORD_END)).items
        assert apply(session, TYPED, item) == "def add(a, b):\n    return a + b"
        assert len(model.starts()) == 1


async def _started(model: ScriptedModel) -> int:
    return len(model.starts())


async def test_accepting_an_item_is_counted_as_accepting_ghost_text(tmp_path: Path) -> None:
    async with scripted(tmp_path, ["rn a + b\n"]) as (session, _):
        uri = session.open(TYPED)
        (item,) = (await menu(session, uri, AT_WORD_END)).items
        assert item.command is not None
        assert item.command.command == ACCEPT_COMPLETION_COMMAND
        # The command is one the server declares: Neovim and blink.cmp run only those.
        provider = session.initialize_result.capabilities.execute_command_provider
        assert provider is not None
        assert ACCEPT_COMPLETION_COMMAND in provider.commands
        session.change(
            uri,
            2,
            [
                {
                    "range": {
                        "start": {"line": 1, "character": 4},
                        "end": {"line": 1, "character": 8},
                    },
                    "text": "return a + b",
                }
            ],
        )
        await request_json(
            session,
            types.WORKSPACE_EXECUTE_COMMAND,
            {"command": item.command.command, "arguments": item.command.arguments},
        )
        report = await request_json(session, "infill/stats", {})
        python = report["usage"]["languages"]["python"]
        assert python["accepted"] == 1
        assert python["characters_accepted"] == len("rn a + b")


async def test_auto_gives_a_client_with_inline_completion_no_menu_items(tmp_path: Path) -> None:
    async with scripted(tmp_path, ["rn a + b\n"], vscode_capabilities()) as (session, model):
        uri = session.open(TYPED)
        result = await menu(session, uri, AT_WORD_END)
        assert not result.items
        assert not result.is_incomplete
        assert model.starts() == []
    # Asked for by the client's setting, or by the command line's flag where it says nothing.
    ways: list[tuple[str, dict[str, Any], list[str]]] = [
        ("setting", {"completionMenu": "on"}, []),
        ("flag", {}, ["--completion-menu", "on"]),
    ]
    for name, options, flags in ways:
        async with scripted(
            tmp_path / name, ["rn a + b\n"], vscode_capabilities(), flags=flags, **options
        ) as (session, _):
            uri = session.open(TYPED)
            (item,) = (await menu(session, uri, AT_WORD_END)).items
            assert apply(session, TYPED, item) == "def add(a, b):\n    return a + b", name


@pytest.mark.parametrize("capabilities", [eglot_capabilities, utf8_capabilities])
@pytest.mark.parametrize(
    "uri",
    [
        "file:///home/user/my%20project/na%C3%AFve%20%C3%A9t%C3%A9.py",
        "file:///C:/Users/Zo%C3%AB/code/app.py",
        "untitled:Untitled-1",
    ],
)
async def test_columns_after_an_emoji_in_each_encoding_and_any_document_name(
    tmp_path: Path, capabilities: Any, uri: str
) -> None:
    text = 'def add(a, b):\n    s = "😀é"; retu'
    async with scripted(tmp_path, ["rn a + b\n"], capabilities()) as (session, _):
        session.open(text, uri=uri)
        line = text.split("\n")[1]
        cursor = session.position(text, 1, len(line))
        (item,) = (await menu(session, uri, cursor)).items
        edit = item.text_edit
        assert isinstance(edit, types.TextEdit)
        assert edit.range.start == session.position(text, 1, len(line) - len("retu"))
        assert apply(session, text, item) == 'def add(a, b):\n    s = "😀é"; return a + b'


async def test_lsp_mode_8_gets_code_point_columns_as_it_counts_them(tmp_path: Path) -> None:
    """lsp-mode 8 (`clientInfo` "emacs", no position encodings) counts columns in code points:
    the server takes them so (UTF-32, said in its capabilities), so an emoji before the typed
    word shifts nothing; its changes on that line land where it meant them."""
    text = 'def add(a, b):\n    s = "😀é"; retu'
    async with scripted(tmp_path, ["rn a + b\n"], lsp_mode_capabilities(), client_name="emacs") as (
        session,
        _,
    ):
        assert session.encoding == types.PositionEncodingKind.Utf32
        uri = session.open(text)
        line = text.split("\n")[1]
        cursor = types.Position(line=1, character=len(line))  # code points, as Emacs counts
        (item,) = (await menu(session, uri, cursor)).items
        edit = item.text_edit
        assert isinstance(edit, types.InsertReplaceEdit)
        assert edit.insert.start == types.Position(line=1, character=len(line) - len("retu"))
        assert apply(session, text, item) == 'def add(a, b):\n    s = "😀é"; return a + b'
    # Another client naming itself so, or lsp-mode declaring encodings, is taken at its word.
    capabilities = lsp_mode_capabilities()
    capabilities.general = types.GeneralClientCapabilities(
        position_encodings=[types.PositionEncodingKind.Utf16]
    )
    async with scripted(tmp_path / "declared", [], capabilities, client_name="emacs") as (
        session,
        _,
    ):
        assert session.encoding == types.PositionEncodingKind.Utf16
    async with scripted(tmp_path / "other", [], lsp_mode_capabilities()) as (session, _):
        assert session.encoding == types.PositionEncodingKind.Utf16


# --- the real default model --------------------------------------------------------------------


@pytest.mark.slow
async def test_the_default_model_completes_a_typed_word_in_the_menu() -> None:
    async with ready_session(eglot_capabilities(), {"infill": {"debounceMs": 0}}) as session:
        text = "def fibonacci(n):\n    if n < 2:\n        return n\n    retu"
        uri = session.open(text)
        cursor = types.Position(line=3, character=8)
        # Asked again as the client does while the generation runs past the menu's wait.
        result = await poll_until(
            lambda: menu(session, uri, cursor), lambda r: bool(r.items), "a suggestion"
        )
        assert result.is_incomplete
        for item in result.items:
            applied = apply(session, text, item)
            assert applied.startswith(text[: -len("retu")] + "retu"), applied
            assert len(applied) > len(text)
            assert item.label.startswith("retu")
            assert (item.filter_text or item.label).startswith("retu")
            assert item.detail is not None
            assert "Gemma" in item.detail


@pytest.mark.slow
async def test_the_default_model_gives_several_items_when_asked_where_no_word_is_typed() -> None:
    async with ready_session(eglot_capabilities(), {"infill": {"debounceMs": 0}}) as session:
        text = "def area(width, height):\n    "
        uri = session.open(text)
        cursor = types.Position(line=1, character=4)
        result = await poll_until(
            lambda: menu(session, uri, cursor), lambda r: bool(r.items), "suggestions"
        )
        texts = [apply(session, text, item) for item in result.items]
        assert 1 <= len(texts) <= 3
        assert len(set(texts)) == len(texts)
        assert all(t.startswith(text) and len(t) > len(text) for t in texts)


@pytest.mark.slow
@pytest.mark.parametrize("capabilities", [eglot_capabilities, utf8_capabilities])
async def test_the_default_model_after_an_emoji_within_a_zero_wait_and_a_cancel(
    capabilities: Any,
) -> None:
    """With no wait at all, the first request is answered at once, empty and incomplete, while
    the generation runs; a request cancelled meanwhile is answered once; a later request at the
    same place gets the finished suggestion, its edit starting at the typed word in the
    session's encoding (an emoji before it counts 2 UTF-16 units, 4 UTF-8 bytes)."""
    options = {"infill": {"debounceMs": 0, "completionMenuWaitMs": 0}}
    async with ready_session(capabilities(), options) as session:
        text = 'def label(n):\n    if n < 0:\n        return "neg"\n    s = "😀"; retu'
        uri = session.open(text)
        line = text.split("\n")[-1]
        cursor = session.position(text, 3, len(line))
        first = await menu(session, uri, cursor)
        assert first.is_incomplete
        msg_id, pending = session.send(COMPLETION, completion_params(uri, cursor))
        session.cancel(msg_id)
        try:
            cancelled: Any = await answer(pending)
        except JsonRpcException as e:
            cancelled = e
        if isinstance(cancelled, JsonRpcException):
            assert cancelled.code == REQUEST_CANCELLED, cancelled
        else:  # answered before the cancel arrived
            assert isinstance(cancelled, types.CompletionList), cancelled
        result = await poll_until(
            lambda: menu(session, uri, cursor), lambda r: bool(r.items), "the suggestion"
        )
        for item in result.items:
            edit = item.text_edit
            assert isinstance(edit, types.TextEdit)
            assert edit.range.start == session.position(text, 3, len(line) - len("retu"))
            applied = apply(session, text, item)
            assert applied.startswith(text), applied
            assert len(applied) > len(text)
