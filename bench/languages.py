"""Real code in six languages: the server against the raw model on the same cursors, in one
run.

    python -m bench languages [--per-language 20] [--languages go,rust]
                              [--cache DIR] [--model PATH] [--json PATH] [--curve]

Files: the sources of six well-known projects, fetched once with the registries' own clients
into `--cache` (default `~/.cache/infill-lsp/bench-languages`) and read from there after:

| language   | project               | from                                                     |
|------------|-----------------------|----------------------------------------------------------|
| TypeScript | RxJS 7.8.1            | npm `rxjs` (`src/internal/**/*.ts`)                      |
| JavaScript | Express 4.21.2        | npm `express` (`lib/**/*.js`)                            |
| Go         | Cobra 1.6.1           | Debian `golang-github-spf13-cobra-dev` (not `_test.go`)  |
| Rust       | regex 1.7.1           | Debian `librust-regex-dev` (`src/**/*.rs`)               |
| Java       | OpenJDK 17 `java.util`| Debian `openjdk-17-source` (`src.zip`, `java.util/*`)    |
| C          | LZ4 (in python-lz4)   | PyPI sdist `lz4==4.3.3` (`lz4libs/*.c`)                  |

Cursors: for each language, `--per-language` cases chosen by a generator seeded with the
language and the case's number: a file (round robin over the files sorted by path), then one
of its code lines (4 to 120 characters, not a comment, not only brackets, after the first 15
lines). The line's code is taken out and its indentation left, the cursor after it: a user
who pressed Enter in an auto-indenting editor at that point. The expected text is the line's
code.

Both sides get the same prompt and the same request (what `lsp_server.inline.plan_for` builds
for that cursor: the mode, the FIM prompt, greedy, the mode's token limit, a single line
stopped at "\\n"):

- raw: the model on our engine in this process, its text inserted as it is (the cursor
  line's indentation left out of the prompt is taken back, as the prompt was built);
- server: the real server (`python -P -m lsp_server.cli serve`, stdio, `debounceMs` 0), an
  automatic inline request, the item applied over its range. Each document is opened for its
  request and closed after (no other file's snippets in the prompt).

Scored per side: exact (the document after the insertion is the original file, lines compared
without trailing whitespace), edit similarity (1 - Levenshtein / longer length, between the
inserted text and the expected line, both stripped; 0 for no suggestion), a duplicated suffix
(not exact, and a line of the inserted text equals, stripped, the first non-blank line after
it, a line with a letter or digit: not a lone `}`), added syntax errors (tree-sitter finds
more ERROR/MISSING nodes in the whole document after the insertion than before it), and no
suggestion. The fitting itself is timed in this
process on the raw texts, with the language's tree (`CursorContext.language_id`) and without
(today's rules): the median added time is the tree's cost per suggestion.

Raw first (then its model is closed), then the server. Writes every case to
bench/results/languages.json. Targets: per language,
the server's added syntax errors at most half of raw's, no duplicated suffix, exact at least
raw's.

`--curve`: the confidence gate's curve on these cursors. The server side alone, with
`minConfidence` 0 so every suggestion comes back, each one's judgement read from
`infill/stats` and scored exact or not as above; then, per language and in all, what the gate
would show at each threshold of the confidence suite (its `curve`: the recorded features
weighed with today's weights, so this is what the server shows at each setting), and at the
default `minConfidence` the change against 0. The weights were fitted on Python alone and are
not refitted here: a report, not a tuning. Writes bench/results/languages_curve.json.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    median,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._compare import model_paths, run_on_raw_engine, server_options
from bench._lsp import ServerClient, mode_at, offset_of
from bench.confidence import change_at, curve, judged_count, last_judgement
from bench.record import Outcome, metric
from engine.completion import CompletionModel
from engine.engine import Engine
from lsp_server.client import insert_text_of
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.plan import plan_for
from lsp_server.inline.prompt import cursor_context, unheal
from lsp_server.postprocess import fit_completion
from lsp_server.postprocess.syntax import error_count
from lsp_server.settings import Settings

log = logging.getLogger("bench.languages")

DEFAULT_CACHE = Path.home() / ".cache" / "infill-lsp" / "bench-languages"
FIRST_LINE = 15  # cursors start below a file's licence header
MIN_FILE_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Source:
    """Where a language's files come from, and which of them count."""

    language_id: str
    project: str
    registry: str  # "npm", "deb" or "pypi"
    package: str  # what the registry's client is given
    under: str  # the folder the files are in, inside the unpacked package
    suffix: str
    skip: tuple[str, ...] = ()  # file names ending so are left out
    zip_member_dir: str | None = None  # files inside a zip found under `under`


