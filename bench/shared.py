"""One engine per machine: language servers on the user's shared engine against language servers
that each hold their models, with the default models, in one run.

    python -m bench shared [--windows 3] [--warm 5] [--rounds 2] [--tasks 40] [--json PATH]

Every language server is the real one over stdio (`infill-lsp serve`, bench/_lsp.py), `engine`
`auto` (the shared engine, started by the first window in a runtime folder of the run's own) or
`here` (the models in its process). Parts:

- memory: `--windows` windows of each kind, each typing in a document of its own (a line of
  real code, a request a keystroke): the resident memory of every process (the language
  servers, and the engine), and how many times the completion model was loaded. Targets: the
  model loaded once; all processes together at most 1.5x the engine alone.
- warm: one window of each kind, a warm request (its prompt in the KV cache) at each of the
  latency suite's places, `--warm` times, the two kinds in turns (the order swapped each
  time). Target: shared at most 1.1x here at the median, or 5 ms more.
- typing: 2 and `--windows` windows on the shared engine typing a line each at once, each
  one's last keystroke to its answer against typing alone (bench/editors.py's typing, `--rounds`
  rounds). The target stays 1.3x; on a CPU without a spare core it is reported.
- kill: `kill -9` of the engine while it writes a long suggestion: when that request was
  answered, and how long until the next request got a suggestion (a new engine started and
  loaded meanwhile).
- gate: HumanEval single-line holes (`--tasks`, spread over the set) with the confidence gate
  on (`minConfidence` 0.15, the default): the suggestions shown through the shared engine
  against those shown here. Target: the same ones.

Writes every figure to bench/results/shared.json; logs go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    humaneval_rows,
    median,
    rss_kib,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._compare import bust_cache, ours_once
from bench._lsp import ServerClient
from bench._spots import default_spots, typing_doc
from bench.editors import (
    TYPING_FILES,
    Typist,
    bench_typing,
    stop_typists,
    typing_ratios,
    worst_ratio,
)
from bench.record import Metric, Outcome, metric
from engine.shared import ping, stop_engines
from lsp_server.client import insert_text_of

log = logging.getLogger("bench.shared")

#: What every window is set to: greedy single answers, nothing written ahead.
SETTINGS: dict[str, Any] = {"debounceMs": 0, "speculativeSuggestions": 0}
#: A prompt whose answer is long: room to kill the engine while it writes.
LONG = "# The first two hundred prime numbers, one per line\nPRIMES = [\n"


def _window(engine: str, runtime: Path, **settings: Any) -> ServerClient:
    return ServerClient(
        {**SETTINGS, "engine": engine, **settings}, env={"XDG_RUNTIME_DIR": str(runtime)}
    )


async def _start(clients: Sequence[ServerClient]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(c.start() for c in clients)))


async def _stop(clients: Sequence[ServerClient]) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await client.stop()


def _engine_of(status: dict[str, Any]) -> dict[str, Any]:
    engine = status.get("engine") or {}
    return dict(engine)


def _count(text: str) -> int:
    return len(text.encode()) // 3  # cutting documents needs no exact count


async def _type_once(client: ServerClient, name: str, path: str) -> None:
    """A line of `path` typed in a document of the window's own, a request a keystroke."""
    doc = typing_doc(path, 1500, _count)
    start = doc.line_start + len(doc.indent)
    uri = f"file:///bench/shared/{name}.py"
    client.open(uri, doc.text[:start] + doc.text[doc.offset :])
    await client.type_keys(uri, start, doc.text[start : doc.offset])


async def memory(args: Any, runtime: Path) -> dict[str, Any]:
    """Resident memory of `--windows` windows of each kind, each having typed a line."""
    out: dict[str, Any] = {}
    for engine in ("auto", "here"):
        clients = [_window(engine, runtime) for _ in range(args.windows)]
        try:
            statuses = await _start(clients)
            paths = TYPING_FILES[: args.windows]
            await asyncio.gather(
                *(
                    _type_once(c, f"{engine}-{i}", p)
                    for i, (c, p) in enumerate(zip(clients, paths, strict=True))
                )
            )
            servers = [rss_kib(c.client.pid or 0) for c in clients]
            row: dict[str, Any] = {"servers_kib": servers}
            if engine == "auto":
                info = _engine_of(await clients[0].status())
                health = ping(Path(info["socket"])) or {}
                (completion,) = [m for m in health["models"] if "completion" in m["roles"]]
                row |= {
                    "engine_kib": rss_kib(int(info["pid"])),
                    "model_loads": completion["loads"],
                    "engine_processes": len({_engine_of(s).get("pid") for s in statuses}),
                }
            else:
                row |= {"engine_kib": 0, "model_loads": len(clients)}
            row["total_kib"] = sum(servers) + row["engine_kib"]
            out[engine] = row
            log.info("memory, engine %s: %s", engine, row)
        finally:
            await _stop(clients)
    return out


