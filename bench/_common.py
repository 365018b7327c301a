"""What every benchmark shares: where things are, the HumanEval data, logging, the statistics
(median, shared prefix), the table printer and writing results.

The tables go to stdout and the logs to stderr, so that a table can be piped or pasted alone.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import logging
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.backend import Backend
from engine.specs import ModelSpec, RemoteSpec
from engine.types import Role, SamplingParams

if TYPE_CHECKING:
    from engine.backends.llama_cpp import LlamaCppBackend

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: HumanEval infilling, kept in the repository with its licence (third_party/README.md).
HUMAN_EVAL_DIR = ROOT / "third_party" / "data" / "human-eval-infilling"
HUMAN_EVAL_RANDOM_SPAN = HUMAN_EVAL_DIR / "HumanEval-RandomSpanInfilling.jsonl.gz"
HUMAN_EVAL = HUMAN_EVAL_DIR / "HumanEval-SingleLineInfilling.jsonl.gz"


def humaneval_rows(path: Path = HUMAN_EVAL) -> list[dict[str, Any]]:
    """Every HumanEval infilling task of a set (single-line by default), in file order."""
    if not path.is_file():
        raise SystemExit(f"HumanEval data not found at {path} (see third_party/README.md)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def humaneval_task(task_id: str) -> dict[str, Any]:
    row = next((r for r in humaneval_rows() if r["task_id"] == task_id), None)
    if row is None:
        raise SystemExit(f"no task {task_id!r} in {HUMAN_EVAL}")
    return row


def setup_logging(*, quiet_engine: bool) -> None:
    """Logs to stderr, `name: message`, from INFO up. `quiet_engine`: the engine's own line per
    job is left out (it logs WARNING and up only), where a benchmark runs hundreds of jobs."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    if quiet_engine:
        logging.getLogger("engine").setLevel(logging.WARNING)


def write_json(path: Path, result: Any) -> None:
    """`result` as indented JSON (values JSON cannot hold, such as a path, as their text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n")


# --- statistics -----------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The median of `values`; NaN when there are none, so that a table shows "nan" for a
    measurement that never happened instead of the whole run failing."""
    values = list(values)
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def shared_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many items two sequences (token ids) share from their start."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --- measuring a backend --------------------------------------------------------------------


def token_counter(backend: Backend) -> Callable[[str], int]:
    """How many tokens a text is to `backend` (no BOS, no special tokens), remembered: cutting
    documents and choosing context count the same lines again and again."""

    @functools.lru_cache(maxsize=16384)
    def count(text: str) -> int:
        return len(backend.tokenize(text, add_bos=False, special=False))

    return count


def timed_tokens(
    backend: Backend, prompt: Sequence[int], n: int
) -> tuple[float, list[float], list[int]]:
    """Greedy tokens from `backend.iter_token_ids` until `n` came out: when the request
    started, the moment each token arrived, and the token ids."""
    started = time.perf_counter()
    stamps: list[float] = []
    ids: list[int] = []
    tokens = backend.iter_token_ids(prompt, SamplingParams(max_tokens=n), threading.Event())
    try:
        for token in tokens:
            stamps.append(time.perf_counter())
            ids.append(token)
            if len(ids) >= n:
                break
    finally:
        tokens.close()
    return started, stamps, ids


def local_spec(spec: ModelSpec | RemoteSpec) -> ModelSpec:
    """A benchmark's model runs in this process: a remote one is refused."""
    if not isinstance(spec, ModelSpec):
        raise SystemExit(f"the benchmarks measure a local model, not {spec}")
    return spec


def default_llama(threads: int | None = None) -> LlamaCppBackend:
    """The default completion model through llama.cpp, loaded as the server loads it (the
    environment's model settings ignored: every run measures the same model)."""
    # Here, not at the top: the benchmarks that load no model do not pay llama.cpp's import.
    from engine.backends.llama_cpp import LlamaCppBackend
    from engine.models import load_backend, model_spec
    from engine.specs import ModelOptions

    spec = model_spec(Role.COMPLETION, ModelOptions(threads=threads), environ={})
    backend = load_backend(local_spec(spec))
    assert isinstance(backend, LlamaCppBackend)
    return backend


def rss_kib(pid: int) -> int:
    """A process's resident memory (VmRSS), in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def suite_parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """A suite's argument parser: `python -m bench NAME`, its docstring's first paragraph."""
    return argparse.ArgumentParser(
        prog=f"python -m bench {name}", description=(doc or "").split("\n\n")[0]
    )
