"""The next-edit suite's scoring (bench/_edits.py, and the predictors bench/next_edit.py
replays) on tiny inputs worked out by hand: hunks, minimal edits, what a heuristic proposes,
what counts as reproduced, reached and false."""

from __future__ import annotations

import pytest

from bench._edits import (
    Edit,
    Kind,
    Score,
    apply_edits,
    hunks,
    kind,
    minimal,
    occurrences,
    region,
    score,
    shifted,
    slid,
    substitution,
    token_substitution,
)


def _checks() -> list[tuple[str, bool]]:
    """Each check of the scoring on tiny inputs, by name, and whether it holds."""
    before = "old = 1\nx = 2\nprint(old)\ny = 3\nz = old + 1\n"
    after = "new = 1\nx = 2\nprint(new)\ny = 3\nz = new + 1\n"
    found = hunks(before, after)
    first = minimal(before, found[0])
    text = apply_edits(before, [first])
    remaining = shifted(found[0], found[1:])
    rename_all = token_substitution(before, text, first)
    n = text.index("print(old)") + len("print(")
    checks: list[tuple[str, bool]] = [
        (
            "apply_edits applies edits in any order",
            apply_edits(
                "abcd", [Edit(start=3, end=4, new_text="D"), Edit(start=0, end=1, new_text="A")]
            )
            == "AbcD",
        ),
        (
            "hunks: three blocks of lines, whole lines",
            [before[h.start : h.end] for h in found]
            == ["old = 1\n", "print(old)\n", "z = old + 1\n"],
        ),
        ("hunks rebuild the next version", apply_edits(before, found) == after),
        ("minimal trims what the hunk keeps", first == Edit(start=0, end=3, new_text="new")),
        (
            "substitution finds old -> new",
            (s := substitution(before, found[0])) is not None and (s.old, s.new) == ("old", "new"),
        ),
        ("whole tokens only", occurrences("old bold old_x (old)", "old") == [0, 16]),
        ("a rename everywhere is same-substitution", kind(before, found) == Kind.SAME),
        (
            "a different change is other",
            kind(before, hunks(before, after.replace("z = new + 1", "z = new + 2"))) == Kind.OTHER,
        ),
        (
            "no edits: nothing reproduced, no false edit",
            score(text, after, remaining, [])
            == Score(remaining=2, reproduced=0, reached=False, false_edits=0, edits=0, valid=True),
        ),
        (
            "the heuristic reaches the file",
            score(text, after, remaining, rename_all)
            == Score(remaining=2, reproduced=2, reached=True, false_edits=0, edits=2, valid=True),
        ),
        (
            "a partial hunk is not reproduced",
            score(text, after, remaining, rename_all[1:]).reproduced == 1,
        ),
        (
            "an edit away from every hunk is false",
            score(
                text,
                after,
                remaining,
                [Edit(start=text.index("x = 2"), end=text.index("x = 2") + 1, new_text="y")],
            ).false_edits
            == 1,
        ),
        (
            "the edited first hunk is no remaining hunk",
            score(text, after, remaining, [Edit(start=0, end=3, new_text="z")]).false_edits == 1,
        ),
        (
            "overlapping edits are invalid",
            not score(
                text,
                after,
                remaining,
                [
                    Edit(start=n, end=n + 3, new_text="a"),
                    Edit(start=n + 1, end=n + 2, new_text="b"),
                ],
            ).valid,
        ),
        (
            "an inserted line may be written at the end of the line above",
            score(
                "a\nb\n",
                "a\nb\nc\n",
                [Edit(start=4, end=4, new_text="c\n")],
                [Edit(start=3, end=3, new_text="\nc")],
            ).reproduced
            == 1,
        ),
        (
            "a line removed from a run of equal lines may be the one above the hunk's",
            score(
                "x\n#:\nA\n#:\ny\n",
                "x\n#:\ny\n",
                [Edit(start=2, end=7, new_text="")],
                [Edit(start=5, end=10, new_text="")],
            )
            == Score(remaining=1, reproduced=1, reached=True, false_edits=0, edits=1, valid=True),
        ),
        (
            "an insertion slides along the text it repeats, a replacement does not",
            slid("aab", Edit(start=1, end=1, new_text="a"))
            == [
                Edit(start=1, end=1, new_text="a"),
                Edit(start=0, end=0, new_text="a"),
                Edit(start=2, end=2, new_text="a"),
            ]
            and slid("aab", Edit(start=1, end=2, new_text="c"))
            == [Edit(start=1, end=2, new_text="c")],
        ),
        (
            "a deletion elsewhere that gives other text stays a false edit",
            score(
                "x\n#:\nA\n#:\ny\n",
                "x\n#:\ny\n",
                [Edit(start=2, end=7, new_text="")],
                [Edit(start=0, end=2, new_text="")],
            ).false_edits
            == 1,
        ),
        (
            "the region holds the newline above",
            region("a\nb\n", Edit(start=2, end=4, new_text="")) == (1, 4),
        ),
        (
            "the heuristic reads whole tokens around a one-letter edit",
            token_substitution("ab = 1\nab\n", "abc = 1\nab\n", Edit(start=2, end=2, new_text="c"))
            == [Edit(start=8, end=10, new_text="abc")],
        ),
        (
            "two tokens for one: the heuristic keeps quiet",
            token_substitution(
                "f(a)\nf(a)\n", "f(a.b)\nf(a)\n", Edit(start=3, end=3, new_text=".b")
            )
            == [],
        ),
    ]
    return checks


CHECKS = _checks()


@pytest.mark.parametrize("good", [good for _, good in CHECKS], ids=[name for name, _ in CHECKS])
def test_scoring(good: bool) -> None:
    assert good
