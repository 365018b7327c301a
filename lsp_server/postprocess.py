"""Post-processing: fit a model's raw continuation to the code around the cursor (DESIGN §5).

Ghost text must read as the user's next keystrokes: it never repeats what already follows the
cursor, closes exactly the brackets that still need closing, keeps the block's indentation and
ends where the block ends. Issue 3's "mode decision" and "post-processing" bullets are the spec;
every rule below says why it is there. Everything here is pure (stdlib only), so the language
server calls it on a document snapshot and the tests call it on plain strings.

Conventions, chosen once for the whole module:

- Text is Python `str`: positions and `Fitted.replace_chars` count code points, never UTF-8 or
  UTF-16 units (the server converts at the protocol boundary). Emoji, CJK and combining marks
  need nothing special, except that a combining mark right after the cursor counts as part of
  a word (the cursor splits a character as the user sees it).
- Lines end at `\\r\\n`, `\\r` or `\\n` only (LSP's rule; `engine.text` splits them).
- Line endings in a suggestion are left as the model wrote them (cuts recognise all three).
  The buffer's line-ending setting is the editor's business when it applies the text (VS
  Code's text model normalises inserted line ends; Neovim's LSP client splits on `\\r?\\n`).
- Indentation is compared by width (`engine.text.indent_width`: tabs advance to the next
  multiple of `TAB_WIDTH`), so a tab and four spaces count as the same depth; mixed
  indentation is compared, never rejected.
- Brackets and string literals are tracked by a rough scanner that knows `()[]{}`, quotes
  (`"`, `'`, backticks, Python's triple quotes, backslash escapes, Rust lifetimes after `&`
  or `<`) and comments (`#` followed by a space; `//` and `/* */` unless the document looks
  like Python, where `//` divides). It serves Python, JS/TS, Go, Rust, Java, C-like languages
  and shell well enough to decide which closers are still owed; it is not a parser.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.text import (
    LINE_BREAK,
    TAB_WIDTH,
    first_line,
    indent_width,
    leading_whitespace,
    line_start,
    lines_and_endings,
    newline_of,
    opens_block,
)

__all__ = [
    "TAB_WIDTH",
    "CompletionMode",
    "CursorContext",
    "Fitted",
    "block_ended",
    "decide_mode",
    "fit_completion",
    "line_opens_block",
]

#: What may follow the cursor for it to count as "at the end of the line": closing brackets,
#: quotes and statement punctuation an editor's auto-pairing typically leaves there.
_CLOSING_CHARS = frozenset(")]}\"'`;,")
_OPENER_OF = {")": "(", "]": "[", "}": "{"}
_CLOSER_LINE_CHARS = frozenset(")]};,")


class CompletionMode(enum.StrEnum):
    """How much text a suggestion may hold: the rest of one line, or a block of lines."""

    SINGLE_LINE = "single_line"
    MULTI_LINE = "multi_line"


@dataclass(frozen=True, slots=True, kw_only=True)
class CursorContext:
    """The document around the cursor: everything before it and everything after it.

    `prefix` may be a window of the document that starts at a line boundary; `suffix` may be
    cut anywhere after the cursor line.
    """

    prefix: str
    suffix: str

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Fitted:
    """A suggestion ready for the editor.

    `text` replaces the cursor position plus the `replace_chars` code points after it, all on
    the cursor line: the range covers closing brackets/quotes that `text` now contains, so that
    they are merged instead of duplicated. The document after accepting it is
    `prefix + text + suffix[replace_chars:]`.
    """

    text: str
    replace_chars: int = 0


# ---------------------------------------------------------------------------------------------
# Mode decision


def decide_mode(ctx: CursorContext) -> CompletionMode | None:
    """Single-line, multi-line, or nothing to suggest, from the cursor's surroundings.

    1. A word character right after the cursor (the cursor is inside an identifier, or between
       a character and its combining mark): None. Anything inserted there splits a word. Not
       at the start of a statement (only indentation before the cursor): a new line of its
       own goes there (see `fit_completion`, step 7).
    2. Code after the cursor on the same line (more than closing brackets, quotes, `;`, `,`,
       whitespace): SINGLE_LINE. The suggestion must join that code, so it cannot span lines.
    3. The cursor at the end of a non-blank line (closers may follow): SINGLE_LINE. The user is
       finishing a statement; a body, if any, starts on the next line.
    4. A blank cursor line right after a line that opens a block (`:`, `{`, `(`, `[`, `=>`,
       `->`, `do`/`then`/...) whose body is not there yet (nothing deeper follows):
       MULTI_LINE. The user is about to write that block's body. If the body exists, the
       user is adding a line to it: rules 5 and 6 decide.
    5. A blank cursor line where the next non-blank line is less indented than the cursor
       line, or nothing follows: MULTI_LINE. The cursor is at the end of a block or the file,
       where the rest of a block is wanted.
    6. A blank cursor line with code at the same (or deeper) indentation below: SINGLE_LINE.
       The user is inserting a statement into an existing block; a block of lines would
       likely repeat the code below.
    """
    rest = ctx.line_suffix
    if rest and _is_word_char(rest[0]) and ctx.line_prefix.strip():
        return None
    if not _is_closing_text(rest) or not ctx.is_blank_line:
        return CompletionMode.SINGLE_LINE
    previous = ctx.previous_nonblank_line
    following = ctx.next_nonblank_line
    if previous is not None and line_opens_block(previous, ctx.prefix):
        body_exists = following is not None and indent_width(following) > indent_width(previous)
        if not body_exists:
            return CompletionMode.MULTI_LINE
    if following is None or indent_width(following) < ctx.indent_width:
        return CompletionMode.MULTI_LINE
    return CompletionMode.SINGLE_LINE


# ---------------------------------------------------------------------------------------------
# Fitting


def fit_completion(raw: str, ctx: CursorContext, mode: CompletionMode) -> Fitted | None:
    """Fit the model's raw continuation to the cursor; None when nothing worth showing is left.

    1. Keep the lines the mode allows: the first line only (SINGLE_LINE), or the lines before
       the first one that ends the block (MULTI_LINE; see `block_ended` for what ends it).
       Trailing whitespace is stripped from every line that ends in a line break, and trailing
       blank lines are dropped: an editor would keep both as litter.
    2. When the rest of the cursor line is only closers (`)`, `")`, `);`, ...), the item's
       range is extended over them (`replace_chars`) and `text` carries the ones the
       suggestion does not close itself, so they are merged, never duplicated. This is done
       whenever such a rest exists, also when the model closed nothing: `foo(|)` + `x` gives
       `x)` over one character. One rule keeps clients' rendering the same for every case.
    3. Brackets are balanced against the document: the suggestion may close a bracket (or
       string) opened before the cursor only if the text after it does not close it already;
       the first closer that would close one twice, or that matches no open bracket, ends the
       suggestion. `foo(|)` + `x))` gives `foo(x)`, yet `)` after `foo(a,` on an earlier line
       is kept when nothing below closes it.
    4. A tail that repeats the start of what follows the cursor on its line is removed (the
       longest such overlap, as long as removing it leaves the brackets as they were): the
       model often writes the rest of the line itself (`foo(|, b)` + `a, b)` gives `a`).
    5. The last line's trailing whitespace is stripped too, unless code follows it on the line
       (a space before `+ 1` is the model's separator) or it lies inside a string literal.
    6. Nothing but whitespace left, or a text that changes nothing: None.
    7. Only indentation before the cursor and code after it on the line (the cursor at the
       start of a statement): a one-line suggestion becomes a line of its own, ending with a
       line break and the cursor line's indentation, so the statement moves down unchanged
       instead of being glued to the suggestion. A suggestion equal to that statement: None.
    """
    # 1. Lines.
    lines = lines_and_endings(raw)
    if mode is CompletionMode.SINGLE_LINE:
        lines = lines[:1]
    stop = _block_end_index([content for content, _ in lines], ctx)
    if stop is not None:
        lines = lines[:stop]
    text = _join_lines(lines)

    # 2. and 3. Balance brackets against the document around the cursor.
    doc = _surroundings(ctx.prefix, ctx.suffix)
    scan = doc.scan(text)
    if scan.cut is not None:
        text = text[: scan.cut]
        scan = doc.scan(text)
    rest = ctx.line_suffix
    if doc.run_closes is not None:
        # The closers of the run that the suggestion closed itself leave the run.
        done = 0
        for (_, mine), (_, theirs) in zip(scan.closed, doc.run_closes, strict=False):
            if mine is not theirs:
                break
            done += 1
        follow = doc.run[doc.run_closes[done - 1][0] :] if done else doc.run
    else:
        follow = rest

    # 4. Overlap with what follows on the line.
    text = _remove_overlap(text, follow, doc, len(scan.closed))

    # 5. Trailing whitespace.
    stripped = text.rstrip()
    tail = text[len(stripped) :]
    code_follows = bool(follow) and not follow[0].isspace() and follow[0] not in _CLOSING_CHARS
    in_string = doc.scan(text).state.string is not None
    if LINE_BREAK.search(tail) or not (code_follows or in_string):
        text = stripped

    # 6. Empty or no change.
    if not text.strip():
        return None

    # 7. A line of its own before code: with only indentation before the cursor and code after
    #    it, a one-line suggestion is a new line; the code that was there moves down intact.
    if (
        doc.run_closes is None
        and not ctx.line_prefix.strip()
        and follow.strip()
        and not LINE_BREAK.search(text)
    ):
        if text.strip() == follow.strip():
            return None  # the model wrote the line that is already there
        return Fitted(
            text=text.rstrip() + newline_of(ctx.prefix + ctx.suffix) + ctx.line_prefix,
            replace_chars=0,
        )
    if doc.run_closes is None:
        return Fitted(text=text, replace_chars=0)
    merged = text + follow
    if merged == doc.run:
        return None
    return Fitted(text=merged, replace_chars=len(doc.run))


def block_ended(generated: str, ctx: CursorContext) -> bool:
    """True once `generated` holds a complete line that ends the suggestion, so the caller can
    stop the model early without changing the result.

    A generated line ends the suggestion (and `fit_completion` keeps only what precedes it)
    when, counting only lines ended by a line break:

    - it equals, stripped, the next non-blank line after the cursor: the model has started
      repeating the code that follows (the first line counts too, whole with the cursor line).
      A line of closing brackets must also be as deep: `    }` does not repeat a `}` below,
      it closes another block (bracket balancing then decides whether it is owed);
    - after the first line, it dedents out of the cursor's block: less indented than the cursor
      line, or, when the cursor line opens a block or follows a line that does, not deeper
      than the opening line. A line of closing brackets at that point (`}`, `});`) is the
      block's own end and is kept; the line after it ends the suggestion;
    - it repeats the previous non-blank line exactly (indentation included) and holds a word
      character: an exact repeat loop, which small models fall into.

    A trailing lone `\\r` does not complete a line yet: the `\\n` of a `\\r\\n` may follow.
    """
    lines = lines_and_endings(generated)
    complete = [content for content, ending in lines if ending]
    if generated.endswith("\r") and complete:
        complete.pop()
    return bool(complete) and _block_end_index(complete, ctx) is not None


# ---------------------------------------------------------------------------------------------
# Lines and indentation


def _join_lines(lines: Sequence[tuple[str, str]]) -> str:
    """The kept lines as text: inner lines right-stripped, trailing blank lines dropped, and
    no line ending after the last line."""
    last = len(lines) - 1
    while last > 0 and not lines[last][0].strip():
        last -= 1
    parts = [content.rstrip() + ending for content, ending in lines[:last]]
    if lines:
        parts.append(lines[last][0])
    return "".join(parts)


def _is_word_char(char: str) -> bool:
    return char == "_" or char.isalnum() or unicodedata.category(char).startswith("M")


def _is_closing_text(text: str) -> bool:
    return all(char in _CLOSING_CHARS or char.isspace() for char in text)


def line_opens_block(line: str, document: str) -> bool:
    """Does this line of `document` end by opening a block (`engine.text.opens_block`), its
    trailing comment aside? The document decides what starts a comment (`_slash_comments`)."""
    return opens_block(_code_part(line, slash_comments=_slash_comments(document)))


def _opened_block_indent(ctx: CursorContext) -> int | None:
    """Width of the line that opens the cursor's block, when the cursor line opens one or is
    blank right after one; None otherwise."""
    line_prefix = ctx.line_prefix
    if line_prefix.strip():
        return indent_width(line_prefix) if line_opens_block(line_prefix, ctx.prefix) else None
    previous = ctx.previous_nonblank_line
    if previous is not None and line_opens_block(previous, ctx.prefix):
        return indent_width(previous)
    return None


def _is_closer_line(stripped: str) -> bool:
    return stripped[0] in _OPENER_OF and all(char in _CLOSER_LINE_CHARS for char in stripped)


def _block_end_index(lines: Sequence[str], ctx: CursorContext) -> int | None:
    """Index of the first generated line that ends the suggestion (rules in `block_ended`).

    `lines` are line contents without endings; the first one continues the cursor line.
    """
    if not lines:
        return None
    # What the model would repeat: the code after the cursor on its line when there is some
    # (the statement the suggestion goes before), else the next non-blank line below.
    following = (
        ctx.line_prefix + ctx.line_suffix if ctx.line_suffix.strip() else ctx.next_nonblank_line
    )

    def repeats_following(line: str) -> bool:
        stripped = line.strip()
        if following is None or not stripped or stripped != following.strip():
            return False
        # A `}` at another depth closes another block: only the same depth repeats it.
        return not _is_closer_line(stripped) or indent_width(line) == indent_width(following)

    line_prefix = ctx.line_prefix
    first = line_prefix + lines[0]
    if repeats_following(first):
        return 0

    opener = _opened_block_indent(ctx)
    if line_prefix.strip():
        block = indent_width(line_prefix)
    else:
        # A blank cursor line: the block is as deep as the first line the model wrote there.
        block = indent_width(first) if first.strip() else indent_width(line_prefix)

    previous = first.rstrip()
    block_closed = False
    for index in range(1, len(lines)):
        line = lines[index]
        stripped = line.strip()
        if not stripped:
            continue
        if block_closed or repeats_following(line):
            return index
        width = indent_width(line)
        if (width <= opener) if opener is not None else (width < block):
            if not _is_closer_line(stripped):
                return index
            block_closed = True
        line = line.rstrip()
        if line == previous and any(_is_word_char(char) for char in stripped):
            return index
        previous = line
    return None


# ---------------------------------------------------------------------------------------------
# Brackets and strings


@dataclass(slots=True, eq=False)
class _Open:
    """An open bracket or string literal, compared by identity.

    `original`: open at the cursor. `indent`: width of the indentation of the line it was
    opened on, where known (it attributes a line-leading closer to its opener, see `_feed`).
    """

    delim: str
    original: bool = False
    indent: int | None = None


class _Scanner:
    """Rough lexical state: open brackets, an open string literal, a comment.

    `slash_comments`: whether `//` and `/*` start comments here (see `_slash_comments`).
    """

    __slots__ = ("comment", "comment_at", "slash_comments", "stack", "string")

    def __init__(self, *, slash_comments: bool = True) -> None:
        self.stack: list[_Open] = []
        self.string: _Open | None = None
        self.comment: str | None = None  # "line" or "block"
        self.comment_at = -1  # where the last comment began in the text fed
        self.slash_comments = slash_comments

    def copy(self) -> _Scanner:
        other = _Scanner(slash_comments=self.slash_comments)
        other.stack = list(self.stack)
        other.string = self.string
        other.comment = self.comment
        return other

    def holds_original(self) -> bool:
        string_open = self.string is not None and self.string.original
        return string_open or bool(self.stack and self.stack[0].original)


_CODE_SPECIAL = re.compile(r"[\"'`#/()\[\]{}\r\n]")
_LINE_END = re.compile(r"[\r\n]")
_STRING_SPECIAL = {
    delim: re.compile("[\\\\\r\n" + re.escape(delim[0]) + "]")
    for delim in ('"', "'", "`", '"""', "'''")
}
_INDENT = re.compile(r"[ \t]*")
_LIFETIME = re.compile(r"'[A-Za-z_]\w*(?!['\w])")
#: Lines that mark a document whose `//` is an operator (Python's floor division): a `#`
#: comment, or a line led by a Python-only keyword. A line led by `//` overrules them.
_HASH_COMMENT_DOC = re.compile(r"^[ \t]*(?:#[ \t!#]|def\s|elif\s|from\s+\S+\s+import\s)", re.M)
_SLASH_COMMENT_DOC = re.compile(r"^[ \t]*//", re.M)


