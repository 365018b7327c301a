"""A rough lexer for brackets, string literals and comments: it tells its consumer about each
bracket and each string's start and end, and skips everything else.

It knows `()[]{}`, quotes (`"`, `'`, backticks, Python's triple quotes, backslash escapes,
Rust lifetimes after `&` or `<`) and comments (`#` followed by a space; `//` and `/* */`
unless the document looks like Python, where `//` divides). It serves Python, JS/TS, Go, Rust,
Java, C-like languages and shell well enough to decide which closers are still owed; it is not
a parser. What a bracket means is the consumers' business (`brackets.py`): the document is
scanned leniently, generated text strictly.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

#: Each closing bracket's opener.
OPENER_OF = {")": "(", "]": "[", "}": "{"}

_CODE_SPECIAL = re.compile(r"[\"'`#/()\[\]{}\r\n]")
_LINE_END = re.compile(r"[\r\n]")
_STRING_SPECIAL = {
    delim: re.compile("[\\\\\r\n" + re.escape(delim[0]) + "]")
    for delim in ('"', "'", "`", '"""', "'''")
}
_LIFETIME = re.compile(r"'[A-Za-z_]\w*(?!['\w])")
#: Lines that mark a document whose `//` is an operator (Python's floor division): a `#`
#: comment, or a line led by a Python-only keyword. A line led by `//` overrules them.
_HASH_COMMENT_DOC = re.compile(r"^[ \t]*(?:#[ \t!#]|def\s|elif\s|from\s+\S+\s+import\s)", re.M)
_SLASH_COMMENT_DOC = re.compile(r"^[ \t]*//", re.M)


@dataclass(slots=True, eq=False)
class Open:
    """An open bracket or string literal, compared by identity.

    `original`: open at the cursor. `indent`: width of the indentation of the line it was
    opened on, where known (it attributes a line-leading closer to its opener, see
    `brackets.scan_document`).
    """

    delim: str
    original: bool = False
    indent: int | None = None


class LexState:
    """What is open: brackets (kept by the consumers), a string literal, a comment.

    `slash_comments`: whether `//` and `/*` start comments here (see `slash_comments`).
    """

    __slots__ = ("comment", "comment_at", "slash_comments", "stack", "string")

    def __init__(self, *, slash_comments: bool = True) -> None:
        self.stack: list[Open] = []
        self.string: Open | None = None
        self.comment: str | None = None  # "line" or "block"
        self.comment_at = -1  # where the last comment began in the text lexed
        self.slash_comments = slash_comments

    def copy(self) -> LexState:
        other = LexState(slash_comments=self.slash_comments)
        other.stack = list(self.stack)
        other.string = self.string
        other.comment = self.comment
        return other

    def holds_original(self) -> bool:
        """Whether something open at the cursor is still open."""
        string_open = self.string is not None and self.string.original
        return string_open or bool(self.stack and self.stack[0].original)


class TokenKind(enum.Enum):
    OPEN = "open"  # `(`, `[` or `{`
    CLOSE = "close"  # `)`, `]` or `}`
    STRING_START = "string start"  # a quote that opens a string literal
    STRING_END = "string end"  # the quote that closes `LexState.string`


class Token(NamedTuple):
    kind: TokenKind
    start: int  # where it starts in the text
    text: str  # the bracket, or the string's delimiter
    line_start: int  # where its line starts in the text; -1: before the text


def lex(state: LexState, text: str, *, starts_line: bool = True) -> Iterator[Token]:
    """The tokens of `text`, lexed from `state`, which follows the comments and strings.

    A string token comes before `state` changes: a consumer that stops there leaves the string
    as it was (not opened, or still open). `starts_line`: whether `text` begins at a line start
    (a suffix begins mid-line, at the cursor). The lexer jumps from one interesting character
    to the next with a regular expression, so a long prefix costs little more than its
    brackets, quotes and line ends.
    """
    line_start = 0 if starts_line else -1
    i, n = 0, len(text)
    while i < n:
        if state.comment == "line":
            match = _LINE_END.search(text, i)
            if match is None:
                return
            state.comment = None
            i = line_start = match.end()
            continue
        if state.comment == "block":
            end = text.find("*/", i)
            if end < 0:
                return
            last_break = max(text.rfind("\n", i, end), text.rfind("\r", i, end))
            if last_break >= 0:
                line_start = last_break + 1
            state.comment = None
            i = end + 2
            continue
        if state.string is not None:
            delim = state.string.delim
            match = _STRING_SPECIAL[delim].search(text, i)
            if match is None:
                return
            j = match.start()
            char = text[j]
            if char == "\\":
                i = j + 2
            elif char in "\r\n":
                if delim in ('"', "'"):
                    state.string = None  # unterminated on its line: the language ends it there
                i = line_start = j + 1
            elif text.startswith(delim, j):
                yield Token(TokenKind.STRING_END, j, delim, line_start)
                state.string = None
                i = j + len(delim)
            else:
                i = j + 1  # one quote inside a triple-quoted string
            continue

        match = _CODE_SPECIAL.search(text, i)
        if match is None:
            return
        j = match.start()
        char = text[j]
        i = j + 1
        if char in "\r\n":
            line_start = i
        elif char == "#":
            after = text[j + 1 : j + 2]
            if not after or after.isspace() or after in "#!":
                state.comment, state.comment_at = "line", j
        elif char == "/":
            after = text[j + 1 : j + 2]
            if after in ("/", "*") and state.slash_comments:
                state.comment, state.comment_at = ("line" if after == "/" else "block"), j
                i = j + 2
        elif char in "\"'`":
            if char == "'" and j > 0 and text[j - 1] in "&<" and _LIFETIME.match(text, j):
                continue  # a Rust lifetime (`&'a str`, `<'a>`), not a character literal
            delim = char * 3 if char != "`" and text.startswith(char * 3, j) else char
            yield Token(TokenKind.STRING_START, j, delim, line_start)
            state.string = Open(delim)
            i = j + len(delim)
        elif char in "([{":
            yield Token(TokenKind.OPEN, j, char, line_start)
        else:
            yield Token(TokenKind.CLOSE, j, char, line_start)


@functools.lru_cache(maxsize=8)
def slash_comments(document: str) -> bool:
    """Whether `//` starts a comment in this document.

    No language id travels with the text, so the document itself decides: `//` is a comment
    unless it looks like Python (or shell, Ruby, ...) and no line starts with `//`. Treating
    Python's `n // 2` as a comment would hide the `)` of `range(n // 2)`.
    """
    return bool(_SLASH_COMMENT_DOC.search(document)) or not _HASH_COMMENT_DOC.search(document)


def code_part(line: str, *, slash_comments: bool) -> str:
    """The line without a trailing comment."""
    state = LexState(slash_comments=slash_comments)
    for _ in lex(state, line):
        pass
    return line[: state.comment_at] if state.comment is not None else line
