"""Edits, hunks and their scoring for bench/next_edit.py: plain functions over text, standard
library only, so that tests/bench/test_next_edit_scoring.py proves them on tiny inputs.

Every offset here is a code-point offset into a Python `str` (not UTF-16, not bytes).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from engine.text import common_affixes

#: A whole token: a run of word characters, or one other non-space character. Crude on purpose:
#: the heuristic it serves is the naive one propagation is compared against, and the same notion
#: decides which cases are "same-substitution".
TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    """Replace `text[start:end]` by `new_text`."""

    start: int
    end: int
    new_text: str


#: The predictor interface: (the file before the first hunk, the file after it, the first hunk
#: as an edit of the file before it) -> proposed edits, in offsets of the file after it,
#: non-overlapping. The first hunk spans `after[edit.start : edit.start + len(edit.new_text)]`.
Predictor = Callable[[str, str, Edit], list[Edit]]


class Kind(StrEnum):
    """A case's kind (strings: they are the JSON's keys too)."""

    SAME = "same-substitution"
    OTHER = "other"


# --- applying edits -------------------------------------------------------------------------


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with every edit applied at once (all offsets are of `text`). Raises ValueError when
    two edits overlap or one lies outside the text: such an answer is not a valid edit list."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    parts: list[str] = []
    at = 0
    for edit in ordered:
        if not at <= edit.start <= edit.end <= len(text):
            raise ValueError(f"edit {edit} overlaps another or lies outside the text")
        parts.append(text[at : edit.start])
        parts.append(edit.new_text)
        at = edit.end
    parts.append(text[at:])
    return "".join(parts)


def minimal(text: str, edit: Edit) -> Edit:
    """The same edit with the text it keeps at both ends trimmed off, as an editor reports it."""
    old = text[edit.start : edit.end]
    new = edit.new_text
    head, tail = common_affixes(old, new)
    return Edit(start=edit.start + head, end=edit.end - tail, new_text=new[head : len(new) - tail])


# --- hunks ----------------------------------------------------------------------------------


def hunks(before: str, after: str) -> list[Edit]:
    """The changed blocks of lines between two texts (a diff without context: nearby changes
    separated by one unchanged line are two hunks), as edits of `before` that replace whole
    lines, in order."""
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    starts = [0]
    for line in old:
        starts.append(starts[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [
        Edit(start=starts[i1], end=starts[i2], new_text="".join(new[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def widened(text: str, edit: Edit) -> Edit:
    """The same edit over the whole lines of `text` it touches, so that its tokens are whole."""
    start = text.rfind("\n", 0, edit.start) + 1
    end = text.find("\n", edit.end)
    end = len(text) if end < 0 else end
    return Edit(
        start=start,
        end=end,
        new_text=text[start : edit.start] + edit.new_text + text[edit.end : end],
    )


def hunk_lines(before: str, hunk: Edit) -> int:
    """How many lines a hunk touches: the larger of the lines it removes and those it adds."""
    return max(before.count("\n", hunk.start, hunk.end), hunk.new_text.count("\n"))


def shifted(first: Edit, rest: Sequence[Edit]) -> list[Edit]:
    """The hunks after `first` in offsets of the text once `first` is applied."""
    delta = len(first.new_text) - (first.end - first.start)
    return [Edit(start=h.start + delta, end=h.end + delta, new_text=h.new_text) for h in rest]


# --- tokens and substitutions ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Substitution:
    """One token sequence replaced by another, each as its exact text."""

    old: str
    new: str


def substitution(before: str, hunk: Edit) -> Substitution | None:
    """The token sequence `hunk` replaced: its old and new text less the tokens they share at
    both ends. None when nothing old was replaced (a pure insertion or deletion of tokens
    leaves nothing to look for elsewhere)."""
    old_text = before[hunk.start : hunk.end]
    old = list(TOKEN.finditer(old_text))
    new = list(TOKEN.finditer(hunk.new_text))
    head = 0
    while head < min(len(old), len(new)) and old[head][0] == new[head][0]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail][0] == new[-1 - tail][0]:
        tail += 1
    old_mid = old[head : len(old) - tail]
    new_mid = new[head : len(new) - tail]
    if not old_mid or not new_mid:
        return None
    return Substitution(
        old=old_text[old_mid[0].start() : old_mid[-1].end()],
        new=hunk.new_text[new_mid[0].start() : new_mid[-1].end()],
    )


def token_count(text: str) -> int:
    """How many whole tokens `text` holds."""
    return len(TOKEN.findall(text))


def occurrences(text: str, needle: str) -> list[int]:
    """Where `needle` occurs in `text` as whole tokens: not glued to a word character on a side
    where the needle itself starts or ends with one."""
    found = []
    word_head = bool(re.match(r"\w", needle))
    word_tail = bool(re.search(r"\w$", needle))
    at = text.find(needle)
    while at >= 0 and needle:
        end = at + len(needle)
        glued_head = word_head and at > 0 and re.match(r"\w", text[at - 1]) is not None
        glued_tail = word_tail and end < len(text) and re.match(r"\w", text[end]) is not None
        if not glued_head and not glued_tail:
            found.append(at)
        at = text.find(needle, end if not glued_head and not glued_tail else at + 1)
    return found


def substitute(text: str, sub: Substitution) -> str:
    """`text` with every whole-token occurrence of `sub.old` replaced by `sub.new`."""
    return apply_edits(
        text,
        [
            Edit(start=at, end=at + len(sub.old), new_text=sub.new)
            for at in occurrences(text, sub.old)
        ],
    )


def kind(before: str, case_hunks: Sequence[Edit]) -> Kind:
    """SAME when every hunk is the first hunk's substitution applied to each whole-token
    occurrence in that hunk's old lines (a rename made everywhere, the same argument changed at
    every call); OTHER otherwise."""
    sub = substitution(before, case_hunks[0])
    if sub is None:
        return Kind.OTHER
    for hunk in case_hunks:
        old = before[hunk.start : hunk.end]
        if not occurrences(old, sub.old) or substitute(old, sub) != hunk.new_text:
            return Kind.OTHER
    return Kind.SAME


# --- predictors of the benchmark's own ------------------------------------------------------


def no_suggestion(before: str, after: str, first: Edit) -> list[Edit]:
    """The trivial baseline: never proposes anything."""
    return []


def token_substitution(before: str, after: str, first: Edit) -> list[Edit]:
    """The naive heuristic: when the first hunk replaced exactly one token by one other, replace
    every other whole-token occurrence of the old one in the file, strings and comments
    included, the first hunk's own place excepted."""
    sub = substitution(before, widened(before, first))
    if sub is None or token_count(sub.old) != 1 or token_count(sub.new) != 1:
        return []
    lo, hi = first.start, first.start + len(first.new_text)
    return [
        Edit(start=at, end=at + len(sub.old), new_text=sub.new)
        for at in occurrences(after, sub.old)
        if not (lo <= at < hi)
    ]