@functools.lru_cache(maxsize=8)
def _slash_comments(prefix: str) -> bool:
    """Whether `//` starts a comment in this document.

    No language id travels with the text, so the document itself decides: `//` is a comment
    unless the prefix looks like Python (or shell, Ruby, ...) and no line starts with `//`.
    Treating Python's `n // 2` as a comment would hide the `)` of `range(n // 2)`.
    """
    return bool(_SLASH_COMMENT_DOC.search(prefix)) or not _HASH_COMMENT_DOC.search(prefix)


def _feed(
    sc: _Scanner,
    text: str,
    *,
    strict: bool = False,
    may_close: Callable[[_Open], bool] | None = None,
    new_strings: bool = True,
    closed: list[tuple[int, _Open]] | None = None,
    until_resolved: bool = False,
    starts_line: bool = True,
) -> int | None:
    """Advance `sc` over `text`.

    Lenient (document text): a closer pops to its nearest matching opener, or is ignored. A
    closer that begins its line closes, among the matching openers, the innermost one opened
    on a line of the same indentation, when there is one: in `class A {`, `    f() {`, cursor,
    `}`, the `}` below is the class's, so the method's `{` is still owed (the user is writing
    the method's body). `starts_line`: whether `text` begins at a line start (a suffix begins
    mid-line, at the cursor).

    Strict (generated text): the scan stops, returning the index, at a closer that matches no
    open bracket, at one that would close an original item `may_close` refuses, and (without
    `new_strings`) at a quote that would open a string. Each original item closed is appended
    to `closed` with the index just after its closer. `until_resolved` stops once no original
    item is open any more (what follows cannot close one).

    The scan jumps from one interesting character to the next with a regular expression, so a
    long prefix costs little more than its brackets, quotes and line ends.
    """
    line_start = 0 if starts_line else -1  # -1: the line began before `text`
    indent_of = -2  # the line whose indentation `indent` holds
    indent: int | None = None
    i, n = 0, len(text)
    while i < n:
        if until_resolved and not sc.holds_original():
            return None
        if sc.comment == "line":
            match = _LINE_END.search(text, i)
            if match is None:
                return None
            sc.comment = None
            i = line_start = match.end()
            continue
        if sc.comment == "block":
            end = text.find("*/", i)
            if end < 0:
                return None
            last_break = max(text.rfind("\n", i, end), text.rfind("\r", i, end))
            if last_break >= 0:
                line_start = last_break + 1
            sc.comment = None
            i = end + 2
            continue
        if sc.string is not None:
            delim = sc.string.delim
            match = _STRING_SPECIAL[delim].search(text, i)
            if match is None:
                return None
            j = match.start()
            char = text[j]
            if char == "\\":
                i = j + 2
            elif char in "\r\n":
                if delim in ('"', "'"):
                    sc.string = None  # unterminated on its line: the language ends it there
                i = line_start = j + 1
            elif text.startswith(delim, j):
                item = sc.string
                if item.original and may_close is not None and not may_close(item):
                    return j
                sc.string = None
                if item.original and closed is not None:
                    closed.append((j + len(delim), item))
                i = j + len(delim)
            else:
                i = j + 1  # one quote inside a triple-quoted string
            continue

        match = _CODE_SPECIAL.search(text, i)
        if match is None:
            return None
        j = match.start()
        char = text[j]
        i = j + 1
        if char in "\r\n":
            line_start = i
        elif char == "#":
            after = text[j + 1 : j + 2]
            if not after or after.isspace() or after in "#!":
                sc.comment, sc.comment_at = "line", j
        elif char == "/":
            after = text[j + 1 : j + 2]
            if after in ("/", "*") and sc.slash_comments:
                sc.comment, sc.comment_at = ("line" if after == "/" else "block"), j
                i = j + 2
        elif char in "\"'`":
            if char == "'" and j > 0 and text[j - 1] in "&<" and _LIFETIME.match(text, j):
                continue  # a Rust lifetime (`&'a str`, `<'a>`), not a character literal
            if strict and not new_strings:
                return j
            delim = char * 3 if char != "`" and text.startswith(char * 3, j) else char
            sc.string = _Open(delim)
            i = j + len(delim)
        elif char in "([{":
            if not strict and line_start >= 0 and indent_of != line_start:
                indent_of = line_start
                indent = _indent_width_at(text, line_start)
            known = not strict and line_start >= 0
            sc.stack.append(_Open(char, indent=indent if known else None))
        else:
            want = _OPENER_OF[char]
            if strict:
                if not sc.stack or sc.stack[-1].delim != want:
                    return j
                top = sc.stack[-1]
                if top.original and may_close is not None and not may_close(top):
                    return j
                sc.stack.pop()
            else:
                leading = None
                if line_start >= 0 and (j == line_start or text[j - 1] in " \t"):
                    before = text[line_start:j]
                    if not before.strip(" \t"):
                        leading = indent_width(before)
                depth = _opener_depth(sc.stack, want, leading)
                if depth is None:
                    continue
                top = sc.stack[depth]
                del sc.stack[depth:]
            if top.original and closed is not None:
                closed.append((j + 1, top))
    return None


