"""Keystroke replay: the language server while the user types, against one warm request
(DESIGN §6).

Run from the repository root:

    .venv/bin/python bench/replay.py [--replays 3] [--replay-debounce-ms N]
                                     [--document engine/worker.py] [--json PATH]

Server default debounce: a line of a document of about 1,500 tokens (bench/_spots.py), typed
one character every 60 ms from its indentation (`didChange` per character, then an inline
request per character as VS Code sends them, each superseding the last), once with
latest-wins alone and once with `$/cancelRequest` for the previous request too. Reported: time
from the last keystroke to its suggestion against a single warm request at the same place (the
line typed but for its last character, one request answered, then the last character, the
blank-line edit and a timed request); and the tokens the engine generated for superseded
requests (its jobs in `infill/stats` that finished "cancelled"). Targets: ratio <= 1.3; at
most 2 tokens per superseded request. The set-up is in bench/_compare.py.

Prints a table to stdout and writes JSON to bench/results/replay.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/replay.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import _compare
from _common import Column, Table, median, ok
from _compare import Raw, bust_cache
from _lsp import KEYSTROKE_S, ServerClient
from _spots import TypingDoc, add_document_arguments, typing_doc

from lsp_server.client import insert_text_of
from lsp_server.settings import Settings

log = _compare.log.getChild("replay")

TARGET_REPLAY = 1.3
TARGET_SUPERSEDED_TOKENS = 2


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


async def run(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    doc = typing_doc(args.document, args.document_tokens, raw.count)
    return {"replay": await bench_replay(client, doc, args.replays, args.replay_debounce_ms)}


def print_table(result: dict[str, Any]) -> None:
    rp, config = result["replay"], result["config"]
    print(
        f"c. keystroke replay: {rp['document']}:{rp['line']}, one character every "
        f"{rp['keystroke_ms']:.0f} ms, debounceMs {rp['debounce_ms']} (server default), "
        f"median of {config['replays']}"
    )
    table = Table(
        Column("variant", 16, "<"),
        Column("keys", 4),
        Column("last key ms", 11, spec=".1f"),
        Column("single ms", 9, spec=".1f"),
        Column("ratio", 6, spec=".2f"),
        Column("superseded jobs", 15),
        Column("tokens max", 10),
        Column("mean", 5, spec=".2f"),
    )
    print(table.header())
    ok_ratio = ok_tokens = True
    for name, v in rp["variants"].items():
        print(
            table.row(
                name,
                v["runs"][0]["keystrokes"],
                v["last_keystroke_to_suggestion_ms"],
                v["single_warm_request_ms"],
                v["ratio"],
                v["superseded_jobs"],
                v["superseded_tokens_max"],
                v["superseded_tokens_mean"],
            )
        )
        ok_ratio &= v["ratio"] <= TARGET_REPLAY
        ok_tokens &= v["superseded_tokens_max"] <= TARGET_SUPERSEDED_TOKENS
        outcomes = [r["outcomes"] for r in v["runs"]]
        early = [r["jobs_finished_before_next_key"] for r in v["runs"]]
        skipped = [r["requests_without_engine_job"] for r in v["runs"]]
        print(
            f"  responses {outcomes}; jobs that finished before the next key {early}; "
            f"requests that never reached the engine {skipped}"
        )
    print(
        f"targets: ratio <= {TARGET_REPLAY}: {ok(ok_ratio)}; superseded tokens <= "
        f"{TARGET_SUPERSEDED_TOKENS} each: {ok(ok_tokens)}"
    )


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replays", type=int, default=3, help="replays per variant (3)")
    add_document_arguments(parser)
    parser.add_argument(
        "--replay-debounce-ms",
        type=int,
        default=Settings().debounce_ms,
        help=f"the server's debounce (default: its own, {Settings().debounce_ms})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    return _compare.main("replay", __doc__ or "", arguments, run, print_table, argv)


if __name__ == "__main__":
    sys.exit(main())
