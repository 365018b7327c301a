"""Latency: the language server against the raw engine (and llama.cpp's own server), on the
same prompts and token counts, side by side in one run. Four parts (`--parts`, all by
default; "documents" only where llama-server is built):

    python -m bench latency [--parts warm,cold,replay,documents] [--repeats 5]
        [--cold-repeats 2] [--replays 3] [--rounds 3] [--document engine/worker.py]
        [--document-tokens 1500] [--model PATH] [--json PATH]

The server is the real one over stdio, `debounceMs` 0 (replay: the server's default); the raw
side is llama-cpp-python's `Llama.generate()` in this process (bench/_raw.py) on the token ids
the server's own `build_prompt` makes, loaded with the same file, context and threads. The
two never compute at the same time (bench/_compare.py).

- warm: for a few positions in real files, a request whose prompt is all in the KV cache on
  both sides, ours timed from sending `textDocument/inlineCompletion` to its response, raw
  from the call to its last token, the same number of tokens. Ours pays for everything
  else: JSON-RPC, the snapshot, the mode, the context window, tokenizing, the worker
  hand-off, post-processing. A blank line added or removed at the document's end before each
  timed request keeps the type-ahead cache out. Target: ours / raw <= 1.10.
- cold: a document of about 1,500 tokens, its first request (a first line no earlier
  document had) against the request after one more character is typed. Target: warm < cold
  / 4; and the cold request against the raw engine's cold prompt and as many tokens. Target:
  ours / raw <= 1.15. Then the warm suggestion's first character typed: the type-ahead
  cache's answer.
- replay: the line typed one character every 60 ms (a request per character, each superseding
  the last), with latest-wins alone and with `$/cancelRequest` too; the last keystroke to its
  suggestion against one warm request there, and the tokens the engine wrote for superseded
  requests. Targets: ratio <= 1.3; at most 2 tokens per superseded request.
- documents: cold, warm (one character typed) and back (after a request in another document)
  on four documents of about 1,500 tokens, against llama-server with every core and with one
  (`-np 4`, `cache_prompt`, `make llama-server` builds it), and the raw engine; then again with
  one competing CPU-bound process. First, the server's resident size after requests in 1, 5
  and 20 documents. Targets: back within 1.5x of warm; cold at most 1.1x and warm at most
  1.0x llama-server with every core; loaded at most 2x idle, request by request.

Writes every run's figures to bench/results/latency.json; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import _compare
from bench._common import RESULTS, median, rss_kib, shared_prefix, suite_parser
from bench._compare import SETTLE_S, OursRun, Raw, bust_cache, ours_once
from bench._lsp import KEYSTROKE_S, ServerClient
from bench._raw import RawRun
from bench._servers import LlamaServer, find_binary
from bench._spots import NoLineToType, Spot, TypingDoc, default_spots, typing_doc
from bench.record import Metric, Outcome, metric
from engine.threads import usable_cores
from lsp_server.client import insert_text_of
from lsp_server.settings import Settings

log = _compare.log.getChild("latency")

TARGET_LATENCY = 1.10
TARGET_WARM = 0.25
TARGET_COLD_RAW = 1.15  # cold request, ours / raw engine
TARGET_REPLAY = 1.3
TARGET_SUPERSEDED_TOKENS = 2

#: The files documents are cut from (real code of this repository, about 1,500 tokens each):
#: the first `DOCUMENTS` of them with a `name = call(...)` line in their first ~1,600 tokens.
#: Spares follow, because files change (lsp_server/neighbors.py lost its line there).
FILES = (
    "engine/worker.py",
    "lsp_server/action_handlers.py",
    "lsp_server/protocol.py",
    "lsp_server/documents.py",
    "engine/stops.py",
    "engine/prefix_cache.py",
)
DOCUMENTS = 4
STEPS = ("cold", "warm", "back")
TARGET_BACK = 1.5  # back / warm, ours
TARGET_COLD = 1.1  # ours / llama-server (every core)
TARGET_PEER_WARM = 1.0
TARGET_LOADED = 2.0  # loaded / idle, ours
KEPT = (1, 5, 20)


# --- warm ---


async def bench_latency(
    client: ServerClient, raw: Raw, spots: Sequence[Spot], repeats: int
) -> list[dict[str, Any]]:
    rows = []
    for number, spot in enumerate(spots):
        uri = f"file:///bench/latency_{number}.py"
        client.open(uri, spot.text)
        prompt = raw.prompt(spot.text, spot.offset)
        # Untimed: learns the token count, and leaves the prompt in both KV caches.
        first = await ours_once(client, uri, spot.offset)
        if first.job is None:
            log.warning(
                "%s: the server ran no engine job (mode %s): skipped", spot.label, first.mode
            )
            client.close(uri)
            continue
        n = first.job.generated
        if first.job.prompt_tokens != len(prompt.token_ids):
            log.error(
                "%s: the server's prompt has %d tokens, build_prompt here %d: not the same prompt",
                spot.label,
                first.job.prompt_tokens,
                len(prompt.token_ids),
            )
        raw.generate(prompt.token_ids, n, cold=True)
        ours_runs: list[OursRun] = []
        raw_runs: list[RawRun] = []
        for repeat in range(repeats):
            order = ("raw", "ours") if repeat % 2 == 0 else ("ours", "raw")
            for side in order:
                if side == "raw":
                    raw_runs.append(raw.generate(prompt.token_ids, n))
                else:
                    bust_cache(client, uri)
                    ours_runs.append(await ours_once(client, uri, spot.offset))
        client.close(uri)
        counts = sorted({r.job.generated for r in ours_runs if r.job is not None})
        if any(r.job is None for r in ours_runs):
            log.error("%s: a timed request was answered without the engine", spot.label)
        if counts != [n]:
            log.warning(
                "%s: the server generated %s tokens across repeats, not %d", spot.label, counts, n
            )
        ours_s = [r.seconds for r in ours_runs]
        raw_s = [r.seconds for r in raw_runs]
        paired = [o / r for o, r in zip(ours_s, raw_s, strict=True)]
        row = {
            "position": spot.label,
            "mode": first.mode,
            "prompt_tokens": len(prompt.token_ids),
            "server_prompt_tokens": first.job.prompt_tokens,
            "generated_tokens": n,
            "finish": first.job.finish,
            "raw_ms": median(raw_s) * 1000,
            "ours_ms": median(ours_s) * 1000,
            "ratio": median(ours_s) / median(raw_s),
            "paired_ratio": median(paired),
            "ours_overhead_ms": median(
                [r.seconds * 1000 - r.job.total_ms for r in ours_runs if r.job is not None]
            ),
            "ours_engine_total_ms": median(
                [r.job.total_ms for r in ours_runs if r.job is not None]
            ),
            "ours_engine_first_token_ms": median(
                [r.job.first_token_ms for r in ours_runs if r.job and r.job.first_token_ms]
            ),
            "raw_first_token_ms": median([r.first_token_s for r in raw_runs]) * 1000,
            "raw_runs_ms": [s * 1000 for s in raw_s],
            "ours_runs_ms": [s * 1000 for s in ours_s],
            "suggestion": first.suggestion,
            "raw_text": raw.text(raw_runs[0]) if raw_runs else None,
        }
        rows.append(row)
        log.info(
            "a. %s: %d tokens, raw %.0f ms, ours %.0f ms (%.3f)",
            spot.label,
            n,
            row["raw_ms"],
            row["ours_ms"],
            row["ratio"],
        )
    return rows


# --- cold ---


async def bench_warm_cold(
    client: ServerClient, raw: Raw, doc: TypingDoc, repeats: int
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        # A first line no earlier document had: the KV cache shares nothing useful.
        header = f"# {repeat + 1}: benchmark document, cold start number {repeat + 1}\n"
        uri = f"file:///bench/warm_cold_{repeat}.py"
        text = header + doc.text
        offset = len(header) + doc.offset
        client.open(uri, text)
        cold = await ours_once(client, uri, offset)
        client.edit(uri, offset, offset, doc.next_char)
        bust_cache(client, uri)  # so that the model runs, even if the suggestion began so
        warm = await ours_once(client, uri, offset + 1)
        # Typing the warm suggestion's first character: the type-ahead cache's case.
        ahead: OursRun | None = None
        if warm.suggestion:
            client.edit(uri, offset + 1, offset + 1, warm.suggestion[0])
            ahead = await ours_once(client, uri, offset + 2)
        client.close(uri)
        # The raw engine on the same two prompts, cold then warm, with the same token counts.
        cold_prompt = raw.prompt(text, offset)
        warm_text = text[:offset] + doc.next_char + text[offset:]
        warm_prompt = raw.prompt(warm_text, offset + 1)
        n_cold = cold.job.generated if cold.job else 1
        n_warm = warm.job.generated if warm.job else 1
        raw_cold = raw.generate(cold_prompt.token_ids, n_cold, cold=True)
        raw_warm = raw.generate(warm_prompt.token_ids, n_warm)
        shared = shared_prefix(cold_prompt.token_ids, warm_prompt.token_ids)
        run: dict[str, Any] = {
            "cold_ms": cold.seconds * 1000,
            "warm_ms": warm.seconds * 1000,
            "cold_engine_first_token_ms": cold.job.first_token_ms if cold.job else None,
            "warm_engine_first_token_ms": warm.job.first_token_ms if warm.job else None,
            "cold_prompt_tokens": len(cold_prompt.token_ids),
            "warm_prompt_tokens": len(warm_prompt.token_ids),
            "prompt_tokens_shared": shared,
            "cold_generated": n_cold,
            "warm_generated": n_warm,
            "raw_cold_ms": raw_cold.seconds * 1000,
            "raw_warm_ms": raw_warm.seconds * 1000,
            "type_ahead_ms": None if ahead is None else ahead.seconds * 1000,
            "type_ahead_engine_job": None if ahead is None else ahead.job is not None,
            "cold_suggestion": cold.suggestion,
            "warm_suggestion": warm.suggestion,
            "mode": cold.mode,
        }
        runs.append(run)
        log.info(
            "b. repeat %d: cold %.0f ms, warm %.0f ms (raw %.0f / %.0f ms)",
            repeat,
            cold.seconds * 1000,
            warm.seconds * 1000,
            raw_cold.seconds * 1000,
            raw_warm.seconds * 1000,
        )
    cold_ms = median([r["cold_ms"] for r in runs])
    warm_ms = median([r["warm_ms"] for r in runs])
    raw_cold_ms = median([r["raw_cold_ms"] for r in runs])
    raw_warm_ms = median([r["raw_warm_ms"] for r in runs])
    ahead_ms = [r["type_ahead_ms"] for r in runs if r["type_ahead_ms"] is not None]
    return {
        "type_ahead_ms": median(ahead_ms),
        "type_ahead_engine_jobs": sum(bool(r["type_ahead_engine_job"]) for r in runs),
        "document": f"{doc.path}, first {doc.text.count(chr(10))} lines (+1 header line)",
        "cursor_line": doc.line_number,
        "document_tokens": doc.tokens,
        "typed": doc.next_char,
        "cold_ms": cold_ms,
        "warm_ms": warm_ms,
        "ratio": warm_ms / cold_ms,
        "raw_cold_ms": raw_cold_ms,
        "raw_warm_ms": raw_warm_ms,
        "raw_ratio": raw_warm_ms / raw_cold_ms,
        # Run by run: the load of a shared machine changes between runs more than within one.
        "cold_raw_ratio": median([r["cold_ms"] / r["raw_cold_ms"] for r in runs]),
        "runs": runs,
    }


# --- replay ---


async def replay_once(
    client: ServerClient, doc: TypingDoc, *, cancel: bool, number: int
) -> dict[str, Any]:
    typed = doc.text[doc.line_start + len(doc.indent) : doc.offset]
    base = doc.text[: doc.line_start + len(doc.indent)] + doc.text[doc.offset :]
    start = doc.line_start + len(doc.indent)
    uri = f"file:///bench/replay_{'cancel' if cancel else 'latest'}_{number}.py"
    client.open(uri, base)
    # The user has been working in this file: its text before the line is in the KV cache.
    count = await client.job_count()
    await client.inline(uri, start)
    await client.jobs_since(count, at_least=1)

    count = await client.job_count()
    typing = await client.type_keys(uri, start, typed, cancel=cancel)
    pendings, items, latency = typing.pendings, typing.items, typing.last_keystroke_s
    await client.jobs_since(count, at_least=1)
    await asyncio.sleep(0.1)  # jobs of superseded requests may still be ending
    jobs = await client.jobs_since(count)
    outcomes: dict[str, int] = {}
    for pending in pendings:
        outcomes[pending.outcome()] = outcomes.get(pending.outcome(), 0) + 1
    final = jobs[-1] if jobs else None
    superseded = [j for j in jobs[:-1] if j.finish == "cancelled"]
    completed_early = [j for j in jobs[:-1] if j.finish != "cancelled"]

    # The single warm request at the same place: the line typed but for its last character,
    # one request answered (the KV cache holds that prompt), then the last character.
    end = start + len(typed)
    client.edit(uri, end - 1, end, "")
    count = await client.job_count()
    await client.inline(uri, end - 1)
    await client.jobs_since(count, at_least=1)
    count = await client.job_count()
    client.edit(uri, end - 1, end - 1, typed[-1])
    edit_at = time.perf_counter()
    bust_cache(client, uri)  # a model run, not the type-ahead cache
    ref_items, ref = await client.inline(uri, end)
    ref_jobs = await client.jobs_since(count, at_least=1)
    reference = ref.seconds + (ref.sent_at - edit_at)
    client.close(uri)
    return {
        "cancel_requests": cancel,
        "keystrokes": len(typed),
        "typed": typed,
        "last_keystroke_to_suggestion_ms": latency * 1000,
        "single_warm_request_ms": reference * 1000,
        "ratio": latency / reference,
        "outcomes": outcomes,
        "engine_jobs": len(jobs),
        "superseded_jobs_tokens": [j.generated for j in superseded],
        "superseded_jobs": [asdict(j) for j in superseded],
        "jobs_finished_before_next_key": len(completed_early),
        "requests_without_engine_job": len(pendings) - len(jobs),
        "final_job": None if final is None else asdict(final),
        "reference_job": asdict(ref_jobs[-1]) if ref_jobs else None,
        "final_answered_by_engine": bool(jobs)
        and final is not None
        and final.finish != "cancelled",
        "suggestion": insert_text_of(items[0]) if items else None,
        "reference_suggestion": insert_text_of(ref_items[0]) if ref_items else None,
    }


async def bench_replay(
    client: ServerClient, doc: TypingDoc, replays: int, debounce_ms: int
) -> dict[str, Any]:
    client.configure({"debounceMs": debounce_ms})
    await client.status()  # a round trip: the setting is in place
    variants = {}
    for cancel in (False, True):
        runs = []
        for number in range(replays):
            run = await replay_once(client, doc, cancel=cancel, number=number)
            runs.append(run)
            log.info(
                "c. %s #%d: last key -> suggestion %.0f ms, single warm %.0f ms, superseded "
                "tokens %s, outcomes %s",
                "cancel" if cancel else "latest",
                number,
                run["last_keystroke_to_suggestion_ms"],
                run["single_warm_request_ms"],
                run["superseded_jobs_tokens"],
                run["outcomes"],
            )
        tokens = [t for r in runs for t in r["superseded_jobs_tokens"]]
        variants["cancel" if cancel else "latest_wins"] = {
            "last_keystroke_to_suggestion_ms": median(
                [r["last_keystroke_to_suggestion_ms"] for r in runs]
            ),
            "single_warm_request_ms": median([r["single_warm_request_ms"] for r in runs]),
            "ratio": median([r["ratio"] for r in runs]),
            "superseded_jobs": len(tokens),
            "superseded_tokens_max": max(tokens) if tokens else 0,
            "superseded_tokens_mean": statistics.fmean(tokens) if tokens else 0.0,
            "runs": runs,
        }
    return {
        "document": doc.path,
        "line": doc.line_number,
        "keystroke_ms": KEYSTROKE_S * 1000,
        "debounce_ms": debounce_ms,
        "variants": variants,
    }


# --- documents ---


@contextlib.contextmanager
def competing_process() -> Iterator[None]:
    """One CPU-bound process for the duration: what a build or a test run does to a core."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        busy.kill()
        busy.wait()


