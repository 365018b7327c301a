"""The context window: the part of the document around the cursor that fits a token budget,
cut at line boundaries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.text import split_lines


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextWindow:
    """The part of the document around the cursor that fits the token budget.

    `prefix` ends at the cursor and starts at a line boundary (`first_line`, 0-based, counted
    in the text given); `suffix` starts at the cursor and ends at a line boundary.
    """

    prefix: str
    suffix: str
    first_line: int
    prefix_tokens: int
    suffix_tokens: int


def context_window(
    prefix: str,
    suffix: str,
    count_tokens: Callable[[str], int],
    *,
    prefix_budget: int,
    suffix_budget: int,
    align_lines: int = 32,
) -> ContextWindow:
    """Cut the text before and after the cursor to token budgets, at line boundaries.

    The cursor's own line (its part before and after the cursor) is kept, clipped to the
    budgets where it alone is over them (a minified file's one long line would otherwise make
    every prompt too long for the model, keystroke after keystroke). The prefix
    window's first line is moved forward to a multiple of `align_lines`: while the user types
    on one line the window then starts at the same place request after request, so the
    prompts share their token prefix and the model's KV cache is reused.
    """
    # 1. Prefix: whole lines backwards from the cursor's line while they fit.
    lines = split_lines(prefix)
    if prefix.endswith(("\n", "\r")):
        lines.append("")  # the cursor starts a new, empty line
    last = len(lines) - 1
    if lines:
        lines[last] = _clip(lines[last], count_tokens, prefix_budget, keep_end=True)
    used = count_tokens(lines[last]) if lines else 0
    start = max(last, 0)
    while start > 0:
        cost = count_tokens(lines[start - 1])
        if used + cost > prefix_budget:
            break
        used += cost
        start -= 1
    # 2. Align the start for KV reuse. The grid is at most `align_lines`, and at most half the
    #    window's lines (a power of two, so it changes rarely), so a small window never loses
    #    more than half its lines to alignment.
    if start > 0 and align_lines > 1:
        grid = min(align_lines, 1 << max(0, ((last - start) // 2).bit_length() - 1))
        aligned = -(-start // grid) * grid
        if aligned < last:
            used -= sum(count_tokens(line) for line in lines[start:aligned])
            start = aligned
    prefix_text = "".join(lines[start:])

    # 3. Suffix: the rest of the cursor's line, then whole lines while they fit.
    suffix_lines = split_lines(suffix)
    kept: list[str] = []
    suffix_used = 0
    for i, line in enumerate(suffix_lines):
        if i == 0:
            line = _clip(line, count_tokens, suffix_budget, keep_end=False)
        cost = count_tokens(line)
        if i > 0 and suffix_used + cost > suffix_budget:
            break
        kept.append(line)
        suffix_used += cost
    return ContextWindow(
        prefix=prefix_text,
        suffix="".join(kept),
        first_line=start,
        prefix_tokens=used,
        suffix_tokens=suffix_used,
    )


#: More characters than any token holds: a line is cut to this many per token of its budget
#: before tokens are counted, so that a megabyte-long line costs no more than a short one.
MAX_CHARS_PER_TOKEN = 32


def _clip(text: str, count_tokens: Callable[[str], int], budget: int, *, keep_end: bool) -> str:
    """`text` if it fits `budget` tokens; else its longest end (`keep_end`) or start that does,
    found by bisection over the cut (fewer characters never take more tokens)."""
    text = (
        text[-budget * MAX_CHARS_PER_TOKEN :] if keep_end else text[: budget * MAX_CHARS_PER_TOKEN]
    )
    if count_tokens(text) <= budget:
        return text

    def part(kept: int) -> str:
        return text[len(text) - kept :] if keep_end else text[:kept]

    fits, over = 0, len(text)  # characters kept: `over` is known not to fit
    while over - fits > 1:
        middle = (fits + over) // 2
        if count_tokens(part(middle)) <= budget:
            fits = middle
        else:
            over = middle
    return part(fits)
