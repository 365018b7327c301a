"""Warm versus cold: the language server on a long document, against the raw engine (DESIGN §6).

Run from the repository root:

    .venv/bin/python bench/warm_cold.py [--cold-repeats 2] [--document engine/worker.py]
                                        [--document-tokens 1500] [--json PATH]

A document of about 1,500 tokens (the first lines of a repository file), the cursor after the
first `(` of an assignment near its end. Cold: the first request on a new document (its first
line differs from every earlier one, so the server's KV cache shares nothing past the first
comment token). Warm: the same, after typing the line's next character (`didChange`, then a
new request; a blank-line edit at the end of the document keeps the type-ahead cache out).
`debounceMs` 0. Target: warm < cold / 4. Raw cold (`reset()` first) and raw warm on the same
prompts are shown alongside (bench/_raw.py), and the type-ahead cache's own case (typing the
warm suggestion's first character) after them. The set-up both sides share is in
bench/_compare.py.

Prints a table to stdout and writes JSON to bench/results/warm_cold.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/warm_cold.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
from collections.abc import Sequence
from typing import Any

import _compare
from _common import Column, Table, median, ok, shared_prefix
from _compare import OursRun, Raw, bust_cache, ours_once
from _lsp import ServerClient
from _spots import TypingDoc, add_document_arguments, typing_doc

log = _compare.log.getChild("warm_cold")

TARGET_WARM = 0.25


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
        "runs": runs,
    }


async def run(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    doc = typing_doc(args.document, args.document_tokens, raw.count)
    return {"warm_cold": await bench_warm_cold(client, raw, doc, args.cold_repeats)}


def print_table(result: dict[str, Any]) -> None:
    wc = result["warm_cold"]
    print(
        f"b. warm vs cold: {wc['document']}, {wc['document_tokens']} tokens, cursor on line "
        f"{wc['cursor_line']}, then {wc['typed']!r} typed; debounceMs 0, median of "
        f"{len(wc['runs'])}"
    )
    Table(
        Column("side", 6, "<"),
        Column("cold ms", 9, spec=".1f"),
        Column("warm ms", 9, spec=".1f"),
        Column("warm/cold", 10, spec=".3f"),
    ).print(
        [
            ("ours", wc["cold_ms"], wc["warm_ms"], wc["ratio"]),
            ("raw", wc["raw_cold_ms"], wc["raw_warm_ms"], wc["raw_ratio"]),
        ]
    )
    print(
        f"typing the warm suggestion's first character next: {wc['type_ahead_ms']:.1f} ms "
        f"(type-ahead cache; engine jobs: {wc['type_ahead_engine_jobs']})"
    )
    run0 = wc["runs"][0]
    cold_ms, warm_ms = run0["cold_engine_first_token_ms"], run0["warm_engine_first_token_ms"]
    print(
        f"prompt {run0['cold_prompt_tokens']} tokens cold, {run0['warm_prompt_tokens']} warm "
        f"({run0['prompt_tokens_shared']} shared); engine first token "
        f"{'-' if cold_ms is None else f'{cold_ms:.0f}'} ms cold, "
        f"{'-' if warm_ms is None else f'{warm_ms:.0f}'} ms warm; "
        f"target warm < {TARGET_WARM} x cold: {ok(wc['ratio'] < TARGET_WARM)}"
    )
    print()


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cold-repeats", type=int, default=2, help="cold/warm pairs (2)")
    add_document_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    return _compare.main("warm_cold", __doc__ or "", arguments, run, print_table, argv)


if __name__ == "__main__":
    sys.exit(main())
