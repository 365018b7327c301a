"""The commit benchmark's cases (bench/_commit_cases.py) and its scoring arithmetic
(bench/next_edit_commits.py) on tiny changes worked out by hand, and the stored cases
(third_party/data/next-edit-commits/): every language has both parts, each case is what the
builder promises."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench._commit_cases import (
    FIFTH,
    FOURTH,
    MAX_HUNKS,
    MIN_HUNKS,
    SECOND,
    SIXTH,
    THIRD,
    CaseKind,
    CommitCase,
    Language,
    Split,
    classify,
    language_id,
    load,
    read_cases,
    small_change,
    split_of,
    window,
    write_cases,
)
from bench._edits import Score, hunks
from bench.commit_corpus import few_lines_changed, sample
from bench.next_edit_commits import Outcome, by_kind, by_language, tally

KINDS = [
    (
        "a rename on two lines",
        "x = old(1)\ny = 2\nz = old(3)\n",
        "x = new(1)\ny = 2\nz = new(3)\n",
        CaseKind.REPLACE_IN_LINE,
    ),
    (
        "a rename made twice on a line counts as the same change",
        "a = old\nb = 1\nc = old + old\n",
        "a = new\nb = 1\nc = new + new\n",
        CaseKind.REPLACE_IN_LINE,
    ),
    (
        "spaces do not count",
        "f(a,b)\nq = 1\nf(a, b)\n",
        "g(a,b)\nq = 1\ng(a,  b)\n",
        CaseKind.REPLACE_IN_LINE,
    ),
    (
        "a call renamed and broken over two lines, twice",
        "x = f(1)\nq = 1\ny = f(1)\n",
        "x = g(\n    1)\nq = 1\ny = g(\n    1)\n",
        CaseKind.REPLACE_ACROSS_LINES,
    ),
    (
        "a statement wrapped in a block, twice: tokens only added",
        "run()\nq = 1\nrun()\n",
        "if ok:\n    run()\nq = 1\nif ok:\n    run()\n",
        CaseKind.INSERTION,
    ),
    (
        "an argument added at two calls",
        "f(a)\nq = 1\nf(a)\n",
        "f(a, 2)\nq = 1\nf(a, 2)\n",
        CaseKind.INSERTION,
    ),
    (
        "a line inserted at two places",
        "a()\nq = 1\nb()\n",
        "a()\nlog()\nq = 1\nb()\nlog()\n",
        CaseKind.INSERTION,
    ),
    (
        "a modifier removed twice",
        "public int a;\nint q;\npublic int b;\n",
        "int a;\nint q;\nint b;\n",
        CaseKind.DELETION,
    ),
    (
        "the same rewrite with another class name",
        "Base.setup(self, cfg)\nq = 1\nOther.setup(self, cfg)\n",
        "super().setup(cfg)\nq = 1\nsuper().setup(cfg)\n",
        CaseKind.ANALOGOUS,
    ),
    (
        "an argument added with another receiver",
        "f(a)\nq = 1\nf(b)\n",
        "f(a, 2)\nq = 1\nf(b, 2)\n",
        CaseKind.INSERTION,
    ),
    (
        "the same call made another with another argument name",
        "old(a)\nq = 1\nold(b)\n",
        "new(a, a)\nq = 1\nnew(b, b)\n",
        CaseKind.ANALOGOUS,
    ),
    (
        "two names differ: other",
        "old(a, x)\nq = 1\nold(b, y)\n",
        "new(a, x)\nq = 1\nnew(b, y) + 1\n",
        CaseKind.OTHER,
    ),
    (
        "a literal that differs is no name: other",
        "f(1)\nq = 1\nf(2)\n",
        "g(1, 1)\nq = 1\ng(2, 2)\n",
        CaseKind.OTHER,
    ),
    (
        "unrelated changes",
        "a = 1\nq = 1\nb = 2\n",
        "a = 10\nq = 1\nc = 2\n",
        CaseKind.OTHER,
    ),
    (
        "a first hunk of spaces only is no change to make again",
        "a  = 1\nq = 1\nb = 2\n",
        "a = 1\nq = 1\nb = 3\n",
        CaseKind.OTHER,
    ),
]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [k[1:] for k in KINDS],
    ids=[k[0] for k in KINDS],
)
def test_kinds(before: str, after: str, expected: CaseKind) -> None:
    assert classify(before, hunks(before, after)) is expected


SIZES = [
    ("two small hunks", "a\nb\nc\n", "A\nb\nC\n", True),
    ("one hunk is not enough", "a\nb\nc\n", "A\nb\nc\n", False),
    ("seven hunks are too many", "x\n-\n" * 7, "y\n-\n" * 7, False),
    ("a hunk of four lines is a rewrite", "a\nb\nc\nd\n-\ne\n", "A\nB\nC\nD\n-\nE\n", False),
    ("a first hunk of spaces only", "a  =1\n-\nb\n", "a =1\n-\nB\n", False),
]


@pytest.mark.parametrize(
    ("before", "after", "expected"), [s[1:] for s in SIZES], ids=[s[0] for s in SIZES]
)
def test_which_changes_are_cases(before: str, after: str, expected: bool) -> None:
    assert small_change(before, hunks(before, after)) is expected


def test_a_window_cuts_the_same_unchanged_lines_from_both_texts() -> None:
    lines = [f"line {i}\n" for i in range(100)]
    before = "".join(lines)
    changed = list(lines)
    changed[40] = "LINE 40\n"
    changed[50:51] = ["line 50\n", "added\n"]
    after = "".join(changed)
    cut = window(before, after, margin=5)
    assert cut.line == 36
    assert cut.before == "".join(lines[35:56])
    assert cut.after == "".join(changed[35:57])
    whole = [(before[h.start : h.end], h.new_text) for h in hunks(before, after)]
    assert [(cut.before[h.start : h.end], h.new_text) for h in hunks(cut.before, cut.after)] == (
        whole
    )


def test_the_quick_bound_lets_every_case_through() -> None:
    before = "".join(f"{i}\n" for i in range(40))
    after = before.replace("3\n", "x\n").replace("30\n", "y\nz\n")
    assert few_lines_changed(before, after)
    assert not few_lines_changed(before, "".join(f"{i}!\n" for i in range(40)))


def test_the_split_is_a_hash_of_the_commit() -> None:
    ids = [f"{i:040x}" for i in range(400)]
    parts = Counter(split_of(c) for c in ids)
    assert [split_of(c) for c in ids] == [split_of(c) for c in ids]
    assert 0.3 < parts[Split.HELDOUT] / len(ids) < 0.5


def _case(kind: CaseKind, commit: str, language: Language = Language.GO) -> CommitCase:
    return CommitCase(
        language=language,
        repository="o/r",
        commit=commit,
        path="a.go",
        line=1,
        before="a\n",
        after="b\n",
        kind=kind,
        split=split_of(commit),
    )


def test_the_sample_takes_each_kind_up_to_its_quota_and_fills_with_others(
    tmp_path: Path,
) -> None:
    cases = [_case(CaseKind.DELETION, f"d{i}") for i in range(30)]
    cases += [_case(CaseKind.OTHER, f"o{i}") for i in range(30)]
    cases += [_case(CaseKind.ANALOGOUS, "a0")]
    chosen = sample(cases, 20)
    counts = Counter(c.kind for c in chosen)
    assert counts == {CaseKind.DELETION: 10, CaseKind.ANALOGOUS: 1, CaseKind.OTHER: 9}
    assert sample(cases, 20) == chosen
    path = tmp_path / "go.jsonl.gz"
    write_cases(path, chosen)
    first = path.read_bytes()
    write_cases(path, chosen)
    assert path.read_bytes() == first, "the same cases make the same bytes"
    assert list(read_cases(path)) == chosen


def _outcome(
    kind: CaseKind, language: Language, *, reproduced: int, false_edits: int, ms: float
) -> Outcome:
    return Outcome(
        case="c",
        language=language,
        kind=kind,
        score=Score(
            remaining=2,
            reproduced=reproduced,
            reached=False,
            false_edits=false_edits,
            edits=reproduced + false_edits,
            valid=True,
        ),
        seconds=ms / 1000,
    )


def test_hits_and_false_edits_are_counted_per_kind_and_language() -> None:
    outcomes = [
        _outcome(CaseKind.INSERTION, Language.GO, reproduced=1, false_edits=0, ms=2),
        # a hunk reproduced beside an edit elsewhere: a false edit, no hit
        _outcome(CaseKind.INSERTION, Language.GO, reproduced=1, false_edits=1, ms=4),
        _outcome(CaseKind.DELETION, Language.RUST, reproduced=0, false_edits=0, ms=6),
        _outcome(CaseKind.OTHER, Language.RUST, reproduced=0, false_edits=2, ms=8),
    ]
    kinds = by_kind(outcomes)
    assert (kinds["insertion"].cases, kinds["insertion"].hits) == (2, 1)
    assert kinds["insertion"].false_edits == 1
    assert (kinds["same change"].cases, kinds["same change"].hits) == (3, 1)
    assert kinds["analogous and other"].false_pct == 100
    assert kinds["all"].median_ms == pytest.approx(5)
    assert kinds["all"].proposed == 3
    languages = by_language(outcomes)
    assert (languages["go"].hit_pct, languages["rust"].false_pct) == (50, 50)
    assert tally([]).cases == 0


def test_language_ids_come_from_the_suffix() -> None:
    assert [
        language_id(p) for p in ("a.py", "b.ts", "c.tsx", "d.mjs", "e.go", "f.rs", "g.java")
    ] == [
        "python",
        "typescript",
        "typescriptreact",
        "javascript",
        "go",
        "rust",
        "java",
    ]


# --- the stored cases -----------------------------------------------------------------------


@pytest.mark.parametrize("language", list(Language), ids=str)
def test_the_stored_cases_have_both_parts_and_are_what_the_builder_promises(
    language: Language,
) -> None:
    tuning = load(Split.TUNING, [language])
    heldout = load(Split.HELDOUT, [language])
    assert len(tuning) >= 20, len(tuning)
    assert len(heldout) >= 10, len(heldout)
    assert not {c.commit for c in tuning} & {c.commit for c in heldout}
    for case in tuning + heldout:
        found = hunks(case.before, case.after)
        assert MIN_HUNKS <= len(found) <= MAX_HUNKS, case.name
        assert small_change(case.before, found), case.name
        assert classify(case.before, found) is case.kind, case.name
        assert case.split is split_of(case.commit), case.name
        assert case.language is language
        assert language_id(case.path) in {language, "typescriptreact"}


def test_every_kind_is_in_the_tuning_part() -> None:
    kinds = Counter(c.kind for c in load(Split.TUNING))
    assert set(kinds) == set(CaseKind), kinds


@pytest.mark.parametrize(
    "folder",
    [SECOND, THIRD, FOURTH, FIFTH, SIXTH],
    ids=["second", "third", "fourth", "fifth", "sixth"],
)
@pytest.mark.parametrize("language", list(Language), ids=str)
def test_the_later_sets_are_all_held_out_and_what_the_builder_promises(
    language: Language, folder: Path
) -> None:
    """The sets drawn later, six other repositories each: every case held out, none in the
    tuning part, each a case as the first set's are, no repository drawn twice."""
    cases = load(Split.HELDOUT, [language], folder)
    assert len(cases) >= 40, len(cases)
    assert not load(Split.TUNING, [language], folder)
    first = {c.repository for c in load(Split.TUNING, [language])}
    first |= {
        c.repository
        for f in (SECOND, THIRD, FOURTH, FIFTH, SIXTH)
        if f != folder
        for c in load(Split.HELDOUT, [language], f)
    }
    for case in cases:
        found = hunks(case.before, case.after)
        assert MIN_HUNKS <= len(found) <= MAX_HUNKS, case.name
        assert small_change(case.before, found), case.name
        assert classify(case.before, found) is case.kind, case.name
        assert case.language is language
        assert case.repository not in first
