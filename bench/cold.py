"""Cold prompts (issue 25): how big a prompt batch should be, and whether llama.cpp's abort
callback could stop a big one as soon as a cancel comes.

Run from the repository root (on demand; not part of `make bench`):

    .venv/bin/python bench/cold.py [--rounds 5] [--tries 10] [--tokens 1500] [--json PATH]

The default completion model, loaded as our llama.cpp backend loads it (`llama_params`: same
file, context, threads, flash attention), evaluates a cold prompt (an empty KV cache) of
`--tokens` tokens of a real file of this repository (engine/worker.py), through the call our
backend makes (`Llama.eval` on one batch at a time, as `LlamaContext.evaluate`):

1. batches of 256, 512, 1024 and 1536 tokens, the order turned by one each round so that the
   machine's load falls on every size alike; a context with llama-cpp-python's (and llama-
   server's) micro-batch of 512 tokens, so a batch of 1024 is two passes of 512 in one call,
   and, as a variant, one whose micro-batch is the whole batch (one pass of 1024 or 1536);
2. the abort callback (`llama_set_abort_callback`, looked at by llama.cpp's CPU backend after
   every node of the graph): the whole prompt in one batch starts in a thread, a cancel comes
   after a random delay, and the time until `llama_decode` returns is measured; its cost on
   an uncancelled batch and on one-token decodes (with and without it installed,
   interleaved), also while another Python thread computes (the callback is Python: each
   look waits for the GIL);
3. what an aborted decode leaves in the KV cache, and whether the answer after it (the
   prompt evaluated again, or only what the cache lacks) is the one a clean evaluation gives,
   bit for bit.

Prints a table to stdout and writes JSON to bench/results/cold.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/cold.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import contextlib
import logging
import math
import os
import platform
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from _common import RESULTS, ROOT, Column, Table, median, setup_logging, write_json

from engine.backends.llama_cpp import llama_params
from engine.models import resolve_model_path
from engine.specs import ModelSpec
from engine.types import Role

log = logging.getLogger("bench.cold")

SIZES = (256, 512, 1024, 1536)
#: llama-cpp-python's default micro-batch, and llama-server's (`-ub 512`).
UBATCH = 512
#: The largest batch: the whole prompt (--tokens at most this), on which the abort callback is
#: measured.
BIG = 1536
#: Greedy tokens compared after an aborted decode and a clean one.
ANSWER_TOKENS = 8
#: One-token decodes per cost measurement.
DECODES = 32
DOCUMENT = "engine/worker.py"
#: `llama_decode`'s code for a decode the abort callback stopped.
ABORTED = 2


@dataclass(frozen=True, slots=True)
class Config:
    """A batch size and the context that evaluates it (`whole`: micro-batch = batch)."""

    batch: int
    whole: bool

    @property
    def label(self) -> str:
        return f"{self.batch} (ubatch {self.batch if self.whole else min(UBATCH, self.batch)})"


def load(spec: ModelSpec, n_batch: int, n_ubatch: int) -> Any:
    import llama_cpp

    params = llama_params(spec)
    params.update(n_batch=n_batch, n_ubatch=n_ubatch)
    return llama_cpp.Llama(**params)


def prompt_ids(llm: Any, tokens: int) -> list[int]:
    """The first `tokens` tokens of a real file, BOS first."""
    text = (ROOT / DOCUMENT).read_text(encoding="utf-8")
    ids = [int(t) for t in llm.tokenize(text.encode("utf-8"), True, False)]
    if len(ids) < tokens:
        raise SystemExit(f"{DOCUMENT} has {len(ids)} tokens, fewer than {tokens}")
    return ids[:tokens]


def cold_eval(llm: Any, ids: list[int], batch: int) -> float:
    """Seconds to evaluate `ids` on an empty cache, `batch` tokens per `Llama.eval`."""
    llm.reset()  # n_tokens 0: the next eval removes every cell first
    started = time.perf_counter()
    for start in range(0, len(ids), batch):
        llm.eval(ids[start : start + batch])
    return time.perf_counter() - started


# --- the abort callback ---------------------------------------------------------------------


class Abort:
    """llama.cpp's abort callback on `llm`'s context, answering whether `event` is set; counts
    its calls."""

    def __init__(self, llm: Any) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self._ctx = llm._ctx.ctx
        self.event = threading.Event()
        self.calls = 0

        def look(_data: Any) -> bool:
            self.calls += 1
            return self.event.is_set()

        # Held here: llama.cpp keeps only the pointer.
        self._callback = llama_cpp.ggml_abort_callback(look)
        self._none = llama_cpp.ggml_abort_callback()  # a NULL pointer: no callback

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        self._lib.llama_set_abort_callback(self._ctx, self._callback, None)
        try:
            yield
        finally:
            self._lib.llama_set_abort_callback(self._ctx, self._none, None)


def decode(llm: Any, ids: list[int], at: int) -> int:
    """`llama_decode` of `ids` at position `at` (the last one's logits): its return code (0
    done, 2 aborted); llama-cpp-python's token count is left alone."""
    import llama_cpp

    llm._batch.set_batch(batch=ids, n_past=at, logits_all=False)
    return int(llama_cpp.llama_decode(llm._ctx.ctx, llm._batch.batch))