class Round:
    """Document A and B of one round: their texts, cursors and prompts."""

    def __init__(self, raw: Raw, a: TypingDoc, b: TypingDoc, tag: str) -> None:
        header_a, header_b = f"# {tag}: document A\n", f"# {tag}: document B\n"
        self.uri_a, self.uri_b = f"file:///bench/{tag}/a.py", f"file:///bench/{tag}/b.py"
        self.text_a, self.offset_a = header_a + a.text, len(header_a) + a.offset
        self.text_b, self.offset_b = header_b + b.text, len(header_b) + b.offset
        self.typed = a.next_char
        typed_text = self.text_a[: self.offset_a] + self.typed + self.text_a[self.offset_a :]
        prompts = {
            "cold": raw.prompt(self.text_a, self.offset_a),
            "warm": raw.prompt(typed_text, self.offset_a + 1),
            "b": raw.prompt(self.text_b, self.offset_b),
        }
        prompts["back"] = prompts["warm"]
        self.prompts = {step: p.token_ids for step, p in prompts.items()}
        # The text llama-server tokenizes: without the BOS token's text (it adds BOS itself).
        bos = raw.engine.backend.vocab.bos_token or ""
        self.texts = {step: p.text.removeprefix(bos) for step, p in prompts.items()}


async def ours_round(client: ServerClient, rnd: Round) -> dict[str, dict[str, Any]]:
    """The four requests through the server; seconds and generated tokens of each."""
    out: dict[str, dict[str, Any]] = {}

    def note(step: str, run: Any) -> None:
        job = run.job
        out[step] = {
            "seconds": run.seconds,
            "generated": job.generated if job else 0,
            "prompt_tokens": job.prompt_tokens if job else None,
            "engine_ms": job.total_ms if job else None,
        }

    client.open(rnd.uri_a, rnd.text_a)
    note("cold", await ours_once(client, rnd.uri_a, rnd.offset_a))
    client.edit(rnd.uri_a, rnd.offset_a, rnd.offset_a, rnd.typed)
    bust_cache(client, rnd.uri_a)
    note("warm", await ours_once(client, rnd.uri_a, rnd.offset_a + 1))
    client.open(rnd.uri_b, rnd.text_b)
    note("b", await ours_once(client, rnd.uri_b, rnd.offset_b))
    bust_cache(client, rnd.uri_a)
    note("back", await ours_once(client, rnd.uri_a, rnd.offset_a + 1))
    return out


