"""The stop processor's cost per token, against one decode step of the model.

    python -m bench stops [--tokens 2000] [--repeats 20] [--json PATH]

`engine.stops.StopChecker` is fed a real 2,000-token output (HumanEval programs tokenized by
the default completion model, each piece decoded by our detokenizer beforehand, so only the
stop processor is timed) with 0, 1 and 50 stop strings. The time per token is reported for
the first and the last quarter of the output (it must not grow with the output's length) and
as a share of one greedy decode step of the same model, measured in the same run.

Writes every figure to bench/results/stops.json; logs go to stderr.
Targets: flat in output length, and under 1% of a decode step.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    humaneval_rows,
    median,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._raw import RawLlama
from bench.record import Outcome, metric
from engine.backends.llama_cpp import LlamaCppBackend
from engine.models import load_backend, resolve_model_path
from engine.output import OutputProcessor
from engine.specs import ModelSpec
from engine.stops import StopChecker
from engine.types import Role, StopConditions

log = logging.getLogger("bench.stops")

TARGET_PERCENT = 1.0
#: The last quarter may cost this much more per token than the first and still count as flat
#: (timer noise on a shared machine is about this large).
FLAT_TOLERANCE = 1.25

#: Fifty stop strings a completion or chat request could really carry. The output is code in an
#: indented block, as at a cursor inside a function body, so none of them matches it and all
#: 2,000 tokens are processed; every line starts with spaces, which keeps the "\n..." ones one
#: character short of a match at each newline, so the withholding path runs too.
STOP_STRINGS: tuple[str, ...] = (
    # the end of a block at the top level of a Python file (several share a prefix)
    "\n\n",
    "\ndef ",
    "\nclass ",
    "\nasync def ",
    "\nassert ",
    "\n@",
    "\nif __name__",
    "\nif ",
    "\nimport ",
    "\nfrom ",
    "\n#",
    "\nprint(",
    '\n"""',
    "\n'''",
    "\nfor ",
    "\nwhile ",
    "\nwith ",
    "\ntry:",
    "\nreturn ",
    "\n}\n",
    # markdown fences and chat turns
    "```",
    "\n```",
    "</code>",
    "</s>",
    "\nUser:",
    "\nAssistant:",
    "\n###",
    "\nHuman:",
    # special tokens of FIM and chat families, as text a model may spell out
    "<|endoftext|>",
    "<|file_sep|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|im_end|>",
    "<|im_start|>",
    "<fim_prefix>",
    "<fim_suffix>",
    "<fim_middle>",
    "<file_sep>",
    "<EOT>",
    "<PRE>",
    "<SUF>",
    "<MID>",
    "[SUFFIX]",
    "[PREFIX]",
    "<end_of_turn>",
    "<｜fim▁hole｜>",
    # a long one widens the window the checker keeps
    "# ---------------- end of generated code ----------------",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    name: str
    stops: tuple[str, ...]
    full_stage: bool = False  # detokenizer + stop checker + deltas, as the worker runs them


def code_text() -> str:
    """HumanEval programs (prompt, solution, rest), each once, as the body of an indented block:
    blank lines dropped, every line indented by four spaces."""
    programs: dict[str, str] = {}
    for row in humaneval_rows():
        task = row["task_id"].rsplit("/", 1)[0]  # SingleLineInfilling/HumanEval/0/L3
        programs.setdefault(task, row["prompt"] + row["canonical_solution"] + row["suffix"])
    lines = (line for program in programs.values() for line in program.splitlines())
    return "\n".join("    " + line for line in lines if line.strip())


def output_tokens(backend: LlamaCppBackend, n: int) -> tuple[list[int], list[str]]:
    """The first `n` tokens of the code and the text our detokenizer makes of each."""
    ids = backend.tokenize(code_text(), add_bos=False, special=False)[:n]
    if len(ids) < n:
        raise SystemExit(f"the code text has only {len(ids)} tokens, fewer than {n}")
    detokenizer = backend.new_detokenizer()
    texts = [detokenizer.step(token_id) for token_id in ids]
    return ids, texts


def check_no_stop(stops: tuple[str, ...], ids: list[int], texts: list[str]) -> None:
    """Every token must go through the whole checker: no stop may match, and the text shown
    (with the final flush) must be exactly the text fed in."""
    full = "".join(texts)
    early = [s for s in stops if s in full]
    assert not early, f"stop strings match the output: {early!r}"
    checker = StopChecker(StopConditions(stop=stops), max_tokens=len(ids) + 1)
    shown = []
    for token_id, text in zip(ids, texts, strict=True):
        result = checker.step(token_id, text)
        assert result.trigger is None, f"stopped at token {checker.generated_tokens}"
        shown.append(result.text)
    assert checker.generated_tokens == len(ids)
    assert "".join(shown) + checker.flush() == full


def segments(n: int) -> list[tuple[int, int]]:
    """First quarter, middle half, last quarter: contiguous, so one pass times all three."""
    q = n // 4
    return [(0, q), (q, n - q), (n - q, n)]