SOURCES: tuple[Source, ...] = (
    Source(
        "typescript", "RxJS 7.8.1", "npm", "rxjs@7.8.1", "package/src/internal", ".ts", (".d.ts",)
    ),
    Source("javascript", "Express 4.21.2", "npm", "express@4.21.2", "package/lib", ".js"),
    Source(
        "go",
        "Cobra 1.6.1",
        "deb",
        "golang-github-spf13-cobra-dev",
        "usr/share/gocode/src/github.com/spf13/cobra",
        ".go",
        ("_test.go",),
    ),
    Source(
        "rust",
        "regex 1.7.1",
        "deb",
        "librust-regex-dev",
        "usr/share/cargo/registry/regex-1.7.1/src",
        ".rs",
    ),
    Source(
        "java",
        "OpenJDK 17 java.util",
        "deb",
        "openjdk-17-source",
        "usr/lib/jvm/openjdk-17/lib",
        ".java",
        zip_member_dir="java.base/java/util/",
    ),
    Source("c", "LZ4 (python-lz4 4.3.3)", "pypi", "lz4==4.3.3", "lz4-4.3.3/lz4libs", ".c"),
)


# --- the files ------------------------------------------------------------------------------


def _fetch(source: Source, cache: Path) -> Path:
    """The package unpacked under `cache` (downloaded and unpacked on first use)."""
    folder = cache / source.package.replace("@", "-").replace("==", "-")
    unpacked = folder / "unpacked"
    if unpacked.is_dir():
        return unpacked
    download = folder / "download"
    download.mkdir(parents=True, exist_ok=True)
    log.info("fetching %s from %s", source.package, source.registry)
    if source.registry == "npm":
        command = ["npm", "pack", source.package, "--pack-destination", str(download)]
    elif source.registry == "deb":
        command = ["apt-get", "download", source.package]
    else:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += [source.package, "-d", str(download)]
    done = subprocess.run(command, cwd=download, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"could not fetch {source.package}: {done.stderr[-2000:]}")
    (archive,) = [p for p in download.iterdir() if p.suffix in (".tgz", ".gz", ".deb")]
    staging = folder / "staging"
    staging.mkdir(exist_ok=True)
    if archive.suffix == ".deb":
        subprocess.run(["dpkg-deb", "-x", str(archive), str(staging)], check=True)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
    staging.rename(unpacked)
    return unpacked


def source_files(source: Source, cache: Path) -> list[tuple[str, str]]:
    """(name, text) of the language's files, sorted by name."""
    root = _fetch(source, cache) / source.under
    files: list[tuple[str, str]] = []
    if source.zip_member_dir is not None:
        (archive,) = root.glob("*.zip")
        with zipfile.ZipFile(archive) as bundle:
            for name in bundle.namelist():
                rest = name[len(source.zip_member_dir) :]
                if name.startswith(source.zip_member_dir) and "/" not in rest:
                    files.append((name, bundle.read(name).decode("utf-8", "replace")))
    else:
        for path in root.rglob("*" + source.suffix):
            files.append((str(path.relative_to(root)), path.read_text("utf-8", "replace")))
    files = [
        (name, text.replace("\r\n", "\n"))
        for name, text in files
        if name.endswith(source.suffix)
        and not name.endswith(source.skip)
        and len(text) >= MIN_FILE_CHARS
    ]
    return sorted(files)


_COMMENT_STARTS = ("//", "/*", "*", "#!", "--")


