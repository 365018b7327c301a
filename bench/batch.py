"""Ranking candidate lines with many sequences per pass against one after another (issue 25):
HumanEval single-line, both ways side by side in one run, on our engine in this process.

Run from the repository root:

    .venv/bin/python bench/batch.py [--limit 40] [--threads N]

Tasks: the selection of bench/humaneval.py (task `i * 1033 // limit`). For each task the
default completion model ranks candidate lines as the server does (lsp_server/rerank.py
`best_lines`: 8 branches after each of two prompts, every distinct line scored with the next
64 tokens of the code after the hole), once with the llama.cpp backend's sequences together
(`LlamaCppBackend.sequences` 8) and once one after another (1), the order alternating, each
from a cold cache (as shipped, the backend chose one of the two at load: `shipped_sequences`);
and the plain greedy line (what the server suggests without ranking). Prints the median times
(and the scorings' share), how often the candidates and the chosen line differ from one after
another, the largest difference of a token's score; writes bench/results/batch.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/batch.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import logging
import os
import statistics
import time
from typing import Any

from _common import RESULTS, default_llama, humaneval_rows, setup_logging, write_json

from engine.backends.llama_cpp import LlamaCppBackend
from engine.completion import CompletionModel
from engine.engine import Engine
from engine.fim import build_fim_prompt
from engine.local_backend import SEQUENCES
from engine.types import GenerationRequest, SamplingParams, StopConditions
from lsp_server.rerank import Ranked, Ranking, best_lines, following_code, hint_prompt

log = logging.getLogger("bench.batch")

MAX_LINE_TOKENS = 48  # the server's single-line limit (maxTokensSingleLine)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--limit", type=int, default=40)
parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (the load's)")
parser.add_argument("--json", type=Path, default=RESULTS / "batch.json")


async def rank(
    model: CompletionModel,
    engine: Engine,
    backend: LlamaCppBackend,
    row: dict[str, Any],
    sequences: int,
) -> tuple[list[Ranked], float, float]:
    """The ranked lines of one task, `sequences` at a time, from a cold cache; the seconds in
    all, and those of the scorings (jobs that wrote no token)."""
    scorer = model.scorer
    assert scorer is not None
    prefix = row["prompt"]
    following = following_code(prefix, row["suffix"]) or ""
    ids = build_fim_prompt(backend, prefix, "", template=None).token_ids
    hint = hint_prompt(prefix, following, "python")
    assert ids is not None
    assert hint is not None
    hint_ids = build_fim_prompt(backend, hint, "", template=None).token_ids
    request = GenerationRequest(
        prompt_token_ids=ids,
        sampling=SamplingParams(max_tokens=MAX_LINE_TOKENS),
        stops=StopConditions(stop=("\n",)),
        cache_key=f"{row['task_id']}/{sequences}",
    )
    ranking = Ranking(following=following, hint_ids=hint_ids, language_id="python")
    backend.sequences = sequences
    backend._context.cut(0)  # cold: nothing of another run's prompt
    before = engine.job_record.snapshot()[0]
    started = time.perf_counter()
    ranked = await best_lines(scorer, ids, ranking, request)
    took = time.perf_counter() - started
    finished, recent = engine.job_record.snapshot()
    jobs = recent[len(recent) - (finished - before) :]
    scoring = sum(j.total_seconds for j in jobs if j.generated_tokens == 0)
    return ranked, took, scoring


async def greedy(engine: Engine, backend: LlamaCppBackend, row: dict[str, Any]) -> float:
    ids = build_fim_prompt(backend, row["prompt"], "", template=None).token_ids
    backend._context.cut(0)
    started = time.perf_counter()
    await engine.collect(
        GenerationRequest(
            prompt_token_ids=ids,
            sampling=SamplingParams(max_tokens=MAX_LINE_TOKENS),
            stops=StopConditions(stop=("\n",)),
            cache_key=f"{row['task_id']}/greedy",
        )
    )
    return time.perf_counter() - started


def parted(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    rows = humaneval_rows()
    picked = sorted({i * len(rows) // args.limit for i in range(args.limit)})
    backend = default_llama(args.threads)
    shipped = backend.sequences
    engine = Engine(backend)
    model = CompletionModel.of(engine, "none")
    tasks: dict[str, Any] = {}
    try:
        for number, index in enumerate(picked):
            row = rows[index]
            if following_code(row["prompt"], row["suffix"]) is None:
                continue
            plain = await greedy(engine, backend, row)
            order = (SEQUENCES, 1) if number % 2 == 0 else (1, SEQUENCES)
            done = {s: await rank(model, engine, backend, row, s) for s in order}
            (together, t_seconds, t_scoring) = done[SEQUENCES]
            (alone, a_seconds, a_scoring) = done[1]
            same_lines = {r.text for r in together} == {r.text for r in alone}
            diff = max(
                (
                    parted(x.token_logprobs, y.token_logprobs)
                    for x in together
                    for y in alone
                    if x.text == y.text
                ),
                default=0.0,
            )
            tasks[row["task_id"]] = {
                "greedy_seconds": plain,
                "together_seconds": t_seconds,
                "alone_seconds": a_seconds,
                "together_scoring_seconds": t_scoring,
                "alone_scoring_seconds": a_scoring,
                "same_candidates": same_lines,
                "same_choice": bool(together and alone and together[0].text == alone[0].text),
                "largest_score_difference": diff,
                "together": [r.text for r in together[:3]],
                "alone": [r.text for r in alone[:3]],
            }
            log.info("%s: %s", row["task_id"], tasks[row["task_id"]])
    finally:
        engine.close()
    return tasks, shipped


def main() -> int:
    args = parser.parse_args()
    setup_logging(quiet_engine=True)
    tasks, shipped = asyncio.run(run(args))
    n = len(tasks)

    def median(key: str) -> float:
        return statistics.median(t[key] for t in tasks.values())

    summary = {
        "tasks": n,
        "load": os.getloadavg(),
        "greedy_median_s": median("greedy_seconds"),
        "together_median_s": median("together_seconds"),
        "alone_median_s": median("alone_seconds"),
        "shipped_sequences": shipped,
        "together_scoring_median_s": median("together_scoring_seconds"),
        "alone_scoring_median_s": median("alone_scoring_seconds"),
        "same_candidates": sum(t["same_candidates"] for t in tasks.values()),
        "same_choice": sum(t["same_choice"] for t in tasks.values()),
        "largest_score_difference": max(t["largest_score_difference"] for t in tasks.values()),
    }
    summary["together_over_greedy"] = summary["together_median_s"] / summary["greedy_median_s"]
    summary["alone_over_greedy"] = summary["alone_median_s"] / summary["greedy_median_s"]
    for key, value in summary.items():
        print(f"{key:28} {value}")
    write_json(
        args.json, {"config": {**vars(args), "json": str(args.json)}, **summary, "tasks": tasks}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
