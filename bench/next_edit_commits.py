"""Next edits on real commits in six languages, through the real server: the first hunk of a
commit's change to a file replayed as the user's edit, then the next edits asked for as an
editor asks, and scored against the hunks that followed.

    python -m bench next_edit_commits [--split tuning|heldout] [--languages python,go]
        [--data FOLDER] [--json PATH]

Cases: third_party/data/next-edit-commits/ (its README names the repositories, one a language,
and how the cases were drawn; bench/commit_corpus.py builds them): a commit's change to one
source file, 2 to 6 hunks of at most 3 lines each, the file cut to a window around them. Each
case belongs to one part for good, from a hash of its commit's id: `tuning` (the default), what
anyone may replay while working on next edits, and `heldout`, replayed once at the end to check
the tuning part's figures. `--data third_party/data/next-edit-commits/second` (and `third`,
`fourth`, `fifth`, `sixth`) are later sets, six other repositories each drawn the same way with
every case held out, for when the held-out part before them has been replayed (their READMEs).

Kinds (bench/_commit_cases.py): hunks that all make the first one's token change, by its shape
(a replacement within one line, one spanning lines, a pure insertion, a pure deletion);
analogous (the others make it with one name changed); other.

Replay, per case, on one server (`python -P -m lsp_server.cli serve`, the models in its
process): `didOpen` of the file before, one `didChange` with the first hunk (trimmed to what it
changes, as an editor reports a paste), then `textDocument/copilotInlineEdit` at the end of the
changed text; the answer's edits are applied and scored with bench/_edits.py's `score`:
- hit: a remaining hunk reproduced exactly and no edit outside the remaining hunks' lines;
- false edit: an edit outside every remaining hunk's lines (or edits that overlap);
- the answer's time, from the request to the response.

Writes every case's outcome to bench/results/next_edit_commits.json; the tables go to stdout.
Targets (the held-out part's): same-change cases at least 60% hit, insertions and deletions
40% each, analogous and other commits 10%; false edits at most 5% of all cases in every
language.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import record
from bench._commit_cases import (
    DATA,
    SAME_CHANGE,
    CaseKind,
    CommitCase,
    Language,
    Split,
    language_id,
    load,
)
from bench._common import RESULTS, ROOT, median, setup_logging, suite_parser, write_json
from bench._edits import Edit, Score, apply_edits, minimal, score, shifted
from bench._lsp import ServerClient
from bench.record import Metric, metric

log = logging.getLogger("bench.next_edit_commits")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What the server's answer did on one case."""

    case: str
    language: Language
    kind: CaseKind
    score: Score
    seconds: float

    @property
    def hit(self) -> bool:
        return self.score.valid and self.score.reproduced > 0 and self.score.false_edits == 0

    @property
    def false_edit(self) -> bool:
        return not self.score.valid or self.score.false_edits > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """Cases, hits and false edits of a group of outcomes; the median answer in ms."""

    cases: int
    hits: int
    false_edits: int
    proposed: int
    median_ms: float

    @property
    def hit_pct(self) -> float:
        return 100 * self.hits / self.cases if self.cases else float("nan")

    @property
    def false_pct(self) -> float:
        return 100 * self.false_edits / self.cases if self.cases else float("nan")


def tally(outcomes: Sequence[Outcome]) -> Tally:
    return Tally(
        cases=len(outcomes),
        hits=sum(o.hit for o in outcomes),
        false_edits=sum(o.false_edit for o in outcomes),
        proposed=sum(o.score.edits > 0 for o in outcomes),
        median_ms=1000 * median(o.seconds for o in outcomes),
    )


#: The rows of the table by kind: each kind, then the same-change kinds together, then all.
def by_kind(outcomes: Sequence[Outcome]) -> dict[str, Tally]:
    rows = {str(k): tally([o for o in outcomes if o.kind is k]) for k in CaseKind}
    rows["same change"] = tally([o for o in outcomes if o.kind in SAME_CHANGE])
    rows["analogous and other"] = tally([o for o in outcomes if o.kind not in SAME_CHANGE])
    rows["all"] = tally(outcomes)
    return rows


def by_language(outcomes: Sequence[Outcome]) -> dict[str, Tally]:
    return {str(lang): tally([o for o in outcomes if o.language is lang]) for lang in Language}


def row(t: Tally) -> str:
    """A row of the tables as text: cases, hits and false edits with their shares."""
    return (
        f"{t.cases} cases, {t.hits} hit ({t.hit_pct:.0f}%), "
        f"{t.false_edits} false edit ({t.false_pct:.1f}%), {t.median_ms:.1f} ms median"
    )


