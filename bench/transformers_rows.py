"""Many sequences per pass in the transformers backend (issue 25): what a forward of several
rows costs against one row, and what branches and scorings written together give and cost
against one after another.

Run from the repository root (on demand; not part of `make bench`):

    .venv/bin/python bench/transformers_rows.py [--device cpu] [--prompts 4] [--repeats 15]
        [--rounds 3] [--long 1500] [--model PATH] [--json PATH]

The default chat model (SmolLM2-135M, its GGUF file dequantized by transformers) or `--model`,
through our transformers backend on `--device`, for HumanEval prompts up to the docstring's
end (the function's body is the answer):

1. one decode step of 1, 4 and 8 rows, each a token on top of a copy of the prompt's keys
   and values (`DecodeLoop.rows`, `run_rows`), after the first prompt and after `--long`
   tokens of engine/worker.py, the sizes interleaved round by round so that the machine's
   load falls on each alike: the least and the median of `--repeats`, what a step of n rows
   costs against n steps of one, and what the copy into n rows costs (median);
2. for each of `--prompts` prompts, the 8 most likely first tokens each continued greedily to
   its line's end (at most 24 tokens), written together (`sequences` 8) and one after another
   (`sequences` 1), in `--rounds` rounds whose order turns: the least time of each, and the
   branches that differ, from which token;
3. the same prompts' branches scored (their log-probabilities after the prompt) together and
   one after another, as many rounds: the least time of each and the largest difference of a
   log-probability.

Prints a table to stdout and writes JSON to bench/results/transformers_rows.json; logs go to
stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/transformers_rows.py` puts bench/ first on sys.path, where bench/engine.py
# would shadow the `engine` package; the repository root goes in front of it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import logging
import os
import platform
import threading
import time
from typing import Any

import torch
from _common import RESULTS, ROOT, Column, Table, humaneval_rows, median, setup_logging, write_json

from engine.backends.transformers import TransformersBackend
from engine.default_models import default_chat_model
from engine.models import load_backend
from engine.specs import ModelSpec

log = logging.getLogger("bench.transformers_rows")

ROWS = (1, 4, 8)
BRANCHES = 8
BRANCH_TOKENS = 24


def suggestion_prompts(count: int) -> list[str]:
    """HumanEval's programs (written by others) up to their docstring's end, one per task."""
    seen: dict[str, str] = {}
    for row in humaneval_rows():
        task = row["task_id"].rsplit("/", 1)[0]
        seen.setdefault(task, row["prompt"] + row["canonical_solution"])
    prompts = []
    for program in list(seen.values())[:count]:
        end = program.find('"""\n', program.find('"""') + 3)
        prompts.append(program[: end + 4] if end >= 0 else program)
    return prompts


def step_costs(
    backend: TransformersBackend, ids: list[int], repeats: int
) -> dict[str, list[float]]:
    """The seconds of each decode step of each row count (keys "1", "4", "8"), and of each copy
    of the prompt into rows ("copy 8"), on a copy of `ids`' cache."""
    decoder = backend._decoder
    backend.score(ids, [], 1, threading.Event())  # the live cache now holds the prompt
    times: dict[str, list[float]] = {}
    for round_ in range(repeats + 1):
        order = ROWS[round_ % len(ROWS) :] + ROWS[: round_ % len(ROWS)]
        for rows in order:
            started = time.perf_counter()
            cache = decoder.rows(len(ids), rows)
            copied = time.perf_counter()
            assert cache is not None
            decoder.run_rows(cache, [[ids[-1]]] * rows)
            if round_:  # the first round warms up
                times.setdefault(str(rows), []).append(time.perf_counter() - copied)
                times.setdefault(f"copy {rows}", []).append(copied - started)
    return times


