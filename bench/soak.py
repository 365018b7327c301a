"""Soak: thousands of random editor operations against the real server, then its health.

Over `--docs` documents (HumanEval prompts, under URIs with spaces, non-ASCII names and
escaped drive letters, as editors send them), `--ops` operations drawn at random with a fixed
seed: opens, closes, incremental edits (insertions, deletions, pasted lines), automatic and
invoked inline requests at random positions, and `$/cancelRequest` for requests in flight. The
real default completion model answers.

It reports what a user would notice after a long day:
- the server's resident memory once warm and at the end (target: after / before <= 1.2);
- every request answered exactly once (responses counted per id; a response to an unknown id
  is counted by the client's warning), with how each ended (items, empty, cancelled, error);
- the server's health at the end: `infill/status` is `ready` and a fresh request gets items.

    python -m bench soak [--ops 5000] [--docs 50] [--seed 7]

Not a timed test: it prints a table and writes `bench/results/soak.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    humaneval_rows,
    rss_kib,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._compare import model_paths
from bench._lsp import Pending, ServerClient
from bench.record import Outcome, metric

log = logging.getLogger("bench.soak")

#: Folders the documents live in: what real file names look like.
FOLDERS = ("file:///ws/my%20project", "file:///ws/caf%C3%A9", "file:///c%3A/Users/me/src")
#: Text an edit types or pastes.
SNIPPETS = (
    "x",
    " ",
    "(",
    ")",
    "\n",
    "    ",
    "return ",
    "if n > 0:\n        ",
    "# note\n",
    "é",
    "🎉",
)
#: Requests in flight at once at most: an editor has one per visible document, not hundreds.
MAX_IN_FLIGHT = 8
#: How much of the run warms the server up before the first memory reading.
WARM_SHARE = 0.1


class UnknownResponses(logging.Handler):
    """Counts the client's warnings about responses to ids it is not waiting for: a second
    response to one request shows up here."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "unknown message id" in record.getMessage() and "Received response" in (
            record.getMessage()
        ):
            self.count += 1


async def settled(futures: Sequence[concurrent.futures.Future[Any]], timeout_s: float) -> None:
    """Wait until the requests' answers have come (their outcome is read later), or the time
    is up."""

    async def one(future: concurrent.futures.Future[Any]) -> None:
        with contextlib.suppress(Exception):  # an error answer is an answer too
            await asyncio.wrap_future(future)

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(one(f) for f in futures)), timeout_s)


