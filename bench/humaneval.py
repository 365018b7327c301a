"""HumanEval single-line infilling: the raw engine against the real server, in one run.

    python -m bench humaneval [--limit 100 | --all] [--layouts hole,blank,indent]
                              [--timeout 5] [--json PATH]

Tasks: `third_party/data/human-eval-infilling/HumanEval-SingleLineInfilling.jsonl.gz` (1033).
By default 100 of them, spread evenly over the whole set: task `i * 1033 // 100` for i in
0..99 (`--limit N` takes N the same way, `--all` takes every task, `--tasks ID ...` names them).
The completion model is the default one (or `--model`), greedy in both variants:

- raw: the engine in this process (`Engine.generate`), prompt = the task's `prompt` (the text
  before the hole) alone, stop at "\\n", at most `maxTokensSingleLine` tokens (the server's
  single-line limit, 48); the hidden "\\n" is given back. This is the data README's baseline
  (37 of 100 measured there, on a selection it does not name).
- ours: the real server (`python -P -m lsp_server.cli serve`, stdio, pygls client, `debounceMs` 0),
  an automatic inline request at the hole, the returned item applied (insert text over its
  range) and the resulting document scored. One document per task and layout (`--layouts`):
  - "hole" (the default): `prompt + suffix`, the cursor at the end of `prompt`. The hole is
    empty, so the cursor sits at column 0 of the line after it, before that line's code; an
    item without a trailing "\\n" fuses with that line. Scored as applied ("hole"), and again
    with a "\\n" given back after the inserted text ("hole_nl", as the raw baseline gets it),
    which isolates everything else.
  - "blank": `prompt + "\\n" + suffix`, the cursor on an empty line at the hole, column 0: the
    user opened a line there (or moved to an empty one).
  - "indent": `prompt + indent + "\\n" + suffix`, the cursor after `indent`, the indentation of
    the expected line: what an auto-indenting editor usually shows after Enter (it leaks that
    indentation, which an editor gets right most of the time).
  The model sees the same prompt in all of these (the server's fallback for a model without
  FIM tokens is the prefix alone; the prefix is `prompt`, and a whitespace-only cursor line is
  left out of the prompt), so differences from raw come from the mode decision and
  post-processing, and from one effect of the engine: after the first layout's request the
  prompt is fully cached, its last token is evaluated again on its own, and llama.cpp's
  numbers then differ slightly from a whole-prompt evaluation (a greedy tie can flip).

Score: `program + "\\n" + test + "\\n" + f"check({entry_point})"` run with this Python in a
subprocess (`-I`, `--timeout` seconds), pass = exit status 0; pass@1 with greedy decoding.
A suggestion "duplicates the suffix" when its text, stripped, equals the first non-blank line
of the document after the cursor, or when a line of the applied result that the insertion
touched equals (stripped) the first non-blank line after the insertion. "Empty": no item.

The model runs in one process at a time: raw first (then its model is closed), then the
server; programs are scored afterwards, two at a time. On a two-core CPU: about 5
minutes for the default (100 tasks, "hole"); each more layout adds 2 to 4 minutes.
Writes per-task outcomes to bench/results/humaneval.json; logs go to stderr. Targets: ours
passes at least as many tasks as raw, and no suggestion duplicates the suffix.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import (
    HUMAN_EVAL,
    HUMAN_EVAL_RANDOM_SPAN,
    RESULTS,
    humaneval_rows,
    local_spec,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._compare import raw_line_request, run_on_raw_engine, server_options
from bench._lsp import ServerClient, apply_item, mode_at
from bench.record import Metric, Outcome, metric
from engine.engine import Engine
from engine.types import Role
from lsp_server.client import insert_text_of
from lsp_server.host import model_specs
from lsp_server.settings import Settings

log = logging.getLogger("bench.humaneval")

LAYOUTS = ("hole", "blank", "indent")
DEFAULT_LAYOUTS = ("hole",)
LABELS = {
    "raw": 'raw: prefix only, stop at "\\n" (+ "\\n")',
    "hole": "ours, doc prompt+suffix, as applied",
    "hole_nl": 'ours, doc prompt+suffix, + "\\n"',
    "blank": 'ours, doc prompt+"\\n"+suffix',
    "indent": 'ours, doc prompt+indent+"\\n"+suffix',
}


def variants_of(layouts: Sequence[str], changes: Sequence[str], *, single_line: bool) -> list[str]:
    """Scored variants: raw, and ours per layout ("hole_nl": hole with "\\n" given back, for
    single-line holes), then the same with each changed setting ("hole+suffixRanking=on")."""
    out = ["raw"]
    for change in ["", *changes]:
        tail = f"+{change}" if change else ""
        for layout in layouts:
            nl = ["hole_nl"] if layout == "hole" and single_line else []
            out += [f"{v}{tail}" for v in [layout, *nl]]
    return out


def layout_of(variant: str) -> str:
    """The server run a variant comes from: its layout and its changed setting."""
    return variant.replace("hole_nl", "hole", 1)


def label_of(variant: str) -> str:
    base, _, change = variant.partition("+")
    return LABELS[base] + (f" [{change}]" if change else "")


def parse_change(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` of `--with`: VALUE as JSON where it parses ("2", "true"), else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--with takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def load_tasks(args: argparse.Namespace) -> tuple[list[tuple[int, dict[str, Any]]], int, str]:
    rows = humaneval_rows(HUMAN_EVAL_RANDOM_SPAN if args.set == "random-span" else HUMAN_EVAL)
    if args.tasks:
        by_id = {row["task_id"]: i for i, row in enumerate(rows)}
        missing = [t for t in args.tasks if t not in by_id]
        if missing:
            raise SystemExit(f"unknown task ids: {missing}")
        picked = [by_id[t] for t in args.tasks]
        how = "named with --tasks"
    elif args.all or args.limit >= len(rows):
        picked = list(range(len(rows)))
        how = "all"
    else:
        picked = sorted({i * len(rows) // args.limit for i in range(args.limit)})
        how = f"spread evenly: task i * {len(rows)} // {args.limit}, i = 0..{args.limit - 1}"
    return [(i, rows[i]) for i in picked], len(rows), how


# --------------------------------------------------------------------------------------------
# Generation


def raw_phase(
    tasks: Sequence[tuple[int, dict[str, Any]]], settings: Settings
) -> dict[str, dict[str, Any]]:
    """The baseline through our engine in this process: prefix only, greedy, stop at "\\n"
    (one line, for either set: the raw model has no other way to know where a span ends)."""
    out: dict[str, dict[str, Any]] = {}

    async def run_all(engine: Engine) -> None:
        for number, (_, row) in enumerate(tasks):
            request = raw_line_request(row["prompt"], settings)
            (choice,) = await engine.collect(request)
            stats = next(
                (s for s in reversed(engine.recent_stats) if s.request_id == request.request_id),
                None,
            )
            out[row["task_id"]] = {
                "text": choice.text,
                "finish": str(choice.finish_reason),
                "prompt_tokens": None if stats is None else stats.prompt_tokens,
                "generated_tokens": None if stats is None else stats.generated_tokens,
            }
            if (number + 1) % 25 == 0:
                log.info("raw: %d/%d", number + 1, len(tasks))

    run_on_raw_engine(settings, run_all)
    return out


@dataclass(slots=True)
class Ours:
    """One server request and its applied result."""

    document: str
    cursor: int
    items: list[dict[str, Any]] = field(default_factory=list)
    program: str | None = None  # the document with the first item applied
    inserted: str | None = None
    insert_start: int = 0
    insert_end: int = 0  # in `program`
    mode: str | None = None
    generated_tokens: int | None = None
    finish: str | None = None
    prompt_tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None


def layout_document(row: dict[str, Any], layout: str) -> tuple[str, int]:
    """The document and the cursor for one layout (see the module docstring)."""
    prompt = row["prompt"]
    if layout == "hole":
        return prompt + row["suffix"], len(prompt)
    if layout == "blank":
        return prompt + "\n" + row["suffix"], len(prompt)
    solution = row["canonical_solution"]
    indent = solution[: len(solution) - len(solution.lstrip(" \t"))]
    return prompt + indent + "\n" + row["suffix"], len(prompt) + len(indent)


async def ours_phase(
    tasks: Sequence[tuple[int, dict[str, Any]]],
    options: dict[str, Any],
    layouts: Sequence[str],
    tail: str = "",
) -> dict[str, dict[str, Ours]]:
    """The server's answers per layout (keys: the layout + `tail`, the changed setting)."""
    client = ServerClient(options)
    out: dict[str, dict[str, Ours]] = {layout + tail: {} for layout in layouts}
    try:
        status = await client.start()
        log.info("server ready: %s", status.get("model"))
        for number, (index, row) in enumerate(tasks):
            for layout in layouts:
                document, cursor = layout_document(row, layout)
                uri = f"file:///bench/humaneval/he_{index:04d}_{layout}.py"
                ours = Ours(document=document, cursor=cursor)
                client.open(uri, document)
                count = await client.job_count()
                try:
                    items, pending = await client.inline(uri, cursor)
                    ours.seconds = pending.seconds
                except Exception as e:  # an error response: recorded, the run goes on
                    items = []
                    ours.error = str(e)
                # The engine's job may end after the response (a multi-line suggestion stops
                # the model early, and the job ends after the answer went out).
                ours.mode = None if ours.error else mode_at(document, cursor)
                wanted = 1 if ours.mode not in (None, "None") else 0
                jobs = await client.jobs_since(count, at_least=wanted, wait_s=2.0)
                if jobs:
                    ours.generated_tokens = jobs[-1].generated
                    ours.finish = jobs[-1].finish
                    ours.prompt_tokens = jobs[-1].prompt_tokens
                ours.items = [
                    {
                        "insert_text": insert_text_of(item),
                        "range": None
                        if item.range is None
                        else [
                            item.range.start.line,
                            item.range.start.character,
                            item.range.end.line,
                            item.range.end.character,
                        ],
                    }
                    for item in items
                ]
                if items:
                    program, start, end = apply_item(document, items[0], cursor)
                    ours.program, ours.insert_start, ours.insert_end = program, start, end
                    ours.inserted = insert_text_of(items[0])
                client.close(uri)
                out[layout + tail][row["task_id"]] = ours
            if (number + 1) % 25 == 0:
                log.info("ours: %d/%d", number + 1, len(tasks))
    finally:
        await client.stop()
    return out