def pos_max(llm: Any) -> int:
    """The last position sequence 0 holds in the KV cache (-1: none)."""
    import llama_cpp

    memory = llama_cpp.llama_get_memory(llm._ctx.ctx)
    return int(llama_cpp.llama_memory_seq_pos_max(memory, 0))


def greedy(llm: Any, n: int) -> tuple[list[int], np.ndarray]:
    """The last logits (a copy) and the `n` greedy tokens after the evaluated prompt."""
    import llama_cpp

    vocab = llm.n_vocab()

    def last() -> np.ndarray:
        row = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(vocab,)).copy()

    first = last()
    out = [int(first.argmax())]
    for _ in range(n - 1):
        llm.eval([out[-1]])
        out.append(int(last().argmax()))
    return out, first


@contextlib.contextmanager
def gil_holder() -> Iterator[None]:
    """A Python thread that computes for the duration (it lets the GIL go every 5 ms, as any
    Python thread does): what the server's event loop does while it parses a long edit."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def cancelled_decode(llm: Any, abort: Abort, ids: list[int], delay: float) -> tuple[int, float]:
    """`ids` decoded in one batch on an empty cache, in a thread, with the abort callback
    installed and a cancel after `delay` seconds: the decode's code and the seconds from the
    cancel to its return."""
    llm.reset()
    llm._ctx.kv_cache_seq_rm(-1, 0, -1)
    abort.event.clear()
    code: list[int] = []
    returned: list[float] = []

    def work() -> None:
        code.append(decode(llm, ids, 0))
        returned.append(time.perf_counter())

    with abort.installed():
        thread = threading.Thread(target=work)
        thread.start()
        time.sleep(delay)
        abort.event.set()
        cancelled = time.perf_counter()
        thread.join()
    return code[0], returned[0] - cancelled


def abort_tries(llm: Any, abort: Abort, ids: list[int], tries: int) -> list[dict]:
    """`tries` evaluations of the whole prompt in one batch, each cancelled after a random
    delay within the first 60% of an uncancelled one's time (timed just before: the machine's
    load changes): the time from the cancel to `llama_decode`'s return, its code (2: aborted;
    0: it ended before the cancel, not counted), and what the cache holds after."""
    rng = random.Random(7)
    out = []
    for _ in range(tries):
        delay = rng.uniform(0.05, 0.6 * cold_eval(llm, ids, BIG))
        code, latency = cancelled_decode(llm, abort, ids, delay)
        out.append(
            {
                "delay_s": delay,
                "latency_ms": latency * 1000,
                "code": code,
                "cache_holds": pos_max(llm) + 1,
            }
        )
        log.info("abort after %.2f s: %s", delay, out[-1])
    return out


def after_abort(llm: Any, abort: Abort, ids: list[int], delay: float) -> dict[str, Any]:
    """What comes after an aborted batch, against a clean evaluation of the same prompt.

    1. Clean: the prompt on an empty cache, its last logits and `ANSWER_TOKENS` greedy tokens.
    2. Aborted after `delay`; the cache's content read back.
    3. The same positions decoded again over what the cache kept (no cells removed): the code.
    4. Our backend's path: `Llama.eval` from llama-cpp-python's token count (0: the decode
       raised), which removes the cells from there first; the answer compared with 1.
    5. Aborted again; what the cache kept is taken as evaluated, the rest evaluated; the
       answer compared with 1.
    """
    prompt = ids
    llm.reset()
    llm.eval(prompt)
    clean_tokens, clean_logits = greedy(llm, ANSWER_TOKENS)

    def aborted() -> tuple[int, int]:
        code, _ = cancelled_decode(llm, abort, prompt, delay)
        return code, pos_max(llm) + 1

    code, kept = aborted()
    redecode = decode(llm, prompt, 0) if kept > 0 else None
    llm.reset()
    llm.eval(prompt)
    again_tokens, again_logits = greedy(llm, ANSWER_TOKENS)
    code_2, kept_2 = aborted()
    llm.reset()
    llm.input_ids[:kept_2] = prompt[:kept_2]
    llm.n_tokens = kept_2
    llm.eval(prompt[kept_2:])
    resumed_tokens, resumed_logits = greedy(llm, ANSWER_TOKENS)
    return {
        "delay_s": delay,
        "abort_code": code,
        "cache_holds_after_abort": kept,
        "redecode_same_positions_code": redecode,
        "evaluated_again": {
            "same_tokens": again_tokens == clean_tokens,
            "max_logit_diff": float(np.abs(again_logits - clean_logits).max()),
        },
        "kept_cells_then_rest": {
            "abort_code": code_2,
            "kept": kept_2,
            "same_tokens": resumed_tokens == clean_tokens,
            "max_logit_diff": float(np.abs(resumed_logits - clean_logits).max()),
        },
    }


def interleaved(rounds: int, sides: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Each side once a round, the order turned by one each round."""
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for number in range(rounds):
        turn = number % len(names)
        for name in names[turn:] + names[:turn]:
            times[name].append(sides[name]())
        log.info("round %d: %s", number, {n: round(t[-1], 3) for n, t in times.items()})
    return times


