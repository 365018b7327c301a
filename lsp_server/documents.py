"""Documents as the client sees them, and frozen snapshots taken before the first `await`.

pygls keeps the documents and converts positions through the negotiated encoding (UTF-16 by
default, UTF-8 for Neovim). Three corrections to its document:
- lines end only at \\n, \\r\\n and \\r, as LSP says; pygls splits with `str.splitlines`,
  which also breaks at U+2028, U+0085, form feeds and more, and would then apply edits and
  convert positions on the wrong lines of a document that holds such characters;
- a position past the end of a line or of the document is refused here, where pygls would
  quietly move it;
- an edit costs a count of line breaks up to the lines it touches and one copy of the text,
  both in C: pygls splits the whole document into lines and joins them again in a Python
  loop, which took a tenth of a second per keystroke in a 4 MB file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace import PositionCodec, TextDocument, Workspace

from engine.text import split_lines

#: A line break, or where the next one may start.
_BREAK = re.compile(r"[\r\n]")


#: Text counted at a time while looking for a line: a few thousand lines of code.
_CHUNK = 1 << 16


def _breaks(text: str, start: int, end: int) -> int:
    """The line breaks in `text[start:end]` (a \r\n is one), counted in C."""
    crlf = text.count("\r\n", start, end)
    return text.count("\n", start, end) + text.count("\r", start, end) - crlf


def _skip_lines(text: str, count: int, start: int) -> int | None:
    """Where the line `count` lines below the one starting at `start` starts; None if the text
    has fewer lines.

    1. Skip whole chunks while they hold fewer line breaks than are left to skip.
    2. In the chunk that holds the line, match the remaining lines; possessive quantifiers, so
       a miss costs one pass and no backtracking.
    """
    while count > 0:
        end = min(start + _CHUNK, len(text))
        if text[end - 1 : end + 1] == "\r\n":
            end += 1  # a chunk never ends between \r and \n
        breaks = _breaks(text, start, end)
        if breaks >= count or end == len(text):
            break
        count -= breaks
        start = end
    if count == 0:
        return start
    match = re.compile(rf"(?:[^\r\n]*+(?:\r\n|\r|\n)){{{count}}}+").match(text, start)
    return None if match is None else match.end()


def lines_at(text: str, first: int, count: int) -> str:
    """Lines `first` to `first + count` of `text` (0-based), with their line breaks; fewer
    where the text ends first. Found by counting line breaks in C (`_skip_lines`), so a
    snippet from a large document costs no split of the whole of it."""
    start = _skip_lines(text, first, 0) if first >= 0 else None
    if start is None:
        return ""
    end = _skip_lines(text, count, start)
    return text[start : len(text) if end is None else end]


class LspTextDocument(TextDocument):
    """pygls's document, with LSP's line breaks and edits that cost what they change."""

    @property
    def lines(self) -> Sequence[str]:
        return tuple(split_lines(self.source))

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        """Replace the change's range, found without splitting the document into lines. A
        range past the end of the document reaches to its end, as in pygls."""
        text = self.source
        start_line = _skip_lines(text, change.range.start.line, 0)
        if start_line is None:
            self._source = text + change.text
            return
        start = self._offset(text, start_line, change.range.start.character)
        end_line = _skip_lines(text, change.range.end.line - change.range.start.line, start_line)
        end = (
            len(text)
            if end_line is None
            else self._offset(text, end_line, change.range.end.character)
        )
        self._source = text[:start] + change.text + text[max(start, end) :]

    def _offset(self, text: str, line_start: int, character: int) -> int:
        """The offset of `character` (client units) on the line starting at `line_start`;
        past the line's end, its end."""
        found = _BREAK.search(text, line_start)
        content = text[line_start : len(text) if found is None else found.start()]
        codec = self.position_codec
        if character >= codec.client_num_units(content):
            return line_start + len(content)
        position = codec.position_from_client_units(
            [content], types.Position(line=0, character=character)
        )
        return line_start + position.character


def use_lsp_lines(workspace: Workspace) -> None:
    """Make the workspace create `LspTextDocument`s (pygls has no public hook for this)."""
    original = workspace._create_text_document

    @functools.wraps(original)
    def create(*args: Any, **kwargs: Any) -> TextDocument:
        document = original(*args, **kwargs)
        document.__class__ = LspTextDocument
        return document

    workspace._create_text_document = create  # type: ignore[method-assign]


def exceeds_bytes(text: str, limit: int) -> bool:
    """Whether `text` takes more than `limit` bytes in UTF-8: encoded only when its length in
    characters (one to four bytes each) leaves that open."""
    if len(text) > limit:
        return True
    if 4 * len(text) <= limit:
        return False
    return len(text.encode("utf-8", "surrogatepass")) > limit


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

    @classmethod
    def at(
        cls, text: str, offset: int, *, uri: str, version: int = 1, language_id: str = "python"
    ) -> DocumentSnapshot:
        """`text` with the cursor at code point `offset`: the document a suggestion's
        acceptance leaves (answers written ahead), and tests'. Lines end where LSP says they
        do (\n, \r\n, \r), as in `snapshot`."""
        line_start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
        return cls(
            uri=uri,
            version=version,
            language_id=language_id,
            text=text,
            offset=offset,
            line=_breaks(text, 0, offset),
            character=offset - line_start,
        )

    @property
    def prefix(self) -> str:
        return self.text[: self.offset]

    @property
    def suffix(self) -> str:
        return self.text[self.offset :]

    def typed_on_from(self, old: DocumentSnapshot) -> bool:
        """Whether this is `old` with text typed at its cursor, and nothing else changed."""
        return (
            self.uri == old.uri and self.suffix == old.suffix and self.prefix.startswith(old.prefix)
        )


def snapshot(document: TextDocument, position: types.Position) -> DocumentSnapshot:
    """Freeze `document` with the cursor at `position` (client units). Raises InvalidPosition.

    The cursor's line is found without splitting the document into lines (`_skip_lines`):
    a request on a 4 MB file costs a count of its line breaks, in C.
    """
    text = document.source
    # The empty line after a final break can hold the cursor: a document of N breaks has
    # N + 1 lines.
    start = _skip_lines(text, position.line, 0) if position.line >= 0 else None
    if start is None:
        lines = _breaks(text, 0, len(text)) + 1
        raise InvalidPosition(
            f"line {position.line} is past the end of the document ({lines} lines)"
        )
    found = _BREAK.search(text, start)
    content = text[start : len(text) if found is None else found.start()]
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
    offset = start + character
    return DocumentSnapshot(
        uri=document.uri,
        version=document.version,
        language_id=document.language_id or "",
        text=text,
        offset=offset,
        line=position.line,
        character=character,
    )


def position_at(text: str, offset: int, codec: PositionCodec) -> types.Position:
    """The position of code point `offset` of `text` in the client's units (the inverse of
    `snapshot`): lines end at \\n, \\r\\n and \\r. Counts line breaks in C, as `snapshot` does."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} is outside the text (0 to {len(text)})")
    start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    return types.Position(
        line=_breaks(text, 0, offset), character=codec.client_num_units(text[start:offset])
    )