def _indent_width_at(text: str, line_start: int) -> int:
    match = _INDENT.match(text, line_start)
    return indent_width(match.group()) if match is not None else 0


def _opener_depth(stack: Sequence[_Open], want: str, indent: int | None) -> int | None:
    """Stack index of the opener a lenient closer closes (see `_feed`)."""
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


def _cursor_state(prefix: str) -> _Scanner:
    """What is open at the cursor, every item marked original."""
    slash_comments = _slash_comments(prefix)
    sc = _Scanner(slash_comments=slash_comments)
    _feed(sc, prefix)
    state = _Scanner(slash_comments=slash_comments)
    state.stack = [_Open(item.delim, original=True, indent=item.indent) for item in sc.stack]
    if sc.string is not None:
        state.string = _Open(sc.string.delim, original=True)
    state.comment = sc.comment
    return state


def _closing_run(run: str, cursor_state: _Scanner) -> list[tuple[int, _Open]] | None:
    """What each closer of the rest of the line closes, when that rest is only closers that
    close what is open at the cursor, in order; None otherwise (then nothing is absorbed)."""
    if not run or not _is_closing_text(run):
        return None
    closes: list[tuple[int, _Open]] = []
    stopped = _feed(cursor_state.copy(), run, strict=True, new_strings=False, closed=closes)
    return closes if stopped is None else None