def table(title: str, rows: dict[str, Tally]) -> str:
    lines = [
        f"| {title} | cases | hit | false edit | proposed | median ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in rows.items():
        if not t.cases:
            continue
        lines.append(
            f"| {name} | {t.cases} | {t.hits} ({t.hit_pct:.0f}%) | {t.false_edits} "
            f"({t.false_pct:.1f}%) | {t.proposed} | {t.median_ms:.1f} |"
        )
    return "\n".join(lines)


# --- the replay -----------------------------------------------------------------------------


def case_uri(number: int, case: CommitCase) -> str:
    """A document of its own for every case, named as the file is (the suffix is what a
    client's language id and the server's grammar go by)."""
    return f"file:///bench/commits/{case.language}/{number}/{Path(case.path).name}"


async def replay(client: ServerClient, number: int, case: CommitCase) -> Outcome:
    """The first hunk as the user's edit, the server's next edits, their score."""
    found = case.hunks
    first = minimal(case.before, found[0])
    uri = case_uri(number, case)
    client.open(uri, case.before, language_id(case.path))
    try:
        client.edit(uri, first.start, first.end, first.new_text)
        text = client.text(uri)
        cursor = first.start + len(first.new_text)
        started = time.perf_counter()
        answer = await client.next_edits(uri, cursor)
        seconds = time.perf_counter() - started
    finally:
        client.close(uri)
    assert text == apply_edits(case.before, [first])
    proposed = [Edit(start=start, end=end, new_text=new) for start, end, new in answer]
    return Outcome(
        case=case.name,
        language=case.language,
        kind=case.kind,
        score=score(text, case.after, shifted(found[0], found[1:]), proposed),
        seconds=seconds,
    )


async def run(cases: Sequence[CommitCase]) -> tuple[list[Outcome], dict[str, Any]]:
    client = ServerClient()
    status = await client.start()
    try:
        outcomes = [await replay(client, n, case) for n, case in enumerate(cases)]
    finally:
        await client.stop()
    return outcomes, status


def metrics_of(outcomes: Sequence[Outcome]) -> list[Metric]:
    kinds = by_kind(outcomes)
    languages = by_language(outcomes)
    found = [
        metric("cases", len(outcomes)),
        metric("same-change cases hit", kinds["same change"].hit_pct, "%", target=(">=", 60)),
        metric("insertions hit", kinds[CaseKind.INSERTION].hit_pct, "%", target=(">=", 40)),
        metric("deletions hit", kinds[CaseKind.DELETION].hit_pct, "%", target=(">=", 40)),
        metric("replacements in a line hit", kinds[CaseKind.REPLACE_IN_LINE].hit_pct, "%"),
        metric("replacements across lines hit", kinds[CaseKind.REPLACE_ACROSS_LINES].hit_pct, "%"),
        metric(
            "analogous and other commits hit",
            kinds["analogous and other"].hit_pct,
            "%",
            target=(">=", 10),
        ),
        metric("cases with a false edit", kinds["all"].false_pct, "%", target=("<=", 5)),
        metric(
            "cases with a false edit, worst language",
            max(t.false_pct for t in languages.values() if t.cases),
            "%",
            target=("<=", 5),
        ),
        metric("answer, median", kinds["all"].median_ms, "ms"),
    ]
    # Each row of the two tables as one line, so that the record holds what stdout shows.
    found += [metric(f"kind {name}", row(t)) for name, t in kinds.items() if t.cases]
    found += [metric(f"language {name}", row(t)) for name, t in languages.items() if t.cases]
    return found


def main(argv: Sequence[str] | None = None) -> record.Outcome:
    parser = suite_parser("next_edit_commits", __doc__)
    parser.add_argument(
        "--split",
        type=Split,
        choices=list(Split),
        default=Split.TUNING,
        help="which part (tuning); the held-out part is replayed once, at the end",
    )
    parser.add_argument(
        "--languages",
        default=",".join(Language),
        help=f"comma-separated, of: {', '.join(Language)}",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=DATA,
        help="the cases' folder (third_party/data/next-edit-commits; its second/, third/, "
        "fourth/, fifth/ and sixth/ hold later sets of six other repositories each, all held "
        "out)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=RESULTS / "next_edit_commits.json",
        help="output (bench/results/next_edit_commits.json)",
    )
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    try:
        languages = [Language(name.strip()) for name in args.languages.split(",") if name.strip()]
    except ValueError as error:
        parser.error(str(error))
    cases = load(args.split, languages, args.data)
    log.info("%d cases of the %s part", len(cases), args.split)
    outcomes, status = asyncio.run(run(cases))
    kinds, languages_table = by_kind(outcomes), by_language(outcomes)
    print(table("kind", kinds))
    print()
    print(table("language", languages_table))
    write_json(
        args.json,
        {
            "split": args.split,
            "languages": languages,
            "status": status,
            "by_kind": {k: asdict(t) for k, t in kinds.items()},
            "by_language": {k: asdict(t) for k, t in languages_table.items()},
            "cases": [
                {
                    "case": o.case,
                    "language": o.language,
                    "kind": o.kind,
                    "hit": o.hit,
                    "false_edit": o.false_edit,
                    **asdict(o.score),
                    "ms": 1000 * o.seconds,
                }
                for o in outcomes
            ],
        },
    )
    parameters = {
        "split": str(args.split),
        "languages": [str(x) for x in languages],
        "data": str(args.data.resolve().relative_to(ROOT))
        if args.data.resolve().is_relative_to(ROOT)
        else str(args.data),
    }
    path = status.get("model_path")
    return record.Outcome(
        parameters=parameters,
        metrics=metrics_of(outcomes),
        models=[Path(path)] if path else [],
    )