def one_token_decodes(llm: Any, ids: list[int], abort: Abort | None) -> float:
    """Seconds per one-token decode after the prompt (`DECODES` of them, median), with
    `abort`'s callback installed for them if given."""
    llm.reset()
    llm.eval(ids)
    took = []
    with abort.installed() if abort is not None else contextlib.nullcontext():
        for token in ids[:DECODES]:
            started = time.perf_counter()
            llm.eval([token])
            took.append(time.perf_counter() - started)
    return median(took)


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = ModelSpec(path=resolve_model_path(Role.COMPLETION), threads=args.threads)
    log.info("loading %s twice (micro-batch %d, and %d)", spec.path, UBATCH, BIG)
    split = load(spec, BIG, UBATCH)
    whole = load(spec, BIG, BIG)
    ids = prompt_ids(split, args.tokens)
    threads = int(split.context_params.n_threads_batch)
    configs = [Config(size, whole=False) for size in SIZES]
    configs += [Config(size, whole=True) for size in SIZES if size > UBATCH]

    # 1. Batch sizes.
    def cold(config: Config) -> Callable[[], float]:
        return lambda: cold_eval(whole if config.whole else split, ids, config.batch)

    sides = {c.label: cold(c) for c in configs}
    for side in sides.values():  # warm-up: page in the weights, build each graph once
        side()
    batches = interleaved(args.rounds, sides)

    # 2. The abort callback: latency, then cost.
    abort = Abort(split)
    tries = abort_tries(split, abort, ids, args.tries)
    calls_before = abort.calls

    def with_callback(measure: Callable[[], float]) -> Callable[[], float]:
        def timed() -> float:
            abort.event.clear()
            with abort.installed():
                return measure()

        return timed

    def big() -> float:
        return cold_eval(split, ids, BIG)

    abort.calls = 0
    costs = interleaved(
        args.rounds,
        {"batch, no callback": big, "batch, callback": with_callback(big)},
    )
    calls_per_batch = abort.calls / args.rounds
    abort.calls = 0
    prefix = ids[:-DECODES]
    decodes = interleaved(
        args.rounds,
        {
            "decode, no callback": lambda: one_token_decodes(split, prefix, None),
            "decode, callback": lambda: one_token_decodes(split, prefix, abort),
        },
    )
    calls_per_decode = abort.calls / (args.rounds * DECODES)
    with gil_holder():
        contended = interleaved(
            args.rounds,
            {"GIL held, no callback": big, "GIL held, callback": with_callback(big)},
        )
    abort.calls = calls_before

    # 3. After an abort.
    full_s = cold_eval(split, ids, BIG)
    checks = [after_abort(split, abort, ids, delay) for delay in (0.2 * full_s, 0.5 * full_s)]
    return {
        "model": str(spec.path),
        "prompt_tokens": len(ids),
        "document": DOCUMENT,
        "threads": threads,
        "cores": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "load_average": os.getloadavg(),
        "rounds": args.rounds,
        "batches_s": batches,
        "batches_median_s": {name: median(t) for name, t in batches.items()},
        "abort_tries": tries,
        "abort_cost_s": {name: median(t) for name, t in {**costs, **contended}.items()},
        "abort_cost_runs_s": {**costs, **contended},
        "one_token_decode_s": {name: median(t) for name, t in decodes.items()},
        "callback_calls_per_batch": calls_per_batch,
        "callback_calls_per_decode": calls_per_decode,
        "after_abort": checks,
    }