class Soak:
    def __init__(self, server: ServerClient, docs: list[tuple[str, str]], seed: int) -> None:
        self.server = server
        self.sources = dict(docs)
        self.rng = random.Random(seed)
        self.open_docs: set[str] = set()
        self.in_flight: list[Pending] = []
        self.sent: list[Pending] = []
        self.cancelled: set[str] = set()
        self.ops: Counter[str] = Counter()

    def _offset(self, uri: str) -> int:
        return self.rng.randint(0, len(self.server.text(uri)))

    async def _make_room(self) -> None:
        """Wait for the oldest request when too many are in flight."""
        self.in_flight = [p for p in self.in_flight if not p.future.done()]
        while len(self.in_flight) >= MAX_IN_FLIGHT:
            oldest = self.in_flight.pop(0)
            await settled([oldest.future], 120)

    async def step(self) -> None:
        rng = self.rng
        closed = [u for u in self.sources if u not in self.open_docs]
        roll = rng.random()
        if not self.open_docs or (closed and roll < 0.05):
            uri = rng.choice(closed)
            self.server.open(uri, self.sources[uri])
            self.open_docs.add(uri)
            self.ops["open"] += 1
            return
        uri = rng.choice(sorted(self.open_docs))
        if roll < 0.08 and len(self.open_docs) > 1:
            self.sources[uri] = self.server.text(uri)  # reopened later as it was left
            self.server.close(uri)
            self.open_docs.discard(uri)
            self.ops["close"] += 1
        elif roll < 0.55:
            text = self.server.text(uri)
            start = self._offset(uri)
            if rng.random() < 0.3 and start < len(text):
                end = min(len(text), start + rng.randint(1, 12))
                self.server.edit(uri, start, end, "")
                self.ops["delete"] += 1
            else:
                self.server.edit(uri, start, start, rng.choice(SNIPPETS))
                self.ops["insert"] += 1
        elif roll < 0.92:
            await self._make_room()
            invoked = rng.random() < 0.1
            pending = self.server.request_inline(uri, self._offset(uri), invoked=invoked)
            self.in_flight.append(pending)
            self.sent.append(pending)
            self.ops["invoked request" if invoked else "request"] += 1
        else:
            live = [p for p in self.in_flight if not p.future.done()]
            if live:
                pending = rng.choice(live)
                self.server.cancel(pending)
                self.cancelled.add(pending.msg_id)
                self.ops["cancel"] += 1

    async def drain(self) -> None:
        """Wait for every request sent so far to be answered (five minutes at most)."""
        await settled([p.future for p in self.sent if not p.future.done()], 300)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = humaneval_rows()[: args.docs]
    docs = [
        (f"{FOLDERS[i % len(FOLDERS)]}/task%20{i}-n%C3%BA{i}.py", str(row["prompt"]))
        for i, row in enumerate(rows)
    ]
    unknown = UnknownResponses()
    logging.getLogger("pygls").addHandler(unknown)
    server = ServerClient({"debounceMs": 0, "maxTokensSingleLine": 24, "maxTokensMultiLine": 48})
    status = await server.start()
    pid = server.client.pid
    assert pid is not None
    log.info("server ready (%s), pid %d", status.get("model"), pid)
    soak = Soak(server, docs, args.seed)
    started = time.perf_counter()
    warm_at = int(args.ops * WARM_SHARE)
    rss_before = 0
    try:
        for i in range(args.ops):
            if i == warm_at:
                await soak.drain()
                rss_before = rss_kib(pid)
            await soak.step()
            if i % 500 == 0:
                log.info("%d operations, %d requests sent", i, len(soak.sent))
        await soak.drain()
        seconds = time.perf_counter() - started
        rss_after = rss_kib(pid)
        end_status = await server.status()
        # Health: a fresh document still gets a suggestion.
        uri = "file:///ws/after%20soak.py"
        server.open(uri, "def add(a, b):\n    return ")
        final_items, _ = await server.inline(uri, len(server.text(uri)))
    finally:
        await server.stop()

    outcomes: Counter[str] = Counter()
    for pending in soak.sent:
        outcome = pending.outcome()
        if outcome.startswith("error -32800"):
            outcome = "cancelled (-32800)"
        outcomes[outcome] += 1
    answered = sum(1 for p in soak.sent if p.future.done())
    return {
        "ops": args.ops,
        "docs": args.docs,
        "seed": args.seed,
        "seconds": round(seconds, 1),
        "operations": dict(soak.ops),
        "requests_sent": len(soak.sent),
        "requests_answered": answered,
        "responses_to_unknown_ids": unknown.count,
        "outcomes": dict(outcomes),
        "rss_kib_warm": rss_before,
        "rss_kib_after": rss_after,
        "rss_after_over_warm": round(rss_after / rss_before, 3),
        "status_after": end_status.get("status"),
        "final_request_items": len(final_items),
    }


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("soak", __doc__)
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--docs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=False)
    result = asyncio.run(run(args))
    write_json(args.out, result)
    r = result
    metrics = [
        metric("requests answered", r["requests_answered"], target=(">=", r["requests_sent"])),
        metric("responses to unknown ids", r["responses_to_unknown_ids"], target=("==", 0)),
        metric("resident memory once warm", r["rss_kib_warm"] / 1024, "MiB"),
        metric("resident memory after", r["rss_kib_after"] / 1024, "MiB"),
        metric("resident memory, after / once warm", r["rss_after_over_warm"], target=("<=", 1.2)),
        metric("status after", r["status_after"]),
        metric("items for a fresh request after", r["final_request_items"], target=(">=", 1)),
    ]
    parameters = {"ops": args.ops, "docs": args.docs, "seed": args.seed}
    return Outcome(parameters=parameters, metrics=metrics, models=model_paths(None))
