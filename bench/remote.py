"""The remote backend: the language server on a local model against the same server on a remote
one, side by side in one run (issue 11, DESIGN §6).

Run from the repository root:

    .venv/bin/python bench/remote.py [--rounds 5] [--spots 4] [--json PATH]

Three sides, each the real language server over stdio (bench/_lsp.py) with the same settings
(`debounceMs` 0, `prefixTokens` 4096 so that the whole prefix is the prompt on every side, the
same threads and context size), on the same model file:

- local: `backend` "llama.cpp" (the default), the model in the server's process;
- engine: `backend` "openai" against `infill-lsp engine` (our engine server) serving the model;
- llama_cpp.server: `backend` "openai" against llama-cpp-python's own server serving the same
  GGUF (`--n_threads T --n_threads_batch T --flash_attn true --logits_all false`, as our
  backend loads it; its default `logits_all` made a cold prompt 4x slower). Where it cannot
  start (its extra is not installed), the side is skipped and the reason printed.

a. Inline-completion latency. Documents are cut from real files of this repository (the cursor
after the first `(` of an assignment near the end, bench/_spots.py), each round's with a first
line of its own, so that no cache holds it. On each: the cold request (the first in the
document), then the warm one (the line's next character typed, then a request; the blank-line
edit of bench/_compare.py keeps the type-ahead cache out of it). Time from sending
`textDocument/inlineCompletion` to its response, medians over rounds and documents, and the
remote sides' ratios over local (also the median of the ratios paired by round and document),
and what each path adds around the model: the request's time minus the model's own time for
it (the local engine's job in `infill/stats`, the engine server's job in its `/stats`).
The sides take turns within a round (local, engine, llama_cpp.server, then the next round):
only one model process computes at a time, the others stay idle. Targets: engine / local <=
1.10; engine / llama_cpp.server <= 1.0.

b. Two language servers typing at once against one engine server (bench/_typists.py): each
types a line of its own document (one character every 60 ms, a request per character,
latest-wins; the shorter line starts later, so that both last keystrokes come at the same
moment), and the time from its last keystroke to the answer to it is compared with the same
typing by that language server alone. Medians over rounds, and together / alone. Four, and
llama-server beside our engine server: bench/editors.py.

Prints tables to stdout and writes JSON to bench/results/remote.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/remote.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import logging
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from _common import (
    RESULTS,
    Column,
    Table,
    median,
    ok,
    setup_logging,
    token_counter,
    write_json,
)
from _compare import SETTLE_S, bust_cache, ours_once, server_options
from _lsp import ServerClient
from _servers import (
    LLAMA_CPP_SERVER,
    ModelServer,
    get_json,
    llama_cpp_server_missing,
    start_engine_server,
    start_llama_cpp_server,
)
from _spots import TypingDoc, typing_doc
from _typists import TYPING_FILES, Typist, bench_typing, typing_ratios

from engine.default_models import default_completion_model
from engine.models import load_backend, model_spec
from engine.threads import usable_cores
from engine.types import Role

log = logging.getLogger("bench.remote")

#: The files documents are cut from (real code of this repository); `--spots N` takes the first N.
FILES = (
    "engine/worker.py",
    "lsp_server/documents.py",  # lsp_server/neighbors.py lost its `name = call(` line
    "lsp_server/action_handlers.py",
    "lsp_server/protocol.py",
    "engine/prefix_cache.py",
    "lsp_server/host.py",
)
LOCAL, ENGINE, PEER = "local", "engine", LLAMA_CPP_SERVER
SIDES = (LOCAL, ENGINE, PEER)
STEPS = ("cold", "warm")
TARGET_ENGINE_OVER_LOCAL = 1.10
TARGET_ENGINE_OVER_PEER = 1.0


@dataclass(slots=True)
class Side:
    """One side: its language server, and the model server behind it (none for local)."""

    name: str
    settings: dict[str, Any]
    model: str | None = None  # local: the model the language server loads
    server: ModelServer | None = None
    client: ServerClient | None = None
    skipped: str | None = None  # why the side did not run
    extra: list[ServerClient] = field(default_factory=list)


async def start_client(side: Side) -> ServerClient:
    client = ServerClient(side.settings, model=side.model)
    await client.start()
    return client


# --- a. latency -----------------------------------------------------------------------------


def round_doc(doc: TypingDoc, round_number: int, spot: int, side: str) -> tuple[str, int, str]:
    """The document of a round (a first line of its own: nothing cached), its cursor and URI."""
    header = f"# round {round_number}, document {spot}\n"
    uri = f"file:///bench/remote/{side.replace('.', '_')}/r{round_number}_d{spot}.py"
    return header + doc.text, len(header) + doc.offset, uri


async def server_jobs(side: Side) -> tuple[int, float | None]:
    """The engine server's completion jobs finished so far, and the last one's total time
    (ms, from its `/stats`); (0, None) for the other sides."""
    if side.name != ENGINE or side.server is None:
        return 0, None
    stats = await asyncio.to_thread(get_json, f"{side.server.url}/stats")
    for model in stats["models"]:
        if "completion" in model["roles"] and model["recent"]:
            return model["jobs_finished"], float(model["recent"][-1]["total_ms"])
    return 0, None


async def server_job_ms(side: Side, before: int, wait_s: float = 2.0) -> float | None:
    """The total time of the engine server's first completion job after `before`, ms (it
    records a job as it ends, which may be just after the answer went out)."""
    if side.name != ENGINE or side.server is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        count, total = await server_jobs(side)
        if count == before + 1:
            return total
        if count > before + 1 or time.monotonic() > deadline:
            log.warning("%s: no single engine server job for the request", side.name)
            return None
        await asyncio.sleep(0.01)


async def side_turn(
    side: Side, docs: Sequence[TypingDoc], round_number: int
) -> list[dict[str, Any]]:
    """Cold and warm requests on every document, one side."""
    client = side.client
    assert client is not None
    out = []
    for spot, doc in enumerate(docs):
        text, offset, uri = round_doc(doc, round_number, spot, side.name)
        client.open(uri, text)
        before, _ = await server_jobs(side)
        runs = {"cold": await ours_once(client, uri, offset)}
        model_ms = {"cold": await server_job_ms(side, before)}
        client.edit(uri, offset, offset, doc.next_char)
        bust_cache(client, uri)  # a model run, not the type-ahead cache
        before, _ = await server_jobs(side)
        runs["warm"] = await ours_once(client, uri, offset + 1)
        model_ms["warm"] = await server_job_ms(side, before)
        client.close(uri)
        for step, run in runs.items():
            job = run.job
            # The model's own time for the request: the engine's job in the language server
            # (local), the engine server's job (its /stats); unknown for llama_cpp.server.
            if side.name == LOCAL:
                model_ms[step] = job.total_ms if job else None
            if job is None:
                log.warning("%s %s %s: answered without the engine", side.name, doc.path, step)
            out.append(
                {
                    "round": round_number,
                    "side": side.name,
                    "document": doc.path,
                    "step": step,
                    "seconds": run.seconds,
                    "mode": run.mode,
                    "prompt_tokens": job.prompt_tokens if job else None,
                    "generated": job.generated if job else None,
                    "engine_ms": job.total_ms if job else None,
                    "model_ms": model_ms[step],
                    "first_token_ms": job.first_token_ms if job else None,
                    "finish": job.finish if job else None,
                    "suggestion": run.suggestion,
                }
            )
    return out


async def bench_latency(
    sides: Sequence[Side], docs: Sequence[TypingDoc], rounds: int
) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for number in range(rounds):
        for side in sides:
            turn = await side_turn(side, docs, number)
            runs += turn
            log.info(
                "round %d %s: %s",
                number,
                side.name,
                ", ".join(f"{r['step']} {r['seconds'] * 1000:.0f} ms" for r in turn),
            )
            await asyncio.sleep(SETTLE_S)
    return runs


def summarize_latency(runs: Sequence[dict[str, Any]], sides: Sequence[str]) -> dict[str, Any]:
    """Medians per side and step (ms), ratios over local, and paired ratios."""
    by_key = {(r["round"], r["side"], r["document"], r["step"]): r for r in runs}
    median_ms = {
        side: {
            step: median([r["seconds"] for r in runs if r["side"] == side and r["step"] == step])
            * 1000
            for step in STEPS
        }
        for side in sides
    }
    # What each path adds around the model: request time minus the model's own time.
    overhead_ms = {
        side: {
            step: median(
                [
                    r["seconds"] * 1000 - r["model_ms"]
                    for r in runs
                    if r["side"] == side and r["step"] == step and r["model_ms"] is not None
                ]
            )
            for step in STEPS
        }
        for side in sides
    }
    ratios: dict[str, dict[str, float]] = {}
    paired: dict[str, dict[str, float]] = {}
    for side in sides:
        if side == LOCAL or LOCAL not in sides:
            continue
        ratios[side] = {step: median_ms[side][step] / median_ms[LOCAL][step] for step in STEPS}
        paired[side] = {
            step: median(
                [
                    r["seconds"] / by_key[(r["round"], LOCAL, r["document"], step)]["seconds"]
                    for r in runs
                    if r["side"] == side and r["step"] == step
                ]
            )
            for step in STEPS
        }
    if ENGINE in sides and PEER in sides:
        ratios[f"{ENGINE} / {PEER}"] = {
            step: median_ms[ENGINE][step] / median_ms[PEER][step] for step in STEPS
        }
        paired[f"{ENGINE} / {PEER}"] = {
            step: median(
                [
                    r["seconds"] / by_key[(r["round"], PEER, r["document"], step)]["seconds"]
                    for r in runs
                    if r["side"] == ENGINE and r["step"] == step
                ]
            )
            for step in STEPS
        }
    # The sides should have done the same work: the same generated tokens, the same prompt.
    mismatches = []
    for r in runs:
        if r["side"] == LOCAL:
            continue
        local = by_key.get((r["round"], LOCAL, r["document"], r["step"]))
        if local is None:
            continue
        if r["generated"] != local["generated"]:
            mismatches.append(
                f"round {r['round']} {r['document']} {r['step']}: {r['side']} generated "
                f"{r['generated']} tokens, local {local['generated']}"
            )
        if r["prompt_tokens"] and r["prompt_tokens"] != local["prompt_tokens"]:
            mismatches.append(
                f"round {r['round']} {r['document']} {r['step']}: {r['side']} prompt "
                f"{r['prompt_tokens']} tokens, local {local['prompt_tokens']}"
            )
    return {
        "median_ms": median_ms,
        "overhead_ms": overhead_ms,
        "ratio": ratios,
        "paired_ratio": paired,
        "unequal": mismatches,
    }


# --- the run ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    model = args.model
    settings: dict[str, Any] = {
        "debounceMs": 0,
        "prefixTokens": 4096,
        "threads": args.threads,
        "contextSize": args.context_size,
    }
    _, parsed = server_options(model, settings)
    spec = model_spec(Role.COMPLETION, parsed.model_options())
    # Only to count tokens when cutting the documents (the vocabulary is enough).
    backend = load_backend(spec)
    try:
        count = token_counter(backend)
        files = FILES[: args.spots]
        docs = [typing_doc(path, args.document_tokens, count) for path in files]
        typing_docs = [typing_doc(path, args.document_tokens, count) for path in TYPING_FILES[:2]]
        model_name = backend.info.name
    finally:
        backend.close()

    sides = [
        Side(LOCAL, {**settings, "backend": "llama.cpp"}, model=model),
        Side(ENGINE, {**settings, "backend": "openai"}),
        Side(PEER, {**settings, "backend": "openai"}),
    ]
    result: dict[str, Any] = {}
    try:
        log.info("starting the local side")
        sides[0].client = await start_client(sides[0])
        log.info("starting infill-lsp engine")
        try:
            engine = await asyncio.to_thread(
                start_engine_server, model, args.threads, args.context_size, log_dir
            )
        except (RuntimeError, TimeoutError, OSError) as e:
            sides[1].skipped = f"infill-lsp engine did not start: {e}"
        else:
            sides[1].server = engine
            sides[1].settings["endpoint"] = f"{engine.url}/v1"
            sides[1].client = await start_client(sides[1])
        log.info("starting llama_cpp.server")
        reason = llama_cpp_server_missing()
        if reason is None:
            try:
                peer = await asyncio.to_thread(
                    start_llama_cpp_server, model, args.threads, args.context_size, 512, log_dir
                )
            except (RuntimeError, TimeoutError, OSError) as e:
                reason = f"it did not start: {e}"
            else:
                sides[2].server = peer
                sides[2].settings["endpoint"] = f"{peer.url}/v1"
                sides[2].client = await start_client(sides[2])
        sides[2].skipped = reason and f"llama_cpp.server skipped: {reason}"
        for side in sides:
            if side.skipped:
                print(side.skipped, file=sys.stderr)
        running = [side for side in sides if side.client is not None]
        runs = await bench_latency(running, docs, args.rounds)
        result["latency"] = {
            **summarize_latency(runs, [side.name for side in running]),
            "documents": [
                {"path": d.path, "line": d.line_number, "tokens": d.tokens} for d in docs
            ],
            "runs": runs,
        }
        # Only the engine server computes from here on.
        for side in sides:
            if side.name == PEER and side.server is not None:
                side.server.close()
        if sides[1].client is not None and args.typing_rounds > 0:
            log.info("b. two language servers on one engine server")
            second = await start_client(Side("engine 2", dict(sides[1].settings)))
            sides[1].extra.append(second)
            typists = [
                Typist("lsp-1", sides[1].client, typing_docs[0]),
                Typist("lsp-2", second, typing_docs[1]),
            ]
            typing = await bench_typing(typists, args.typing_rounds, (2,))
            result["concurrent"] = {
                "summary": {r.typist: r.as_json() for r in typing_ratios(typing, 2)},
                "documents": [t.doc.path for t in typists],
                "runs": typing,
            }
    finally:
        for side in sides:
            for client in [side.client, *side.extra]:
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.stop()
            if side.server is not None:
                side.server.close()
    result["config"] = {
        "model": model_name,
        "model_path": model,
        "threads": args.threads,
        "context_size": args.context_size,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "server_settings": settings,
        "rounds": args.rounds,
        "typing_rounds": args.typing_rounds,
        "spots": len(docs),
        "document_tokens": args.document_tokens,
        "sides": {
            side.name: {
                "ran": side.skipped is None,
                "skipped": side.skipped,
                "server": side.server.command if side.server else None,
            }
            for side in sides
        },
    }
    return result


def print_table(result: dict[str, Any]) -> None:
    config = result["config"]
    print(
        f"remote backend: {config['model']} ({config['threads']} threads, context "
        f"{config['context_size']}), {config['cpu_count']} cores"
    )
    for side in config["sides"].values():
        if side["skipped"]:
            print(f"  {side['skipped']}")
    print()
    latency = result.get("latency")
    if latency:
        docs = latency["documents"]
        prompts = [r["prompt_tokens"] for r in latency["runs"] if r["prompt_tokens"]] or [0]
        print(
            f"a. inline completion through the language server, debounceMs 0, {len(docs)} "
            f"documents, prompts of {min(prompts)}-{max(prompts)} tokens, median of "
            f"{config['rounds']} rounds x documents, ms from request to response"
        )
        table = Table(
            Column("side", 30, "<"),
            Column("cold", 8, spec=".1f"),
            Column("warm", 8, spec=".1f"),
            Column("cold/x", 7, spec=".3f"),
            Column("warm/x", 7, spec=".3f"),
            Column("paired c", 8, spec=".3f"),
            Column("paired w", 8, spec=".3f"),
            Column("added c", 8, spec=".1f"),
            Column("added w", 8, spec=".1f"),
        )
        print(table.header())
        for side, ms in latency["median_ms"].items():
            ratio = latency["ratio"].get(side)
            paired = latency["paired_ratio"].get(side)
            added = latency["overhead_ms"][side]
            ratios = (
                (ratio["cold"], ratio["warm"], paired["cold"], paired["warm"])
                if ratio and paired
                else (None,) * 4
            )
            print(table.row(side, ms["cold"], ms["warm"], *ratios, added["cold"], added["warm"]))
        for name, ratio in latency["ratio"].items():
            if " / " in name:
                paired = latency["paired_ratio"][name]
                print(
                    table.row(
                        name, "", "", ratio["cold"], ratio["warm"], paired["cold"], paired["warm"]
                    )
                )
        print(
            "x: local (or the side after the slash); paired: median of per-request ratios;\n"
            "added: request time minus the model's own time for it (the language server's "
            "engine job,\nor the engine server's /stats job), ms: what the path adds around "
            "the model (nan: unknown)"
        )
        engine = latency["ratio"].get(ENGINE)
        if engine:
            worst = max(engine.values())
            print(
                f"engine / local <= {TARGET_ENGINE_OVER_LOCAL}: "
                f"{ok(worst <= TARGET_ENGINE_OVER_LOCAL)} (worst {worst:.3f})"
            )
        vs_peer = latency["ratio"].get(f"{ENGINE} / {PEER}")
        if vs_peer:
            worst = max(vs_peer.values())
            print(
                f"engine / llama_cpp.server <= {TARGET_ENGINE_OVER_PEER}: "
                f"{ok(worst <= TARGET_ENGINE_OVER_PEER)} (worst {worst:.3f})"
            )
        for line in latency["unequal"][:10]:
            print(f"  unequal work: {line}")
        print()
    concurrent = result.get("concurrent")
    if concurrent:
        rounds = config["typing_rounds"]
        print(
            "b. two language servers typing at once against one engine server: last keystroke "
            f"to its answer, median of {rounds} rounds, ms"
        )
        Table(
            Column("language server", 16, "<"),
            Column("document", 30, "<"),
            Column("alone", 8, spec=".1f"),
            Column("together", 9, spec=".1f"),
            Column("ratio", 6, spec=".2f"),
        ).print(
            (name, doc, row["alone_ms"], row["together_ms"], row["ratio"])
            for (name, row), doc in zip(
                concurrent["summary"].items(), concurrent["documents"], strict=True
            )
        )
        print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of part a (5)")
    parser.add_argument(
        "--spots", type=int, default=4, help=f"documents per round, 1-{len(FILES)} (4)"
    )
    parser.add_argument(
        "--typing-rounds", type=int, default=None, help="rounds of part b (default: --rounds)"
    )
    parser.add_argument(
        "--document-tokens", type=int, default=1500, help="document size in tokens (1500)"
    )
    parser.add_argument("--threads", type=int, default=min(usable_cores(), 8))
    parser.add_argument("--context-size", type=int, default=4096)
    parser.add_argument("--model", help="the GGUF file every side serves (default: the default)")
    parser.add_argument("--json", type=Path, default=RESULTS / "remote.json", help="output file")
    args = parser.parse_args(argv)
    if not 1 <= args.spots <= len(FILES):
        parser.error(f"--spots must be 1 to {len(FILES)}")
    args.model = str(Path(args.model).expanduser() if args.model else default_completion_model())
    if args.typing_rounds is None:
        args.typing_rounds = args.rounds
    setup_logging(quiet_engine=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="infill-bench-remote-") as log_dir:
        result = asyncio.run(run(args, Path(log_dir)))
    result["config"]["wall_s"] = round(time.perf_counter() - started, 1)
    print_table(result)
    write_json(args.json, result)
    log.info("wrote %s in %.0f s", args.json, result["config"]["wall_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
