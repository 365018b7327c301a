"""The engine server under load: `/health` and a small completion, idle and while 200 slow
sockets and one greedy client hold on to it.

    python -m bench load [--slow-sockets 200] [--completions 10] [--json PATH]

The real `infill-lsp engine` with the default models on loopback (bench/_servers.py). Two
phases, each measured the same way:

- `/health`: requests one after another for `--health-seconds`, each on a connection of its
  own (as a load balancer's probe): requests per second, p50 and p99 of their times;
- a small completion (16 tokens, greedy, a short prompt): `--completions` of them one after
  another, a short pause between two: requests per second (one at a time) and p50 and p99.

First idle; then while `--slow-sockets` sockets trickle (half send a header line a second and
never end their head, half send a whole head for a 100 kB body and then a byte a second) and
one greedy client asks for `n` 4 x `max_tokens` 4000 with `ignore_eos` (the most one request
may ask for, 16,384 tokens, with the default `--max-request-tokens`). The `/health` probes run
throughout the busy phase, the completions among them. Each trickling socket is watched until
the server closes it: its time against its deadline (head 10 s, body 30 s: engine/api/
connections.py).

Targets: `/health` p99 under 100 ms throughout; the small completion's p50 while busy within
2x its idle p50; trickling heads closed within 15 s, trickled bodies within their 30 s
deadline (plus a second).

Writes every figure to bench/results/load.json; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench._common import (
    RESULTS,
    median,
    percentile,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._servers import ModelServer, start_engine_server
from bench.record import Outcome, metric
from engine.api.connections import Deadlines
from engine.models import resolve_model_path
from engine.threads import usable_cores
from engine.types import Role

log = logging.getLogger("bench.load")

SMALL = {"prompt": "def add(a, b):\n    return", "max_tokens": 16, "temperature": 0}
GREEDY = {
    "prompt": "Once upon a time",
    "n": 4,
    "max_tokens": 4000,
    "ignore_eos": True,
    "temperature": 0.8,
    "stream": True,
}
HEALTH_TARGET_P99 = 0.100
BUSY_OVER_IDLE_TARGET = 2.0
HEAD_TARGET = 15.0
DEADLINE_SLACK = 1.0
BODY_LENGTH = 100_000


@dataclass(frozen=True, slots=True)
class Figures:
    """One route's requests in one phase."""

    count: int
    failed: int
    per_second: float
    p50_ms: float
    p99_ms: float


def figures(times: Sequence[float], failed: int, seconds: float) -> Figures:
    return Figures(
        count=len(times),
        failed=failed,
        per_second=len(times) / seconds if seconds > 0 else math.nan,
        p50_ms=median(times) * 1000,
        p99_ms=percentile(times, 0.99) * 1000,
    )


# --- plain HTTP over asyncio streams: no client library's pool or retries in the figures ---


async def request(
    host: str, port: int, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, bytes]:
    """One request on a connection of its own: the status and the body (read to its end)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    return status, answer.partition(b"\r\n\r\n")[2]


async def timed(host: str, port: int, method: str, path: str, body: Any = None) -> float | None:
    """A request's seconds, or None if it did not answer 200."""
    started = time.perf_counter()
    try:
        status, _ = await request(host, port, method, path, body)
    except OSError:
        return None
    return time.perf_counter() - started if status == 200 else None


async def health_probes(host: str, port: int, until: asyncio.Event) -> tuple[list[float], int]:
    """`/health` one request after another until `until` is set: their times, and failures."""
    times: list[float] = []
    failed = 0
    while not until.is_set():
        seconds = await timed(host, port, "GET", "/health")
        if seconds is None:
            failed += 1
        else:
            times.append(seconds)
        await asyncio.sleep(0.01)
    return times, failed


async def small_completions(host: str, port: int, count: int) -> tuple[list[float], int, float]:
    """`count` small completions one after another: their times, failures, seconds in all."""
    times: list[float] = []
    failed = 0
    started = time.perf_counter()
    busy = 0.0
    for _ in range(count):
        seconds = await timed(host, port, "POST", "/v1/completions", SMALL)
        if seconds is None:
            failed += 1
        else:
            times.append(seconds)
            busy += seconds
        await asyncio.sleep(0.3)  # the greedy client gets the model back between two
    log.info("%d small completions in %.1f s", count, time.perf_counter() - started)
    return times, failed, busy


