"""Suggestions written ahead of time (issue 12, part 3): from accepting a suggestion to the next
one, with the work ahead (`speculativeSuggestions` 2) and without (0), side by side in one run.

Run from the repository root:

    .venv/bin/python bench/ahead.py [--rounds 3] [--files N] [--json PATH]

Two real language servers (bench/_lsp.py), the same settings but for the one setting, the same
default model. Documents: real files of this repository cut after a line that assigns from a
call (`name = call(`, bench/_spots.py), each round's with a first line of its own so that
nothing is cached from before. On each, per side: an automatic request at the cursor; once the
server has finished its work ahead (`infill/stats` "ahead"), the first item is accepted and the
line ending typed (the new line indented as the one before), then a request at the new
cursor: its time from request to response, and whether the model ran for it (the server's log
says which answers were written ahead). The sides take
turns, one computing at a time.

Target: with the work ahead, accepting and going on costs at most a tenth of a warm model
request (the same request without it).

Prints a table; writes bench/results/ahead.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/ahead.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import logging
import re
import time
from typing import Any

from _common import RESULTS, ROOT, Column, Table, median, ok, setup_logging, write_json
from _lsp import ServerClient, apply_item

from engine.text import TAB_WIDTH, leading_whitespace, opens_block

log = logging.getLogger("bench.ahead")
FILES = (
    "engine/worker.py",
    "engine/fim.py",
    "lsp_server/neighbors.py",
    "lsp_server/host.py",
    "engine/backends/llama_cpp.py",
    "lsp_server/action_handlers.py",
)
ASSIGN = re.compile(r"^[ \t]+[\w.]+ = [\w.]+\(.*\)$")
SETTINGS = {"debounceMs": 0}


def spot(path: str, round_number: int) -> tuple[str, int] | None:
    """The file up to its last `name = call(...)` line in its first 200 lines, that line cut
    after the call's `(`, the cursor there; a first line of the round's own. None: no such
    line."""
    lines = (ROOT / path).read_text(encoding="utf-8").split("\n")[:200]
    found = [i for i, line in enumerate(lines) if ASSIGN.match(line)]
    if not found:
        return None
    index = found[-1]
    line = lines[index]
    head = f"# round {round_number}\n"
    # The line cut after its call's `(`: the suggestion writes the arguments.
    text = head + "\n".join([*lines[:index], line[: line.index("(") + 1]]) + "\n"
    return text, len(text) - 1


async def settled(client: ServerClient) -> None:
    deadline = time.monotonic() + 60
    while (await client.client.stats()).get("ahead", {}).get("running"):
        if time.monotonic() > deadline:
            raise TimeoutError("the work ahead never finished")
        await asyncio.sleep(0.01)


def read_log(client: ServerClient) -> list[str]:
    return client.log_file.read_text(encoding="utf-8", errors="replace").splitlines()


async def one(client: ServerClient, uri: str, text: str, cursor: int) -> dict[str, Any] | None:
    client.open(uri, text)
    items, _ = await client.inline(uri, cursor)
    if not items:
        return None
    await settled(client)
    after, _, end = apply_item(text, items[0], cursor)
    line = after[after.rfind("\n", 0, end) + 1 : end]
    indent = leading_whitespace(line)
    if opens_block(line):
        indent += " " * TAB_WIDTH
    client.edit(uri, cursor, cursor, after[cursor:end] + "\n" + indent)
    _, pending = await client.inline(uri, end + 1 + len(indent))
    # The server logs each answer, saying which were written ahead (a job count would also
    # see the work ahead that starts after the answer).
    answers = [line for line in read_log(client) if " inline " in line]
    ran = "(written ahead)" not in answers[-1]
    client.close(uri)
    await settled(client)  # its work ahead after this answer must not slow the other side
    return {"seconds": pending.seconds, "model_ran": ran}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sides = {
        "ahead": ServerClient({**SETTINGS, "speculativeSuggestions": 2}),
        "without": ServerClient({**SETTINGS, "speculativeSuggestions": 0}),
    }
    for client in sides.values():
        await client.start()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    try:
        for round_number in range(args.rounds):
            for path in FILES[: args.files]:
                found = spot(path, round_number)
                if found is None:
                    continue
                text, cursor = found
                outcome = {}
                for name, client in sides.items():
                    uri = (ROOT / f"{path}.r{round_number}.{name}.py").as_uri()
                    outcome[name] = await one(client, uri, text, cursor)
                if all(outcome.values()):
                    for name, value in outcome.items():
                        results[name].append({"file": path, "round": round_number, **value})
            log.info("round %d of %d", round_number + 1, args.rounds)
    finally:
        for client in sides.values():
            await client.stop()
    summary = {
        name: {
            "median_ms": round(median(r["seconds"] for r in runs) * 1000, 1),
            "model_ran": sum(r["model_ran"] for r in runs),
            "requests": len(runs),
        }
        for name, runs in results.items()
        if runs
    }
    return {"summary": summary, "runs": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=len(FILES))
    parser.add_argument("--json", type=Path, default=RESULTS / "ahead.json")
    args = parser.parse_args()
    setup_logging(quiet_engine=False)
    result = asyncio.run(run(args))
    summary = result["summary"]
    print("accepting a suggestion (and the line ending) to the next one, ms from request")
    table = Table(Column("side", 10, "<"), Column("median ms", 10), Column("model ran", 10))
    print(table.titles())
    for name, row in summary.items():
        print(table.row(name, row["median_ms"], f"{row['model_ran']:>5}/{row['requests']}"))
    if "ahead" in summary and "without" in summary:
        ratio = summary["ahead"]["median_ms"] / summary["without"]["median_ms"]
        result["ratio"] = round(ratio, 3)
        print(f"ahead / without: {ratio:.3f} (target <= 0.1: {ok(ratio <= 0.1)})")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
