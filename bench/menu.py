"""The completion menu against inline completion, on the same typing in one run.

    python -m bench menu [--file engine/worker.py] [--lines 8] [--keystroke-ms 150]
        [--pause-ms 600] [--wait-ms 500] [--json PATH]

Real lines of a real file are typed again, one character every `--keystroke-ms`, in a
document that holds the file up to that line. After each keystroke the client asks, as each
kind of client does: an inline request (VS Code, a request per keystroke, each superseding the
last), or a menu request (nvim-cmp, blink.cmp, lsp-mode: a `textDocument/completion` per
keystroke while the list is incomplete). Then the user pauses for `--pause-ms` and the menu
client asks once more (company and Helix ask once the user pauses, and nothing more until the
next key). Each line is typed twice, in two copies of the document, once per kind of request,
on the same server (`completionMenu` on, the default wait or `--wait-ms`), after one request at
the line's start that brings the text before it into the KV cache.

Figures, per line typed and over all lines:
- the time from the first keystroke to the first answer with a suggestion in it, menu and
  inline, and their ratio (target: the menu within 1.5x inline's);
- how long a menu request takes to be answered (target: its 95th percentile within the wait
  and 100 ms), and the share of menu requests answered with a suggestion;
- the share of lines whose pause request shows a suggestion (what a company or Helix user
  sees).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    ROOT,
    median,
    percentile,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._lsp import ServerClient, position_of
from bench.record import Metric, Outcome, metric

log = logging.getLogger("bench.menu")


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """One request's answer: when it was sent (seconds from the line's first keystroke), how
    long it took, and how many suggestions it carried."""

    sent_s: float
    took_s: float
    items: int


def lines_to_type(text: str, count: int) -> list[int]:
    """Indices of `count` lines spread over the file's second half that a person types: code
    of 16 characters or more after the indentation, not a comment or a decorator."""
    lines = text.split("\n")
    picked = [
        i
        for i in range(len(lines) // 2, len(lines))
        if len(lines[i].strip()) >= 16 and not lines[i].lstrip().startswith(("#", "@", '"'))
    ]
    if len(picked) <= count:
        return picked
    step = len(picked) / count
    return [picked[int(k * step)] for k in range(count)]


def _items(result: Any) -> int:
    if result is None:
        return 0
    items = getattr(result, "items", result)
    return len(items) if isinstance(items, Sequence) else 0


async def _ask(future: concurrent.futures.Future[Any], started: float, sent: float) -> Answer:
    result = await asyncio.wrap_future(future)
    return Answer(sent_s=sent - started, took_s=time.perf_counter() - sent, items=_items(result))


async def type_line(
    client: ServerClient,
    uri: str,
    base: str,
    start: int,
    typed: str,
    *,
    menu: bool,
    keystroke_s: float,
    pause_s: float,
) -> tuple[list[Answer], Answer | None]:
    """Type `typed` at `start` of the document `base`, asking after each keystroke; the menu
    also asks once after the pause. Every request's answer, and the pause request's."""
    client.open(uri, base)
    # The user has been working here: the text before the line is in the KV cache for both
    # kinds of request alike (one inline request at the line's start, answered before typing).
    await client.inline(uri, start)
    ids = itertools.count()
    started = time.perf_counter()
    asks = []
    for k, char in enumerate(typed):
        delay = started + k * keystroke_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        client.edit(uri, start + k, start + k, char)
        position = position_of(client.text(uri), start + k + 1)
        sent = time.perf_counter()
        msg_id = f"menu-bench-{uri}-{next(ids)}"
        future = (
            client.client.send_completion(uri, position, msg_id=msg_id)
            if menu
            else client.client.send_inline(uri, position, msg_id=msg_id)
        )
        asks.append(asyncio.ensure_future(_ask(future, started, sent)))
    answers = list(await asyncio.gather(*asks))
    pause = None
    if menu:
        await asyncio.sleep(pause_s)
        position = position_of(client.text(uri), start + len(typed))
        sent = time.perf_counter()
        future = client.client.send_completion(uri, position, msg_id=f"menu-bench-{uri}-pause")
        pause = await _ask(future, started, sent)
    client.close(uri)
    return answers, pause


def first_item_s(answers: Sequence[Answer]) -> float | None:
    """From the first keystroke to the first answer that carried a suggestion."""
    times = [a.sent_s + a.took_s for a in answers if a.items]
    return min(times) if times else None


async def run(args: Any) -> tuple[dict[str, Any], list[Metric]]:
    settings: dict[str, Any] = {"completionMenu": "on"}
    if args.wait_ms is not None:
        settings["completionMenuWaitMs"] = args.wait_ms
    client = ServerClient(settings)
    status = await client.start()
    text = (ROOT / args.file).read_text(encoding="utf-8")
    runs = []
    try:
        for number, index in enumerate(lines_to_type(text, args.lines)):
            lines = text.split("\n")
            line = lines[index]
            indent = line[: len(line) - len(line.lstrip())]
            typed = line.strip()[: args.chars]
            base = "\n".join([*lines[:index], indent])
            start = len(base)
            row: dict[str, Any] = {"line": index + 1, "typed": typed}
            for menu in (False, True):
                uri = f"file:///bench/menu/{'menu' if menu else 'inline'}-{number}.py"
                answers, pause = await type_line(
                    client,
                    uri,
                    base,
                    start,
                    typed,
                    menu=menu,
                    keystroke_s=args.keystroke_ms / 1000,
                    pause_s=args.pause_ms / 1000,
                )
                kind = "menu" if menu else "inline"
                row[kind] = {
                    "first_item_s": first_item_s(answers),
                    "answers": [asdict(a) for a in answers],
                    "pause": None if pause is None else asdict(pause),
                }
            runs.append(row)
            log.info(
                "line %d: first item inline %s s, menu %s s",
                index + 1,
                row["inline"]["first_item_s"],
                row["menu"]["first_item_s"],
            )
    finally:
        await client.stop()

    wait_ms = float(settings.get("completionMenuWaitMs", 500))
    menu_answers = [Answer(**a) for r in runs for a in r["menu"]["answers"]]
    inline_first = [r["inline"]["first_item_s"] for r in runs if r["inline"]["first_item_s"]]
    menu_first = [r["menu"]["first_item_s"] for r in runs if r["menu"]["first_item_s"]]
    both = [
        r["menu"]["first_item_s"] / r["inline"]["first_item_s"]
        for r in runs
        if r["menu"]["first_item_s"] and r["inline"]["first_item_s"]
    ]
    pauses = [r["menu"]["pause"] for r in runs if r["menu"]["pause"] is not None]
    metrics = [
        metric(
            "first suggestion after the first keystroke, inline, median", _ms(inline_first), "ms"
        ),
        metric("first suggestion after the first keystroke, menu, median", _ms(menu_first), "ms"),
        metric(
            "first suggestion, menu / inline, median of lines with both",
            median(both) if both else None,
            target=("<=", 1.5),
        ),
        metric(
            "menu request answered in, 95th percentile",
            percentile([a.took_s for a in menu_answers], 0.95) * 1000,
            "ms",
            target=("<=", wait_ms + 100),
        ),
        metric(
            "menu requests answered with a suggestion",
            100 * sum(a.items > 0 for a in menu_answers) / max(1, len(menu_answers)),
            "%",
        ),
        metric(
            "lines whose pause request shows a suggestion",
            100 * sum(p["items"] > 0 for p in pauses) / max(1, len(pauses)),
            "%",
        ),
        metric("lines typed", len(runs)),
    ]
    result = {"status": status, "settings": settings, "runs": runs}
    return result, metrics


def _ms(values: Sequence[float]) -> float | None:
    return median(values) * 1000 if values else None


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("menu", __doc__)
    parser.add_argument("--file", default="engine/worker.py", help="the file whose lines are typed")
    parser.add_argument("--lines", type=int, default=8, help="lines typed (8)")
    parser.add_argument("--chars", type=int, default=12, help="characters typed a line (12)")
    parser.add_argument("--keystroke-ms", type=float, default=150, help="between keys (150)")
    parser.add_argument("--pause-ms", type=float, default=600, help="the pause after (600)")
    parser.add_argument("--wait-ms", type=int, default=None, help="completionMenuWaitMs")
    parser.add_argument("--json", type=Path, default=RESULTS / "menu.json", help="output file")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    result, metrics = asyncio.run(run(args))
    write_json(args.json, result)
    parameters = {
        "file": args.file,
        "lines": args.lines,
        "chars": args.chars,
        "keystroke_ms": args.keystroke_ms,
        "pause_ms": args.pause_ms,
        "wait_ms": result["settings"].get("completionMenuWaitMs", "default"),
        "model": result["status"].get("model"),
    }
    path = result["status"].get("model_path")
    return Outcome(parameters=parameters, metrics=metrics, models=[Path(path)] if path else [])
