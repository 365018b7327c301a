"""Brackets and strings around the cursor: the lexer's two consumers and what they tell the
fitting steps.

- `scan_document` reads the user's text leniently: a stray closer is ignored, and a closer
  that begins its line goes to the opener on a line of the same indentation.
- `scan_generated` reads the model's text strictly: it stops where the text closes something
  it must not, so the fitting cuts the suggestion there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.text import first_line, indent_width
from lsp_server.postprocess.context import is_closing_text
from lsp_server.postprocess.lexer import OPENER_OF, LexState, Open, Token, TokenKind, lex
from lsp_server.postprocess.lexer import slash_comments as document_slash_comments

#: (index just after its closer, the item) for each item open at the cursor that a text closes.
Closed = list[tuple[int, Open]]

_INDENT = re.compile(r"[ \t]*")


def scan_document(
    state: LexState,
    text: str,
    *,
    closed: Closed | None = None,
    until_resolved: bool = False,
    starts_line: bool = True,
) -> None:
    """Advance `state` over the document's `text`, leniently.

    A closer pops to its nearest matching opener, or is ignored. A closer that begins its line
    closes, among the matching openers, the innermost one opened on a line of the same
    indentation, when there is one: in `class A {`, `    f() {`, cursor, `}`, the `}` below is
    the class's, so the method's `{` is still owed (the user is writing the method's body).
    Each original item closed is appended to `closed`. `until_resolved` stops once no original
    item is open any more (what follows cannot close one). `starts_line`: see `lexer.lex`.
    """
    indent_line = -2  # the line whose indentation `indent` holds
    indent: int | None = None
    for token in lex(state, text, starts_line=starts_line):
        if until_resolved and not state.holds_original():
            return
        if token.kind is TokenKind.STRING_END:
            _record_string_end(state, token, closed)
        elif token.kind is TokenKind.OPEN:
            known = token.line_start >= 0
            if known and indent_line != token.line_start:
                indent_line = token.line_start
                indent = _indent_at(text, token.line_start)
            state.stack.append(Open(token.text, indent=indent if known else None))
        elif token.kind is TokenKind.CLOSE:
            depth = _opener_depth(state.stack, OPENER_OF[token.text], _leading(text, token))
            if depth is None:
                continue
            top = state.stack[depth]
            del state.stack[depth:]
            if top.original and closed is not None:
                closed.append((token.start + 1, top))


def scan_generated(
    state: LexState,
    text: str,
    *,
    may_close: Callable[[Open], bool] | None = None,
    new_strings: bool = True,
    closed: Closed | None = None,
) -> int | None:
    """Advance `state` over generated `text`, strictly; the index where it must stop, if any.

    The scan stops at a closer that matches no open bracket, at one that would close an
    original item `may_close` refuses, and (without `new_strings`) at a quote that would open
    a string. Each original item closed is appended to `closed`.
    """
    for token in lex(state, text):
        if token.kind is TokenKind.STRING_START:
            if not new_strings:
                return token.start
        elif token.kind is TokenKind.STRING_END:
            item = state.string
            if item is not None and item.original and may_close and not may_close(item):
                return token.start
            _record_string_end(state, token, closed)
        elif token.kind is TokenKind.OPEN:
            state.stack.append(Open(token.text))
        else:
            if not state.stack or state.stack[-1].delim != OPENER_OF[token.text]:
                return token.start
            top = state.stack[-1]
            if top.original and may_close is not None and not may_close(top):
                return token.start
            state.stack.pop()
            if top.original and closed is not None:
                closed.append((token.start + 1, top))
    return None


def _record_string_end(state: LexState, token: Token, closed: Closed | None) -> None:
    item = state.string
    if item is not None and item.original and closed is not None:
        closed.append((token.start + len(token.text), item))


def _indent_at(text: str, line_start: int) -> int:
    match = _INDENT.match(text, line_start)
    return indent_width(match.group()) if match is not None else 0


def _leading(text: str, token: Token) -> int | None:
    """The indentation width before a closer that begins its line; None otherwise."""
    start, j = token.line_start, token.start
    if start < 0 or not (j == start or text[j - 1] in " \t"):
        return None
    before = text[start:j]
    return indent_width(before) if not before.strip(" \t") else None


def _opener_depth(stack: Sequence[Open], want: str, indent: int | None) -> int | None:
    """Stack index of the opener a lenient closer closes (see `scan_document`)."""
    nearest = None
    for depth in range(len(stack) - 1, -1, -1):
        item = stack[depth]
        if item.delim != want:
            continue
        if indent is None or item.indent == indent:
            return depth
        if nearest is None:
            nearest = depth
    return nearest


def _cursor_state(prefix: str) -> LexState:
    """What is open at the cursor, every item marked original."""
    slash_comments = document_slash_comments(prefix)
    scanned = LexState(slash_comments=slash_comments)
    scan_document(scanned, prefix)
    state = LexState(slash_comments=slash_comments)
    state.stack = [Open(item.delim, original=True, indent=item.indent) for item in scanned.stack]
    if scanned.string is not None:
        state.string = Open(scanned.string.delim, original=True)
    state.comment = scanned.comment
    return state


def _closing_run(run: str, cursor_state: LexState) -> Closed | None:
    """What each closer of the rest of the line closes, when that rest is only closers that
    close what is open at the cursor, in order; None otherwise (then nothing is absorbed)."""
    if not run or not is_closing_text(run):
        return None
    closes: Closed = []
    stopped = scan_generated(cursor_state.copy(), run, new_strings=False, closed=closes)
    return closes if stopped is None else None


@dataclass(frozen=True, slots=True)
class TextScan:
    """Generated text scanned from the cursor's state."""

    cut: int | None  # where the text must end: a closer with nothing (left) to close
    closed: Closed  # original items the text closed, in order
    state: LexState  # after the text

    def leaves_own_open(self) -> bool:
        """Whether the text opened a bracket or string of its own and left it open."""
        string = self.state.string
        return any(not item.original for item in self.state.stack) or (
            string is not None and not string.original
        )


@dataclass(frozen=True, slots=True)
class Surroundings:
    """What the brackets around the cursor allow a suggestion, computed once per document.

    `run` is the rest of the cursor line absorbed into the suggestion's range (closers only,
    each closing what is open at the cursor, in order; `run_closes` says what each closes),
    or "" with `run_closes` None when there is none. `owed_elsewhere` holds the items open at
    the cursor that the document after the run closes: the suggestion must not close them.
    """

    state: LexState  # open at the cursor; never changed (scans work on copies)
    run: str
    run_closes: tuple[tuple[int, Open], ...] | None
    owed_elsewhere: frozenset[Open]

    def may_close(self, item: Open) -> bool:
        return item not in self.owed_elsewhere

    def scan(self, text: str) -> TextScan:
        """Scan generated text strictly from the cursor's state."""
        state = self.state.copy()
        closed: Closed = []
        cut = scan_generated(state, text, may_close=self.may_close, closed=closed)
        return TextScan(cut, closed, state)


@functools.lru_cache(maxsize=8)
def surroundings(prefix: str, suffix: str) -> Surroundings:
    """The brackets around the cursor. Cached: every choice of a request, and every streamed
    line, asks about the same document, and a long prefix is the one costly scan here."""
    state = _cursor_state(prefix)
    run = first_line(suffix).rstrip()
    run_closes = _closing_run(run, state)
    after_state = state.copy()
    if run_closes is not None:
        scan_document(after_state, run, starts_line=False)
    else:
        run = ""
    closed_below: Closed = []
    scan_document(
        after_state, suffix[len(run) :], closed=closed_below, until_resolved=True, starts_line=False
    )
    return Surroundings(
        state=state,
        run=run,
        run_closes=None if run_closes is None else tuple(run_closes),
        owed_elsewhere=frozenset(item for _, item in closed_below),
    )
