"""The mode decision: a single line, a block of lines, or nothing to suggest, from the
cursor's surroundings alone (before any model work)."""

from __future__ import annotations

import enum

from engine.text import indent_width
from lsp_server.postprocess.context import (
    CursorContext,
    is_closing_text,
    is_word_char,
    line_opens_block,
)


class CompletionMode(enum.StrEnum):
    """How much text a suggestion may hold: the rest of one line, or a block of lines."""

    SINGLE_LINE = "single_line"
    MULTI_LINE = "multi_line"


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
    if rest and is_word_char(rest[0]) and ctx.line_prefix.strip():
        return None
    if not is_closing_text(rest) or not ctx.is_blank_line:
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