def peer_round(peer: LlamaServer, rnd: Round, counts: dict[str, int]) -> dict[str, dict[str, Any]]:
    out = {}
    for step in ("cold", "warm", "b", "back"):
        run = peer.complete(rnd.texts[step], max(1, counts[step]))
        if step in ("cold", "b") and run.prompt_evaluated != len(rnd.prompts[step]):
            log.warning(
                "%s tokenized the %s prompt into %d tokens, ours into %d",
                peer.label,
                step,
                run.prompt_evaluated,
                len(rnd.prompts[step]),
            )
        out[step] = {
            "seconds": run.seconds,
            "generated": run.generated,
            "prompt_evaluated": run.prompt_evaluated,
        }
    return out


def raw_round(raw: Raw, rnd: Round, counts: dict[str, int]) -> dict[str, dict[str, Any]]:
    out = {}
    for step in ("cold", "warm", "b", "back"):
        run = raw.generate(rnd.prompts[step], max(1, counts[step]), cold=step == "cold")
        out[step] = {"seconds": run.seconds, "generated": len(run.token_ids)}
    return out


async def rounds(
    client: ServerClient,
    raw: Raw,
    peers: Sequence[LlamaServer],
    docs: Sequence[TypingDoc],
    count: int,
    condition: str,
) -> list[dict[str, Any]]:
    results = []
    for number in range(count):
        a, b = docs[(2 * number) % len(docs)], docs[(2 * number + 1) % len(docs)]
        rnd = Round(raw, a, b, f"{condition}-{number}")
        ours = await ours_round(client, rnd)
        counts = {step: ours[step]["generated"] for step in ours}
        sides: dict[str, Any] = {"ours": ours}
        await asyncio.sleep(SETTLE_S)  # a pause between sides
        for peer in peers:
            sides[peer.label] = peer_round(peer, rnd, counts)
            await asyncio.sleep(SETTLE_S)
        sides["raw llama-cpp-python"] = raw_round(raw, rnd, counts)
        await asyncio.sleep(SETTLE_S)
        log.info(
            "%s round %d: %s",
            condition,
            number,
            "; ".join(
                f"{side} " + " ".join(f"{s} {v[s]['seconds']:.2f}" for s in STEPS)
                for side, v in sides.items()
            ),
        )
        results.append(
            {
                "documents": [a.path, b.path],
                "prompt_tokens": len(rnd.prompts["cold"]),
                "sides": sides,
            }
        )
    return results


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median seconds of each side and step."""
    sides = runs[0]["sides"].keys()
    return {
        side: {step: median([r["sides"][side][step]["seconds"] for r in runs]) for step in STEPS}
        for side in sides
    }


async def memory(client: ServerClient, docs: Sequence[TypingDoc]) -> list[dict[str, Any]]:
    """The server's resident memory once 1, 5 and 20 documents have been completed in."""
    rows = []
    pid = client.client.pid
    assert pid is not None
    for number in range(1, max(KEPT) + 1):
        doc = docs[number % len(docs)]
        header = f"# memory: document {number}\n"
        uri = f"file:///bench/memory/{number}.py"
        client.open(uri, header + doc.text)
        await ours_once(client, uri, len(header) + doc.offset)
        if number in KEPT:
            status = await client.status()
            rows.append(
                {
                    "documents": number,
                    "rss_mib": rss_kib(pid) / 1024,
                    "kv_cache": status.get("kv_cache"),
                }
            )
            log.info("memory: %d documents, RSS %.0f MiB", number, rows[-1]["rss_mib"])
    return rows


