"""A next-edit model's time per rewrite: the baseline drafts from the document must beat.

Run from the repository root:

    .venv/bin/python bench/next_edit_rewrite.py [--cases 12] [--model PATH] [--format zeta1]
                                                [--json PATH]

A next-edit model rewrites the region around the cursor (lsp_server/next_edit/region.py: the
cursor's line, 2 lines above and 6 below), and most of what it writes is a copy of that
region. Each case is a HumanEval program (third_party/data, written by others) in which the user
has just renamed the function's first parameter in its `def` line; the region and the prompt
are built as the language server builds them (edit history, `region_input`, the format's
prompt), and the rewrite runs through `NextEditModel.rewrite`, the one place rewrites are
generated.

Two rows per run:
- "rewrite, as answered": the rewrite as the model wrote it, to its end marker or its token
  limit (twice the region's tokens plus 64). The default model (Gemma 3 270M base) is no
  next-edit model: it is run in the Zeta v1 format it was never trained on, so its answers are
  no valid rewrites and run to the limit; its time per token is what counts.
- "a copy of the region": the same prompt, and exactly as many tokens as a rewrite that
  changes one line writes (the region and the format's markers), token by token. This is what
  a trained next-edit model's rewrite costs today, and what prompt lookup (drafts copied from
  the region, checked in one forward pass) is measured against.

Prints a table to stdout and writes JSON to bench/results/next_edit_rewrite.json; logs go to
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    Column,
    Table,
    humaneval_rows,
    median,
    setup_logging,
    suite_parser,
    write_json,
)
from engine.engine import Engine
from engine.models import load_backend, model_spec
from engine.next_edit import NEXT_EDIT_FAMILIES
from engine.next_edit_model import NextEditModel, RewriteOutcome
from engine.specs import ModelOptions, ModelSpec
from engine.types import GenerationRequest, Role, SamplingParams, StopConditions
from lsp_server.documents import DocumentSnapshot
from lsp_server.next_edit.history import EditHistory
from lsp_server.next_edit.region import region_input

_DEF = re.compile(r"^def \w+\((\w+)", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """A program before and after the user renamed its first parameter in the `def` line,
    and the cursor after the new name."""

    name: str
    before: str
    after: str
    cursor: int


def cases(count: int) -> list[Case]:
    """The first `count` HumanEval programs whose function takes a parameter."""
    programs: dict[str, str] = {}
    for row in humaneval_rows():
        task = row["task_id"].rsplit("/", 1)[0]
        programs.setdefault(task, row["prompt"] + row["canonical_solution"] + row["suffix"])
    found = []
    for task, program in programs.items():
        match = _DEF.search(program)
        if match is None or len(match[1]) < 2:
            continue
        new = match[1] + "_in"
        after = program[: match.start(1)] + new + program[match.end(1) :]
        found.append(Case(name=task, before=program, after=after, cursor=match.start(1) + len(new)))
        if len(found) == count:
            break
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    case: str
    region_tokens: int
    prompt_tokens: int
    outcome: str
    rewrite_tokens: int
    rewrite_seconds: float
    first_token_seconds: float
    copy_tokens: int
    copy_seconds: float


async def measure(model: NextEditModel, case: Case, index: int) -> Measured:
    history = EditHistory()
    uri = f"file:///bench/{case.name.replace('/', '_')}.py"
    history.opened(uri, case.before)
    history.changed(uri, case.after, now=0.0)
    snap = DocumentSnapshot.at(case.after, case.cursor, uri=uri)
    region = region_input(snap, history.recent(), model.count_tokens)
    given = region.given
    rewrite = await model.rewrite(given, cache_key=f"rewrite-{index}")
    # A copy's length: the format's answer holding the region unchanged, in this model's
    # tokens (the markers as they are written: text for a model that lacks them as tokens).
    answer = _answer(model, given.region)
    copy_tokens = model.count_tokens(answer)
    request, _ = model.request(given, cache_key=f"copy-{index}")
    copy = GenerationRequest(
        prompt_token_ids=request.prompt_token_ids,
        prompt=request.prompt,
        role=Role.NEXT_EDIT,
        sampling=SamplingParams(max_tokens=copy_tokens, temperature=0.0),
        stops=StopConditions(ignore_eos=True),
        cache_key=f"rewrite-{index}",  # the same document: its prompt is in the cache
    )
    started = time.perf_counter()
    first: float | None = None
    async with contextlib.aclosing(model.engine.generate(copy)) as deltas:
        async for _delta in deltas:
            if first is None:
                first = time.perf_counter() - started
    decode = time.perf_counter() - started - (first or 0.0)
    return Measured(
        case=case.name,
        region_tokens=model.count_tokens(given.region),
        prompt_tokens=rewrite.prompt_tokens,
        outcome=rewrite.outcome.value,
        rewrite_tokens=rewrite.output_tokens,
        rewrite_seconds=rewrite.seconds,
        first_token_seconds=rewrite.first_token_seconds or 0.0,
        copy_tokens=copy_tokens,
        # The cold prompt as the rewrite met it, then the copy's tokens one by one.
        copy_seconds=(rewrite.first_token_seconds or 0.0) + decode,
    )


def _answer(model: NextEditModel, region: str) -> str:
    if model.format.family == "zeta1":
        return f"<|editable_region_start|>\n{region}\n<|editable_region_end|>"
    return f"{region}\n>>>>>>> UPDATED"


def print_table(measured: Sequence[Measured], model_name: str) -> dict[str, Any]:
    table = Table(
        Column("path", 24, "<"),
        Column("cases", 6),
        Column("region tok", 10, spec=".0f"),
        Column("prompt tok", 10, spec=".0f"),
        Column("written tok", 11, spec=".0f"),
        Column("first token ms", 14, spec=".0f"),
        Column("ms per rewrite", 14, spec=".0f"),
        Column("tok/s", 7, spec=".1f"),
    )
    rows = {
        "rewrite, as answered": (
            [m.rewrite_tokens for m in measured],
            [m.rewrite_seconds for m in measured],
        ),
        "a copy of the region": (
            [m.copy_tokens for m in measured],
            [m.copy_seconds for m in measured],
        ),
    }
    summary: dict[str, Any] = {"model": model_name, "cases": len(measured)}
    print(f"next-edit rewrites on {model_name}, {len(measured)} cases")
    table_rows = []
    for name, (tokens, seconds) in rows.items():
        decode = [
            t / max(s - m.first_token_seconds, 1e-9)
            for t, s, m in zip(tokens, seconds, measured, strict=True)
        ]
        entry = {
            "written_tokens": median(tokens),
            "ms_per_rewrite": median(seconds) * 1000,
            "tokens_per_second": median(decode),
        }
        summary[name] = entry
        table_rows.append(
            (
                name,
                len(measured),
                median(m.region_tokens for m in measured),
                median(m.prompt_tokens for m in measured),
                entry["written_tokens"],
                median(m.first_token_seconds for m in measured) * 1000,
                entry["ms_per_rewrite"],
                entry["tokens_per_second"],
            )
        )
    table.print(table_rows)
    outcomes: dict[str, int] = {}
    for m in measured:
        outcomes[m.outcome] = outcomes.get(m.outcome, 0) + 1
    summary["outcomes"] = outcomes
    print("rewrite outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return summary


async def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = model_spec(Role.NEXT_EDIT, ModelOptions(next_edit_model=args.model))
    if not isinstance(spec, ModelSpec):
        raise SystemExit("the benchmark runs a local model")
    engine = Engine(load_backend(spec))
    try:
        model = NextEditModel.of(engine, args.format)
        if model is None:
            raise SystemExit(f"{engine.info.path}: no next-edit format (name one with --format)")
        measured = [await measure(model, case, i) for i, case in enumerate(cases(args.cases))]
        if any(m.outcome == RewriteOutcome.FAILED for m in measured):
            raise SystemExit("a rewrite failed: see the log")
        summary = print_table(measured, engine.info.name)
        summary["format"] = model.format.family
        summary["per_case"] = [_row(m) for m in measured]
        return summary
    finally:
        engine.close()


def _row(m: Measured) -> dict[str, Any]:
    return {name: getattr(m, name) for name in Measured.__slots__}


def main(argv: Sequence[str] | None = None) -> int:
    parser = suite_parser("next_edit_rewrite", __doc__)
    parser.add_argument("--cases", type=int, default=12, help="HumanEval programs (default 12)")
    parser.add_argument("--model", help="a next-edit model (default: the completion model)")
    parser.add_argument(
        "--format",
        default="zeta1",
        choices=sorted(NEXT_EDIT_FAMILIES),
        help="its next-edit format (default zeta1)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "next_edit_rewrite.json")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    summary = asyncio.run(run(args))
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