def _is_candidate(line: str) -> bool:
    code = line.strip()
    return (
        4 <= len(code) <= 120
        and not code.startswith(_COMMENT_STARTS)
        and any(char.isalnum() for char in code)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    language_id: str
    file: str
    line: int  # 0-based, in the original file
    original: str
    document: str  # the original with the line's code taken out
    cursor: int
    expected: str


def cases_for(source: Source, files: Sequence[tuple[str, str]], count: int) -> list[Case]:
    """`count` cursors for a language (see the module docstring)."""
    cases: list[Case] = []
    for number in range(count):
        name, text = files[number % len(files)]
        lines = text.split("\n")
        candidates = [i for i in range(FIRST_LINE, len(lines)) if _is_candidate(lines[i])]
        if not candidates:
            continue
        line = random.Random(f"{source.language_id}:{number}").choice(candidates)
        content = lines[line]
        indent = content[: len(content) - len(content.lstrip(" \t"))]
        start = sum(len(item) + 1 for item in lines[:line])
        document = text[: start + len(indent)] + text[start + len(content) :]
        cases.append(
            Case(
                language_id=source.language_id,
                file=name,
                line=line,
                original=text,
                document=document,
                cursor=start + len(indent),
                expected=content.strip(),
            )
        )
    return cases


def _uri(case: Case, index: int) -> str:
    return f"file:///bench/languages/{case.language_id}/{index:03d}/{Path(case.file).name}"


# --- the two sides --------------------------------------------------------------------------


@dataclass(slots=True)
class Side:
    """One side's answer for a case: the inserted text and where."""

    text: str | None = None  # None: no suggestion
    start: int = 0
    end: int = 0  # the range of the document it replaces
    seconds: float = 0.0
    error: str | None = None
    judgement: dict[str, Any] | None = None  # the confidence gate's (`infill/stats`)

    def result(self, case: Case) -> str:
        if self.text is None:
            return case.document
        return case.document[: self.start] + self.text + case.document[self.end :]


@dataclass(slots=True)
class RawCase:
    side: Side
    mode: str
    fit_ms: float | None = None  # fitting the raw text with the tree
    fit_plain_ms: float | None = None  # ... and with today's rules only
    extra: dict[str, Any] = field(default_factory=dict)


def _time_fit(raw: str, snap: DocumentSnapshot, mode: Any, language_id: str) -> float:
    """Milliseconds to fit `raw` at the cursor (best of three: the machine is shared)."""
    ctx = replace(cursor_context(snap), language_id=language_id)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        fit_completion(raw, ctx, mode)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def raw_phase(cases: Sequence[Case], settings: Settings) -> list[RawCase]:
    """The model's own text for each case, on our engine in this process."""
    out: list[RawCase] = []

    async def run_all(engine: Engine) -> None:
        model = CompletionModel.of(engine, None)
        for index, case in enumerate(cases):
            snap = DocumentSnapshot.at(
                case.document, case.cursor, uri=_uri(case, index), language_id=case.language_id
            )
            plan = plan_for(model, snap, settings, invoked=False)
            if plan is None:
                out.append(RawCase(side=Side(start=case.cursor, end=case.cursor), mode="None"))
                continue
            started = time.perf_counter()
            (choice,) = await engine.collect(plan.requests[0])
            seconds = time.perf_counter() - started
            text = unheal(choice.text, plan.prompt.healed_indent)
            item = RawCase(
                side=Side(text=text or None, start=case.cursor, end=case.cursor, seconds=seconds),
                mode=str(plan.mode),
            )
            # The fitting's cost, with the language's tree and without (the clock alone).
            item.fit_ms = _time_fit(text, snap, plan.mode, case.language_id)
            item.fit_plain_ms = _time_fit(text, snap, plan.mode, "")
            out.append(item)
            if (index + 1) % 10 == 0:
                log.info("raw: %d/%d", index + 1, len(cases))

    run_on_raw_engine(settings, run_all)
    return out


async def server_phase(cases: Sequence[Case], options: dict[str, Any]) -> list[Side]:
    """The real server's suggestion for each case."""
    client = ServerClient(options)
    out: list[Side] = []
    try:
        status = await client.start()
        log.info("server ready: %s", status.get("model"))
        judged = await judged_count(client)
        for index, case in enumerate(cases):
            uri = _uri(case, index)
            client.open(uri, case.document, case.language_id)
            side = Side(start=case.cursor, end=case.cursor)
            try:
                items, pending = await client.inline(uri, case.cursor)
                side.seconds = pending.seconds
                if items:
                    item = items[0]
                    side.text = insert_text_of(item)
                    if item.range is not None:
                        side.start = offset_of(case.document, item.range.start)
                        side.end = offset_of(case.document, item.range.end)
            except Exception as e:  # an error response: recorded, the run goes on
                side.error = str(e)
            side.judgement, judged = await last_judgement(client, judged)
            client.close(uri)
            out.append(side)
            if (index + 1) % 10 == 0:
                log.info("server: %d/%d", index + 1, len(cases))
    finally:
        await client.stop()
    return out


# --- scores ---------------------------------------------------------------------------------


def levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]


def similarity(text: str | None, expected: str) -> float:
    if not text:
        return 0.0
    a, b = text.strip()[:400], expected.strip()
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1 - levenshtein(a, b) / longest


