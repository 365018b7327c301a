"""The editors-at-once suite's figures (bench/editors.py): on hand-made typing records, each
typist's median together over its median alone, the worst of a group, the verdict on the
target for two at once, and the answers the two servers gave differently are the ones worked
out by hand, so the record rests on checked arithmetic."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import editors


def _run(
    round_number: int,
    typist: str,
    ms: float,
    n: int = 1,
    *,
    suggestion: str | None = "x)",
    prompt_tokens: int = 1500,
    engine_jobs: int = 20,
) -> dict[str, Any]:
    return {
        "round": round_number,
        "mode": "alone" if n == 1 else "together",
        "n": n,
        "typist": typist,
        "last_keystroke_ms": ms,
        "engine_jobs": engine_jobs,
        "suggestion": suggestion,
        "final_job": {"prompt_tokens": prompt_tokens, "generated": 3},
    }


# Three rounds. lsp-1 alone 100, 120, 110 (median 110); with one other 200, 180, 220 (200);
# with three others 400, 330, 350 (350). lsp-2 alone 70, 50, 60 (60); with one other 72, 90,
# 66 (72); with three others 120, 100, 110 (110). lsp-3 and lsp-4 alone 100 each round, with
# three others 150 and 300.
RUNS = [
    *(_run(r, "lsp-1", ms) for r, ms in enumerate((100, 120, 110))),
    *(_run(r, "lsp-2", ms) for r, ms in enumerate((70, 50, 60))),
    *(_run(r, "lsp-3", 100) for r in range(3)),
    *(_run(r, "lsp-4", 100) for r in range(3)),
    *(_run(r, "lsp-1", ms, 2) for r, ms in enumerate((200, 180, 220))),
    *(_run(r, "lsp-2", ms, 2) for r, ms in enumerate((72, 90, 66))),
    *(_run(r, "lsp-1", ms, 4) for r, ms in enumerate((400, 330, 350))),
    *(_run(r, "lsp-2", ms, 4) for r, ms in enumerate((120, 100, 110))),
    *(_run(r, "lsp-3", 150, 4) for r in range(3)),
    *(_run(r, "lsp-4", 300, 4) for r in range(3)),
]


def test_each_typist_together_over_alone() -> None:
    two = editors.typing_ratios(RUNS, 2)
    assert [(r.typist, r.alone_ms, r.together_ms) for r in two] == [
        ("lsp-1", 110, 200),
        ("lsp-2", 60, 72),
    ]
    assert [r.ratio for r in two] == pytest.approx([200 / 110, 1.2])
    assert editors.worst_ratio(two) == pytest.approx(200 / 110)
    four = editors.typing_ratios(RUNS, 4)
    assert [r.ratio for r in four] == pytest.approx([350 / 110, 110 / 60, 1.5, 3.0])
    assert editors.worst_ratio(four) == pytest.approx(350 / 110)


def test_alone_is_each_typist_against_itself() -> None:
    alone = editors.typing_ratios(RUNS, 1)
    assert [(r.typist, r.together_ms) for r in alone] == [
        ("lsp-1", 110),
        ("lsp-2", 60),
        ("lsp-3", 100),
        ("lsp-4", 100),
    ]
    assert editors.worst_ratio(alone) == 1.0


def test_a_typist_never_alone_makes_the_group_unknown() -> None:
    runs = [r for r in RUNS if not (r["typist"] == "lsp-2" and r["mode"] == "alone")]
    two = editors.typing_ratios(runs, 2)
    assert math.isnan(two[1].ratio)
    assert math.isnan(editors.worst_ratio(two))
    assert math.isnan(editors.worst_ratio([]))


def test_a_typing_answered_from_the_type_ahead_cache_is_left_out() -> None:
    # A fourth round where lsp-2, together with lsp-1, typed along a suggestion: answered in
    # 2 ms without the model server. Counted, its median would be 71 ms (1.18x).
    runs = [*RUNS, _run(3, "lsp-2", 2, 2, engine_jobs=0)]
    two = editors.typing_ratios(runs, 2)
    assert two[1].together_ms == 72
    assert two[1].ratio == pytest.approx(1.2)
    # The same work on the other side reached the server: named as unequal work.
    assert editors.unequal_work({"engine": [_run(3, "lsp-2", 90, 2)], "llama-server": runs}) == [
        "round 3 together2 lsp-2: llama-server 0 model requests, engine 20 (none: answered "
        "from the type-ahead cache, left out)"
    ]


def test_the_summary_and_the_verdict_on_two_at_once() -> None:
    summary = editors.summarize(RUNS, (2, 4))
    assert list(summary) == ["1", "2", "4"]
    assert summary["2"]["worst"] == pytest.approx(200 / 110)
    assert [t["ratio"] for t in summary["4"]["typists"]] == pytest.approx(
        [350 / 110, 110 / 60, 1.5, 3.0]
    )
    # Below the target: lsp-2 of the group of two only.
    fast = [
        dict(r, last_keystroke_ms=120) if r["n"] == 2 and r["typist"] == "lsp-1" else r
        for r in RUNS
    ]
    result = {
        "summary": {"engine": summary, "llama-server": editors.summarize(fast, (2, 4))},
        "unequal": [],
        "documents": [{"typist": "lsp-1", "path": "engine/worker.py", "line": 9}],
        "config": {
            "model": "m",
            "threads": 2,
            "context_size": 4096,
            "slots": 4,
            "cpu_count": 2,
            "rounds": 3,
            "groups": [2, 4],
            "document_tokens": 1500,
            "skipped": {},
            "load_average_start": (1.5, 1.0, 1.0),
            "load_average_end": (2.5, 1.0, 1.0),
        },
    }
    metrics = {m.name: m for m in editors.editors_metrics(result)}
    engine_two = metrics["infill-lsp engine, 2 at once: worst together / alone"]
    assert engine_two.value == pytest.approx(200 / 110, rel=1e-5)
    assert (engine_two.target, engine_two.met) == ("<= 1.3", False)
    peer_two = metrics["llama-server -np 4, 2 at once: worst together / alone"]
    assert peer_two.value == pytest.approx(1.2)
    assert peer_two.met is True
    engine_four = metrics["infill-lsp engine, 4 at once: worst together / alone"]
    assert engine_four.value == pytest.approx(350 / 110, rel=1e-5)
    assert engine_four.target is None
    assert metrics["answers or prompts unequal between the servers"].value == 0


def test_unequal_work_names_each_differing_answer_and_prompt() -> None:
    engine = [_run(0, "lsp-1", 100), _run(0, "lsp-2", 100), _run(0, "lsp-1", 100, 2)]
    peer = [
        _run(0, "lsp-1", 90),  # the same work
        _run(0, "lsp-2", 90, suggestion="y)"),
        _run(0, "lsp-1", 90, 2, prompt_tokens=1499),
    ]
    assert editors.unequal_work({"engine": engine, "llama-server": peer}) == [
        "round 0 alone lsp-2: llama-server 'y)', engine 'x)'",
        "round 0 together2 lsp-1: llama-server prompt 1499 tokens, engine 1500",
    ]
    assert editors.unequal_work({"engine": engine}) == []
