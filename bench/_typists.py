"""Language servers typing a line each at once against one model server (bench/remote.py's
part b, bench/editors.py): the typists, one line typed and timed, the rounds, and the ratios
of typing together over typing alone.

A typist is a real language server (bench/_lsp.py) with a document of its own, cut from this
repository's files (bench/_spots.py). It types the document's line from its indentation, one
character every 60 ms with a request per character (latest-wins supersedes the older); what
is measured is the time from its last keystroke to the answer to it. Typing together, the
shorter lines start later, so that every last keystroke comes at the same moment.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from _common import median
from _compare import SETTLE_S, bust_cache
from _lsp import KEYSTROKE_S, ServerClient
from _spots import TypingDoc

from lsp_server.client import insert_text_of

log = logging.getLogger("bench.typing")

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
    may add what the model server says of it (bench/editors.py: the engine server's jobs)."""
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
