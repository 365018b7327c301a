"""Several editors on one model server: 1, 2 and 4 language servers typing a line each at once,
each one's last keystroke against typing alone, on our engine server and on llama-server with
4 slots (issue 25).

Run from the repository root (`make llama-server` first for the llama-server side; without the
binary that side is skipped, saying why):

    .venv/bin/python bench/editors.py [--rounds 3] [--sides engine,llama-server]
        [--engine-arg=--some-flag ...] [--json bench/results/editors.json]

Each typist is the real language server over stdio (`infill-lsp serve`, bench/_lsp.py) with
`backend` "openai" pointed at the model server, `debounceMs` 0 and `prefixTokens` 4096 (the
whole prefix is the prompt), each with a document of its own cut from this repository's files
(about 1,500 tokens, bench/_typists.py). A typist types its document's line, one character
every 60 ms with a request per character (latest-wins), and the time from its last keystroke
to the answer to it is measured; typing together, every last keystroke comes at the same
moment. Per round: each typist alone, then the first 2, then all 4 at once (reversed in odd
rounds). Medians over rounds, together / alone per typist, and the worst of a group.

The two model servers serve the same GGUF (the default, Gemma 3 270M) with the same threads,
both up with their typists, taking turns round by round (the order reversed in odd rounds, so
that a change in the shared machine's load falls on both; the idle one computes nothing):

- engine: `infill-lsp engine --threads T --context-size C`, then every `--engine-arg`;
- llama-server: llama.cpp's own server, `-t T -tb T -np 4 -c 4C -cb -fa on -b 512` (its
  context is split among its slots: C each; continuous batching; flash attention and batch
  size as our backend loads the model), then every `--llama-server-arg`.

Both get the same prompt text (the language servers render the same FIM family, named in
their settings, and each server tokenizes the text) with the same sampling (greedy, the same
max tokens; the remote backend turns off llama.cpp's repeat penalty and min_p). One difference
stays: llama-server does not say which stop string ended an answer, so the remote backend
sends it none and closes the stream at the stop itself (a token or so more for llama-server).
Answers and prompt sizes are compared between the servers, request by request; differences
are printed as "unequal work".

Target (issue 25): two typing at once at most 1.3x alone, each.

Prints a table to stdout and writes JSON to bench/results/editors.json (with the machine's
load average at the start and the end); logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/editors.py` puts bench/ first on sys.path, where bench/engine.py would shadow
# the `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import logging
import math
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from _common import RESULTS, Column, Table, ok, setup_logging, token_counter, write_json
from _compare import SETTLE_S, server_options
from _lsp import ServerClient
from _servers import LlamaServer, find_binary, get_json, start_engine_server
from _spots import TypingDoc, typing_doc
from _typists import (
    ALONE,
    TYPING_FILES,
    Typist,
    bench_typing,
    typing_ratios,
    worst_ratio,
)

from engine.default_models import default_completion_model
from engine.fim import PromptFormat
from engine.models import load_backend, model_spec
from engine.specs import ModelSpec
from engine.threads import usable_cores
from engine.types import Role

log = logging.getLogger("bench.editors")

ENGINE, PEER = "engine", "llama-server"
SIDES = (ENGINE, PEER)
LABELS = {ENGINE: "infill-lsp engine", PEER: "llama-server -np 4"}
GROUPS = (2, 4)
TARGET_TWO = 1.3  # two typing at once / alone, each (issue 25)


# --- the arithmetic ---------------------------------------------------------------------------


def summarize(runs: Sequence[dict[str, Any]], groups: Sequence[int]) -> dict[str, Any]:
    """Per n (1 alone, then each group): every typist's ratio and the group's worst."""
    out: dict[str, Any] = {}
    for n in (1, *groups):
        ratios = typing_ratios(runs, n)
        out[str(n)] = {"typists": [r.as_json() for r in ratios], "worst": worst_ratio(ratios)}
    return out


def unequal_work(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Where the sides did not do the same work for the same keystroke: another answer, or
    another prompt size (both servers tokenize the same text) -- request by request, for the
    last keystroke of every typing in both sides' runs."""
    if len(runs) < 2:
        return []
    (first, a_runs), *others = runs.items()
    by_key = {(r["round"], r["mode"], r["n"], r["typist"]): r for r in a_runs}
    out = []
    for side, side_runs in others:
        for r in side_runs:
            key = (r["round"], r["mode"], r["n"], r["typist"])
            a = by_key.get(key)
            if a is None:
                continue
            where = f"round {key[0]} {key[1]}{'' if key[1] == ALONE else key[2]} {key[3]}"
            if r["suggestion"] != a["suggestion"]:
                out.append(f"{where}: {side} {r['suggestion']!r}, {first} {a['suggestion']!r}")
            if bool(r["engine_jobs"]) != bool(a["engine_jobs"]):
                out.append(
                    f"{where}: {side} {r['engine_jobs']} model requests, {first} "
                    f"{a['engine_jobs']} (none: answered from the type-ahead cache, left out)"
                )
            a_job, r_job = a["final_job"] or {}, r["final_job"] or {}
            a_prompt, r_prompt = a_job.get("prompt_tokens"), r_job.get("prompt_tokens")
            if a_prompt and r_prompt and a_prompt != r_prompt:
                out.append(f"{where}: {side} prompt {r_prompt} tokens, {first} {a_prompt}")
    return out


