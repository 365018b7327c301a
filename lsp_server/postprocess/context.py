"""The document around the cursor, as post-processing sees it: the cursor line, its
neighbours, and the few character classes the rules share."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from engine.text import (
    first_line,
    indent_width,
    leading_whitespace,
    line_start,
    lines_and_endings,
    opens_block,
)
from lsp_server.postprocess.lexer import code_part, slash_comments

#: What may follow the cursor for it to count as "at the end of the line": closing brackets,
#: quotes and statement punctuation an editor's auto-pairing typically leaves there.
CLOSING_CHARS = frozenset(")]}\"'`;,")


@dataclass(frozen=True, slots=True, kw_only=True)
class CursorContext:
    """The document around the cursor: everything before it and everything after it.

    `prefix` may be a window of the document that starts at a line boundary; `suffix` may be
    cut anywhere after the cursor line.
    """

    prefix: str
    suffix: str
    #: The editor's language id: where `syntax` has a grammar for it, the tree decides where a
    #: suggestion ends and whether it breaks the code; "" (or a language without one): the
    #: lexer and indentation rules do.
    language_id: str = ""

    @property
    def line_prefix(self) -> str:
        """The cursor line up to the cursor."""
        return self.prefix[line_start(self.prefix) :]

    @property
    def line_suffix(self) -> str:
        """The cursor line after the cursor, without its line ending."""
        return first_line(self.suffix)

    @property
    def indent(self) -> str:
        """The cursor line's leading spaces and tabs."""
        return leading_whitespace(self.line_prefix + self.line_suffix)

    @property
    def indent_width(self) -> int:
        """Width of `indent`, tabs expanded to multiples of `TAB_WIDTH`."""
        return indent_width(self.indent)

    @property
    def is_blank_line(self) -> bool:
        """True when the cursor line holds only whitespace."""
        return not (self.line_prefix + self.line_suffix).strip()

    @property
    def previous_nonblank_line(self) -> str | None:
        """The nearest line above the cursor line that is not blank (None at the window's top)."""
        end = len(self.prefix) - len(self.line_prefix)  # just after the line break above
        while end > 0:
            end -= 2 if self.prefix.endswith("\r\n", 0, end) else 1  # before that break
            start = line_start(self.prefix, end)
            line = self.prefix[start:end]
            if line.strip():
                return line
            end = start
        return None

    @property
    def next_nonblank_line(self) -> str | None:
        """The nearest line below the cursor line that is not blank (None at the end)."""
        for line, _ in lines_and_endings(self.suffix)[1:]:  # after the rest of the cursor line
            if line.strip():
                return line
        return None


def is_word_char(char: str) -> bool:
    return char == "_" or char.isalnum() or unicodedata.category(char).startswith("M")


def is_closing_text(text: str) -> bool:
    return all(char in CLOSING_CHARS or char.isspace() for char in text)


def line_opens_block(line: str, document: str) -> bool:
    """Does this line of `document` end by opening a block (`engine.text.opens_block`), its
    trailing comment aside? The document decides what starts a comment (`lexer.slash_comments`)."""
    return opens_block(code_part(line, slash_comments=slash_comments(document)))
