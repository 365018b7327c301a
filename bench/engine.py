"""Our engine against raw llama-cpp-python, side by side in one run.

    python -m bench engine [--tokens 64] [--repeats 5] [--json PATH]

Raw is the raw llama.cpp baseline (bench/_raw.py): its own `Llama`, loaded with the options our
backend uses, so model, context and threads are identical; `Llama.generate()` on the prompt's
token ids, after `reset()` (a cold KV cache). Ours is
`Engine.generate()` on the prompt text, through the worker thread, the detokenizer, the stop
processor and the asyncio hand-off, measured where a consumer (the LSP layer) sees the deltas.
Ours starts cold too: an untimed one-token job on a prompt that shares no token with the real
one leaves nothing of it in the KV cache, so both sides evaluate the whole prompt every time.
Both decode greedily, and ours has `ignore_eos=True`, so both make exactly `--tokens` tokens;
the counts and the token ids are checked to match.

Writes every figure to bench/results/engine.json; logs go to stderr.
Target: ours/raw within 1.05 for time to first token and for time per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    humaneval_task,
    median,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._raw import RawLlama
from bench.record import Outcome, metric
from engine.backend import Backend
from engine.engine import Engine
from engine.models import load_backend, resolve_model_path
from engine.specs import ModelSpec
from engine.types import FinishReason, GenerationRequest, Role, SamplingParams, StopConditions

log = logging.getLogger("bench.engine")

#: A real FIM prefix (the code before a single-line hole) of about 370 tokens with Gemma's
#: tokenizer: long enough that prompt processing dominates the time to first token.
DEFAULT_TASK = "SingleLineInfilling/HumanEval/81/L10"
TARGET_RATIO = 1.05


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One timed generation. Times are seconds from the request to the consumer's loop."""

    side: str  # "raw" or "ours"
    repeat: int
    first_token_s: float
    total_s: float
    tokens: int
    token_ids: tuple[int, ...]
    worker_first_token_s: float | None = None  # ours only: as the worker thread saw it

    @property
    def decode_s_per_token(self) -> float:
        """Time per token after the first: the decode loop alone, without the prompt."""
        return (self.total_s - self.first_token_s) / max(1, self.tokens - 1)


def load_prompt(task_id: str) -> str:
    """The text before the hole of one HumanEval single-line infilling task."""
    return str(humaneval_task(task_id)["prompt"])


def raw_once(raw: RawLlama, prompt: str, n: int, repeat: int, *, add_bos: bool) -> Run:
    """The raw baseline: tokenize, then `generate()` on a cold KV cache until `n` tokens came
    out. We reset rather than vary the prompt so that both sides evaluate exactly the same
    tokens every time."""
    raw.reset()
    started = time.perf_counter()
    ids = raw.tokenize(prompt, add_bos=add_bos)
    tokenizing = time.perf_counter() - started
    run = raw.generate(ids, n)
    return Run(
        side="raw",
        repeat=repeat,
        first_token_s=tokenizing + run.first_token_s,
        total_s=tokenizing + run.seconds,
        tokens=len(run.token_ids),
        token_ids=run.token_ids,
    )


async def cool(engine: Engine, prompt_ids: Sequence[int]) -> None:
    """Leave nothing of the prompt in the engine's KV cache: one token after a one-token
    prompt that differs from the prompt's first token (llama.cpp then keeps no prefix)."""
    other = (prompt_ids[0] + 1) % engine.info.vocab_size
    await engine.collect(
        GenerationRequest(
            prompt_token_ids=(other,), sampling=SamplingParams(max_tokens=1, temperature=0.0)
        )
    )


async def ours_once(
    engine: Engine, prompt_ids: Sequence[int], prompt: str, n: int, repeat: int
) -> Run:
    """Our engine, timed as its consumer sees it: from `generate()` to the last delta."""
    await cool(engine, prompt_ids)  # a cold KV cache, as for raw; the worker is then idle
    started = time.perf_counter()
    request = GenerationRequest(
        prompt=prompt,
        sampling=SamplingParams(max_tokens=n, temperature=0.0),
        stops=StopConditions(ignore_eos=True),
    )
    out: list[int] = []
    first: float | None = None
    finish: FinishReason | None = None
    async with contextlib.aclosing(engine.generate(request)) as deltas:
        async for delta in deltas:
            if delta.token_ids and first is None:
                first = time.perf_counter()
            out.extend(delta.token_ids)
            if delta.finish_reason is not None:
                finish = delta.finish_reason
    done = time.perf_counter()
    assert first is not None
    if finish is not FinishReason.LENGTH:
        log.warning("ours finished with %s, expected %s", finish, FinishReason.LENGTH)
    stats = next(
        (s for s in reversed(engine.recent_stats) if s.request_id == request.request_id), None
    )
    return Run(
        side="ours",
        repeat=repeat,
        first_token_s=first - started,
        total_s=done - started,
        tokens=len(out),
        token_ids=tuple(out),
        worker_first_token_s=None if stats is None else stats.first_token_seconds,
    )


