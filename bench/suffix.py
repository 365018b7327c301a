"""What the code after the cursor can do for a model without FIM tokens (issue 12, part 2):
candidate lines and ways of ranking them, HumanEval single-line, side by side in one run.

Run from the repository root:

    .venv/bin/python bench/suffix.py [--limit 100] [--offset 0] [--candidates 8] [--window 64]

Tasks: the selection of bench/humaneval.py (task `i * 1033 // limit`), shifted by `--offset`
(`--offset 5` gives 100 other tasks: choose parameters there, report on the usual ones). The
default completion model runs in this process on our engine, with the functions the server
ranks with (lsp_server/rerank.py): for each task, the greedy line after the prefix, then
`--candidates` lines after each of the two prompts (the prefix; the code after the hole shown
first as a comment block, then the prefix), each one scored once after the prefix with the
first `--window` tokens of the code after the hole. Every variant below is computed from those
scores (a log-probability of the first W tokens does not depend on the tokens after them, and
the first N branches are those a run with N candidates makes), so they compare exactly:

- prefix: the greedy line (what the server suggests with `suffixRanking` off);
- hint: the greedy line after the second prompt;
- rank N/W joint: of the first N candidates of each prompt that hold code, the one whose line
  and next W tokens are most likely; "suffix": the next W tokens' probability alone;
- oracle N: any of those candidates passes (the bound of a ranker over them).

Each line is inserted at the hole and the program run with its tests (bench/humaneval.py).
Prints a table; writes bench/results/suffix.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/suffix.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import logging
import time
from typing import Any

from _common import RESULTS, Column, Table, humaneval_rows, setup_logging, write_json
from humaneval import full_program, score_all

from engine.completion import CompletionModel
from engine.engine import Engine
from engine.fim import build_fim_prompt
from engine.models import load_backend, model_spec
from engine.specs import ModelOptions
from engine.types import GenerationRequest, Role, SamplingParams, StopConditions
from lsp_server.rerank import candidate_lines, following_code, hint_prompt, holds_code, rank_lines

log = logging.getLogger("bench.suffix")
MAX_LINE_TOKENS = 48  # the server's single-line limit (maxTokensSingleLine)
COUNTS = (3, 5, 8)
WINDOWS = (8, 16, 32, 64)


async def task_lines(
    model: CompletionModel, engine: Engine, row: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """The greedy lines and every candidate's scores for one task."""
    scorer = model.scorer
    assert scorer is not None
    backend = engine.backend
    prefix = row["prompt"]
    following = following_code(prefix, row["suffix"]) or ""
    ids = build_fim_prompt(backend, prefix, "", template=None).token_ids
    hint = hint_prompt(prefix, following, "python")
    assert ids is not None
    assert hint is not None
    hint_ids = build_fim_prompt(backend, hint, "", template=None).token_ids
    assert hint_ids is not None
    request = GenerationRequest(
        prompt_token_ids=ids,
        sampling=SamplingParams(max_tokens=MAX_LINE_TOKENS),
        stops=StopConditions(stop=("\n",)),
    )
    before = engine.job_record.snapshot()[0]
    (greedy,) = await engine.collect(request)
    (hinted_greedy,) = await engine.collect(
        GenerationRequest(prompt_token_ids=hint_ids, sampling=request.sampling, stops=request.stops)
    )
    plain = await candidate_lines(scorer, ids, request, cache_key="plain", count=args.candidates)
    hinted = await candidate_lines(
        scorer, hint_ids, request, cache_key="hint", count=args.candidates
    )
    ranked = await rank_lines(
        scorer, ids, [*plain, *hinted], following, cache_key="plain", window_tokens=args.window
    )
    stats = engine.job_record.snapshot()[1][-(engine.job_record.snapshot()[0] - before) :]
    return {
        "prefix": greedy.text,
        "hint": hinted_greedy.text,
        "plain": plain,
        "hinted": hinted,
        "scores": {r.text: [r.line_tokens, list(r.token_logprobs)] for r in ranked},
        "evaluated": sum(s.prompt_evaluated or 0 for s in stats),
        "generated": sum(s.generated_tokens for s in stats),
    }