async def phase(host: str, port: int, health_seconds: float, completions: int) -> dict[str, Any]:
    """`/health` probes for `health_seconds`, then with completions among them."""
    until = asyncio.Event()
    probes = asyncio.create_task(health_probes(host, port, until))
    started = time.perf_counter()
    await asyncio.sleep(health_seconds)
    times, failed, busy = await small_completions(host, port, completions)
    until.set()
    health_times, health_failed = await probes
    return {
        "health": figures(health_times, health_failed, time.perf_counter() - started),
        "completion": figures(times, failed, busy),
    }


# --- slow clients ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Slow:
    """One trickling socket: what it trickled, its deadline, and when the server closed it
    (seconds after it connected; None: still open when the run ended)."""

    kind: str
    deadline: float
    closed_after: float | None


async def trickle(host: str, port: int, kind: str, deadline: float, give_up: float) -> Slow:
    """Connect and trickle a head (`head`) or a body (`body`), a piece a second, until the
    server closes the socket or `give_up` seconds pass."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return Slow(kind, deadline, 0.0)  # refused outright: closed at once
    if kind == "head":
        writer.write(b"GET /health HTTP/1.1\r\n")
    else:
        writer.write(
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {BODY_LENGTH}\r\n\r\n{{".encode()
        )

    async def feed() -> None:
        n = 0
        while True:
            await asyncio.sleep(1.0)
            writer.write(f"X-Slow-{n}: a\r\n".encode() if kind == "head" else b" ")
            n += 1
            await writer.drain()

    feeder = asyncio.create_task(feed())
    closed_after: float | None = None
    try:
        async with asyncio.timeout(give_up):
            while await reader.read(65536):  # an answer (a 4xx) is read past; EOF is the close
                pass
        closed_after = time.perf_counter() - started
    except TimeoutError:
        closed_after = None
    except OSError:  # reset by the server: closed too
        closed_after = time.perf_counter() - started
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await feeder
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return Slow(kind, deadline, closed_after)


async def greedy_client(host: str, port: int, stop: asyncio.Event) -> int:
    """The greedy request, streamed and read until `stop`; the bytes it got."""
    reader, writer = await asyncio.open_connection(host, port)
    data = json.dumps(GREEDY).encode()
    writer.write(
        (
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode()
        + data
    )
    await writer.drain()
    got = 0
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    got += len(chunk)
    finally:
        writer.close()  # going away cancels the generation
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return got


# --- the run ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace, server: ModelServer) -> dict[str, Any]:
    address = urlsplit(server.url)
    host, port = address.hostname or "127.0.0.1", address.port or 80
    deadlines = Deadlines()
    for _ in range(2):  # warm: the first requests load pages and build caches
        await timed(host, port, "POST", "/v1/completions", SMALL)
    log.info("idle phase")
    idle = await phase(host, port, args.health_seconds, args.completions)

    log.info("busy phase: %d slow sockets and a greedy client", args.slow_sockets)
    stop = asyncio.Event()
    greedy = asyncio.create_task(greedy_client(host, port, stop))
    give_up = deadlines.body_seconds + 10
    slow_tasks = [
        asyncio.create_task(
            trickle(
                host,
                port,
                kind,
                deadlines.head_seconds if kind == "head" else deadlines.body_seconds,
                give_up,
            )
        )
        for i in range(args.slow_sockets)
        for kind in ["head" if i % 2 == 0 else "body"]
    ]
    await asyncio.sleep(2.0)  # the greedy request has the model, the sockets are open
    busy = await phase(host, port, args.health_seconds, args.completions)
    # The probes go on until the last trickler is closed: /health while they hold on.
    until = asyncio.Event()
    probes = asyncio.create_task(health_probes(host, port, until))
    probes_started = time.perf_counter()
    slow = await asyncio.gather(*slow_tasks)
    until.set()
    late_times, late_failed = await probes
    stop.set()
    greedy_bytes = await greedy
    return {
        "idle": idle,
        "busy": busy,
        "busy_health_while_sockets_close": figures(
            late_times, late_failed, time.perf_counter() - probes_started
        ),
        "slow": slow,
        "greedy_bytes": greedy_bytes,
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    slow: list[Slow] = result["slow"]
    out: dict[str, Any] = {}
    for kind in ("head", "body"):
        mine = [s for s in slow if s.kind == kind]
        closed = [s.closed_after for s in mine if s.closed_after is not None]
        # Each socket by its deadline (plus a second for the timer and the close), and heads
        # also by 15 s, what a user would call hung.
        deadline = mine[0].deadline + DEADLINE_SLACK if mine else math.nan
        limit = min(HEAD_TARGET, deadline) if kind == "head" else deadline
        out[kind] = {
            "sockets": len(mine),
            "closed": len(closed),
            "latest_close_s": max(closed) if closed else math.nan,
            "limit_s": limit,
            "all_closed_in_time": len(closed) == len(mine) and all(c <= limit for c in closed),
        }
    idle, busy = result["idle"], result["busy"]
    late = result["busy_health_while_sockets_close"]
    health_p99 = max(idle["health"].p99_ms, busy["health"].p99_ms, late.p99_ms)
    ratio = busy["completion"].p50_ms / idle["completion"].p50_ms
    out["health_p99_ms"] = health_p99
    out["completion_busy_over_idle"] = ratio
    out["targets"] = {
        "health_p99_under_100_ms": health_p99 < HEALTH_TARGET_P99 * 1000,
        "completion_within_2x_idle": ratio <= BUSY_OVER_IDLE_TARGET,
        "heads_closed_within_15_s": out["head"]["all_closed_in_time"],
        "bodies_closed_within_deadline": out["body"]["all_closed_in_time"],
    }
    return out


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("load", __doc__)
    parser.add_argument("--slow-sockets", type=int, default=200)
    parser.add_argument("--completions", type=int, default=10, help="small completions a phase")
    parser.add_argument(
        "--health-seconds", type=float, default=3.0, help="/health alone at a phase's start"
    )
    parser.add_argument("--threads", type=int, default=min(usable_cores(), 8))
    parser.add_argument("--context-size", type=int, default=4096)
    parser.add_argument("--json", type=Path, default=RESULTS / "load.json", help="output file")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    model = resolve_model_path(Role.COMPLETION)
    load_before = os.getloadavg()  # other processes' load: the figures are this machine's
    with tempfile.TemporaryDirectory(prefix="infill-bench-load-") as log_dir:
        server = start_engine_server(str(model), args.threads, args.context_size, Path(log_dir))
        try:
            result = asyncio.run(run(args, server))
        finally:
            server.close()
    summary = summarize(result)
    write_json(
        args.json,
        {
            "config": {
                **{k: v for k, v in vars(args).items() if k != "json"},
                "model": str(model),
                "small": SMALL,
                "greedy": GREEDY,
                "machine": platform.platform(),
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
            },
            "result": json.loads(json.dumps(result, default=asdict)),
            "summary": summary,
        },
    )
    idle, busy = result["idle"], result["busy"]
    metrics = [
        metric(
            "/health p99 throughout",
            summary["health_p99_ms"],
            "ms",
            target=("<", HEALTH_TARGET_P99 * 1000),
        ),
        metric("small completion p50, idle", idle["completion"].p50_ms, "ms"),
        metric("small completion p50, busy", busy["completion"].p50_ms, "ms"),
        metric(
            "small completion p50, busy / idle",
            summary["completion_busy_over_idle"],
            target=("<=", BUSY_OVER_IDLE_TARGET),
        ),
    ]
    for kind, sockets in (("head", "trickling heads"), ("body", "trickled bodies")):
        s = summary[kind]
        metrics.append(
            metric(
                f"{sockets}: latest closed",
                s["latest_close_s"],
                "s",
                target=("<=", s["limit_s"]),
            )
        )
        metrics.append(metric(f"{sockets}: closed", s["closed"], target=(">=", s["sockets"])))
    parameters = {k: v for k, v in vars(args).items() if k != "json"}
    return Outcome(parameters=parameters, metrics=metrics, models=[Path(model)])