# --------------------------------------------------------------------------------------------
# Scoring


def run_program(program: str, timeout: float) -> tuple[bool, str]:
    """Run one program; (passed, the last line of what it printed on failure)."""
    with tempfile.TemporaryDirectory(prefix="he-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(program, encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "-I", str(path)],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False, f"timeout ({timeout:g} s)"
    if done.returncode == 0:
        return True, ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1][:200] if lines else f"exit status {done.returncode}"


def full_program(program: str, row: dict[str, Any]) -> str:
    return f"{program}\n{row['test']}\ncheck({row['entry_point']})\n"


def score_all(
    programs: dict[str, str], timeout: float, workers: int
) -> dict[str, tuple[bool, str]]:
    """Each distinct program text once."""
    results: dict[str, tuple[bool, str]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_program, text, timeout): key for key, text in programs.items()}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
    return results


# --------------------------------------------------------------------------------------------
# Analysis


def _first_nonblank(text: str) -> str | None:
    return next((line for line in text.split("\n") if line.strip()), None)


def duplicates_suffix(ours: Ours) -> bool:
    """The suggestion repeats the code after the cursor (definition in the module docstring)."""
    if ours.program is None or ours.inserted is None:
        return False
    following = _first_nonblank(ours.document[ours.cursor :])
    if following is not None and ours.inserted.strip() == following.strip():
        return True
    program = ours.program
    start = program.rfind("\n", 0, ours.insert_start) + 1
    end = program.find("\n", ours.insert_end)
    end = len(program) if end < 0 else end
    touched = program[start:end].split("\n")
    after = _first_nonblank(program[end + 1 :]) if end < len(program) else None
    return after is not None and any(
        line.strip() and line.strip() == after.strip() for line in touched
    )