def summarize(runs: Sequence[Run]) -> dict[str, Any]:
    """Medians per side, ratios of the medians, and the median of the per-repeat ratios (each
    pair ran back to back, so that ratio cancels most of the machine's drift)."""
    raw = [r for r in runs if r.side == "raw"]
    ours = [r for r in runs if r.side == "ours"]
    metrics: dict[str, Callable[[Run], float]] = {
        "first_token_ms": lambda r: r.first_token_s * 1000,
        "decode_ms_per_token": lambda r: r.decode_s_per_token * 1000,
        "decode_tokens_per_s": lambda r: 1 / r.decode_s_per_token,
        "total_ms": lambda r: r.total_s * 1000,
    }
    summary: dict[str, Any] = {}
    for name, value in metrics.items():
        raw_values = [value(r) for r in raw]
        ours_values = [value(r) for r in ours]
        paired = [o / r for o, r in zip(ours_values, raw_values, strict=True)]
        summary[name] = {
            "raw": median(raw_values),
            "ours": median(ours_values),
            "ratio_of_medians": median(ours_values) / median(raw_values),
            "median_paired_ratio": median(paired),
            "raw_runs": raw_values,
            "ours_runs": ours_values,
        }
    worker = [r.worker_first_token_s for r in ours if r.worker_first_token_s is not None]
    if worker:
        summary["ours_worker_first_token_ms"] = median(worker) * 1000
    return summary


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("engine", __doc__)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per run (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per side (default 5)")
    parser.add_argument("--task", default=DEFAULT_TASK, help="HumanEval single-line task id")
    parser.add_argument("--json", type=Path, default=RESULTS / "engine.json", help="output file")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)  # one line per job is noise here

    prompt = load_prompt(args.task)
    path = resolve_model_path(Role.COMPLETION)
    log.info("loading %s", path)
    # No kept states (a budget of 0): ours is to start cold as raw does, and the engine would
    # otherwise bring the prompt back from the state it kept when `cool` took the cache.
    spec = ModelSpec(path=path, kv_cache_mb=0)
    backend: Backend = load_backend(spec)
    engine = Engine(backend, name="bench")
    raw = RawLlama(spec)
    prompt_ids = backend.tokenize(prompt, add_bos=backend.vocab.adds_bos)
    raw_ids = raw.tokenize(prompt, add_bos=backend.vocab.adds_bos)
    if list(raw_ids) != prompt_ids:
        raise SystemExit("raw and our tokenizer disagree on the prompt: the comparison is unfair")

    runs: list[Run] = []
    try:
        with asyncio.Runner() as runner:
            log.info("warming up (one untimed run per side)")
            raw_once(raw, prompt, args.tokens, -1, add_bos=backend.vocab.adds_bos)
            runner.run(ours_once(engine, prompt_ids, prompt, args.tokens, -1))
            for repeat in range(args.repeats):
                # Interleaved, and the order flips every repeat (raw, ours, ours, raw, ...): a
                # steady drift of the machine then hits both sides alike, and neither always
                # runs right after the other.
                order = ("raw", "ours") if repeat % 2 == 0 else ("ours", "raw")
                for side in order:
                    if side == "raw":
                        run = raw_once(
                            raw, prompt, args.tokens, repeat, add_bos=backend.vocab.adds_bos
                        )
                    else:
                        run = runner.run(ours_once(engine, prompt_ids, prompt, args.tokens, repeat))
                    runs.append(run)
                    log.info(
                        "repeat %d %-4s: first token %.1f ms, total %.1f ms, %d tokens",
                        repeat,
                        side,
                        run.first_token_s * 1000,
                        run.total_s * 1000,
                        run.tokens,
                    )
    finally:
        engine.close()
        raw.close()

    raw_runs = [r for r in runs if r.side == "raw"]
    ours_runs = [r for r in runs if r.side == "ours"]
    same_ids = all(r.token_ids == raw_runs[0].token_ids for r in runs)
    counts_ok = all(r.tokens == args.tokens for r in runs)
    if not counts_ok:
        log.error("token counts differ from --tokens %d", args.tokens)
    if not same_ids:
        log.warning("greedy runs produced different token ids")
    threads, threads_batch = raw.threads
    config: dict[str, Any] = {
        "model": backend.info.name,
        "model_path": str(path),
        "device": backend.info.device,
        "task": args.task,
        "prompt_tokens": len(prompt_ids),
        "tokens": args.tokens,
        "repeats": args.repeats,
        "threads": threads,
        "threads_batch": threads_batch,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "raw_token_counts": sorted({r.tokens for r in raw_runs}),
        "ours_token_counts": sorted({r.tokens for r in ours_runs}),
        "same_token_ids": same_ids,
    }
    summary = summarize(runs)
    write_json(args.json, {"config": config, "summary": summary, "runs": [asdict(r) for r in runs]})
    if not counts_ok:
        raise SystemExit(f"token counts differ from --tokens {args.tokens}: no record")
    metrics = [
        metric("prompt", len(prompt_ids), "tokens"),
        metric("same token ids on both sides", "yes" if same_ids else "no"),
    ]
    names = {
        "first_token_ms": "time to first token",
        "decode_ms_per_token": "time per token",
    }
    for key, name in names.items():
        s = summary[key]
        metrics += [
            metric(f"{name}, raw", s["raw"], "ms"),
            metric(f"{name}, ours", s["ours"], "ms"),
            metric(f"{name}, ours / raw", s["median_paired_ratio"], target=("<=", TARGET_RATIO)),
        ]
    parameters = {"task": args.task, "tokens": args.tokens, "repeats": args.repeats}
    parameters |= {"threads": threads, "threads_batch": threads_batch}
    return Outcome(parameters=parameters, metrics=metrics, models=[path])