async def warm(args: Any, runtime: Path) -> dict[str, Any]:
    """Warm requests (the prompt in the KV cache) at the latency suite's places, here and
    through the shared engine in turns, `--warm` times each; only requests that ran the
    model count."""
    clients = {"here": _window("here", runtime), "auto": _window("auto", runtime)}
    times: dict[str, list[float]] = {"here": [], "auto": []}
    try:
        await _start(list(clients.values()))
        for number, spot in enumerate(default_spots()):
            for kind, client in clients.items():
                uri = f"file:///bench/shared/warm-{kind}-{number}.py"
                client.open(uri, spot.text)
                await ours_once(client, uri, spot.offset)  # untimed: the prompt is kept
            for repeat in range(args.warm):
                order = ("here", "auto") if repeat % 2 == 0 else ("auto", "here")
                for kind in order:
                    uri = f"file:///bench/shared/warm-{kind}-{number}.py"
                    bust_cache(clients[kind], uri)
                    run = await ours_once(clients[kind], uri, spot.offset)
                    if run.job is not None:
                        times[kind].append(run.seconds)
    finally:
        await _stop(list(clients.values()))
    return {kind: [t * 1000 for t in values] for kind, values in times.items()}


async def typing(args: Any, runtime: Path) -> dict[str, Any]:
    """2 and `--windows` windows on the shared engine typing at once, against alone."""
    docs = [typing_doc(p, 1500, _count) for p in TYPING_FILES[: args.windows]]
    settings = {"prefixTokens": 4096}
    clients = [_window("auto", runtime, **settings) for _ in docs]
    try:
        await _start(clients)
        typists = [
            Typist(f"window-{i + 1}", c, d)
            for i, (c, d) in enumerate(zip(clients, docs, strict=True))
        ]
        groups = sorted({2, args.windows})
        runs = await bench_typing(typists, args.rounds, groups, label="shared engine")
    finally:
        await stop_typists(clients)
    return {
        "runs": runs,
        "worst": {str(n): worst_ratio(typing_ratios(runs, n)) for n in groups},
        "groups": groups,
    }


async def kill(args: Any, runtime: Path) -> dict[str, Any]:
    """`kill -9` of the engine during a request: its answer, then the next suggestion."""
    client = _window("auto", runtime, maxTokensMultiLine=400, minConfidence=0)
    try:
        status = await client.start()
        pid = int(_engine_of(status)["pid"])
        client.open("file:///bench/shared/kill.py", LONG)
        pending = client.request_inline("file:///bench/shared/kill.py", len(LONG))
        await asyncio.sleep(0.5)
        killed = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await pending.wait()
        answered = time.perf_counter() - killed
        error = pending.outcome()
        tries = 0
        text = FUNCTION_TEXT
        while True:
            tries += 1
            uri = f"file:///bench/shared/after-{tries}.py"
            client.open(uri, text)
            with contextlib.suppress(Exception):
                items, _ = await client.inline(uri, len(text))
                if any(insert_text_of(i).strip() for i in items):
                    break
            if time.perf_counter() - killed > 120:
                raise RuntimeError("no suggestion within 120 s of killing the engine")
            await asyncio.sleep(0.1)
        next_s = time.perf_counter() - killed
        after = _engine_of(await client.status())
    finally:
        await _stop([client])
    return {
        "answered_ms": answered * 1000,
        "error": error,
        "next_suggestion_s": next_s,
        "requests_until_then": tries,
        "new_pid": after.get("pid"),
        "old_pid": pid,
        "restarts": after.get("restarts"),
    }


FUNCTION_TEXT = "def add(a, b):\n    return "


