"""The confidence gate's curve as the benchmarks report it (bench/confidence.py's `curve` and
`change_at`, and bench/languages.py's `--curve` records): on hand-made suggestions whose
confidence is known, the counts shown, right and wrong at each threshold are the ones counted
by hand, so the README's curve tables rest on checked arithmetic."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import confidence as gate
from lsp_server.inline.confidence import BIAS, WEIGHTS, Features, confidence


def _features_scoring(target: float) -> dict[str, Any]:
    """Recorded features (a judgement's `features`) the gate scores at `target`: one token,
    no cursor flag set, the three log-probabilities equal, solved from today's weights."""
    slope = WEIGHTS["first_logprob"] + WEIGHTS["mean_logprob"] + WEIGHTS["min_logprob"]
    x = (math.log(target / (1 - target)) - BIAS) / slope
    features = Features(
        tokens=1,
        mean_logprob=x,
        min_logprob=x,
        first_logprob=x,
        ranking=None,
        multi_line=False,
        after_opener=False,
        at_line_end=False,
        blank_line=False,
        in_comment=False,
        in_string=False,
        after_word=False,
        after_space=False,
        after_dot=False,
        after_operator=False,
    )
    assert confidence(features) == pytest.approx(target)
    return {field: getattr(features, field) for field in Features.__slots__}


def _record(score: float | None, right: bool, *, judged: bool = True) -> dict[str, Any]:
    features = None if score is None else _features_scoring(score)
    return {
        "inserted": "x = 1",
        "right": right,
        "judgement": {"features": features} if judged else None,
    }


RECORDS = [
    _record(0.03, True),
    _record(0.08, False),
    _record(0.12, False),
    _record(0.17, True),
    _record(0.17, False),
    _record(0.52, True),
    _record(0.92, False),
    _record(None, True, judged=False),  # the gate judged nothing: always shown
    _record(None, False),  # no log-probabilities: always shown
    {"inserted": None, "right": False, "judgement": None},  # no suggestion: never counted
]

#: threshold -> (shown, right, wrong), counted by hand from RECORDS.
EXPECTED = {
    0.0: (9, 4, 5),
    0.05: (8, 3, 5),
    0.1: (7, 3, 4),
    0.15: (6, 3, 3),
    0.2: (4, 2, 2),
    0.5: (4, 2, 2),
    0.55: (3, 1, 2),
    0.9: (3, 1, 2),
    0.95: (2, 1, 1),
}


def test_the_curve_counts_what_each_threshold_shows() -> None:
    rows = gate.curve(RECORDS)
    assert [row["threshold"] for row in rows] == list(gate.THRESHOLDS)
    for threshold, (shown, right, wrong) in EXPECTED.items():
        row = gate.at(rows, threshold)
        assert (row["shown"], row["right"], row["wrong"]) == (shown, right, wrong), threshold


def test_the_change_at_the_default_is_against_showing_everything() -> None:
    change = gate.change_at(gate.curve(RECORDS), 0.15)
    assert change["shown"] == (9, 6)
    assert change["wrong_cut"] == pytest.approx(1 - 3 / 5)  # wrong shown -40%
    assert change["right_cut"] == pytest.approx(1 - 3 / 4)  # right shown -25%
    assert change["precision"] == pytest.approx((4 / 9, 3 / 6))


def test_nothing_to_hide_is_no_change() -> None:
    only_wrong = [_record(0.08, False), _record(0.5, False)]
    change = gate.change_at(gate.curve(only_wrong), 0.15)
    assert change["right_cut"] == 0.0
    assert change["wrong_cut"] == pytest.approx(0.5)
    assert change["precision"] == (0.0, 0.0)


def test_languages_curve_scores_exact_as_right() -> None:
    from bench import languages

    original = "fn main() {\n    let x = 1;\n    run(x);\n}\n"
    document = "fn main() {\n    \n    run(x);\n}\n"
    cursor = document.index("\n    \n") + 5
    case = languages.Case(
        language_id="rust",
        file="main.rs",
        line=1,
        original=original,
        document=document,
        cursor=cursor,
        expected="let x = 1;",
    )
    judged = {"features": _features_scoring(0.1)}
    sides = [
        languages.Side(text="let x = 1;", start=cursor, end=cursor, judgement=judged),
        languages.Side(text="let y = 2;", start=cursor, end=cursor, judgement=judged),
        languages.Side(text=None, start=cursor, end=cursor),
    ]
    result = languages.curve_result([case] * 3, sides, ["rust"], 0.15)
    assert [row["right"] for row in result["cases"]] == [True, False, False]
    for language in ("rust", "all"):
        base, gated = result["curves"][language][0], gate.at(result["curves"][language], 0.15)
        assert (base["shown"], base["right"], base["wrong"]) == (2, 1, 1)
        assert gated["shown"] == 0  # both scored 0.1: hidden at 0.15
        assert result["changes"][language]["right_cut"] == 1.0
        assert result["changes"][language]["unjudged"] == 0