def documents(tokens: int, count: Callable[[str], int]) -> list[TypingDoc]:
    """The first `DOCUMENTS` of `FILES` that have a line to type, cut to about `tokens`."""
    docs = []
    for path in FILES:
        try:
            docs.append(typing_doc(path, tokens, count))
        except NoLineToType as e:
            log.warning("skipping %s", e)
        if len(docs) == DOCUMENTS:
            return docs
    raise SystemExit(f"only {len(docs)} of {FILES} have a line to type: add files to FILES")


async def bench_documents(
    client: ServerClient, raw: Raw, args: argparse.Namespace
) -> dict[str, Any]:
    binary = find_binary(args.llama_server)
    assert binary is not None  # checked before the part runs
    docs = documents(args.document_tokens, raw.count)
    cores = usable_cores()
    configs = sorted({cores, 1}, reverse=True)
    # First, on the fresh server: memory as documents accumulate (this also warms it up).
    kept = await memory(client, docs)
    peers = [LlamaServer(binary, raw.info.path, threads=t) for t in configs]
    try:
        idle = await rounds(client, raw, peers, docs, args.rounds, "idle")
        with competing_process():
            loaded = await rounds(client, raw, peers, docs, args.rounds, "loaded")
    finally:
        for peer in peers:
            peer.close()
    return {
        "llama_server": str(binary),
        "cores": cores,
        "idle": {"median_s": summarize(idle), "runs": idle},
        "loaded": {"median_s": summarize(loaded), "runs": loaded},
        "memory": kept,
    }


