"""Requests under way at once, written together or one at a time, side by side in one run, on
the engine's own worker in this process.

    python -m bench rows [--rounds 3] [--tokens 32] [--threads N]

A round: N documents (HumanEval prompts, a different task each) whose states are kept (each
asked alone once, as an editor's earlier keystroke would), then a keystroke in each: all N
requests submitted at once, greedy, `--tokens` tokens at most. Each is answered two ways, the
order turning from round to round:

- together: the worker writes the N requests as one group, a token of each per pass
  (`engine/backends/llama_group.py`), whatever the load-time probe found (`group_from` 2);
- one at a time: no group (`group_from` 0), so the requests take turns.

Prints, for N = 1, 2, 4 and 8, the median seconds until the last of the N answers is out and
the mean seconds per answer, each way; their ratio to one request alone (the measure
for editors sharing an engine: at most 1.3x for two); and how many answers parted from the
other way's (the cells of a request written together lie elsewhere in the cache, and near
ties can go the other way). Writes bench/results/rows.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    default_llama,
    humaneval_rows,
    setup_logging,
    suite_parser,
    write_json,
)
from bench.record import Metric, Outcome, metric
from engine.backends.llama_cpp import LlamaCppBackend
from engine.types import GenerationRequest, Role, SamplingParams, TextDelta
from engine.worker import END, Job, Worker

WAYS = ("together", "one at a time")
COUNTS = (1, 2, 4, 8)


class _Answer:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.ended = threading.Event()
        self.at = 0.0

    def emit(self, item: object) -> None:
        if item is END:
            self.at = time.perf_counter()
            self.ended.set()
        elif isinstance(item, TextDelta):
            self.tokens.extend(item.token_ids)


def _hold(worker: Worker) -> threading.Event:
    """The worker held inside a chat job's first delta until the returned event is set."""
    inside, release = threading.Event(), threading.Event()

    def emit(item: object) -> None:
        if isinstance(item, TextDelta) and not inside.is_set():
            inside.set()
            release.wait(120)

    blocker = GenerationRequest(
        prompt_token_ids=(1, 2), role=Role.CHAT, sampling=SamplingParams(max_tokens=1)
    )
    worker.submit(Job(request=blocker, emit=emit))
    inside.wait(120)
    return release


def at_once(
    worker: Worker, prompts: list[list[int]], keys: list[str], tokens: int
) -> tuple[list[float], list[list[int]]]:
    """The prompts submitted at once: each answer's seconds from the start, and its tokens."""
    answers = [_Answer() for _ in prompts]
    release = _hold(worker)
    for ids, key, answer in zip(prompts, keys, answers, strict=True):
        request = GenerationRequest(
            prompt_token_ids=tuple(ids), sampling=SamplingParams(max_tokens=tokens), cache_key=key
        )
        worker.submit(Job(request=request, emit=answer.emit))
    started = time.perf_counter()
    release.set()
    for answer in answers:
        answer.ended.wait(600)
    return [a.at - started for a in answers], [a.tokens for a in answers]


def run(args: argparse.Namespace) -> dict[str, Any]:
    backend: LlamaCppBackend = default_llama(args.threads)
    shipped = backend.group_from
    worker = Worker(backend, "bench")
    rows = humaneval_rows()
    texts = [row["prompt"] for row in rows[:: max(1, len(rows) // 200)]]
    cases: list[dict[str, Any]] = []
    used = 0
    try:
        for count in COUNTS:
            for round_number in range(args.rounds):
                picked = texts[used : used + count]
                used += count
                ids = [backend.tokenize(t, add_bos=backend.vocab.adds_bos) for t in picked]
                order = WAYS if round_number % 2 == 0 else WAYS[::-1]
                case: dict[str, Any] = {"count": count, "round": round_number}
                for way in order:
                    backend.group_from = 2 if way == "together" else 0
                    keys = [f"{way}-{count}-{round_number}-{i}" for i in range(count)]
                    # Each document's state kept: its prompt but the last 3 tokens, alone.
                    for p, key in zip(ids, keys, strict=True):
                        at_once(worker, [p[:-3]], [key], 1)
                    seconds, answers = at_once(worker, ids, keys, args.tokens)
                    case[way] = {"seconds": seconds, "tokens": answers}
                case["parted"] = sum(
                    a != b
                    for a, b in zip(
                        case["together"]["tokens"], case["one at a time"]["tokens"], strict=True
                    )
                )
                cases.append(case)
                print(
                    f"N={count} round {round_number}: together last "
                    f"{max(case['together']['seconds']):.2f} s, one at a time last "
                    f"{max(case['one at a time']['seconds']):.2f} s, parted {case['parted']}",
                    flush=True,
                )
    finally:
        worker.close(60)
        backend.group_from = shipped
        backend.close()
    summary = summarize(cases)
    return {
        "shipped_group_from": shipped,
        "model_path": Path(backend.info.path),
        "threads": args.threads,
        "tokens": args.tokens,
        "load": os.getloadavg(),
        "summary": summary,
        "cases": cases,
    }


def summarize(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per count and way: the median of the rounds' last answer, the mean answer, and each
    against one request alone (the same way's N = 1 rounds)."""
    found = []
    alone: dict[str, float] = {}
    for count in sorted({c["count"] for c in cases}):
        rounds = [c for c in cases if c["count"] == count]
        for way in WAYS:
            last = statistics.median(max(c[way]["seconds"]) for c in rounds)
            mean = statistics.median(statistics.fmean(c[way]["seconds"]) for c in rounds)
            if count == 1:
                alone[way] = last
            base = alone.get(way)
            found.append(
                {
                    "count": count,
                    "way": way,
                    "last_seconds": last,
                    "mean_seconds": mean,
                    "last_vs_alone": None if not base else last / base,
                    "parted": sum(c["parted"] for c in rounds),
                    "answers": count * len(rounds),
                }
            )
    return found


def rows_metrics(result: dict[str, Any]) -> list[Metric]:
    """Per count: together against in turns, and the answers that parted; two at once the way
    the load-time probe chose, against one alone (editors sharing an engine: at most 1.3x)."""
    by = {(s["count"], s["way"]): s for s in result["summary"]}
    shipped = result["shipped_group_from"]
    out = [metric("requests at once from which rows go together (load-time probe)", shipped)]
    for count in sorted({s["count"] for s in result["summary"]}):
        together, turns = by[(count, "together")], by[(count, "one at a time")]
        if count > 1:
            ratio = together["last_seconds"] / turns["last_seconds"]
            out.append(metric(f"{count} at once: last answer, together / in turns", ratio))
        out.append(metric(f"{count} at once: answers parted", together["parted"]))
    if (2, "together") in by:
        probe = by[(2, "together" if 0 < shipped <= 2 else "one at a time")]
        out.append(
            metric(
                "2 at once, the probe's way: last answer / one alone",
                probe["last_vs_alone"],
                target=("<=", 1.3),
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("rows", __doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=RESULTS / "rows.json")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    result = run(args)
    write_json(args.json, result)
    return Outcome(
        parameters={"rounds": args.rounds, "tokens": args.tokens, "threads": args.threads},
        metrics=rows_metrics(result),
        models=[result["model_path"]],
    )
