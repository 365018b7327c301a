"""Latency: the language server against the raw engine, side by side in one run (DESIGN §6).

Run from the repository root:

    .venv/bin/python bench/latency.py [--repeats 5] [--json PATH]

Warm KV cache on both sides, server `debounceMs` 0: for a few positions in real files, the
time from sending `textDocument/inlineCompletion` to its response, against the raw baseline
(bench/_raw.py: `Llama.generate()`) timed from the call to its last token. Token count: the
server's engine reports how many tokens it generated for the request (`infill/stats`), and raw
generates exactly that many, greedy, on the same ids: the same tokens (the single-line stop
"\\n", the end-of-generation token, or the multi-line early stop, all land on the last of
them). "Warm": each timed request repeats the previous one on the same side, so the KV cache
holds the whole prompt and both sides evaluate one prompt token again (llama-cpp-python's rule
for a fully cached prompt). Ours pays for everything else: JSON-RPC both ways, the snapshot,
mode decision, the context window and tokenizing, the worker hand-off, post-processing. Each
timed request first adds or removes a blank line at the end of the document: that changes
neither the prompt nor the fit, but it keeps the server's type-ahead cache (which answers a
repeated request in a few ms without the model) out of the measurement. Target: ours/raw <=
1.10. The set-up both sides share is in bench/_compare.py.

Prints a table to stdout and writes JSON to bench/results/latency.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/latency.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
from collections.abc import Sequence
from typing import Any

import _compare
from _common import Column, Table, median, ok
from _compare import OursRun, Raw, bust_cache, ours_once
from _lsp import ServerClient
from _raw import RawRun
from _spots import Spot, default_spots

log = _compare.log.getChild("latency")

TARGET_LATENCY = 1.10


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


async def run(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    return {"latency": await bench_latency(client, raw, default_spots(), args.repeats)}


def print_table(result: dict[str, Any]) -> None:
    rows, config = result["latency"], result["config"]
    print(
        f"a. latency, warm KV cache on both sides, debounceMs 0, median of "
        f"{config['repeats']} (same prompt ids, same token count)"
    )
    Table(
        Column("position", 44, "<"),
        Column("mode", 11, "<"),
        Column("prompt", 6),
        Column("tok", 4),
        Column("raw ms", 8, spec=".1f"),
        Column("ours ms", 8, spec=".1f"),
        Column("ours/raw", 8, spec=".3f"),
        Column("paired", 7, spec=".3f"),
        Column("overhead", 8, spec=".1f"),
    ).print(
        (
            row["position"][:44],
            row["mode"] or "-",
            row["prompt_tokens"],
            row["generated_tokens"],
            row["raw_ms"],
            row["ours_ms"],
            row["ratio"],
            row["paired_ratio"],
            row["ours_overhead_ms"],
        )
        for row in rows
    )
    worst = max((row["ratio"] for row in rows), default=float("nan"))
    print(
        f"target ours/raw <= {TARGET_LATENCY}: {ok(worst <= TARGET_LATENCY)} (worst {worst:.3f}); "
        "paired: median of per-repeat ratios;\noverhead: ours minus the server engine's own time "
        "for the same request (its job in infill/stats), ms: what the server adds around the model"
    )
    print()


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per side (5)")


def main(argv: Sequence[str] | None = None) -> int:
    return _compare.main("latency", __doc__ or "", arguments, run, print_table, argv)


if __name__ == "__main__":
    sys.exit(main())
