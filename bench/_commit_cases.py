"""The cases of the commit benchmark (bench/next_edit_commits.py): what a case is, how its
commit's change is classified, the window a file is cut to, the tuning / held-out split and
reading the stored cases. Plain functions, standard library and bench/_edits.py only, so that
tests/bench/test_commit_cases.py proves them on tiny inputs.

A case is one source file's change in one commit: the file before and after (cut to a window
of lines around the change) and its hunks (`_edits.hunks`: changed blocks of lines, no
context). Its kind says what the commit's hunks have in common with the first one:

- the same token change in every hunk, by the first hunk's shape: a replacement within one
  line, a replacement spanning lines, a pure insertion of tokens, a pure deletion;
- analogous: every other hunk makes the first one's change with one name in it replaced by
  another (the same name everywhere it stands in that change), at least one of them does;
- other: anything else.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from bench._edits import TOKEN, Edit, hunks, minimal

DATA = Path(__file__).resolve().parents[1] / "third_party" / "data" / "next-edit-commits"
#: Sets drawn later from six other repositories each, every case held out, each replayed once
#: after a round of tuning (their READMEs say when and why).
SECOND, THIRD, FOURTH, FIFTH, SIXTH = (
    DATA / "second",
    DATA / "third",
    DATA / "fourth",
    DATA / "fifth",
    DATA / "sixth",
)

#: A hunk touching more lines is a rewrite, not the small edit a next edit follows (the PyPI
#: benchmark's bound, bench/next_edit.py's `MAX_HUNK_LINES`).
MIN_HUNKS, MAX_HUNKS, MAX_HUNK_LINES = 2, 6, 3
#: Lines kept above the first hunk and below the last one when a file is cut to a window:
#: enough for a function or two around the change, and the stored data stays small.
WINDOW_MARGIN = 150


class Language(StrEnum):
    """The benchmark's languages; each value is also the LSP language id of its files."""

    PYTHON = "python"
    TYPESCRIPT = "typescript"
    JAVASCRIPT = "javascript"
    GO = "go"
    RUST = "rust"
    JAVA = "java"


#: Which language a file is, by its suffix.
SUFFIXES: dict[str, Language] = {
    ".py": Language.PYTHON,
    ".ts": Language.TYPESCRIPT,
    ".tsx": Language.TYPESCRIPT,
    ".mts": Language.TYPESCRIPT,
    ".js": Language.JAVASCRIPT,
    ".mjs": Language.JAVASCRIPT,
    ".cjs": Language.JAVASCRIPT,
    ".go": Language.GO,
    ".rs": Language.RUST,
    ".java": Language.JAVA,
}


def language_id(path: str) -> str:
    """The LSP language id of a file: `typescriptreact` for .tsx, else its language's."""
    suffix = Path(path).suffix
    if suffix == ".tsx":
        return "typescriptreact"
    return str(SUFFIXES[suffix])


class CaseKind(StrEnum):
    """A case's kind (strings: they are the stored data's and the JSON's values)."""

    REPLACE_IN_LINE = "replace-in-line"
    REPLACE_ACROSS_LINES = "replace-across-lines"
    INSERTION = "insertion"
    DELETION = "deletion"
    ANALOGOUS = "analogous"
    OTHER = "other"


#: The kinds whose hunks all make the same change, by the first hunk's shape.
SAME_CHANGE = (
    CaseKind.REPLACE_IN_LINE,
    CaseKind.REPLACE_ACROSS_LINES,
    CaseKind.INSERTION,
    CaseKind.DELETION,
)


class Split(StrEnum):
    """Tuning: the part anyone may replay while working on next edits. Held out: replayed once,
    to check what the tuning part's figures say."""

    TUNING = "tuning"
    HELDOUT = "heldout"


#: The share of commits held out, by the first byte of their id's sha256 (below this of 256).
HELDOUT_BELOW = 102  # 40%


def split_of(commit: str) -> Split:
    """A commit's part, from a hash of its id alone: every file of a commit goes to one part,
    and no one chooses it."""
    first = hashlib.sha256(commit.encode()).digest()[0]
    return Split.HELDOUT if first < HELDOUT_BELOW else Split.TUNING


# --- classification -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenChange:
    """What a hunk changes, as tokens: its old and new tokens less those they share at both
    ends (spaces do not count)."""

    old: tuple[str, ...]
    new: tuple[str, ...]


def token_change(before: str, hunk: Edit) -> TokenChange:
    old = TOKEN.findall(before[hunk.start : hunk.end])
    new = TOKEN.findall(hunk.new_text)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return TokenChange(
        old=tuple(old[head : len(old) - tail]), new=tuple(new[head : len(new) - tail])
    )


def replaced_all(tokens: Sequence[str], old: Sequence[str], new: Sequence[str]) -> list[str]:
    """`tokens` with every run equal to `old` (left to right, not overlapping) made `new`."""
    out: list[str] = []
    at = 0
    while at < len(tokens):
        if old and list(tokens[at : at + len(old)]) == list(old):
            out.extend(new)
            at += len(old)
        else:
            out.append(tokens[at])
            at += 1
    return out


def same_change(first: TokenChange, before: str, hunk: Edit) -> bool:
    """Whether `hunk` makes `first`'s change: the same tokens changed, or the first's old
    tokens replaced by its new ones wherever they stand in the hunk's lines (a rename made at
    two uses on one line)."""
    if token_change(before, hunk) == first:
        return True
    if not first.old:
        return False
    old = TOKEN.findall(before[hunk.start : hunk.end])
    if not _contains(old, first.old):
        return False
    return replaced_all(old, first.old, first.new) == TOKEN.findall(hunk.new_text)