@dataclass(frozen=True, slots=True)
class _TextScan:
    cut: int | None  # where the text must end: a closer with nothing (left) to close
    closed: list[tuple[int, _Open]]  # original items the text closed, in order
    state: _Scanner  # after the text


@dataclass(frozen=True, slots=True)
class _Surroundings:
    """What the brackets around the cursor allow a suggestion, computed once per document.

    `run` is the rest of the cursor line absorbed into the suggestion's range (closers only,
    each closing what is open at the cursor, in order; `run_closes` says what each closes),
    or "" with `run_closes` None when there is none. `owed_elsewhere` holds the items open at
    the cursor that the document after the run closes: the suggestion must not close them.
    """

    state: _Scanner  # open at the cursor; never changed (scans work on copies)
    run: str
    run_closes: tuple[tuple[int, _Open], ...] | None
    owed_elsewhere: frozenset[_Open]

    def may_close(self, item: _Open) -> bool:
        return item not in self.owed_elsewhere

    def scan(self, text: str) -> _TextScan:
        """Scan generated text strictly from the cursor's state."""
        state = self.state.copy()
        closed: list[tuple[int, _Open]] = []
        cut = _feed(state, text, strict=True, may_close=self.may_close, closed=closed)
        return _TextScan(cut, closed, state)


