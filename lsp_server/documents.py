"""Documents as the client sees them, and frozen snapshots taken before the first `await`.

pygls keeps the documents and converts positions through the negotiated encoding (UTF-16 by
default, UTF-8 for Neovim). Two corrections to its document:
- lines end only at \\n, \\r\\n and \\r, as LSP says; pygls splits with `str.splitlines`,
  which also breaks at U+2028, U+0085, form feeds and more, and would then apply edits and
  convert positions on the wrong lines of a document that holds such characters;
- a position past the end of a line or of the document is refused here, where pygls would
  quietly move it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace import TextDocument, Workspace

from engine.text import lines_and_endings, split_lines


class LspTextDocument(TextDocument):
    """pygls's document, with LSP's line breaks."""

    @property
    def lines(self) -> Sequence[str]:
        return tuple(split_lines(self.source))


def use_lsp_lines(workspace: Workspace) -> None:
    """Make the workspace create `LspTextDocument`s (pygls has no public hook for this)."""
    original = workspace._create_text_document

    @functools.wraps(original)
    def create(*args: Any, **kwargs: Any) -> TextDocument:
        document = original(*args, **kwargs)
        document.__class__ = LspTextDocument
        return document

    workspace._create_text_document = create  # type: ignore[method-assign]


def find_document(workspace: Workspace, uri: str) -> TextDocument | None:
    """The open document for `uri`, however the client escaped it; None if it is not open.

    pygls 2.1 keys open documents by the percent-decoded URI (so `my%20dir`, `caf%C3%A9` and
    VS Code's `c%3A` drive all find the document its didOpen stored), while a document's
    `uri` stays as the client sent it. Looking up the raw URI would miss every escaped one.
    Unlike `Workspace.get_text_document`, a document that is not open is not read from disk.
    """
    documents: dict[str, TextDocument] = workspace.text_documents
    document = documents.get(unquote(uri))
    if document is None:
        document = documents.get(uri)  # a workspace keyed by the raw URI (pygls 2.0)
    return document


class InvalidPosition(JsonRpcInvalidParams, ValueError):
    """A position outside the document: raised in a request, its answer is InvalidParams."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentSnapshot:
    """The document at one moment, with the cursor: what a request computes on."""

    uri: str
    version: int | None
    language_id: str
    text: str
    offset: int  # the cursor, in code points from the start of `text`
    line: int
    character: int  # in code points

    @property
    def prefix(self) -> str:
        return self.text[: self.offset]

    @property
    def suffix(self) -> str:
        return self.text[self.offset :]


def snapshot(document: TextDocument, position: types.Position) -> DocumentSnapshot:
    """Freeze `document` with the cursor at `position` (client units). Raises InvalidPosition."""
    text = document.source
    lines = lines_and_endings(text)  # the empty line after a final break can hold the cursor
    if not 0 <= position.line < len(lines):
        raise InvalidPosition(
            f"line {position.line} is past the end of the document ({len(lines)} lines)"
        )
    content = lines[position.line][0]
    codec = document.position_codec
    width = codec.client_num_units(content)
    if not 0 <= position.character <= width:
        raise InvalidPosition(
            f"character {position.character} is past the end of line {position.line} "
            f"({width} units)"
        )
    server = codec.position_from_client_units(
        [content], types.Position(line=0, character=position.character)
    )
    character = server.character
    offset = sum(len(content) + len(ending) for content, ending in lines[: position.line])
    offset += character
    return DocumentSnapshot(
        uri=document.uri,
        version=document.version,
        language_id=document.language_id or "",
        text=text,
        offset=offset,
        line=position.line,
        character=character,
    )
