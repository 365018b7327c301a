"""Resident memory with 1, 4 and 8 sequences live in one llama.cpp context (issue 25), on the
engine the server runs, in this process.

Run from the repository root:

    .venv/bin/python bench/sequences_memory.py [--tokens 64] [--rounds 3]

Each count in a process of its own (memory a process has used stays its own): the default
completion model is loaded as the server loads it (its context holds 8 sequences beside the
live one), then `--rounds` times a 1,000-character prompt cut from a file of this repository
is evaluated, its most likely first tokens are scored, and that many greedy branches are
written together (`BranchRequest`, the backend's rows forced together as where they pay:
`LlamaCppBackend.sequences` 8; 1 is a plain greedy branch), each `--tokens` tokens long. A
thread reads the process's resident size (VmRSS) every 2 ms; the table shows the resident
size after loading and the peak while the branches were written. Writes
bench/results/sequences_memory.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/sequences_memory.py` puts bench/ first on sys.path, where bench/engine.py
# would shadow the `engine` package; the repository root goes in front of it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import json
import os
import subprocess
import threading
from typing import Any

from _common import RESULTS, ROOT, default_llama, rss_kib, setup_logging, write_json

from engine.engine import Engine
from engine.local_backend import SEQUENCES
from engine.types import BranchRequest, SamplingParams, ScoreRequest

COUNTS = (1, 4, 8)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--tokens", type=int, default=64)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--json", type=Path, default=RESULTS / "sequences_memory.json")
parser.add_argument("--count", type=int, default=None, help="one count, in this process")


class PeakReader:
    """The largest VmRSS seen since `reset`, read every 2 ms on a thread of its own."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss_kib(os.getpid()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


async def run(args: argparse.Namespace, count: int) -> dict[str, Any]:
    backend = default_llama()
    loaded = rss_kib(os.getpid())
    engine = Engine(backend)
    text = (ROOT / "engine" / "worker.py").read_text(encoding="utf-8")[:1000]
    prompt = tuple(backend.tokenize(text, add_bos=True))
    reader = PeakReader()
    backend.sequences = SEQUENCES
    try:
        for _ in range(args.rounds):
            backend._context.cut(0)
            scores = await engine.score(ScoreRequest(prompt_token_ids=prompt, top=count))
            assert scores is not None
            branches = await engine.branch(
                BranchRequest(
                    prompt_token_ids=prompt,
                    first_tokens=tuple(token for token, _ in scores.top),
                    sampling=SamplingParams(max_tokens=args.tokens),
                )
            )
            assert branches is not None
            assert len(branches.texts) == count
    finally:
        reader.close()
        engine.close()
    return {"count": count, "loaded_kib": loaded, "peak_kib": reader.peak}


def main() -> int:
    args = parser.parse_args()
    setup_logging(quiet_engine=True)
    if args.count is not None:
        print(json.dumps(asyncio.run(run(args, args.count))))
        return 0
    found = []
    for count in COUNTS:
        command = [sys.executable, __file__, "--count", str(count)]
        command += ["--tokens", str(args.tokens), "--rounds", str(args.rounds)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'sequences live':>15} {'loaded MiB':>11} {'peak MiB':>9} {'peak - loaded MiB':>18}")
    for each in found:
        loaded, peak = each["loaded_kib"] / 1024, each["peak_kib"] / 1024
        print(f"{each['count']:>15} {loaded:11.1f} {peak:9.1f} {peak - loaded:18.1f}")
    config = {key: str(value) for key, value in vars(args).items()}
    write_json(args.json, {"config": config, "load": os.getloadavg(), "counts": found})
    return 0


if __name__ == "__main__":
    sys.exit(main())