@functools.lru_cache(maxsize=8)
def _surroundings(prefix: str, suffix: str) -> _Surroundings:
    """Cached: every choice of a request, and every streamed line, asks about the same
    document, and a long prefix is the one costly scan here."""
    state = _cursor_state(prefix)
    run = first_line(suffix).rstrip()
    run_closes = _closing_run(run, state)
    after_state = state.copy()
    if run_closes is not None:
        _feed(after_state, run, starts_line=False)
    else:
        run = ""
    closed_below: list[tuple[int, _Open]] = []
    _feed(
        after_state,
        suffix[len(run) :],
        closed=closed_below,
        until_resolved=True,
        starts_line=False,
    )
    return _Surroundings(
        state=state,
        run=run,
        run_closes=None if run_closes is None else tuple(run_closes),
        owed_elsewhere=frozenset(item for _, item in closed_below),
    )


def _remove_overlap(text: str, follow: str, doc: _Surroundings, closed_count: int) -> str:
    """`text` without its longest tail that repeats the start of `follow`.

    An overlap is only removed when the text without it leaves the brackets as the whole text
    did (same original items closed, none of its own left open): otherwise the tail's closers
    close the text's own brackets (`f()` before `) + 1`) and are not a copy of the line's.
    """
    for size in range(min(len(text), len(follow)), 0, -1):
        if not text.endswith(follow[:size]):
            continue
        kept = text[:-size]
        scan = doc.scan(kept)
        own_open = any(not item.original for item in scan.state.stack) or (
            scan.state.string is not None and not scan.state.string.original
        )
        if scan.cut is None and len(scan.closed) == closed_count and not own_open:
            return kept
    return text


def _code_part(line: str, *, slash_comments: bool) -> str:
    """The line without a trailing comment."""
    sc = _Scanner(slash_comments=slash_comments)
    _feed(sc, line)
    return line[: sc.comment_at] if sc.comment is not None else line