def new_step(config: Config, n: int, backend: LlamaCppBackend) -> Callable[[int, str], object]:
    """A fresh per-token function for one pass: the checker's `step`, or the whole stage."""
    stops = StopConditions(stop=config.stops)
    if not config.full_stage:
        return StopChecker(stops, max_tokens=n + 1).step
    processor = OutputProcessor(
        n=1, stops=stops, max_tokens=n + 1, min_tokens=0, new_detokenizer=backend.new_detokenizer
    )
    return lambda token_id, _text: processor.on_tokens(0, (token_id,))


def time_config(
    config: Config, ids: list[int], texts: list[str], repeats: int, backend: LlamaCppBackend
) -> list[list[float]]:
    """Seconds per token of each segment, one list per segment over the repeats."""
    n = len(ids)
    pairs = list(zip(ids, texts, strict=True))
    bounds = segments(n)
    per_segment: list[list[float]] = [[] for _ in bounds]
    for _ in range(repeats):
        step = new_step(config, n, backend)
        # As `timeit` does: a collection in the middle of a pass would be charged to it.
        gc.collect()
        gc.disable()
        try:
            for k, (start, end) in enumerate(bounds):
                chunk = pairs[start:end]
                started = time.perf_counter()
                for token_id, text in chunk:
                    step(token_id, text)
                per_segment[k].append((time.perf_counter() - started) / (end - start))
        finally:
            gc.enable()
    return per_segment


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("stops", __doc__)
    parser.add_argument("--tokens", type=int, default=2000, help="output length (default 2000)")
    parser.add_argument("--repeats", type=int, default=20, help="passes per config (default 20)")
    parser.add_argument(
        "--decode-tokens", type=int, default=50, help="tokens for the decode step (default 50)"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "stops.json", help="output file")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=False)
    assert len(set(STOP_STRINGS)) == len(STOP_STRINGS) == 50, "fifty distinct stop strings"

    path = resolve_model_path(Role.COMPLETION)
    log.info("loading %s", path)
    spec = ModelSpec(path=path)
    backend = load_backend(spec)
    assert isinstance(backend, LlamaCppBackend)
    try:
        ids, texts = output_tokens(backend, args.tokens)
        configs = [
            Config(name="0 stop strings", stops=()),
            Config(name='1 stop string ("\\n\\n")', stops=("\n\n",)),
            Config(name="50 stop strings", stops=STOP_STRINGS),
            Config(name="output stage, 50 stops", stops=STOP_STRINGS, full_stage=True),
        ]
        for config in configs:
            check_no_stop(config.stops, ids, texts)
        log.info("%d tokens, %d characters; no stop string matches", len(ids), sum(map(len, texts)))

        timings = {}
        for config in configs:
            log.info("timing %s", config.name)
            timings[config.name] = time_config(config, ids, texts, args.repeats, backend)
        log.info("timing a decode step (%d greedy tokens, 3 runs)", args.decode_tokens)
        prompt_ids = backend.tokenize("".join(texts[:100]), add_bos=backend.vocab.adds_bos)
        raw = RawLlama(spec)  # the raw llama.cpp baseline: one decode step
        try:
            decode_s = raw.decode_step_seconds(prompt_ids, args.decode_tokens)
        finally:
            raw.close()
    finally:
        backend.close()

    q = len(ids) // 4
    rows: list[dict[str, Any]] = []
    for config in configs:
        first, middle, last = timings[config.name]
        first_us = median(first) * 1e6
        last_us = median(last) * 1e6
        whole = [
            (q * a + (len(ids) - 2 * q) * b + q * c) / len(ids)
            for a, b, c in zip(first, middle, last, strict=True)
        ]
        whole_us = median(whole) * 1e6
        rows.append(
            {
                "config": config.name,
                "stop_strings": len(config.stops),
                "full_stage": config.full_stage,
                "first_quarter_us_per_token": first_us,
                "last_quarter_us_per_token": last_us,
                "all_us_per_token": whole_us,
                "last_over_first": last_us / first_us,
                "percent_of_decode_step": whole_us / (decode_s * 1e6) * 100,
            }
        )

    write_json(
        args.json,
        {"decode_step_ms": decode_s * 1000, "rows": rows, "stop_strings": list(STOP_STRINGS)},
    )
    metrics = [metric("decode step", decode_s * 1000, "ms")]
    for row in rows:
        name = row["config"]
        metrics.append(metric(f"{name}, per token", row["all_us_per_token"], "us"))
        if not row["full_stage"]:
            metrics.append(
                metric(
                    f"{name}, last / first quarter",
                    row["last_over_first"],
                    target=("<=", FLAT_TOLERANCE),
                )
            )
    # The headline: the checker with every stop string, as a share of a decode step.
    fifty = next(row for row in rows if row["stop_strings"] == 50 and not row["full_stage"])
    metrics.append(
        metric(
            "stops per token, 50 strings, share of a decode step",
            fifty["percent_of_decode_step"],
            "%",
            target=("<", TARGET_PERCENT),
        )
    )
    parameters = {"tokens": len(ids), "repeats": args.repeats, "decode_tokens": args.decode_tokens}
    return Outcome(parameters=parameters, metrics=metrics, models=[path])