# --- scoring --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Score:
    """What one predictor's answer achieved on one case."""

    remaining: int
    reproduced: int
    reached: bool
    false_edits: int
    edits: int
    valid: bool


def region(text: str, hunk: Edit) -> tuple[int, int]:
    """The closed span of `text` where an edit counts toward `hunk`: its lines, and the newline
    before them, since "insert a line after this one" is as often written at the end of the
    line above as at the start of the next."""
    return max(0, hunk.start - 1), hunk.end


def slid(text: str, edit: Edit) -> list[Edit]:
    """`edit`, then the same pure deletion or insertion slid along the repeated text around it,
    left and then right: each gives the same text (removing the first or the second of two
    `#:` lines), and a diff's choice among them is arbitrary. Replacements do not slide."""
    found = [edit]
    start, end, new = edit.start, edit.end, edit.new_text
    if (start == end) == (not new):
        return found  # a replacement, or nothing
    s, e, t = start, end, new
    while s > 0 and (text[s - 1] == (t[-1] if t else text[e - 1])):
        if t:
            t = t[-1] + t[:-1]
        s, e = s - 1, e - 1
        found.append(Edit(start=s, end=e, new_text=t))
    s, e, t = start, end, new
    while e < len(text) and (text[e] == (t[0] if t else text[s])):
        if t:
            t = t[1:] + t[0]
        s, e = s + 1, e + 1
        found.append(Edit(start=s, end=e, new_text=t))
    return found


def score(text: str, target: str, remaining: Sequence[Edit], proposed: Sequence[Edit]) -> Score:
    """Score `proposed` (edits of `text`, the file after the first hunk) against the hunks still
    to make (`remaining`, edits of `text`) and the final file `target`.

    1. An answer whose edits overlap or leave the text is invalid: scored as false edits only.
    2. Each proposed edit goes to the first remaining hunk whose region holds it whole; an edit
       no region holds is a false edit.
    3. A hunk is reproduced when its own edits turn its region into exactly the hunk's result.
    4. The file is reached when all the edits together give exactly `target`.
    """
    try:
        result = apply_edits(text, proposed)
    except ValueError:
        return Score(
            remaining=len(remaining),
            reproduced=0,
            reached=False,
            false_edits=len(proposed),
            edits=len(proposed),
            valid=False,
        )
    regions = [region(text, hunk) for hunk in remaining]
    owned: list[list[Edit]] = [[] for _ in remaining]
    false_edits = 0
    for proposal in proposed:
        owner, edit = None, proposal
        for candidate in slid(text, proposal):
            owner = next(
                (
                    i
                    for i, (lo, hi) in enumerate(regions)
                    if lo <= candidate.start <= candidate.end <= hi
                ),
                None,
            )
            if owner is not None:
                edit = candidate
                break
        if owner is None:
            false_edits += 1
        else:
            owned[owner].append(edit)
    reproduced = 0
    for hunk, (lo, hi), edits in zip(remaining, regions, owned, strict=True):
        if not edits:
            continue
        local = [Edit(start=e.start - lo, end=e.end - lo, new_text=e.new_text) for e in edits]
        wanted = text[lo : hunk.start] + hunk.new_text + text[hunk.end : hi]
        if apply_edits(text[lo:hi], local) == wanted:
            reproduced += 1
    return Score(
        remaining=len(remaining),
        reproduced=reproduced,
        reached=result == target,
        false_edits=false_edits,
        edits=len(proposed),
        valid=True,
    )