def _same_lines(a: str, b: str) -> bool:
    return [line.rstrip() for line in a.rstrip().split("\n")] == [
        line.rstrip() for line in b.rstrip().split("\n")
    ]


def score(case: Case, side: Side, errors_before: int | None) -> dict[str, Any]:
    result = side.result(case)
    exact = side.text is not None and _same_lines(result, case.original)
    after_text = result[side.start + len(side.text or "") :]
    next_line = next((line.strip() for line in after_text.split("\n")[1:] if line.strip()), None)
    if side.text is not None and after_text.split("\n")[0].strip():
        next_line = after_text.split("\n")[0].strip()  # code right after the insertion
    duplicated = (
        not exact
        and side.text is not None
        and next_line is not None
        and any(char.isalnum() for char in next_line)
        and any(line.strip() == next_line for line in side.text.split("\n"))
    )
    errors_after = error_count(result, case.language_id)
    added = (
        side.text is not None
        and errors_before is not None
        and errors_after is not None
        and errors_after > errors_before
    )
    return {
        "text": side.text,
        "exact": exact,
        "similarity": round(similarity(side.text, case.expected), 3),
        "duplicated_suffix": duplicated,
        "added_errors": added,
        "empty": side.text is None,
        "seconds": round(side.seconds, 3),
        "error": side.error,
    }


def summarize(rows: Sequence[dict[str, Any]], side: str) -> dict[str, Any]:
    picked = [row[side] for row in rows]
    return {
        "cases": len(picked),
        "exact": sum(p["exact"] for p in picked),
        "similarity": round(sum(p["similarity"] for p in picked) / max(len(picked), 1), 3),
        "duplicated_suffix": sum(p["duplicated_suffix"] for p in picked),
        "added_errors": sum(p["added_errors"] for p in picked),
        "empty": sum(p["empty"] for p in picked),
        "median_s": round(median(p["seconds"] for p in picked if not p["empty"]), 3),
    }


# --- the confidence gate's curve (--curve) --------------------------------------------------


