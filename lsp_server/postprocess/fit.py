"""Fitting: the model's raw continuation cut, balanced and trimmed to the code around the
cursor (the steps of `fit_completion`), and where a multi-line suggestion ends (`block_ended`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.text import LINE_BREAK, indent_width, lines_and_endings, newline_of
from lsp_server.postprocess.brackets import Surroundings, surroundings
from lsp_server.postprocess.context import (
    CLOSING_CHARS,
    CursorContext,
    is_word_char,
    line_opens_block,
)
from lsp_server.postprocess.lexer import OPENER_OF
from lsp_server.postprocess.mode import CompletionMode
from lsp_server.postprocess.syntax import Place, block_end, closers_owed, errors_added, place_at


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
    8. Where the language has a grammar (`syntax`): a suggestion that leaves the document
       with more syntax errors than it had without it is cut to the most whole lines that
       do not (each cut fitted again by steps 2 to 7), or dropped when no cut is clean. A
       window around the cursor is parsed, a few tenths of a millisecond per cut. A text that
       ends by opening a block, with nothing after it on the line, is judged with that block
       closed: the user writes the block next.
    """
    # 1. Lines.
    lines = lines_and_endings(raw)
    if mode is CompletionMode.SINGLE_LINE:
        lines = lines[:1]
    stop = _block_end_index([content for content, _ in lines], ctx)
    if stop is not None:
        lines = lines[:stop]
    fitted = _fit_text(_join_lines(lines), ctx)

    # 8. Syntax errors: the longest cut by whole lines that adds none, else nothing.
    count = len(lines)
    while fitted is not None and _adds_errors(fitted, ctx):
        count -= 1
        fitted = _fit_text(_join_lines(lines[:count]), ctx) if count > 0 else None
    return fitted


def _adds_errors(fitted: Fitted, ctx: CursorContext) -> bool:
    """Whether the document has more syntax errors with `fitted` accepted than without it;
    False where the language has no grammar (`syntax`)."""
    if not ctx.language_id:
        return False
    after = ctx.suffix[fitted.replace_chars :]
    text = fitted.text
    if text.rstrip().endswith("{") and not after.partition("\n")[0].strip():
        # A line that ends by opening a block (`if (i < hi) {`, `) {` after `while (x`) is
        # where the user goes on to write the block: it is judged with the block it opened
        # closed. Judged as it stands, every such line would be dropped, and a brace language
        # would never be offered the start of a block one line at a time.
        text += "\n" + closers_owed(text)
    added = errors_added(ctx.prefix, text, after, ctx.language_id)
    return added is not None and added > 0


def _fit_text(text: str, ctx: CursorContext) -> Fitted | None:
    """Steps 2 to 7 of `fit_completion` on the kept lines' text."""
    # 2. and 3. Balance brackets against the document around the cursor.
    doc = surroundings(ctx.prefix, ctx.suffix)
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
    code_follows = bool(follow) and not follow[0].isspace() and follow[0] not in CLOSING_CHARS
    # Nothing to strip, nothing to decide: where the text ends is asked only of a tail (a
    # parse of the document with the text, where the language has a grammar).
    if tail and (
        LINE_BREAK.search(tail) or not (code_follows or _ends_in_string(text, follow, doc, ctx))
    ):
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


def _ends_in_string(text: str, follow: str, doc: Surroundings, ctx: CursorContext) -> bool:
    """Whether the end of `text`, written at the cursor, lies inside a string literal: by the
    tree of the document with it where the language has a grammar (`syntax.place_at`), else
    by the lexer from the cursor's state."""
    if ctx.language_id:
        # The document as accepting the text leaves it: the rest of the line that the text
        # does not absorb (`follow`) and what follows the absorbed run.
        after = follow + ctx.suffix[len(doc.run) :] if doc.run_closes is not None else ctx.suffix
        place = place_at(ctx.prefix + text, after, ctx.language_id)
        if place is not None:
            return place is Place.STRING
    return doc.scan(text).state.string is not None