def print_table(result: dict[str, Any]) -> None:
    meds = result["batches_median_s"]
    base = meds[Config(256, whole=False).label]
    print(
        f"cold prompt of {result['prompt_tokens']} tokens ({result['document']}), "
        f"{result['threads']} threads, median of {result['rounds']} interleaved rounds "
        f"(load average at the end {result['load_average'][0]:.2f}: the machine was shared)"
    )
    Table(
        Column("batch (micro-batch)", 22, "<"),
        Column("seconds", 9, spec=".3f"),
        Column("tokens/s", 9, spec=".0f"),
        Column("/ 256", 7, spec=".3f"),
    ).print((name, s, result["prompt_tokens"] / s, s / base) for name, s in meds.items())
    print()
    tries = result["abort_tries"]
    aborted = [t for t in tries if t["code"] == ABORTED]
    latencies = [t["latency_ms"] for t in aborted]
    print(
        f"abort callback on the prompt in one batch: cancel to llama_decode's return, "
        f"{len(aborted)} of {len(tries)} tries aborted (the others ended first): median "
        f"{median(latencies):.1f} ms, max {max(latencies, default=math.nan):.1f} ms; cache "
        f"holds after: {sorted({t['cache_holds'] for t in aborted})} tokens"
    )
    cost = result["abort_cost_s"]
    dec = result["one_token_decode_s"]
    print(
        f"  cost, the prompt in one batch: {cost['batch, callback']:.3f} s with / "
        f"{cost['batch, no callback']:.3f} s without "
        f"({cost['batch, callback'] / cost['batch, no callback']:.3f}x; "
        f"{result['callback_calls_per_batch']:.0f} calls)"
    )
    print(
        f"  cost, the same with a Python thread holding the GIL: "
        f"{cost['GIL held, callback']:.3f} s with / {cost['GIL held, no callback']:.3f} s "
        f"without ({cost['GIL held, callback'] / cost['GIL held, no callback']:.3f}x)"
    )
    print(
        f"  cost, one-token decode: {dec['decode, callback'] * 1000:.2f} ms with / "
        f"{dec['decode, no callback'] * 1000:.2f} ms without "
        f"({dec['decode, callback'] / dec['decode, no callback']:.3f}x; "
        f"{result['callback_calls_per_decode']:.0f} calls)"
    )
    for check in result["after_abort"]:
        again, kept = check["evaluated_again"], check["kept_cells_then_rest"]
        print(
            f"after an abort at {check['delay_s']:.2f} s (code {check['abort_code']}): cache "
            f"holds {check['cache_holds_after_abort']} tokens; the same positions decoded over "
            f"them: code {check['redecode_same_positions_code']}; evaluated again: same answer "
            f"{again['same_tokens']} (logits differ by {again['max_logit_diff']:.3g}); kept "
            f"{kept['kept']} cells + the rest: same answer {kept['same_tokens']} (logits "
            f"differ by {kept['max_logit_diff']:.3g})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per measurement (5)")
    parser.add_argument("--tries", type=int, default=10, help="cancelled batches (10)")
    parser.add_argument("--tokens", type=int, default=1500, help="prompt tokens (1500)")
    parser.add_argument(
        "--threads",
        type=int,
        help="threads (default: the backend's most, every usable core; fixed here, where the "
        "backend follows the machine's load batch by batch)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "cold.json", help="output file")
    args = parser.parse_args(argv)
    if not DECODES < args.tokens <= BIG:
        parser.error(f"--tokens must be {DECODES + 1} to {BIG}")
    setup_logging(quiet_engine=True)
    result = run(args)
    write_json(args.json, result)
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