def curve_result(
    cases: Sequence[Case], sides: Sequence[Side], wanted: Sequence[str], default: float
) -> dict[str, Any]:
    """Every case scored, and per language and in all the gate's curve (the confidence suite's
    `curve`, exact as `right`) and its change at `default` against 0."""
    rows = []
    for case, side in zip(cases, sides, strict=True):
        scored = score(case, side, error_count(case.document, case.language_id))
        rows.append(
            {
                "language": case.language_id,
                "file": case.file,
                "line": case.line + 1,
                "expected": case.expected,
                "server_mode": mode_at(case.document, case.cursor),
                "inserted": side.text,
                "right": scored["exact"],
                "judgement": side.judgement,
                "server": scored,
            }
        )
    curves: dict[str, list[dict[str, Any]]] = {}
    changes: dict[str, dict[str, Any]] = {}
    for language in [*wanted, "all"]:
        picked = [r for r in rows if language in ("all", r["language"])]
        if picked:
            curves[language] = curve(picked)
            changes[language] = change_at(curves[language], default)
            # Shown suggestions the gate cannot judge (no log-probabilities): always shown.
            changes[language]["unjudged"] = sum(
                r["inserted"] is not None
                and (r["judgement"] is None or r["judgement"]["features"] is None)
                for r in picked
            )
    return {"default": default, "curves": curves, "changes": changes, "cases": rows}


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("languages", __doc__)
    parser.add_argument("--per-language", type=int, default=20, help="cursors per language")
    parser.add_argument(
        "--languages", default=",".join(s.language_id for s in SOURCES), help="comma-separated"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="fetched packages")
    parser.add_argument("--model", help="completion model for both sides (default: the default)")
    parser.add_argument("--json", type=Path, default=None, help="default: bench/results/...")
    parser.add_argument(
        "--curve", action="store_true", help="the confidence gate's curve (server side only)"
    )
    args = parser.parse_args(argv)
    if args.json is None:
        args.json = RESULTS / ("languages_curve.json" if args.curve else "languages.json")
    setup_logging(quiet_engine=True)
    started = time.perf_counter()
    wanted = args.languages.split(",")
    cases: list[Case] = []
    for source in SOURCES:
        if source.language_id in wanted:
            files = source_files(source, args.cache)
            log.info("%s: %d files from %s", source.language_id, len(files), source.project)
            cases += cases_for(source, files, args.per_language)
    if args.curve:
        return curve_main(args, cases, wanted, started)
    options, settings = server_options(args.model)
    raw = raw_phase(cases, settings)
    ours = asyncio.run(server_phase(cases, options))

    rows: list[dict[str, Any]] = []
    for case, raw_case, server_side in zip(cases, raw, ours, strict=True):
        errors_before = error_count(case.document, case.language_id)
        rows.append(
            {
                "language": case.language_id,
                "file": case.file,
                "line": case.line + 1,
                "expected": case.expected,
                "mode": raw_case.mode,
                "server_mode": mode_at(case.document, case.cursor),
                "errors_before": errors_before,
                "raw": score(case, raw_case.side, errors_before),
                "server": score(case, server_side, errors_before),
                "fit_ms": raw_case.fit_ms,
                "fit_plain_ms": raw_case.fit_plain_ms,
            }
        )
    summary: dict[str, Any] = {}
    for language in [*wanted, "all"]:
        picked = [r for r in rows if language in ("all", r["language"])]
        if not picked:
            continue
        raw_summary, ours_summary = summarize(picked, "raw"), summarize(picked, "server")
        summary[language] = {
            "raw": raw_summary,
            "server": ours_summary,
            "targets_met": ours_summary["added_errors"] * 2 <= raw_summary["added_errors"]
            and ours_summary["duplicated_suffix"] == 0
            and ours_summary["exact"] >= raw_summary["exact"],
        }
    timed = [r for r in rows if r["fit_ms"] is not None]
    added = [r["fit_ms"] - r["fit_plain_ms"] for r in timed]
    result: dict[str, Any] = {
        "benchmark": "languages",
        "config": {
            "per_language": args.per_language,
            "languages": wanted,
            "sources": {s.language_id: f"{s.project} ({s.registry} {s.package})" for s in SOURCES},
            "server_settings": {k: v for k, v in options.items() if k != "model"},
            "model": options.get("model", "default"),
            "cpu_count": os.cpu_count(),
            "load_before": os.getloadavg(),
            "wall_s": round(time.perf_counter() - started, 1),
        },
        "fit_ms": {
            "tree": median(r["fit_ms"] for r in timed),
            "plain": median(r["fit_plain_ms"] for r in timed),
            "added": median(added),
            "added_max": max(added, default=float("nan")),
        },
        "summary": summary,
        "cases": rows,
    }
    write_json(args.json, result)
    metrics = []
    for language, s in summary.items():
        raw_s, ours = s["raw"], s["server"]
        metrics += [
            metric(f"{language}: exact, raw", raw_s["exact"]),
            metric(f"{language}: exact, server", ours["exact"], target=(">=", raw_s["exact"])),
            metric(
                f"{language}: added syntax errors, server",
                ours["added_errors"],
                target=("<=", raw_s["added_errors"] / 2),
            ),
            metric(
                f"{language}: duplicated suffix, server",
                ours["duplicated_suffix"],
                target=("==", 0),
            ),
        ]
    metrics.append(
        metric("fitting with the tree, added time, median", result["fit_ms"]["added"], "ms")
    )
    return Outcome(
        parameters={"per_language": args.per_language, "languages": wanted},
        metrics=metrics,
        models=model_paths(args.model),
    )


def curve_main(
    args: argparse.Namespace, cases: Sequence[Case], wanted: Sequence[str], started: float
) -> Outcome:
    """`--curve`: the server alone with the gate off, then the curve (module docstring)."""
    load_before = os.getloadavg()
    options, _ = server_options(args.model, {"minConfidence": 0})
    sides = asyncio.run(server_phase(cases, options))
    result = curve_result(cases, sides, wanted, Settings().min_confidence)
    result["config"] = {
        "per_language": args.per_language,
        "languages": wanted,
        "sources": {s.language_id: f"{s.project} ({s.registry} {s.package})" for s in SOURCES},
        "server_settings": {k: v for k, v in options.items() if k != "model"},
        "model": options.get("model", "default"),
        "weights": "lsp_server/inline/confidence.py as fitted on Python, not refitted here",
        "cpu_count": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    write_json(args.json, result)
    metrics = []
    for language, change in result["changes"].items():
        metrics += [
            metric(
                f"gate at {result['default']:g}, {language}: not exact shown, fewer",
                change["wrong_cut"] * 100,
                "%",
            ),
            metric(
                f"gate at {result['default']:g}, {language}: exact shown, fewer",
                change["right_cut"] * 100,
                "%",
            ),
        ]
    return Outcome(
        parameters={"curve": True, "per_language": args.per_language, "languages": wanted},
        metrics=metrics,
        models=model_paths(args.model),
    )