async def gate(args: Any, runtime: Path) -> dict[str, Any]:
    """HumanEval single-line holes, the gate on: shown here against shown through the engine."""
    rows = humaneval_rows()
    step = max(1, len(rows) // args.tasks)
    tasks = rows[::step][: args.tasks]
    clients = {kind: _window(kind, runtime, minConfidence=0.15) for kind in ("here", "auto")}
    shown: dict[str, list[str | None]] = {"here": [], "auto": []}
    try:
        await _start(list(clients.values()))
        for row in tasks:
            text = row["prompt"] + row["suffix"]
            for kind, client in clients.items():
                uri = f"file:///bench/shared/{kind}/{row['task_id'].replace('/', '_')}.py"
                client.open(uri, text)
                items, _ = await client.inline(uri, len(row["prompt"]))
                shown[kind].append(insert_text_of(items[0]) if items else None)
                client.close(uri)
    finally:
        await _stop(list(clients.values()))
    return {"tasks": [r["task_id"] for r in tasks], "shown": shown}


async def run(args: Any) -> dict[str, Any]:
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    result: dict[str, Any] = {"load_start": os.getloadavg()}
    try:
        for part in args.parts:
            log.info("part %s", part)
            result[part] = await PARTS[part](args, runtime)
    finally:
        stop_engines(runtime)
    result["load_end"] = os.getloadavg()
    return result


PARTS = {"memory": memory, "warm": warm, "typing": typing, "kill": kill, "gate": gate}


def shared_metrics(result: dict[str, Any], windows: int) -> list[Metric]:
    out: list[Metric] = []
    if "memory" in result:
        shared, here = result["memory"]["auto"], result["memory"]["here"]
        out += [
            metric(
                f"model loads, {windows} windows, shared engine",
                shared["model_loads"],
                target=("<=", 1),
            ),
            metric(f"model loads, {windows} windows, each here", here["model_loads"]),
            metric(
                f"all processes / the engine alone, {windows} windows, shared",
                shared["total_kib"] / shared["engine_kib"],
                target=("<=", 1.5),
            ),
            metric(
                f"resident memory, {windows} windows, shared", shared["total_kib"] / 1024, "MiB"
            ),
            metric(
                f"resident memory, {windows} windows, each here", here["total_kib"] / 1024, "MiB"
            ),
            metric(
                "a language server on the shared engine, median",
                median(shared["servers_kib"]) / 1024,
                "MiB",
            ),
        ]
    if "warm" in result:
        here_ms, shared_ms = median(result["warm"]["here"]), median(result["warm"]["auto"])
        out += [
            metric("warm request, here, median", here_ms, "ms"),
            metric("warm request, shared engine, median", shared_ms, "ms"),
            metric("warm request, shared / here, median", shared_ms / here_ms, target=("<=", 1.1)),
            metric(
                "warm request, shared - here, median",
                shared_ms - here_ms,
                "ms",
                target=("<=", 5),
            ),
        ]
    if "typing" in result:
        for n in result["typing"]["groups"]:
            out.append(
                metric(
                    f"{n} windows typing at once / alone, worst, shared engine",
                    result["typing"]["worst"][str(n)],
                    target=("<=", 1.3) if n == 2 else None,
                )
            )
    if "kill" in result:
        kill = result["kill"]
        out += [
            metric(
                "kill -9 of the engine: the request under way answered in",
                kill["answered_ms"],
                "ms",
            ),
            metric(
                "kill -9 of the engine: the next suggestion after", kill["next_suggestion_s"], "s"
            ),
        ]
    if "gate" in result:
        here, shared = result["gate"]["shown"]["here"], result["gate"]["shown"]["auto"]
        same = sum(a == b for a, b in zip(here, shared, strict=True))
        out += [
            metric("HumanEval holes, gate on: shown here", sum(x is not None for x in here)),
            metric(
                "HumanEval holes, gate on: shown through the shared engine",
                sum(x is not None for x in shared),
            ),
            metric(
                "HumanEval holes, gate on: the same answer both ways",
                100 * same / len(here),
                "%",
                target=(">=", 100),
            ),
        ]
    return out


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("shared", __doc__)
    parser.add_argument("--windows", type=int, default=3, help="windows of each kind (3)")
    parser.add_argument("--warm", type=int, default=5, help="warm requests a place (5)")
    parser.add_argument("--rounds", type=int, default=2, help="typing rounds (2)")
    parser.add_argument("--tasks", type=int, default=40, help="HumanEval holes (40)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "shared.json", help="output file")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    setup_logging(quiet_engine=True)
    result = asyncio.run(run(args))
    write_json(args.json, result)
    parameters = {
        "windows": args.windows,
        "warm": args.warm,
        "rounds": args.rounds,
        "tasks": args.tasks,
        "parts": args.parts,
    }
    return Outcome(parameters=parameters, metrics=shared_metrics(result, args.windows), models=[])