def pick(task: dict[str, Any], count: int, window: int, how: str) -> str:
    pool = [*task["plain"][:count], *task["hinted"][:count]]
    pool = [line for line in pool if holds_code(line, "python")] or pool
    if not pool:
        return task["prefix"]

    def score(line: str) -> float:
        line_tokens, each = task["scores"][line]
        after = sum(each[line_tokens : line_tokens + window])
        return after if how == "suffix" else sum(each[:line_tokens]) + after

    return max(pool, key=score)


def variants(task: dict[str, Any]) -> dict[str, str]:
    out = {"prefix": task["prefix"], "hint": task["hint"]}
    for count in COUNTS:
        for window in WINDOWS:
            for how in ("joint", "suffix"):
                out[f"rank {count}/{window} {how}"] = pick(task, count, window, how)
    return out


async def collect_all(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = humaneval_rows()
    picked = sorted(
        {(i * len(rows) // args.limit + args.offset) % len(rows) for i in range(args.limit)}
    )
    spec = model_spec(Role.COMPLETION, ModelOptions(), environ={})
    engine = Engine(load_backend(spec))
    model = CompletionModel.of(engine, "none")
    out: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for number, index in enumerate(picked):
            row = rows[index]
            out[row["task_id"]] = await task_lines(model, engine, row, args)
            if (number + 1) % 10 == 0:
                log.info(
                    "%d/%d tasks, %.0f s", number + 1, len(picked), time.perf_counter() - started
                )
    finally:
        engine.close()
    return [rows[i] for i in picked], out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--candidates", type=int, default=max(COUNTS))
    parser.add_argument("--window", type=int, default=max(WINDOWS))
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--json", type=Path, default=RESULTS / "suffix.json")
    args = parser.parse_args()
    setup_logging(quiet_engine=True)
    started = time.perf_counter()
    rows, tasks = asyncio.run(collect_all(args))
    by_id = {row["task_id"]: row for row in rows}
    chosen = {tid: variants(task) for tid, task in tasks.items()}
    candidates = {
        tid: {*task["plain"], *task["hinted"], task["prefix"], task["hint"]}
        for tid, task in tasks.items()
    }

    def program(tid: str, line: str) -> str:
        row = by_id[tid]
        return full_program(row["prompt"] + line + "\n" + row["suffix"], row)

    verdicts = score_all(
        {
            f"{tid}\0{line}": program(tid, line)
            for tid, lines in candidates.items()
            for line in lines
        },
        args.timeout,
        workers=2,
    )

    def passed(tid: str, line: str) -> bool:
        return verdicts[f"{tid}\0{line}"][0]

    names = list(next(iter(chosen.values())))
    scores = {name: sum(passed(t, chosen[t][name]) for t in chosen) for name in names}
    for count in COUNTS:
        scores[f"oracle {count}"] = sum(
            any(passed(t, line) for line in [*task["plain"][:count], *task["hinted"][:count]])
            for t, task in tasks.items()
        )
    n = len(tasks)
    print(
        f"HumanEval single-line, {n} tasks (offset {args.offset}), {args.candidates} candidates "
        f"per prompt, window {args.window} tokens"
    )
    table = Table(Column("variant", 24, "<"), Column("passed", 8))
    print(table.titles())
    for name, count in scores.items():
        print(table.row(name, f"{count:>4}/{n}"))
    mean = {k: round(sum(t[k] for t in tasks.values()) / n, 1) for k in ("evaluated", "generated")}
    print(
        f"model work per task (all candidates, both prompts): {mean['generated']} tokens "
        f"generated, {mean['evaluated']} evaluated; {time.perf_counter() - started:.0f} s in all"
    )
    write_json(
        args.json,
        {
            "config": {**vars(args), "json": str(args.json), "tasks": n},
            "passed": scores,
            "per_task_mean": mean,
            "tasks": tasks,
            "chosen": chosen,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