def block_ended(generated: str, ctx: CursorContext) -> bool:
    """True once `generated` holds a complete line that ends the suggestion, so the caller can
    stop the model early without changing the result.

    A generated line ends the suggestion (and `fit_completion` keeps only what precedes it)
    when, counting only lines ended by a line break:

    - it equals, stripped, the next non-blank line after the cursor: the model has started
      repeating the code that follows (the first line counts too, whole with the cursor line).
      A line of closing brackets must also be as deep: `    }` does not repeat a `}` below,
      it closes another block (bracket balancing then decides whether it is owed);
    - where the language has a grammar (`syntax.block_end`): it comes after the line where the
      node the suggestion opened ends (`if (x) {` ... `}`), or after the line where the block
      the suggestion was written in ends (its `}`, or its last line in Python);
    - elsewhere, after the first line, it dedents out of the cursor's block: less indented
      than the cursor line, or, when the cursor line opens a block or follows a line that
      does, not deeper than the opening line. A line of closing brackets at that point (`}`,
      `});`) is the block's own end and is kept; the line after it ends the suggestion;
    - it completes a copy of the block of lines right above it (indentation included), which
      holds a word character: a repeat loop, which small models fall into (one line again and
      again, or a block: `if (next != null) {`, `next.remove();`, `}` five times). The first
      copy stays.

    A trailing lone `\\r` does not complete a line yet: the `\\n` of a `\\r\\n` may follow.
    """
    lines = lines_and_endings(generated)
    complete = [content for content, ending in lines if ending]
    if generated.endswith("\r") and complete:
        complete.pop()
    return bool(complete) and _block_end_index(complete, ctx) is not None


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


#: The characters of a line that only closes brackets (`}`, `});`, `],`).
_CLOSER_LINE_CHARS = frozenset(")]};,")


def _is_closer_line(stripped: str) -> bool:
    return stripped[0] in OPENER_OF and all(char in _CLOSER_LINE_CHARS for char in stripped)


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

    # Where the code ends, by the tree where the language has a grammar (else by indentation).
    tree = (
        block_end(ctx.prefix, ctx.suffix, lines, ctx.language_id)
        if len(lines) > 1 and ctx.language_id
        else None
    )
    opener = _opened_block_indent(ctx)
    if line_prefix.strip():
        block = indent_width(line_prefix)
    else:
        # A blank cursor line: the block is as deep as the first line the model wrote there.
        block = indent_width(first) if first.strip() else indent_width(line_prefix)

    kept = [(0, first.rstrip())] if first.strip() else []
    block_closed = False
    for index in range(1, len(lines)):
        line = lines[index]
        stripped = line.strip()
        if not stripped:
            continue
        if block_closed or repeats_following(line):
            return index
        if tree is not None:
            if tree.line is not None and index >= tree.line:
                return index
        else:
            width = indent_width(line)
            if (width <= opener) if opener is not None else (width < block):
                if not _is_closer_line(stripped):
                    return index
                block_closed = True
        kept.append((index, line.rstrip()))
        repeat = _repeat_start(kept)
        if repeat is not None:
            return repeat
    return None


def _repeat_start(kept: Sequence[tuple[int, str]]) -> int | None:
    """Where a block of lines that repeats the block right above it starts, when the last
    kept line completes such a copy and the block holds a word character; None otherwise.

    `kept` holds the non-blank lines so far, (index, content without trailing whitespace).
    Small models fall into loops of one line, and of several (a Java suggestion wrote
    `if (next != null) {`, `next.remove();`, `}` five times): the first copy stays.
    """
    last = len(kept)
    for size in range(1, last // 2 + 1):
        copy = kept[last - size :]
        original = kept[last - 2 * size : last - size]
        if all(a[1] == b[1] for a, b in zip(copy, original, strict=True)) and any(
            is_word_char(char) for _, content in copy for char in content
        ):
            return copy[0][0]
    return None


def _remove_overlap(text: str, follow: str, doc: Surroundings, closed_count: int) -> str:
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
        if scan.cut is None and len(scan.closed) == closed_count and not scan.leaves_own_open():
            return kept
    return text