def _contains(tokens: Sequence[str], run: Sequence[str]) -> bool:
    return any(list(tokens[i : i + len(run)]) == list(run) for i in range(len(tokens)))


NAME = re.compile(r"[^\W\d]\w*")


def analogous_change(first: TokenChange, other: TokenChange) -> bool:
    """Whether `other` is `first` with one name made another, wherever the name stands in it
    (`Base.setup(self, cfg)` -> `super().setup(cfg)` against `Other.setup(self, cfg)` ->
    `super().setup(cfg)`)."""
    if len(first.old) != len(other.old) or len(first.new) != len(other.new):
        return False
    pairs = {
        (a, b) for a, b in zip(first.old + first.new, other.old + other.new, strict=True) if a != b
    }
    if len(pairs) != 1:
        return False
    ((name, instead),) = pairs
    if not (NAME.fullmatch(name) and NAME.fullmatch(instead)):
        return False
    renamed = tuple(instead if t == name else t for t in first.old + first.new)
    return renamed == other.old + other.new


def first_shape(before: str, hunk: Edit) -> CaseKind:
    """The shape of a hunk's change: tokens only added, only removed, or replaced within one
    line or across lines (whether its characters' change, trimmed, holds a line end)."""
    change = token_change(before, hunk)
    if not change.old:
        return CaseKind.INSERTION
    if not change.new:
        return CaseKind.DELETION
    trimmed = minimal(before, hunk)
    if "\n" in before[trimmed.start : trimmed.end] or "\n" in trimmed.new_text:
        return CaseKind.REPLACE_ACROSS_LINES
    return CaseKind.REPLACE_IN_LINE


def classify(before: str, case_hunks: Sequence[Edit]) -> CaseKind:
    """The kind of a change of at least two hunks (see the module's docstring)."""
    first = token_change(before, case_hunks[0])
    if not first.old and not first.new:
        return CaseKind.OTHER  # spaces only: no token change to make again
    rest = case_hunks[1:]
    if all(same_change(first, before, h) for h in rest):
        return first_shape(before, case_hunks[0])
    if all(
        same_change(first, before, h) or analogous_change(first, token_change(before, h))
        for h in rest
    ):
        return CaseKind.ANALOGOUS
    return CaseKind.OTHER


def small_change(before: str, case_hunks: Sequence[Edit]) -> bool:
    """Whether a file's change is a case: 2 to 6 hunks, each of a few lines, the first one
    changing tokens (not only spaces)."""
    if not MIN_HUNKS <= len(case_hunks) <= MAX_HUNKS:
        return False
    for hunk in case_hunks:
        removed = before.count("\n", hunk.start, hunk.end)
        if max(removed, hunk.new_text.count("\n")) > MAX_HUNK_LINES:
            return False
    first = token_change(before, case_hunks[0])
    return bool(first.old or first.new)


# --- the window -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A file pair cut to the same unchanged lines at both ends; `line`: the 1-based number of
    its first line in the file before."""

    before: str
    after: str
    line: int


def window(before: str, after: str, margin: int = WINDOW_MARGIN) -> Window:
    """The two texts cut to `margin` lines above the first hunk and below the last: the cut
    falls on unchanged lines, so the window's hunks are the file's, moved up."""
    found = hunks(before, after)
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    if not found:
        return Window(before=before, after=after, line=1)
    top = max(0, before.count("\n", 0, found[0].start) - margin)
    last_end = before.count("\n", 0, found[-1].end)  # lines before the last hunk's end
    bottom = min(len(old), last_end + margin)
    kept_below = len(old) - bottom  # unchanged lines cut off at the end, the same in both
    return Window(
        before="".join(old[top:bottom]),
        after="".join(new[top : len(new) - kept_below]),
        line=top + 1,
    )


# --- stored cases ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitCase:
    """One stored case: where it came from, the two texts (a window of the file), its kind and
    its part."""

    language: Language
    repository: str
    commit: str
    path: str
    line: int
    before: str
    after: str
    kind: CaseKind
    split: Split

    @property
    def name(self) -> str:
        return f"{self.repository}@{self.commit[:10]}:{self.path}"

    @property
    def hunks(self) -> list[Edit]:
        return hunks(self.before, self.after)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CommitCase:
        data = json.loads(text)
        return cls(
            language=Language(data["language"]),
            repository=data["repository"],
            commit=data["commit"],
            path=data["path"],
            line=data["line"],
            before=data["before"],
            after=data["after"],
            kind=CaseKind(data["kind"]),
            split=Split(data["split"]),
        )


def data_file(language: Language, folder: Path = DATA) -> Path:
    return folder / f"{language}.jsonl.gz"


def write_cases(path: Path, cases: Sequence[CommitCase]) -> None:
    """The cases as gzip JSON lines; mtime 0, so that the same cases make the same bytes."""
    body = "".join(c.to_json() + "\n" for c in cases).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(body)


def read_cases(path: Path) -> Iterator[CommitCase]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield CommitCase.from_json(line)


def load(
    split: Split, languages: Sequence[Language] = tuple(Language), folder: Path = DATA
) -> list[CommitCase]:
    """The stored cases of one part, language by language in file order."""
    return [
        case
        for language in languages
        for case in read_cases(data_file(language, folder))
        if case.split is split
    ]
