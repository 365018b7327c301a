"""Documents and cursors for the server benchmarks (the latency suite, editors): positions in
real files, HumanEval programs, and a document of about N tokens with a line to type."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from bench._common import ROOT, humaneval_task

#: A line a person writes: an assignment from a call, cut after its `(`.
ASSIGN_CALL = re.compile(r"^(?P<indent>[ \t]+)(?P<target>[\w.]+) = [\w.]+\((?=[^)\s])")


@dataclass(frozen=True, slots=True, kw_only=True)
class Spot:
    """A document and a cursor in it (code points)."""

    label: str
    text: str
    offset: int


def _cut_line(text: str, line_index: int, column: int) -> Spot:
    """`text` with line `line_index` cut at `column` (the rest of that line deleted)."""
    lines = text.split("\n")
    lines[line_index] = lines[line_index][:column]
    cut = "\n".join(lines)
    offset = sum(len(line) + 1 for line in lines[:line_index]) + column
    return Spot(label="", text=cut, offset=offset)


def file_spot(path: str, anchor: str, label: str) -> Spot:
    """The first line of `path` that contains `anchor`, cut right after the anchor: the user
    has typed that far into the line (the lines below are kept)."""
    text = (ROOT / path).read_text(encoding="utf-8")
    for index, line in enumerate(text.split("\n")):
        column = line.find(anchor)
        if column >= 0:
            spot = _cut_line(text, index, column + len(anchor))
            return Spot(label=f"{label} ({path}:{index + 1})", text=spot.text, offset=spot.offset)
    raise SystemExit(f"no line of {path} contains {anchor!r}: pick another position")


def demo_spot() -> Spot:
    """`make demo`'s position, as it is: examples/fibonacci.py line 5, column 5."""
    text = (ROOT / "examples" / "fibonacci.py").read_text(encoding="utf-8")
    lines = text.split("\n")
    offset = sum(len(line) + 1 for line in lines[:4]) + 4
    if len(lines) < 5 or len(lines[4]) < 4:
        raise SystemExit("examples/fibonacci.py changed: line 5 has no column 5 any more")
    return Spot(label="demo (examples/fibonacci.py:5:5)", text=text, offset=offset)


def humaneval_spot(task_id: str, anchor: str) -> Spot:
    """A HumanEval program with its hole line typed up to and including `anchor`."""
    row = humaneval_task(task_id)
    line = row["canonical_solution"].rstrip("\n")
    typed = line[: line.index(anchor) + len(anchor)]
    text = row["prompt"] + typed + "\n" + row["suffix"]
    short = task_id.removeprefix("SingleLineInfilling/")
    return Spot(label=f"HumanEval {short}", text=text, offset=len(row["prompt"]) + len(typed))


def default_spots() -> list[Spot]:
    return [
        demo_spot(),
        file_spot("lsp_server/inline/plan.py", "prompt = build_prompt(", "mid-line"),
        file_spot("bench/engine.py", "raw_ids = raw.tokenize(", "mid-line, long file"),
        humaneval_spot("SingleLineInfilling/HumanEval/81/L10", "elif "),
    ]


class NoLineToType(SystemExit):
    """A file with no `name = call(...)` line where `typing_doc` looks for one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TypingDoc:
    """A document of about N tokens with a line to type near its end.

    `text` has the line cut right after its first `(` (cursor at `offset`); `next_char` is the
    character that follows in the file; `line_start` and `indent` locate the line, for typing
    it from its indentation.
    """

    path: str
    line_number: int  # 1-based, in the file
    text: str
    offset: int
    next_char: str
    line_start: int
    indent: str
    tokens: int


def typing_doc(path: str, target_tokens: int, count: Callable[[str], int]) -> TypingDoc:
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.split("\n")
    used = 0
    end = len(lines)
    for index, line in enumerate(lines):
        used += count(line + "\n")
        if used >= target_tokens:
            end = index + 1
            break
    # The last assignment-from-call line, leaving a few lines after it as the suffix.
    for index in range(end - 4, 0, -1):
        m = ASSIGN_CALL.match(lines[index])
        if m is not None:
            break
    else:
        raise NoLineToType(f"{path}: no `name = call(...)` line in its first {end} lines")
    kept = lines[:end]
    column = m.end()
    next_char = kept[index][column]
    kept[index] = kept[index][:column]
    doc = "\n".join(kept) + "\n"
    start = sum(len(line) + 1 for line in kept[:index])
    return TypingDoc(
        path=path,
        line_number=index + 1,
        text=doc,
        offset=start + column,
        next_char=next_char,
        line_start=start,
        indent=m["indent"],
        tokens=count(doc),
    )
