"""Invoked requests: three items against the one an automatic request writes (issue 25), on the
server's own inline path (`suggest`) in this process, side by side in one run.

Run from the repository root:

    .venv/bin/python bench/invoked.py [--limit 20] [--threads N]

Cases: HumanEval single-line tasks (bench/humaneval.py's selection, task `i * 1033 // limit`),
two cursors each: "line", the hole's line opened and indented as an editor does after Enter
(a single-line suggestion), and "body", an empty indented line at the end of the function's
prompt, nothing after it (a multi-line suggestion). Each cursor is answered four ways, each
from a cold cache (nothing of an earlier prompt kept), the order turning from case to case:

- automatic: one suggestion, greedy (what the user sees while typing);
- invoked: three items as shipped: at temperature 0 the greedy answers after the three most
  likely first tokens (`lsp_server/starts.py`), the llama.cpp backend writing them together
  where its rows pay on this machine (`LlamaCppBackend.sequences`, chosen at load) and one
  after another on the prompt evaluated once where they do not;
- invoked together: the same with the branches forced into one batch (8 sequences);
- invoked sampled: the way before, the greedy answer and then three sampled choices.

Prints the median seconds of each way and its ratio to automatic (target: invoked at most 1.5x
automatic), how often the first invoked item is the automatic suggestion, and the mean number
of items; writes bench/results/invoked.json. Default model, `minConfidence` 0 (invoked requests
are never gated; the automatic one is compared as the model writes it).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/invoked.py` puts bench/ first on sys.path, where bench/engine.py would shadow
# the `engine` package; the repository root goes in front of it (bench/ stays, for helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

from _common import RESULTS, default_llama, humaneval_rows, setup_logging, write_json

from engine.backends.llama_cpp import LlamaCppBackend
from engine.completion import CompletionModel
from engine.engine import Engine
from engine.local_backend import SEQUENCES
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline import plan
from lsp_server.inline.suggest import suggest
from lsp_server.settings import Settings

log = logging.getLogger("bench.invoked")

WAYS = ("automatic", "invoked", "invoked together", "invoked sampled")
ITEMS = 3

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--limit", type=int, default=20)
parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (the load's)")
parser.add_argument("--json", type=Path, default=RESULTS / "invoked.json")


def cursors(row: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """The task's two cursors: (document, offset)."""
    prompt, suffix = row["prompt"], row["suffix"]
    solution_line = suffix.lstrip("\n").split("\n", 1)[0] if suffix.strip() else ""
    indent = solution_line[: len(solution_line) - len(solution_line.lstrip())] or "    "
    line = prompt + indent
    body_prompt = row["prompt"].split("\n")
    # The function's prompt up to the end of its docstring, then an empty body line.
    body = "\n".join(body_prompt[: _docstring_end(body_prompt) + 1]) + "\n    "
    return {
        "line": (line + "\n" + suffix, len(line)),
        "body": (body, len(body)),
    }


def _docstring_end(lines: list[str]) -> int:
    """The index of the line that closes the first function's docstring (the last line if
    none is found)."""
    quotes = [i for i, text in enumerate(lines) if '"""' in text or "'''" in text]
    for i in quotes:
        text = lines[i].strip()
        opens = i == quotes[0] and text.count('"""') + text.count("'''") == 1
        if not opens:
            return i
    return len(lines) - 1


@contextlib.contextmanager
def sampled_items() -> Iterator[None]:
    """While set: invoked items are sampled choices after the greedy one (the way before)."""
    shipped = plan.writes_together
    plan.writes_together = lambda model, settings, prompt: False
    try:
        yield
    finally:
        plan.writes_together = shipped


async def answer_once(
    model: CompletionModel,
    backend: LlamaCppBackend,
    shipped: int,
    way: str,
    text: str,
    offset: int,
    uri: str,
) -> tuple[float, list[str]]:
    settings = Settings(debounce_ms=0, min_confidence=0.0, invoked_suggestions=ITEMS)
    backend.sequences = SEQUENCES if way == "invoked together" else shipped
    backend._context.cut(0)  # cold: nothing of another way's prompt
    snap = DocumentSnapshot.at(text, offset, uri=uri)
    started = time.perf_counter()
    with sampled_items() if way == "invoked sampled" else contextlib.nullcontext():
        result = await suggest(model, snap, settings, invoked=way != "automatic")
    return time.perf_counter() - started, [s.text for s in result.suggestions]


async def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    rows = humaneval_rows()
    picked = sorted({i * len(rows) // args.limit for i in range(args.limit)})
    backend = default_llama(args.threads)
    shipped = backend.sequences
    engine = Engine(backend)
    model = CompletionModel.of(engine, None)
    cases: list[dict[str, Any]] = []
    try:
        for number, index in enumerate(picked):
            row = rows[index]
            for kind, (text, offset) in cursors(row).items():
                turn = number % len(WAYS)
                order = WAYS[turn:] + WAYS[:turn]
                done = {}
                for way in order:
                    uri = f"file:///bench/{row['task_id'].replace('/', '-')}/{kind}/{way}.py"
                    done[way] = await answer_once(
                        model, backend, shipped, way, text, offset, uri.replace(" ", "-")
                    )
                case = {
                    "task_id": row["task_id"],
                    "cursor": kind,
                    **{f"{way} seconds": done[way][0] for way in WAYS},
                    **{f"{way} items": done[way][1] for way in WAYS},
                }
                cases.append(case)
                log.info("%s %s: %s", row["task_id"], kind, case)
    finally:
        engine.close()
    return cases, shipped


def main() -> int:
    args = parser.parse_args()
    setup_logging(quiet_engine=True)
    cases, shipped = asyncio.run(run(args))
    answered = [c for c in cases if c["automatic items"]]
    summary: dict[str, Any] = {
        "cases": len(cases),
        "load": os.getloadavg(),
        "shipped_sequences": shipped,
    }
    print(f"{'way':18} {'cursor':7} {'median s':>9} {'/ automatic':>12} {'items':>6}")
    for kind in ("line", "body", "all"):
        mine = [c for c in cases if kind in ("all", c["cursor"])]
        if not mine:
            continue
        base = statistics.median(c["automatic seconds"] for c in mine)
        for way in WAYS:
            seconds = statistics.median(c[f"{way} seconds"] for c in mine)
            items = statistics.mean(len(c[f"{way} items"]) for c in mine)
            summary[f"{kind} {way} median_s"] = seconds
            summary[f"{kind} {way} over automatic"] = seconds / base
            summary[f"{kind} {way} mean items"] = items
            print(f"{way:18} {kind:7} {seconds:9.3f} {seconds / base:12.2f} {items:6.2f}")
    first_same = sum(
        bool(c["invoked items"]) and c["invoked items"][0] == c["automatic items"][0]
        for c in answered
    )
    together_same = sum(c["invoked items"] == c["invoked together items"] for c in cases)
    summary["first invoked item is the automatic one"] = f"{first_same} of {len(answered)}"
    summary["together items equal shipped items"] = f"{together_same} of {len(cases)}"
    for key in ("first invoked item is the automatic one", "together items equal shipped items"):
        print(f"{key}: {summary[key]}")
    write_json(
        args.json, {"config": {**vars(args), "json": str(args.json)}, **summary, "cases": cases}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