# --- the suite ---------------------------------------------------------------------------------


async def _warm(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    return {"positions": await bench_latency(client, raw, default_spots(), args.repeats)}


async def _cold(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    doc = typing_doc(args.document, args.document_tokens, raw.count)
    return await bench_warm_cold(client, raw, doc, args.cold_repeats)


async def _replay(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    doc = typing_doc(args.document, args.document_tokens, raw.count)
    return await bench_replay(client, doc, args.replays, Settings().debounce_ms)


PARTS = {
    "warm": _compare.Part(name="warm", body=_warm, settings={}),
    "cold": _compare.Part(name="cold", body=_cold, settings={}),
    "replay": _compare.Part(name="replay", body=_replay, settings={}),
    # The whole prefix in the prompt, so that each round's first line makes it new.
    "documents": _compare.Part(
        name="documents", body=bench_documents, settings={"prefixTokens": 4096}
    ),
}


def _warm_metrics(part: dict[str, Any]) -> list[Metric]:
    ratios = [row["ratio"] for row in part["positions"]]
    worst = max(ratios, default=float("nan"))
    return [
        metric(
            "warm request, server / raw engine, worst position",
            worst,
            target=("<=", TARGET_LATENCY),
        ),
        metric(
            "warm request, server / raw engine, best position", min(ratios, default=float("nan"))
        ),
        # A position answered in one token is mostly the fixed cost around the model (the raw
        # side re-evaluates one cached token in a few ms): the median says more of a typing day.
        metric("warm request, server / raw engine, median position", median(ratios)),
        metric(
            "warm request, added around the model, median",
            median(row["ours_overhead_ms"] for row in part["positions"]),
            "ms",
        ),
    ]


def _cold_metrics(part: dict[str, Any]) -> list[Metric]:
    return [
        metric("cold request", part["cold_ms"], "ms"),
        metric("cold request, raw engine", part["raw_cold_ms"], "ms"),
        metric(
            "cold request, server / raw engine",
            part["cold_raw_ratio"],
            target=("<=", TARGET_COLD_RAW),
        ),
        metric("warm request after one character", part["warm_ms"], "ms"),
        metric("warm / cold, server", part["ratio"], target=("<", TARGET_WARM)),
        metric("warm / cold, raw engine", part["raw_ratio"]),
        metric(
            "typing the suggestion's next character (type-ahead cache)", part["type_ahead_ms"], "ms"
        ),
    ]


def _replay_metrics(part: dict[str, Any]) -> list[Metric]:
    out = []
    for name, v in part["variants"].items():
        way = "latest-wins" if name == "latest_wins" else "with $/cancelRequest"
        out += [
            metric(
                f"replay, {way}: last keystroke / one warm request",
                v["ratio"],
                target=("<=", TARGET_REPLAY),
            ),
            metric(
                f"replay, {way}: tokens per superseded request, most",
                v["superseded_tokens_max"],
                target=("<=", TARGET_SUPERSEDED_TOKENS),
            ),
            metric(
                f"replay, {way}: tokens per superseded request, mean", v["superseded_tokens_mean"]
            ),
        ]
    return out


def _documents_metrics(part: dict[str, Any]) -> list[Metric]:
    idle, loaded = part["idle"]["median_s"], part["loaded"]["median_s"]
    ours = idle["ours"]
    out = [metric(f"documents, {step}, server", ours[step], "s") for step in STEPS]
    out.append(
        metric(
            "documents, back / warm, server",
            ours["back"] / ours["warm"],
            target=("<=", TARGET_BACK),
        )
    )
    peer = next((s for s in idle if s.startswith("llama-server -t") and " -t 1 " not in s), None)
    if peer is not None:
        out += [
            metric(
                "documents, cold, server / llama-server every core",
                ours["cold"] / idle[peer]["cold"],
                target=("<=", TARGET_COLD),
            ),
            metric(
                "documents, warm, server / llama-server every core",
                ours["warm"] / idle[peer]["warm"],
                target=("<=", TARGET_PEER_WARM),
            ),
        ]
    # Request by request, round i loaded against round i idle where both wrote as many tokens.
    pairs = [
        lo["sides"]["ours"][step]["seconds"] / idle_run["sides"]["ours"][step]["seconds"]
        for idle_run, lo in zip(part["idle"]["runs"], part["loaded"]["runs"], strict=False)
        for step in STEPS
        if lo["sides"]["ours"][step]["generated"] == idle_run["sides"]["ours"][step]["generated"]
    ]
    medians = [loaded["ours"][step] / ours[step] for step in STEPS]
    out.append(
        metric(
            "documents, loaded / idle, worst", max([*medians, *pairs]), target=("<=", TARGET_LOADED)
        )
    )
    out += [
        metric(
            f"documents, server resident size, {row['documents']} documents", row["rss_mib"], "MiB"
        )
        for row in part["memory"]
    ]
    return out


METRICS: dict[str, Callable[[dict[str, Any]], list[Metric]]] = {
    "warm": _warm_metrics,
    "cold": _cold_metrics,
    "replay": _replay_metrics,
    "documents": _documents_metrics,
}


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("latency", __doc__)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="which parts, comma-separated (all)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="warm: timed runs per side (5)")
    parser.add_argument("--cold-repeats", type=int, default=2, help="cold: cold/warm pairs (2)")
    parser.add_argument("--replays", type=int, default=3, help="replay: replays per variant (3)")
    parser.add_argument("--rounds", type=int, default=3, help="documents: rounds per condition (3)")
    parser.add_argument(
        "--document", default="engine/worker.py", help="cold, replay: the file (engine/worker.py)"
    )
    parser.add_argument(
        "--document-tokens", type=int, default=1500, help="document size in tokens (1500)"
    )
    parser.add_argument(
        "--llama-server", help="documents: the llama-server binary (default: make's)"
    )
    parser.add_argument("--model", help="completion model for both sides (default: the default)")
    parser.add_argument("--json", type=Path, default=RESULTS / "latency.json", help="output file")
    args = parser.parse_args(argv)
    names = [name for name in args.parts.split(",") if name]
    if unknown := set(names) - set(PARTS):
        parser.error(f"no part {sorted(unknown)}; the parts: {', '.join(PARTS)}")
    if "documents" in names and find_binary(args.llama_server) is None:
        log.warning(
            "documents skipped: no llama-server binary (`make llama-server` builds it, about 6 "
            "minutes; or name one with --llama-server or LLAMA_SERVER)"
        )
        names.remove("documents")
    result = _compare.run_parts(args, [PARTS[name] for name in names], args.json)
    config = result["config"]
    return Outcome(
        parameters={
            "parts": names,
            **{k: v for k, v in config.items() if k not in ("model_path", "parts", "llama_server")},
        },
        metrics=[m for name in names for m in METRICS[name](result[name])],
        models=[Path(config["model_path"])],
    )
