"""The completion menu's items: inline suggestions as `textDocument/completion` items, for the
LSP clients that show AI text only in their menu (Emacs eglot and lsp-mode, Helix, Kakoune, Sublime,
Neovim's built-in completion, nvim-cmp, blink.cmp).

The suggestions are the inline ones (`InlineCompleter`: one path from the document to the fitted
text); this module decides which clients get them and how an item is written so that each client
shows, filters and inserts it whole. What the clients do, read from their sources:

- The client filters items by the word before the cursor, matched against `filterText` or
  `label` (eglot 1.9 against the label alone), by prefix or fuzzily: both start with that word.
- Each client inserts the edit differently: the `textEdit` covers the typed word (eglot 1.9
  puts the label in first and expects the edit to cover the typed word; nvim-cmp drops an item
  whose edit spans lines), and `newText` repeats the word before the suggestion. No
  `insertText`: eglot 1.9 shows and inserts it as the candidate, newlines and all.
- Plain text, kept as it is (`insertTextMode` asIs: lsp-mode re-indents lines 2..n with the
  major mode otherwise), `kind` Text (Helix parses a Snippet-kind item as a snippet, blink.cmp
  adds brackets to a Function).
- Neovim 0.11's own completion inserts a plain-text edit only up to its first whitespace and
  applies a whole edit only for a snippet, which `vim.snippet` indents by the cursor line's
  indentation: that client gets every item as a snippet (one line too), escaped, its lines 2..n
  relative to the cursor line.
- The closers after the cursor that a suggestion ends with stay where they are, the item
  stopping before them: clients insert up to the cursor (an `InsertReplaceEdit`'s insert range
  by default, and Neovim's own completion always), which would write them twice.
- The list is always incomplete, so that every client asks again as the user types instead of
  filtering an item made for an older word (the stale item then overwrites what was typed).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from lsprotocol import types

from lsp_server.postprocess import Fitted

#: What the menu item says it is, beside its label.
SOURCE = "infill"
#: Characters of the suggestion's first line shown in the label.
LABEL_CHARS = 60
#: A word the client filters by: letters, digits and `_` (Emacs's symbol, Vim's `\k`, Helix's
#: word and blink.cmp's keyword agree on these).
_WORD_BEFORE = re.compile(r"\w*\Z")


class MenuMode(enum.Enum):
    """`completionMenu`: which clients get suggestions in their completion menu."""

    #: Clients that do not declare inline completion: nobody sees a suggestion twice.
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class MenuPlace(enum.Enum):
    """`completionMenuPlace`: where the suggestion sorts among the other servers' items."""

    FIRST = "first"
    LAST = "last"


#: `sortText` of each place: before or after any letter or digit (clients sort it as a string).
_SORT_TEXT = {MenuPlace.FIRST: " ", MenuPlace.LAST: "~"}


@dataclass(frozen=True, slots=True, kw_only=True)
class MenuClient:
    """What the client said of itself in `initialize` that decides how its items are written."""

    #: It declares LSP 3.18 inline completion (the key's presence: lsp-mode sends it empty).
    inline_completion: bool = False
    #: It takes an `InsertReplaceEdit` (insert up to the cursor, replace over closers).
    insert_replace: bool = False
    #: Neovim's built-in completion: a whole edit is applied only as a snippet.
    snippet_edits: bool = False
    #: It shows markdown documentation (else the suggestion is plain text there).
    markdown: bool = False

    @classmethod
    def of(
        cls, capabilities: types.ClientCapabilities | None, info: types.ClientInfo | None
    ) -> MenuClient:
        document = capabilities.text_document if capabilities is not None else None
        completion = document.completion if document is not None else None
        item = completion.completion_item if completion is not None else None
        insert_replace = bool(item and item.insert_replace_support)
        snippets = bool(item and item.snippet_support)
        neovim = info is not None and info.name == "Neovim"
        formats = (item.documentation_format or []) if item is not None else []
        return cls(
            markdown=types.MarkupKind.Markdown in formats,
            # An empty object declares it too (lsp-mode sends one).
            inline_completion=document is not None and document.inline_completion is not None,
            insert_replace=insert_replace,
            # nvim-cmp and blink.cmp declare insert-replace edits, and apply plain text whole.
            snippet_edits=neovim and snippets and not insert_replace,
        )


def serves_menu(mode: MenuMode, client: MenuClient) -> bool:
    """Whether this client gets suggestions in its completion menu."""
    if mode is MenuMode.AUTO:
        return not client.inline_completion
    return mode is MenuMode.ON