# --- the run ----------------------------------------------------------------------------------


async def start_typists(settings: dict[str, Any], docs: Sequence[TypingDoc]) -> list[Typist]:
    """A language server per document, started together; all stopped if one fails."""
    clients = [ServerClient(dict(settings)) for _ in docs]
    started = await asyncio.gather(*(c.start() for c in clients), return_exceptions=True)
    failed = [e for e in started if isinstance(e, BaseException)]
    if failed:
        await stop_typists(clients)
        raise failed[0]
    return [
        Typist(f"lsp-{i + 1}", client, doc)
        for i, (client, doc) in enumerate(zip(clients, docs, strict=True))
    ]


async def stop_typists(clients: Sequence[ServerClient]) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await client.stop()


def start_server(side: str, args: argparse.Namespace, log_dir: Path) -> tuple[Any, list[str]]:
    """The side's model server, ready, and its command line."""
    if side == ENGINE:
        engine = start_engine_server(
            args.model,
            args.threads,
            args.context_size,
            log_dir,
            extra_args=args.engine_arg,
        )
        return engine, engine.command
    binary = find_binary(args.llama_server)
    assert binary is not None  # checked before
    peer = LlamaServer(
        binary,
        args.model,
        threads=args.threads,
        slots=args.slots,
        context_per_slot=args.context_size,
        # Continuous batching (the default in recent builds, named all the same), flash
        # attention and the batch size our backend loads the model with.
        extra_args=["-cb", "-fa", "on", "-b", "512", *args.llama_server_arg],
        log_dir=log_dir,
    )
    return peer, peer.command


async def start_side(
    side: str,
    args: argparse.Namespace,
    settings: dict[str, Any],
    docs: Sequence[TypingDoc],
    log_dir: Path,
    stack: contextlib.AsyncExitStack,
) -> tuple[list[Typist], list[str], str]:
    """The side's model server and its typists, stopped when `stack` closes; its URL."""
    log.info("starting %s", LABELS[side])
    server, command = await asyncio.to_thread(start_server, side, args, log_dir)
    stack.callback(server.close)
    typists = await start_typists({**settings, "endpoint": f"{server.url}/v1"}, docs)
    stack.push_async_callback(stop_typists, [t.client for t in typists])
    return typists, command, server.url


@dataclass(slots=True)
class ServerJobs:
    """The engine server's completion jobs, step by step (its `/stats`: only its most recent
    jobs, so a long step may have lost its first ones)."""

    url: str = ""
    seen: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)

    async def record(self, step: dict[str, Any]) -> None:
        if not self.url:
            return
        stats = await asyncio.to_thread(get_json, f"{self.url}/stats")
        model = next(m for m in stats["models"] if "completion" in m["roles"])
        new = model["jobs_finished"] - self.seen
        jobs = model["recent"][-new:] if new > 0 else []
        self.seen = model["jobs_finished"]
        self.steps.append({**step, "jobs_finished": new, "jobs": jobs})


