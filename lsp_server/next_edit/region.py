"""What a next-edit model is shown: the editable region around the cursor (whole lines), the
code around it within a token budget, and the recent edits as unified diffs; and its rewrite
read back as edits of the document.

Plain functions over a snapshot and the edit history, so that the prompt a user's edits make
is tested without a model (`editor.py` runs the model).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from engine.context_window import context_window
from engine.next_edit import NextEditInput, RecentEdit, RegionEdit
from lsp_server.documents import DocumentSnapshot
from lsp_server.next_edit.history import EditGroup, uri_path
from lsp_server.next_edit.propagate import ProposedEdit

#: The editable region: the cursor's line, this many whole lines above it and below it. The
#: next edit of a pattern is usually on the lines just after the one changed; a small region
#: keeps a rewrite (which copies it token by token) short on a CPU. A larger change elsewhere
#: is propagation's (it reaches the whole file).
REGION_LINES_ABOVE = 2
REGION_LINES_BELOW = 6
#: ... and no more tokens than this: a region of minified code is cut to the lines nearest
#: the cursor, and its rewrite stays bounded.
REGION_TOKENS = 256

#: The code before and after the region in the prompt, in tokens: enough for the enclosing
#: function and the definitions it uses.
BEFORE_TOKENS = 768
AFTER_TOKENS = 256

#: Recent edits shown, newest last: Zeta was trained on about five events.
MAX_EDITS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Region:
    """A next-edit model's input for `snap`, and where its region starts in the document
    (code points), to place the rewrite's edits."""

    given: NextEditInput
    offset: int


def _line_start(text: str, offset: int) -> int:
    """The start of the line holding `offset`."""
    return max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1


def _line_end(text: str, offset: int) -> int:
    """Where the line holding `offset` ends (before its line break)."""
    ends = [i for i in (text.find("\n", offset), text.find("\r", offset)) if i >= 0]
    return min(ends) if ends else len(text)


def _previous_line(text: str, start: int) -> int:
    """The start of the line before the one starting at `start` (> 0)."""
    brk = start - 2 if text[start - 2 : start] == "\r\n" else start - 1
    return _line_start(text, brk)


def _next_line_end(text: str, end: int) -> int:
    """The end of the line after the one ending at `end` (< len(text))."""
    return _line_end(text, end + 2 if text.startswith("\r\n", end) else end + 1)


def region_bounds(text: str, cursor: int, count_tokens: Callable[[str], int]) -> tuple[int, int]:
    """The editable region around `cursor`: from the start of the line `REGION_LINES_ABOVE`
    above its line to the end (before the break) of the line `REGION_LINES_BELOW` below,
    lines dropped farthest first (below before above at equal distance) while it is over
    `REGION_TOKENS`; the cursor's own line always stays."""
    first, last = _line_start(text, cursor), _line_end(text, cursor)
    above: list[int] = []  # starts of the lines above, nearest first
    while len(above) < REGION_LINES_ABOVE and (above[-1] if above else first) > 0:
        above.append(_previous_line(text, above[-1] if above else first))
    below: list[int] = []  # ends of the lines below, nearest first
    while len(below) < REGION_LINES_BELOW and (below[-1] if below else last) < len(text):
        below.append(_next_line_end(text, below[-1] if below else last))
    while above or below:
        start = above[-1] if above else first
        end = below[-1] if below else last
        if count_tokens(text[start:end]) <= REGION_TOKENS:
            return start, end
        if len(below) >= len(above):
            below.pop()
        else:
            above.pop()
    return first, last


def recent_edits(groups: Sequence[EditGroup], roots: Sequence[str]) -> tuple[RecentEdit, ...]:
    """The last `MAX_EDITS` groups as the prompt's edits, oldest first, each named by its path
    in its workspace folder where it is in one."""
    edits = []
    for group in groups[-MAX_EDITS:]:
        diff = group.unified_diff()
        if diff:
            edits.append(RecentEdit(path=prompt_path(group.uri, roots), diff=diff))
    return tuple(edits)


def prompt_path(uri: str, roots: Sequence[str]) -> str:
    """The document's path as a prompt names it: relative to the workspace folder holding it
    (as the models' training data named files), else its whole path."""
    path = uri_path(uri)
    for root in roots:
        base = uri_path(root).rstrip("/") + "/"
        if path.startswith(base):
            return path[len(base) :]
    return path


def region_input(
    snap: DocumentSnapshot,
    groups: Sequence[EditGroup],
    count_tokens: Callable[[str], int],
    *,
    roots: Sequence[str] = (),
) -> Region:
    """The model's input for `snap`: the region around the cursor, the code around it within
    `BEFORE_TOKENS` and `AFTER_TOKENS`, and the recent edits `groups` (oldest first)."""
    text = snap.text
    start, end = region_bounds(text, snap.offset, count_tokens)
    window = context_window(
        text[:start],
        text[end:],
        count_tokens,
        prefix_budget=BEFORE_TOKENS,
        suffix_budget=AFTER_TOKENS,
    )
    before, region, after = window.prefix, text[start:end], window.suffix
    # The window keeps the line the region starts on whole: `before` ends at a line break,
    # or it is empty (the region starts the file or the window).
    given = NextEditInput(
        path=prompt_path(snap.uri, roots),
        text=before + region + after,
        region_start=len(before),
        region_end=len(before) + len(region),
        cursor=len(before) + snap.offset - start,
        edits=recent_edits(groups, roots),
        at_file_start=len(before) == start,
    )
    return Region(given=given, offset=start)


def document_edits(
    region: Region,
    edits: Sequence[RegionEdit],
    text: str,
    *,
    last: EditGroup | None,
    reverted: Collection[tuple[str, str]] = (),
) -> tuple[ProposedEdit, ...]:
    """The rewrite's edits as edits of the document `text`, less one that would undo `last`
    (the change the user just made: a model that writes the old text back proposes an undo,
    never a next edit) and one that makes a substitution the user reverted."""
    proposed = []
    for edit in edits:
        start, end = region.offset + edit.start, region.offset + edit.end
        if last is not None and _undoes(text, start, end, edit.text, last):
            continue
        if (text[start:end], edit.text) in reverted:
            continue
        proposed.append(ProposedEdit(start=start, end=end, text=edit.text))
    return tuple(proposed)


def _undoes(text: str, start: int, end: int, new: str, last: EditGroup) -> bool:
    """Whether replacing `start:end` of `text` by `new` puts back what `last` replaced."""
    if not start <= last.start <= last.end <= end:
        return False
    return text[start : last.start] + last.removed + text[last.end : end] == new
