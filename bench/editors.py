"""Several editors on one model server: 1, 2 and 4 language servers typing a line each at once,
each one's last keystroke against typing alone, on our engine server and on llama-server with
4 slots.

    python -m bench editors [--rounds 3] [--sides engine,llama-server]
        [--engine-arg=--some-flag ...] [--json PATH]

Each typist is the real language server over stdio (`infill-lsp serve`, bench/_lsp.py) with
`backend` "openai" pointed at the model server, `debounceMs` 0 and `prefixTokens` 4096 (the
whole prefix is the prompt), each with a document of its own cut from this repository's files
(about 1,500 tokens, `TYPING_FILES`). A typist types its document's line, one character
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

Target: two typing at once at most 1.3x alone, each.

Writes every figure to bench/results/editors.json (with the machine's
load average at the start and the end); logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    median,
    setup_logging,
    suite_parser,
    token_counter,
    write_json,
)
from bench._compare import SETTLE_S, bust_cache, server_options
from bench._lsp import KEYSTROKE_S, ServerClient
from bench._servers import LlamaServer, find_binary, get_json, start_engine_server
from bench._spots import TypingDoc, typing_doc
from bench.record import Metric, Outcome, Target, metric
from engine.default_models import default_completion_model
from engine.fim import PromptFormat
from engine.models import load_backend, model_spec
from engine.specs import ModelSpec
from engine.threads import usable_cores
from engine.types import Role
from lsp_server.client import insert_text_of

log = logging.getLogger("bench.editors")

ENGINE, PEER = "engine", "llama-server"
SIDES = (ENGINE, PEER)
LABELS = {ENGINE: "infill-lsp engine", PEER: "llama-server -np 4"}
GROUPS = (2, 4)
TARGET_TWO = 1.3  # two typing at once / alone, each


# --- the typists ---------------------------------------------------------------------------

#: The files the typists' documents are cut from, the first typist's first (real code of this
#: repository, each with a `name = call(` line near its ~1,500th token).
TYPING_FILES = (
    "engine/worker.py",
    "lsp_server/documents.py",
    "lsp_server/action_handlers.py",
    "lsp_server/protocol.py",
)
ALONE, TOGETHER = "alone", "together"


@dataclass(slots=True)
class Typist:
    """A language server typing a line of its own document."""

    name: str
    client: ServerClient
    doc: TypingDoc


async def prepare_typing(typist: Typist, tag: str) -> tuple[str, int, str]:
    """Open the document with the line cut at its indentation and ask once, so that the text
    before the line is in the KV cache (the user has been working in this file). `tag` makes
    the document's first line, and its URI, unique (nothing cached from an earlier round); the
    same tag gives the same text, whichever server is behind the typist and whether it types
    alone or with others: the same prompts, the same greedy answers expected."""
    doc = typist.doc
    start = doc.line_start + len(doc.indent)
    header = f"# {tag}: {typist.name}\n"
    text = header + doc.text[:start] + doc.text[doc.offset :]
    uri = f"file:///bench/typing/{tag}_{typist.name}.py"
    client = typist.client
    client.open(uri, text)
    count = await client.job_count()
    await client.inline(uri, len(header) + start)
    await client.jobs_since(count, at_least=1)
    # Its answer may be the whole line: typed along, every keystroke would then be answered
    # from the type-ahead cache, without the model server (seen with llama-server's answer).
    bust_cache(client, uri)
    return uri, len(header) + start, doc.text[start : doc.offset]


async def type_line(
    typist: Typist, uri: str, start: int, typed: str, delay_s: float = 0.0
) -> dict[str, Any]:
    """After `delay_s`, one character every 60 ms, a request after each (latest-wins
    supersedes the older): the time from the last keystroke to its answer, and the answer."""
    client = typist.client
    count = await client.job_count()
    await asyncio.sleep(delay_s)
    typing = await client.type_keys(uri, start, typed)
    jobs = await client.jobs_since(count, at_least=1)
    client.close(uri)
    final = jobs[-1] if jobs else None
    return {
        "keystrokes": len(typed),
        "final_job": None if final is None else asdict(final),
        "engine_jobs": len(jobs),
        "last_keystroke_ms": typing.last_keystroke_s * 1000,
        "outcomes": [p.outcome() for p in typing.pendings],
        "answered": bool(typing.items),
        "suggestion": insert_text_of(typing.items[0]) if typing.items else None,
    }


async def type_together(typists: Sequence[Typist], tag: str) -> list[dict[str, Any]]:
    """Every typist prepared, then all typing at once, their last keystrokes at one moment."""
    prepared = [await prepare_typing(t, tag) for t in typists]
    longest = max(len(typed) for _, _, typed in prepared)
    return list(
        await asyncio.gather(
            *(
                type_line(t, *p, delay_s=(longest - len(p[2])) * KEYSTROKE_S)
                for t, p in zip(typists, prepared, strict=True)
            )
        )
    )


async def bench_typing(
    typists: Sequence[Typist],
    rounds: int,
    groups: Sequence[int] = (2,),
    *,
    label: str = "",
    first_round: int = 0,
    after_step: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> list[dict[str, Any]]:
    """Per round: each typist alone, then the first n typing at once for each n of `groups`
    (the order reversed in odd rounds, so that a drift of the machine falls on both). A record
    per typist and step: its round (numbered from `first_round`), mode ("alone", "together"),
    n (1 alone) and `type_line`'s result. `after_step`, given each step's round, mode and n,
    may add what the model server says of it (the engine server's jobs)."""
    runs: list[dict[str, Any]] = []
    steps = [(ALONE, 1), *((TOGETHER, n) for n in groups)]
    for number in range(first_round, first_round + rounds):
        for mode, n in steps if number % 2 == 0 else steps[::-1]:
            tag = f"r{number}"
            if mode == ALONE:
                for typist in typists[: max(groups, default=1)]:
                    uri, start, typed = await prepare_typing(typist, tag)
                    result = await type_line(typist, uri, start, typed)
                    runs.append(
                        {"round": number, "mode": mode, "n": 1, "typist": typist.name, **result}
                    )
                    await asyncio.sleep(SETTLE_S)
            else:
                group = typists[:n]
                results = await type_together(group, tag)
                for typist, result in zip(group, results, strict=True):
                    runs.append(
                        {"round": number, "mode": mode, "n": n, "typist": typist.name, **result}
                    )
                await asyncio.sleep(SETTLE_S)
            if after_step is not None:
                await after_step({"round": number, "mode": mode, "n": n})
        log.info(
            "%styping round %d: %s",
            f"{label}: " if label else "",
            number,
            ", ".join(
                f"{r['typist']} {r['mode']}{'' if r['mode'] == ALONE else r['n']} "
                f"{r['last_keystroke_ms']:.0f} ms"
                for r in runs
                if r["round"] == number
            ),
        )
    return runs


# --- the ratios -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypingRatio:
    """One typist's last keystroke to its answer typing among n, against typing alone:
    medians over rounds (ms) and together / alone."""

    typist: str
    n: int
    alone_ms: float
    together_ms: float

    @property
    def ratio(self) -> float:
        return self.together_ms / self.alone_ms if self.alone_ms > 0 else math.nan

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


def served(run: dict[str, Any]) -> bool:
    """Whether a typing reached the model server: one answered wholly from the type-ahead
    cache (the user typed along a suggestion) measures no server, and is left out."""
    return bool(run["engine_jobs"])


def alone_ms(runs: Sequence[dict[str, Any]], typist: str) -> float:
    """The median of a typist's last keystrokes typing alone (NaN where it never did)."""
    return median(
        r["last_keystroke_ms"]
        for r in runs
        if r["typist"] == typist and r["mode"] == ALONE and served(r)
    )


def typing_ratios(runs: Sequence[dict[str, Any]], n: int) -> list[TypingRatio]:
    """Each typist of the n typing together, in the order they first appear in `runs`; n 1:
    each typist alone, against itself (ratio 1). Medians of the typings that reached the
    model server."""
    names = list(dict.fromkeys(r["typist"] for r in runs if r["n"] == n))
    out = []
    for name in names:
        alone = alone_ms(runs, name)
        together = (
            alone
            if n == 1
            else median(
                r["last_keystroke_ms"]
                for r in runs
                if r["typist"] == name and r["mode"] == TOGETHER and r["n"] == n and served(r)
            )
        )
        out.append(TypingRatio(typist=name, n=n, alone_ms=alone, together_ms=together))
    return out


def worst_ratio(ratios: Sequence[TypingRatio]) -> float:
    """The largest together / alone of a group (NaN for none, or where one is unknown)."""
    values = [r.ratio for r in ratios]
    if not values or any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


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


def editors_metrics(result: dict[str, Any]) -> list[Metric]:
    """Each model server's worst ratio of typing together over alone, per group size (two at
    once judged against the target), and how many answers differed between the servers."""
    out = []
    for side, summary in result["summary"].items():
        for n, group in summary.items():
            if n != "1":
                target: Target | None = ("<=", TARGET_TWO) if n == "2" else None
                out.append(
                    metric(
                        f"{LABELS[side]}, {n} at once: worst together / alone",
                        group["worst"],
                        target=target,
                    )
                )
    if len(result["summary"]) > 1:  # the servers' answers compared, where both ran
        out.append(metric("answers or prompts unequal between the servers", len(result["unequal"])))
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


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("editors", __doc__)
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
    write_json(args.json, result)
    for side, why in result["config"]["skipped"].items():
        log.warning("%s skipped: %s", LABELS[side], why)
    keys = ("rounds", "threads", "context_size", "slots")
    parameters = {"sides": list(args.sides), **{k: result["config"][k] for k in keys}}
    return Outcome(
        parameters=parameters, metrics=editors_metrics(result), models=[Path(args.model)]
    )