async def run(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    load_start = os.getloadavg()
    settings: dict[str, Any] = {
        "debounceMs": 0,
        "prefixTokens": 4096,
        "threads": args.threads,
        "contextSize": args.context_size,
    }
    _, parsed = server_options(args.model, {**settings, "backend": "llama.cpp"})
    # Only to count tokens when cutting the documents, and for the model's FIM family (the
    # vocabulary is enough).
    spec = model_spec(Role.COMPLETION, parsed.model_options())
    assert isinstance(spec, ModelSpec)  # the settings name llama.cpp
    backend = load_backend(spec)
    try:
        count = token_counter(backend)
        docs = [
            typing_doc(path, args.document_tokens, count)
            for path in TYPING_FILES[: max(args.groups)]
        ]
        fim = PromptFormat.local(backend, None).fim
        model_name = backend.info.name
    finally:
        backend.close()
    # Named in every language server's settings: the same prompt text for both servers (ours
    # would say it, llama-server cannot).
    settings |= {"backend": "openai", "fimFamily": fim.family if fim else "none"}
    server_options(None, settings)  # a bad setting ends the run here

    runs: dict[str, list[dict[str, Any]]] = {}
    commands: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    engine_jobs = ServerJobs()
    async with contextlib.AsyncExitStack() as stack:
        typists: dict[str, list[Typist]] = {}
        for side in args.sides:
            if side == PEER and find_binary(args.llama_server) is None:
                skipped[side] = (
                    f"no llama-server binary at "
                    f"{args.llama_server or '$LLAMA_SERVER or the default'} (make llama-server)"
                )
                print(f"{LABELS[side]} skipped: {skipped[side]}", file=sys.stderr)
                continue
            try:
                typists[side], commands[side], url = await start_side(
                    side, args, settings, docs, log_dir, stack
                )
                if side == ENGINE:
                    engine_jobs.url = url
            except (RuntimeError, TimeoutError, OSError) as e:
                skipped[side] = f"it did not start: {e}"
                print(f"{LABELS[side]} skipped: {skipped[side]}", file=sys.stderr)
        # Both servers are up; the sides take turns round by round (the first in even rounds,
        # the other first in odd ones), so that a change in the shared machine's load falls
        # on both. An idle server computes nothing meanwhile.
        runs = {side: [] for side in typists}
        for number in range(args.rounds):
            order = list(typists) if number % 2 == 0 else list(typists)[::-1]
            for side in order:
                runs[side] += await bench_typing(
                    typists[side],
                    1,
                    args.groups,
                    label=LABELS[side],
                    first_round=number,
                    after_step=engine_jobs.record if side == ENGINE else None,
                )
                await asyncio.sleep(SETTLE_S)
    return {
        "summary": {side: summarize(side_runs, args.groups) for side, side_runs in runs.items()},
        "unequal": unequal_work(runs),
        "documents": [
            {"typist": f"lsp-{i + 1}", "path": d.path, "line": d.line_number, "tokens": d.tokens}
            for i, d in enumerate(docs)
        ],
        "runs": runs,
        # The engine server's jobs of each step (its /stats), where it still had them: the
        # phases of a typing together (queued, first token, total) against alone.
        "engine_server_jobs": engine_jobs.steps,
        "config": {
            "model": model_name,
            "model_path": args.model,
            "threads": args.threads,
            "context_size": args.context_size,
            "slots": args.slots,
            "fim_family": settings["fimFamily"],
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "server_settings": settings,
            "rounds": args.rounds,
            "groups": list(args.groups),
            "document_tokens": args.document_tokens,
            "commands": commands,
            "skipped": skipped,
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
    }


def cell(typist: dict[str, Any]) -> str:
    """A typist's median and its ratio to alone, "361 (1.91)" (as `TypingRatio.as_json`)."""
    if math.isnan(typist["together_ms"]):
        return "nan"
    return f"{typist['together_ms']:.0f} ({typist['ratio']:.2f})"


def print_table(result: dict[str, Any]) -> None:
    config = result["config"]
    start, end = config["load_average_start"][0], config["load_average_end"][0]
    context = config["context_size"]
    print(
        f"editors typing at once: {config['model']}, {config['threads']} threads, context "
        f"{context} (llama-server: {config['slots']} slots of {context} each), "
        f"{config['cpu_count']} cores, load average {start:.2f} at the start, {end:.2f} at "
        "the end"
    )
    for side, why in config["skipped"].items():
        print(f"  {LABELS[side]} skipped: {why}")
    print(
        f"last keystroke to its answer, median of {config['rounds']} rounds, ms (together / "
        "the same typist alone)"
    )
    width = max(config["groups"], default=1)
    table = Table(
        Column("model server", 20, "<"),
        Column("N", 2),
        *(Column(f"lsp-{i + 1}", 12) for i in range(width)),
        Column("worst", 6, spec=".2f"),
        Column(f"<= {TARGET_TWO} (N 2)", 13),
    )
    rows = []
    for side, summary in result["summary"].items():
        for n, group in summary.items():
            cells: list[str | None] = [cell(t) for t in group["typists"]]
            cells += [None] * (width - len(cells))
            verdict = ok(group["worst"] <= TARGET_TWO) if n == "2" else ""
            rows.append((LABELS[side], n, *cells, group["worst"], verdict))
    table.print(rows)
    documents = ", ".join(f"{d['typist']} {d['path']}:{d['line']}" for d in result["documents"])
    print(f"documents (about {config['document_tokens']} tokens): {documents}")
    for line in result["unequal"][:10]:
        print(f"  unequal work: {line}")
    if len(result["unequal"]) > 10:
        print(f"  unequal work: {len(result['unequal']) - 10} more in the JSON")


def counts(text: str) -> tuple[int, ...]:
    values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    if not values or values[0] < 2 or values[-1] > len(TYPING_FILES):
        raise argparse.ArgumentTypeError(f"numbers from 2 to {len(TYPING_FILES)}")
    return values


def sides(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values or any(v not in SIDES for v in values):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(SIDES)}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument(
        "--sides", type=sides, default=SIDES, help=f"model servers to run ({','.join(SIDES)})"
    )
    parser.add_argument(
        "--groups",
        type=counts,
        default=GROUPS,
        help="how many language servers type at once, besides each alone (2,4)",
    )
    parser.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for `infill-lsp engine` (repeatable; --engine-arg=--flag)",
    )
    parser.add_argument(
        "--llama-server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for llama-server (repeatable)",
    )
    parser.add_argument(
        "--llama-server", help="the llama-server binary (default: $LLAMA_SERVER, or make's)"
    )
    parser.add_argument("--slots", type=int, default=4, help="llama-server's -np (4)")
    parser.add_argument(
        "--document-tokens", type=int, default=1500, help="document size in tokens (1500)"
    )
    parser.add_argument("--threads", type=int, default=min(usable_cores(), 8))
    parser.add_argument("--context-size", type=int, default=4096)
    parser.add_argument("--model", help="the GGUF file both servers serve (default: the default)")
    parser.add_argument(
        "--log-dir", type=Path, help="keep the model servers' logs here (default: not kept)"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "editors.json", help="output file")
    args = parser.parse_args(argv)
    args.model = str(Path(args.model).expanduser() if args.model else default_completion_model())
    setup_logging(quiet_engine=True)
    started = time.perf_counter()
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(run(args, args.log_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="infill-bench-editors-") as log_dir:
            result = asyncio.run(run(args, Path(log_dir)))
    result["config"]["wall_s"] = round(time.perf_counter() - started, 1)
    print_table(result)
    write_json(args.json, result)
    log.info("wrote %s in %.0f s", args.json, result["config"]["wall_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