def first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--long", type=int, default=1500)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=RESULTS / "transformers_rows.json")
    args = parser.parse_args()
    setup_logging(quiet_engine=True)

    path = args.model or default_chat_model()
    backend = load_backend(ModelSpec(path=path, backend="transformers", device=args.device))
    assert isinstance(backend, TransformersBackend)
    eog = backend.eog_token_ids

    def line_end(_index: int, token: int) -> bool:
        return token in eog or "\n" in backend.detokenize([token])

    prompts = [
        backend.tokenize(p, add_bos=backend.vocab.adds_bos)
        for p in suggestion_prompts(args.prompts)
    ]
    text = (ROOT / "engine" / "worker.py").read_text(encoding="utf-8")
    long = backend.tokenize(text, add_bos=backend.vocab.adds_bos)[: args.long]
    steps = {len(ids): step_costs(backend, ids, args.repeats) for ids in (prompts[0], long)}

    jobs: list[dict[str, Any]] = []
    for index, ids in enumerate(prompts):
        scores = backend.score(ids, [], BRANCHES, threading.Event())
        assert scores is not None
        firsts = [token for token, _ in scores.top]
        times: dict[str, float] = {}
        written: dict[str, list[list[int]]] = {}
        scored: dict[str, Any] = {}
        ways = [("together", BRANCHES), ("alone", 1)]
        for round_ in range(args.rounds):
            # The order turns each round; the least time of the rounds is kept: on a machine
            # shared with other work it is what the cores can do when both are free.
            for way, sequences in ways[round_ % 2 :] + ways[: round_ % 2]:
                backend.sequences = sequences
                started = time.perf_counter()
                branches = backend.branch(ids, firsts, BRANCH_TOKENS, line_end, threading.Event())
                took = time.perf_counter() - started
                times[f"branch {way}"] = min(took, times.get(f"branch {way}", took))
                assert branches is not None
                written[way] = branches
        continuations = [(f, *b) for f, b in zip(firsts, written["alone"], strict=True)]
        for round_ in range(args.rounds):
            for way, sequences in ways[round_ % 2 :] + ways[: round_ % 2]:
                backend.sequences = sequences
                started = time.perf_counter()
                scored[way] = backend.score(ids, continuations, 1, threading.Event())
                took = time.perf_counter() - started
                times[f"score {way}"] = min(took, times.get(f"score {way}", took))
        parted = [
            (i, first_difference(a, b), len(b))
            for i, (a, b) in enumerate(zip(written["together"], written["alone"], strict=True))
            if a != b
        ]
        largest = max(
            abs(x - y)
            for a, b in zip(
                scored["together"].continuations, scored["alone"].continuations, strict=True
            )
            for x, y in zip(a, b, strict=True)
        )
        jobs.append(
            {
                "prompt": index,
                "prompt_tokens": len(ids),
                "branch_tokens": sum(len(b) for b in written["alone"]),
                "seconds": times,
                "parted": parted,
                "largest_log_prob_difference": largest,
            }
        )
        log.info("prompt %d: %s", index, jobs[-1])
    backend.close()

    print(
        f"{backend.info.name} on {args.device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    steps_table = Table(
        Column("prompt", 6),
        Column("rows", 5),
        Column("least ms", 9, spec=".1f"),
        Column("/ rows x one", 13, spec=".2f"),
        Column("median ms", 10, spec=".1f"),
        Column("/ rows x one", 13, spec=".2f"),
        Column("copy ms", 8, spec=".1f"),
    )
    print(steps_table.header())
    for length, costs in steps.items():
        least = {key: min(seconds) for key, seconds in costs.items()}
        middle = {key: median(seconds) for key, seconds in costs.items()}
        for rows in map(str, ROWS):
            print(
                steps_table.row(
                    length,
                    rows,
                    least[rows] * 1000,
                    least[rows] / (int(rows) * least["1"]),
                    middle[rows] * 1000,
                    middle[rows] / (int(rows) * middle["1"]),
                    middle[f"copy {rows}"] * 1000,
                )
            )
    print()
    jobs_table = Table(
        Column("prompt", 6),
        Column("tokens", 6),
        Column("branch together s", 17, spec=".2f"),
        Column("alone s", 8, spec=".2f"),
        Column("parted", 6),
        Column("score together s", 16, spec=".2f"),
        Column("alone s", 8, spec=".2f"),
        Column("max |dlogp|", 11, spec=".1e"),
    )
    jobs_table.print(
        (
            job["prompt"],
            job["branch_tokens"],
            job["seconds"]["branch together"],
            job["seconds"]["branch alone"],
            len(job["parted"]),
            job["seconds"]["score together"],
            job["seconds"]["score alone"],
            job["largest_log_prob_difference"],
        )
        for job in jobs
    )
    total = {key: sum(job["seconds"][key] for job in jobs) for key in jobs[0]["seconds"]}
    print(
        f"all: branches together / alone {total['branch together']:.1f} / "
        f"{total['branch alone']:.1f} s, scorings {total['score together']:.1f} / "
        f"{total['score alone']:.1f} s"
    )
    write_json(
        args.json,
        {
            "model": backend.info.name,
            "device": args.device,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "machine": platform.processor() or platform.machine(),
            "load": os.getloadavg(),
            "step_seconds": steps,
            "jobs": jobs,
            "total_seconds": total,
        },
    )


if __name__ == "__main__":
    main()