def typed_word(line_before_cursor: str) -> str:
    """The word the client filters the menu by: the word characters right before the cursor."""
    match = _WORD_BEFORE.search(line_before_cursor)
    return match.group() if match else ""


def label_of(word: str, text: str) -> str:
    """The item's label: the typed word and the suggestion's first line, cut, with `…` where
    more follows (a cut line or more lines)."""
    first, _, rest = text.partition("\n")
    if not first.strip() and rest.strip():  # it starts on the next line: show that one
        first, _, rest = rest.lstrip("\n").partition("\n")
        first = "↵ " + first.strip()
    line = word + first
    if len(line) > LABEL_CHARS:
        return line[: LABEL_CHARS - 1].rstrip() + "…"
    return line + (" …" if rest.strip() else "")


def snippet_text(text: str, indent: str) -> str | None:
    """`text` as a snippet for Neovim's `vim.snippet`, which puts the cursor line's indentation
    `indent` before each of lines 2..n: those lose it here, and `$`, `}` and `\\` are escaped.
    None when a line is indented less than `indent` (the snippet cannot write it)."""
    lines = text.split("\n")
    relative = [lines[0]]
    for line in lines[1:]:
        if line.startswith(indent):
            relative.append(line[len(indent) :])
        elif line.strip():
            return None
        else:
            relative.append("")
    return re.sub(r"([$}\\])", r"\\\1", "\n".join(relative))


def keeping_closers(fitted: Fitted, suffix: str) -> Fitted:
    """`fitted` written to leave the closers after the cursor in place, where its text ends with
    the ones it absorbs (the same document once accepted): clients insert up to the cursor
    (nvim-cmp and blink.cmp by default use an `InsertReplaceEdit`'s insert range, Neovim's own
    completion never removes text after the cursor), which would double them (`f(x))`)."""
    closers = suffix[: fitted.replace_chars]
    if closers and fitted.text.endswith(closers) and len(fitted.text) > len(closers):
        return Fitted(text=fitted.text[: -len(closers)], replace_chars=0)
    return fitted


def menu_items(
    suggestions: tuple[Fitted, ...],
    *,
    word: str,
    line_indent: str,
    start: types.Position,
    cursor: types.Position,
    replace_end: list[types.Position],
    client: MenuClient,
    place: MenuPlace,
    model: str,
    commands: list[types.Command | None],
) -> list[types.CompletionItem]:
    """The menu items of fitted suggestions. `start`: where the typed `word` starts on the
    cursor's line; `replace_end[i]`: the end of what suggestion i replaces (the cursor, or past
    the closers it absorbs); `commands[i]`: what the client runs when the item is accepted (the
    usage counts), or None."""
    items = []
    for rank, fitted in enumerate(suggestions):
        text = word + fitted.text
        snippet = None
        if client.snippet_edits:
            # Even one line: as plain text, Neovim 0.11 would insert it only up to its first
            # space ("return a + b" gives "return").
            snippet = snippet_text(text, line_indent)
            if snippet is None:  # a line the snippet cannot indent: its first line alone
                text = text.split("\n", 1)[0]
                snippet = snippet_text(text, line_indent)
        new_text = snippet if snippet is not None else text
        edit: types.TextEdit | types.InsertReplaceEdit
        if client.insert_replace:
            edit = types.InsertReplaceEdit(
                new_text=new_text,
                insert=types.Range(start=start, end=cursor),
                replace=types.Range(start=start, end=replace_end[rank]),
            )
        else:
            edit = types.TextEdit(
                range=types.Range(start=start, end=replace_end[rank]), new_text=new_text
            )
        first_line = text.split("\n", 1)[0]
        items.append(
            types.CompletionItem(
                label=label_of(word, fitted.text),
                label_details=types.CompletionItemLabelDetails(description=SOURCE),
                kind=types.CompletionItemKind.Text,
                detail=f"{SOURCE} suggestion ({model})",
                documentation=(
                    types.MarkupContent(kind=types.MarkupKind.Markdown, value=_code_block(text))
                    if client.markdown
                    else text
                ),
                filter_text=first_line,
                sort_text=f"{_SORT_TEXT[place]}{rank:02d}",
                preselect=False,
                insert_text_format=(
                    types.InsertTextFormat.Snippet
                    if snippet is not None
                    else types.InsertTextFormat.PlainText
                ),
                insert_text_mode=types.InsertTextMode.AsIs,
                text_edit=edit,
                command=commands[rank],
            )
        )
    return items


def _code_block(text: str) -> str:
    """`text` in a markdown code block whose fence no line of it closes."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"
