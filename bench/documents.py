"""Many warm documents: cold, warm and coming back to a file, against llama-server (DESIGN §6).

Run from the repository root (`make llama-server` first: a benchmark-only build of llama.cpp's
own server from the sources llama-cpp-python vendors; without it this benchmark says so and
skips itself):

    .venv/bin/python bench/documents.py [--rounds 3] [--document-tokens 1600] [--json PATH]

Three requests a user makes all day, on documents cut from this repository's files (a first
line unique to each round, so nothing is cached from before), the cursor after the first `(` of
an assignment near the end; the whole prefix is the prompt (`prefixTokens` 4096: about 1,400
to 1,500 tokens), `debounceMs` 0:

- cold: the first request on document A;
- warm: the same after typing the line's next character;
- back: the same again after one request on another document B.

Four sides, in turn, never computing at the same time, on the same prompt
(`lsp_server.inline.build_prompt`: token ids for the raw engine, its text for llama-server,
which tokenizes it as our server tokenizes the document) and the same number of generated
tokens: ours (the real
server over stdio), llama-server with every core (`-t N -tb N -np 4`, `cache_prompt`), llama-
server with one thread (the configuration of the issue's first measurement), and the raw engine
(bench/_raw.py: llama-cpp-python, one KV cache, every core). Then the same rounds again with one
competing CPU-bound process (a Python busy loop), and ours against its idle self. First of
all, on the fresh server, its resident memory after requests in 1, 5 and 20 documents
(`infill/status` says how many states it keeps).

Targets: back within 1.5x of warm; cold at most 1.1x and warm at most 1.0x llama-server with
every core; loaded at most 2x idle, request by request.

Prints a table to stdout and writes JSON to bench/results/documents.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/documents.py` puts bench/ first on sys.path, where bench/engine.py would shadow
# the `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import subprocess
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import _compare
from _common import Column, Table, median, ok, rss_kib
from _compare import SETTLE_S, Raw, bust_cache, ours_once
from _lsp import ServerClient
from _servers import LlamaServer, find_binary
from _spots import NoLineToType, TypingDoc, typing_doc

from engine.threads import usable_cores

log = _compare.log.getChild("documents")

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
TARGET_WARM = 1.0
TARGET_LOADED = 2.0  # loaded / idle, ours
KEPT = (1, 5, 20)


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


async def run(client: ServerClient, raw: Raw, args: argparse.Namespace) -> dict[str, Any]:
    binary = find_binary(args.llama_server)
    assert binary is not None  # checked in main()
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


def print_table(result: dict[str, Any]) -> None:
    idle, loaded = result["idle"]["median_s"], result["loaded"]["median_s"]
    runs = result["idle"]["runs"]
    print(
        f"many documents: prompts of {min(r['prompt_tokens'] for r in runs)} to "
        f"{max(r['prompt_tokens'] for r in runs)} tokens, debounceMs 0, median of {len(runs)} "
        "rounds; seconds from request to response"
    )
    Table(
        Column("side", 34, "<"),
        *(Column(step, 7, spec=".3f") for step in STEPS),
        Column("loaded: cold", 12, spec=".3f", gap="   "),
        *(Column(step, 7, spec=".3f") for step in ("warm", "back")),
    ).print(
        (side, *(idle[side][s] for s in STEPS), *(loaded[side][s] for s in STEPS)) for side in idle
    )
    ours = idle["ours"]
    best_peer = next(
        (s for s in idle if s.startswith("llama-server -t") and " -t 1 " not in s), None
    )
    back = ours["back"] / ours["warm"]
    print(f"back / warm (ours) <= {TARGET_BACK}: {ok(back <= TARGET_BACK)} ({back:.2f})")
    if best_peer is not None:
        cold = ours["cold"] / idle[best_peer]["cold"]
        warm = ours["warm"] / idle[best_peer]["warm"]
        print(f"cold ours / {best_peer} <= {TARGET_COLD}: {ok(cold <= TARGET_COLD)} ({cold:.2f})")
        print(f"warm ours / {best_peer} <= {TARGET_WARM}: {ok(warm <= TARGET_WARM)} ({warm:.2f})")
    # Loaded against idle: per step, the medians; and request by request, round i loaded
    # against round i idle (the same files) where both generated as many tokens.
    medians = {step: loaded["ours"][step] / ours[step] for step in STEPS}
    pairs = [
        lo["sides"]["ours"][step]["seconds"] / idle_run["sides"]["ours"][step]["seconds"]
        for idle_run, lo in zip(result["idle"]["runs"], result["loaded"]["runs"], strict=False)
        for step in STEPS
        if lo["sides"]["ours"][step]["generated"] == idle_run["sides"]["ours"][step]["generated"]
    ]
    worst = max([*medians.values(), *pairs])
    print(
        f"loaded / idle (ours) <= {TARGET_LOADED}: {ok(worst <= TARGET_LOADED)} (medians "
        + ", ".join(f"{step} {value:.2f}" for step, value in medians.items())
        + f"; worst of {len(pairs)} matched requests {max(pairs, default=float('nan')):.2f})"
    )
    print()
    print("resident memory of the server (completion and chat models loaded)")
    for row in result["memory"]:
        kv = row["kv_cache"] or {}
        print(
            f"  {row['documents']:>2} documents used: RSS {row['rss_mib']:7.0f} MiB, kept "
            f"{kv.get('documents', 0)} states, {kv.get('bytes', 0) / 2**20:6.0f} MiB of "
            f"{kv.get('budget_bytes', 0) / 2**20:.0f} MiB"
        )
    print()


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="rounds per condition (3)")
    parser.add_argument(
        "--document-tokens",
        type=int,
        default=1600,
        help="document size in tokens (1600: prompts of about 1,400 to 1,500 tokens)",
    )
    parser.add_argument("--llama-server", help="the llama-server binary (default: make's)")


def main(argv: Sequence[str] | None = None) -> int:
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--llama-server")
    known, _ = probe.parse_known_args(argv)
    if find_binary(known.llama_server) is None:
        print(
            "bench/documents.py skipped: no llama-server binary (build it with `make "
            "llama-server`, about 6 minutes, or name one with --llama-server or LLAMA_SERVER)"
        )
        return 0
    # The whole prefix in the prompt, so that each round's first line makes it new.
    settings = {"prefixTokens": 4096}
    return _compare.main("documents", __doc__ or "", arguments, run, print_table, argv, settings)


if __name__ == "__main__":
    sys.exit(main())
