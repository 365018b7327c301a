"""The completion menu's items, as each kind of client takes them (`lsp_server/menu/items.py`):
the typed word replaced, the whole suggestion inserted, a label and filter text the client's
matcher keeps, and which clients get the menu at all."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import client_capabilities

from lsp_server.menu.items import (
    LABEL_CHARS,
    MenuClient,
    MenuMode,
    MenuPlace,
    keeping_closers,
    label_of,
    menu_items,
    serves_menu,
    snippet_text,
    typed_word,
)
from lsp_server.postprocess import Fitted

PLAIN = MenuClient(markdown=True)
INSERT_REPLACE = MenuClient(insert_replace=True)
NEOVIM_OWN = MenuClient(snippet_edits=True)


@pytest.mark.parametrize(
    ("line", "word"),
    [
        ("    retu", "retu"),
        ("x = foo.", ""),
        ("x = foo.ba", "ba"),
        ("    ", ""),
        ("", ""),
        ("total_2", "total_2"),
        ("s = 'é'; naïv", "naïv"),
        ("call(", ""),
    ],
)
def test_the_typed_word_is_the_word_characters_before_the_cursor(line: str, word: str) -> None:
    assert typed_word(line) == word


@pytest.mark.parametrize(
    ("word", "text", "label"),
    [
        ("retu", "rn a + b", "return a + b"),
        ("", "return a\nprint(a)", "return a …"),
        ("if", " x:\n        y()\n", "if x: …"),
        ("", "\n    return 1", "↵ return 1"),
        ("", "x" * 100, "x" * (LABEL_CHARS - 1) + "…"),
    ],
)
def test_the_label_reads_as_the_suggestions_first_line(word: str, text: str, label: str) -> None:
    assert label_of(word, text) == label
    assert label.startswith(word)


def test_a_snippet_for_neovims_own_completion_is_escaped_and_indented_from_the_cursor_line() -> (
    None
):
    text = 'if x:\n        print("${a}\\\\")\n    return'
    assert snippet_text(text, "    ") == 'if x:\n    print("\\${a\\}\\\\\\\\")\nreturn'
    # A line left of the cursor line's indentation cannot be written by vim.snippet.
    assert snippet_text("a\nb", "    ") is None
    assert snippet_text("a\n\n    b", "    ") == "a\n\nb"


def _items(
    fitted: tuple[Fitted, ...], client: MenuClient, *, word: str = "retu", absorbed: int = 0
) -> list[types.CompletionItem]:
    start = types.Position(line=3, character=4)
    cursor = types.Position(line=3, character=4 + len(word))
    return menu_items(
        fitted,
        word=word,
        line_indent="    ",
        start=start,
        cursor=cursor,
        replace_end=[types.Position(line=3, character=cursor.character + absorbed)] * len(fitted),
        client=client,
        place=MenuPlace.FIRST,
        model="Gemma 3 270m",
        commands=[None] * len(fitted),
    )


def test_an_item_replaces_the_typed_word_with_the_word_and_the_whole_suggestion() -> None:
    (item,) = _items((Fitted(text="rn a + b\nprint(a)", replace_chars=0),), PLAIN)
    edit = item.text_edit
    assert isinstance(edit, types.TextEdit)
    assert edit.range.start == types.Position(line=3, character=4)
    assert edit.range.end == types.Position(line=3, character=8)
    assert edit.new_text == "return a + b\nprint(a)"
    assert item.insert_text is None  # eglot 1.9 would insert it as the candidate
    assert item.filter_text == "return a + b"
    assert item.label.startswith("retu")
    assert item.insert_text_format == types.InsertTextFormat.PlainText
    assert item.insert_text_mode == types.InsertTextMode.AsIs
    assert item.kind == types.CompletionItemKind.Text
    assert item.preselect is False
    assert item.detail is not None
    assert "Gemma 3 270m" in item.detail
    assert isinstance(item.documentation, types.MarkupContent)
    assert "return a + b\nprint(a)" in item.documentation.value


def test_an_insert_replace_client_replaces_the_closers_the_suggestion_absorbs() -> None:
    (item,) = _items((Fitted(text="rn f(x)", replace_chars=1),), INSERT_REPLACE, absorbed=1)
    edit = item.text_edit
    assert isinstance(edit, types.InsertReplaceEdit)
    assert edit.insert.end == types.Position(line=3, character=8)
    assert edit.replace.end == types.Position(line=3, character=9)
    assert edit.new_text == "return f(x)"


@pytest.mark.parametrize(
    ("fitted", "suffix", "kept"),
    [
        # The closer it absorbs stays where it is: the text stops before it.
        (Fitted(text="n - 2)", replace_chars=1), ")", Fitted(text="n - 2")),
        (Fitted(text="x) + f(y)", replace_chars=1), ")\n", Fitted(text="x) + f(y")),
        (Fitted(text='a")', replace_chars=2), '")', Fitted(text="a")),
        # Nothing absorbed, or text that does not end with the closers: as it was.
        (Fitted(text="n - 2", replace_chars=0), ")", Fitted(text="n - 2")),
        (Fitted(text="x]", replace_chars=1), ")", Fitted(text="x]", replace_chars=1)),
    ],
)
def test_a_menu_item_leaves_the_closers_after_the_cursor_in_place(
    fitted: Fitted, suffix: str, kept: Fitted
) -> None:
    """Clients insert a menu item up to the cursor (nvim-cmp's and blink.cmp's default insert
    range, Neovim's own completion in any case): absorbed closers would be doubled there."""
    assert keeping_closers(fitted, suffix) == kept
    # The document once accepted is the same.
    after = kept.text + suffix[kept.replace_chars :]
    assert after == fitted.text + suffix[fitted.replace_chars :]


def test_neovims_own_completion_gets_every_suggestion_as_a_snippet() -> None:
    (item,) = _items((Fitted(text="rn a\n    b = $x", replace_chars=0),), NEOVIM_OWN)
    assert item.insert_text_format == types.InsertTextFormat.Snippet
    assert item.text_edit is not None
    assert item.text_edit.new_text == "return a\nb = \\$x"
    # One line too: Neovim 0.11 inserts a plain-text edit only up to its first space.
    (one,) = _items((Fitted(text="rn $a + b", replace_chars=0),), NEOVIM_OWN)
    assert one.insert_text_format == types.InsertTextFormat.Snippet
    assert one.text_edit is not None
    assert one.text_edit.new_text == "return \\$a + b"
    # A line left of the cursor line's indentation: the first line alone, still a snippet.
    (cut,) = _items((Fitted(text="rn a\nb()", replace_chars=0),), NEOVIM_OWN)
    assert cut.insert_text_format == types.InsertTextFormat.Snippet
    assert cut.text_edit is not None
    assert cut.text_edit.new_text == "return a"


def test_several_suggestions_keep_their_order_and_sort_first_or_last() -> None:
    fitted = (Fitted(text="rn a", replace_chars=0), Fitted(text="rn b", replace_chars=0))
    first = _items(fitted, PLAIN)
    assert [i.label for i in first] == ["return a", "return b"]
    keys = [i.sort_text or "" for i in first]
    assert keys == sorted(keys)
    # Before any other server's item (a letter, digit or symbol name), or after it.
    assert all(key < "0" for key in keys)
    last = menu_items(
        fitted,
        word="retu",
        line_indent="",
        start=types.Position(line=0, character=0),
        cursor=types.Position(line=0, character=4),
        replace_end=[types.Position(line=0, character=4)] * 2,
        client=PLAIN,
        place=MenuPlace.LAST,
        model="m",
        commands=[None, None],
    )
    assert all((i.sort_text or "") > "zzzz" for i in last)


CLIENTS = {
    "vscode": client_capabilities("visual_studio_code@v1.65.2"),
    "neovim": client_capabilities("neovim@v0.11.0"),
    "emacs": client_capabilities("emacs@v29.1"),
}


def test_which_clients_get_the_menu() -> None:
    vscode_like = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()
        )
    )
    inline = MenuClient.of(vscode_like, types.ClientInfo(name="Visual Studio Code"))
    assert inline.inline_completion
    assert not serves_menu(MenuMode.AUTO, inline)
    assert serves_menu(MenuMode.ON, inline)
    for name, capabilities in CLIENTS.items():
        client = MenuClient.of(capabilities, types.ClientInfo(name=name))
        # None of these recordings declares inline completion.
        assert serves_menu(MenuMode.AUTO, client), name
        assert not serves_menu(MenuMode.OFF, client), name
    assert not serves_menu(MenuMode.AUTO, MenuClient(inline_completion=True))


def test_neovims_own_completion_is_told_from_nvim_cmp_by_its_edits() -> None:
    capabilities = CLIENTS["neovim"]
    own = MenuClient.of(capabilities, types.ClientInfo(name="Neovim"))
    assert own.snippet_edits
    assert not own.insert_replace
    completion = capabilities.text_document.completion  # type: ignore[union-attr]
    assert completion is not None
    assert completion.completion_item is not None
    completion.completion_item.insert_replace_support = True  # what cmp-nvim-lsp declares
    cmp = MenuClient.of(capabilities, types.ClientInfo(name="Neovim"))
    assert cmp.insert_replace
    assert not cmp.snippet_edits