def hole_nl_program(ours: Ours) -> str | None:
    """The hole layout's result with a "\\n" given back after the inserted text."""
    if ours.program is None:
        return None
    if ours.inserted is not None and ours.inserted.endswith("\n"):
        return ours.program
    return ours.program[: ours.insert_end] + "\n" + ours.program[ours.insert_end :]


def loss_reason(ours: Ours | None, raw_text: str, variant: str) -> str:
    """Why ours failed where raw passed, from the text alone."""
    if ours is None or ours.error:
        return "error response"
    if not ours.items:
        return f"empty (mode {ours.mode})"
    inserted = ours.inserted or ""
    raw_line = raw_text.rstrip()
    lines = inserted.split("\n")
    if variant == "hole" and not inserted.endswith("\n"):
        return "fused with the next line (no line break)"
    if len([line for line in lines if line.strip()]) > 1:
        return f"several lines ({ours.mode})"
    first = lines[0].rstrip()
    if first == raw_line:
        return "same line as raw (context differs)"
    if raw_line.startswith(first):
        return "cut short of raw's line"
    if first.startswith(raw_line):
        return "longer than raw's line"
    if first.strip() == raw_line.strip():
        return "indentation differs from raw"
    return "different text from raw"


def analyze(
    tasks: Sequence[tuple[int, dict[str, Any]]],
    raw: dict[str, dict[str, Any]],
    ours: dict[str, dict[str, Ours]],
    scores: dict[str, tuple[bool, str]],
    variants: Sequence[str],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    per_task = []
    for index, row in tasks:
        tid = row["task_id"]
        expected = row["canonical_solution"]
        raw_text = raw[tid]["text"]
        entry: dict[str, Any] = {
            "task_id": tid,
            "index": index,
            "expected": expected,
            "suffix_first_line": _first_nonblank(row["suffix"]),
            "raw": {
                **raw[tid],
                "passed": scores[f"raw:{tid}"][0],
                "failure": scores[f"raw:{tid}"][1],
                "duplicates_suffix": bool(
                    raw_text.strip()
                    and raw_text.strip() == (_first_nonblank(row["suffix"]) or "").strip()
                ),
            },
        }
        for variant in variants[1:]:
            o = ours[layout_of(variant)][tid]
            key = f"{variant}:{tid}"
            passed, failure = scores[key]  # without an item: the document as it is
            record = {
                "mode": o.mode,
                "items": o.items,
                "inserted": o.inserted,
                "empty": not o.items,
                "duplicates_suffix": (
                    duplicates_suffix(o) if not variant.startswith("hole_nl") else None
                ),
                "passed": passed,
                "failure": failure,
                "generated_tokens": o.generated_tokens,
                "finish": o.finish,
                "prompt_tokens": o.prompt_tokens,
                "ms": round(o.seconds * 1000, 1),
                "error": o.error,
            }
            if (
                "+" not in variant
                and not variant.startswith("hole_nl")
                and o.prompt_tokens is not None
            ):
                record["same_prompt_size_as_raw"] = o.prompt_tokens == raw[tid]["prompt_tokens"]
            if entry["raw"]["passed"] and not passed:
                record["loss_reason"] = loss_reason(o, raw_text, variant)
            entry[variant] = record
        per_task.append(entry)

    n = len(per_task)
    summary: dict[str, Any] = {"tasks": n}
    for variant in variants:
        rows = [t[variant] for t in per_task]
        s: dict[str, Any] = {"passed": sum(r["passed"] for r in rows), "pass_at_1": 0.0}
        s["pass_at_1"] = s["passed"] / n if n else 0.0
        if variant != "raw":
            s["empty"] = sum(r["empty"] for r in rows)
            if not variant.startswith("hole_nl"):
                s["duplicates_suffix"] = sum(bool(r["duplicates_suffix"]) for r in rows)
                s["modes"] = dict(collections.Counter(str(r["mode"]) for r in rows))
            pairs = list(zip(rows, per_task, strict=True))
            times = sorted(r["ms"] for r in rows)
            s["median_ms"] = statistics.median_high(times) if times else None
            s["mean_ms"] = round(sum(times) / len(times), 1) if times else None
            s["wins_over_raw"] = sum(r["passed"] and not t["raw"]["passed"] for r, t in pairs)
            s["losses_to_raw"] = sum(t["raw"]["passed"] and not r["passed"] for r, t in pairs)
            s["loss_reasons"] = dict(
                collections.Counter(r["loss_reason"] for r in rows if "loss_reason" in r)
            )
        else:
            s["duplicates_suffix"] = sum(r["duplicates_suffix"] for r in rows)
            s["empty"] = sum(not r["text"].strip() for r in rows)
        summary[variant] = s
    return per_task, summary


# --------------------------------------------------------------------------------------------
# Report


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("humaneval", __doc__)
    parser.add_argument("--limit", type=int, default=100, help="tasks, spread evenly (100)")
    parser.add_argument("--all", action="store_true", help="all 1033 tasks")
    parser.add_argument("--tasks", nargs="+", metavar="ID", help="these task ids only")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per program (5)")
    parser.add_argument(
        "--layouts",
        default=",".join(DEFAULT_LAYOUTS),
        help=f"documents per task, of {', '.join(LAYOUTS)} (default: %(default)s)",
    )
    parser.add_argument(
        "--set",
        choices=("single-line", "random-span"),
        default="single-line",
        help="HumanEval infilling set (default: %(default)s)",
    )
    parser.add_argument(
        "--with",
        dest="changes",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also run the server with this setting changed (repeatable), side by side",
    )
    parser.add_argument("--model", help="completion model (default: the default one)")
    parser.add_argument("--json", type=Path, default=RESULTS / "humaneval.json", help="output")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    started = time.perf_counter()

    layouts = [x for x in args.layouts.split(",") if x]
    if not layouts or any(x not in LAYOUTS for x in layouts):
        raise SystemExit(f"--layouts takes some of {', '.join(LAYOUTS)}")
    variants = variants_of(layouts, args.changes, single_line=args.set == "single-line")
    tasks, total, how = load_tasks(args)
    options, settings = server_options(args.model)
    spec = local_spec(model_specs(settings)[Role.COMPLETION])

    log.info("raw: %d tasks through the engine", len(tasks))
    t0 = time.perf_counter()
    raw = raw_phase(tasks, settings)
    raw_s = time.perf_counter() - t0
    log.info("ours: %d tasks x %d documents through the server", len(tasks), len(layouts))
    t0 = time.perf_counter()
    ours = asyncio.run(ours_phase(tasks, options, layouts))
    ours_s = time.perf_counter() - t0
    changed_s: dict[str, float] = {}
    for change in args.changes:
        key, value = parse_change(change)
        log.info("ours with %s: %d tasks through the server", change, len(tasks))
        t0 = time.perf_counter()
        ours |= asyncio.run(ours_phase(tasks, {**options, key: value}, layouts, f"+{change}"))
        changed_s[change] = round(time.perf_counter() - t0, 1)

    programs: dict[str, str] = {}
    for _, row in tasks:
        tid = row["task_id"]
        text = raw[tid]["text"]
        completion = text if text.endswith("\n") else text + "\n"
        programs[f"raw:{tid}"] = full_program(row["prompt"] + completion + row["suffix"], row)
        for variant in variants[1:]:
            o = ours[layout_of(variant)][tid]
            nl = variant.startswith("hole_nl")
            program = hole_nl_program(o) if nl else o.program
            programs[f"{variant}:{tid}"] = full_program(program or o.document, row)
    distinct: dict[str, str] = {}
    key_of: dict[str, str] = {}
    for key, text in programs.items():
        key_of[key] = distinct.setdefault(text, key)
    log.info("scoring %d distinct programs of %d", len(distinct), len(programs))
    t0 = time.perf_counter()
    by_first = score_all({key: text for text, key in distinct.items()}, args.timeout, 2)
    score_s = time.perf_counter() - t0
    scores = {key: by_first[first] for key, first in key_of.items()}

    per_task, summary = analyze(tasks, raw, ours, scores, variants)
    config = {
        "model": Path(spec.path).name,
        "model_path": str(spec.path),
        "set": args.set,
        "changes": args.changes,
        "tasks_in_set": total,
        "selection": how,
        "task_indices": [i for i, _ in tasks],
        "max_tokens": settings.max_tokens_single_line,
        "server_settings": options,
        "layouts": layouts,
        "timeout_s": args.timeout,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "seconds": {
            "raw": round(raw_s, 1),
            "ours": round(ours_s, 1),
            **{f"ours+{change}": seconds for change, seconds in changed_s.items()},
            "scoring": round(score_s, 1),
            "total": round(time.perf_counter() - started, 1),
        },
    }
    mismatched = [
        t["task_id"]
        for t in per_task
        for v in variants[1:]
        if t[v].get("same_prompt_size_as_raw") is False
    ]
    if mismatched:
        log.warning("prompt sizes differ from raw for %s", sorted(set(mismatched)))
    write_json(args.json, {"config": config, "summary": summary, "tasks": per_task})
    return Outcome(
        parameters={k: config[k] for k in ("set", "selection", "layouts", "changes", "max_tokens")},
        metrics=humaneval_metrics(summary, variants),
        models=[Path(spec.path)],
    )


def humaneval_metrics(summary: dict[str, Any], variants: Sequence[str]) -> list[Metric]:
    """Tasks passed by each variant; ours, through the server, at least as many as raw, and no
    suggestion that repeats the text after the cursor."""
    n, raw = summary["tasks"], summary["raw"]["passed"]
    out = [metric("tasks", n), metric("passed, raw engine", raw)]
    for index, variant in enumerate(variants[1:]):
        s = summary[variant]
        name = "passed, ours through the server" if index == 0 else f"passed, {label_of(variant)}"
        out.append(metric(name, s["passed"], target=(">=", raw)))
        if "duplicates_suffix" in s:
            out.append(
                metric(
                    f"{label_of(variant)}: repeats the suffix",
                    s["duplicates_suffix"],
                    target=("==", 0),
                )
            )
        out.append(metric(f"{label_of(variant)}: answer time, median", s["median_ms"], "ms"))
    return out
