"""Cross-file context: does a name defined in another open file reach the suggestion? (issue 12)

Run from the repository root:

    .venv/bin/python bench/crossfile.py [--limit 100] [--package click==8.1.7] [--json PATH]

Code: a pinned, well-known pure-Python package that no one here wrote, installed from PyPI
at bench time (`pip install --no-deps --target bench/results/crossfile/<name>-<version>`,
once; then reused). Default `click==8.1.7`: 16 modules that import from each other.

Cases, by a fixed rule (not tuned to any result): every line of a module of the package
that uses, in a Load context, a name the module imports from another module of the same
package (`from .mod import name`, `from click.mod import name`) and that is defined at the
top level of that module (def, class or assignment); import lines themselves are not cases.
All such lines in (module path, line number) order, each line once; `--limit N` takes N of
them spread evenly (`i * total // N` for i in 0..N-1; default 100).

A case's document is the module with the line's text after its indentation removed (the line
ending stays); the cursor sits after the indentation. The defining module is opened first
(didOpen), then the document, both at their real paths; the workspace folder is the install
folder, so paths read `click/core.py`. Both are closed after the case (which drops the
server's selection and recent regions for them; the engine may still reuse its KV state
of an earlier case's prompt, alike for both server variants).

Variants, greedy, one line (`maxTokensSingleLine` tokens at most), one run:
- raw: the engine in this process, prompt = the document's prefix window alone (the
  server's own `context_window`, `prefixTokens` 1536), stop at "\\n";
- raw+code / raw+comments: the same, with the snippets the server would choose (the same
  `NeighborContext` selection, `contextTokens` 512) written in front, as path comment and
  code, or commented out under "Compare this snippet from PATH:" (neighbors.PlainStyle);
- ours-off / ours-on: the real server (stdio, `debounceMs` 0), an automatic inline request
  at the cursor, `contextTokens` 0 or 512 (the default); the first line of the item.

Scores per variant: exact match of the suggestion's first line with the hidden text (both
stripped), mean edit similarity (difflib ratio), and how often the suggestion contains the
imported name. Latency: the server's response time per request, with context and without,
and the engine's prompt tokens: cold (the case's first request) and warm (then the user
types the hidden line's first character, plus a blank line at the end of the document so
that the type-ahead cache cannot answer; the kept selection keeps the prompt's start, so
the model's KV cache is reused). Prints a table, writes JSON to bench/results/crossfile.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/crossfile.py` puts bench/ first on sys.path, where bench/engine.py would shadow
# the `engine` package; the repository root goes in front of it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import ast
import asyncio
import difflib
import logging
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from _common import RESULTS, Column, Table, median, setup_logging, token_counter, write_json
from _compare import raw_line_request, run_on_raw_engine, server_options
from _lsp import ServerClient

from engine.context_window import context_window
from engine.engine import Engine
from lsp_server.client import insert_text_of
from lsp_server.documents import DocumentSnapshot
from lsp_server.neighbors import NeighborContext, OtherDocument, PlainStyle, render_plain
from lsp_server.settings import Settings

log = logging.getLogger("bench.crossfile")

CONTEXT_TOKENS = 512
VARIANTS = ("raw", "raw+code", "raw+comments", "ours-off", "ours-on")


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    module: str  # path relative to the install folder, e.g. click/core.py
    line: int  # 0-based
    name: str  # the imported name the line uses
    defining: str  # the module that defines it
    hidden: str  # the line's text after its indentation


def install(requirement: str) -> Path:
    """The package's install folder (pip, once)."""
    name, _, version = requirement.partition("==")
    target = RESULTS / "crossfile" / f"{name}-{version}"
    if not (target / name).is_dir():
        log.info("installing %s into %s", requirement, target)
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
                *("--target", str(target), requirement),
            ],
            check=True,
        )
    return target


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def find_cases(root: Path, package: str) -> list[Case]:
    """Every qualifying line (module docstring), in (module, line) order."""
    modules = sorted(p.relative_to(root).as_posix() for p in (root / package).rglob("*.py"))
    trees = {m: ast.parse((root / m).read_text(encoding="utf-8")) for m in modules}
    defined = {m: _top_level_names(t) for m, t in trees.items()}
    cases: list[Case] = []
    for module in modules:
        text = (root / module).read_text(encoding="utf-8")
        lines = text.split("\n")
        here = module.rsplit("/", 1)[0]
        imported: dict[str, str] = {}
        import_lines: set[int] = set()
        for node in ast.walk(trees[module]):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 1 and node.module:
                target = f"{here}/{node.module.replace('.', '/')}.py"
            elif node.level == 0 and (node.module or "").startswith(package + "."):
                target = f"{(node.module or '').replace('.', '/')}.py"
            else:
                continue
            if target not in defined or target == module:
                continue
            import_lines.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
            for alias in node.names:
                if alias.name in defined[target]:
                    imported[alias.asname or alias.name] = target
        seen: set[int] = set()
        uses = sorted(
            (node.lineno - 1, node.id)
            for node in ast.walk(trees[module])
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in imported
        )
        for line, name in uses:
            if line in seen or line in import_lines:
                continue
            seen.add(line)
            hidden = lines[line].strip()
            if not hidden or hidden.startswith("#"):
                continue
            cases.append(
                Case(module=module, line=line, name=name, defining=imported[name], hidden=hidden)
            )
    return cases


def document_of(root: Path, case: Case) -> tuple[str, int]:
    """The module with the case's line emptied after its indentation, and the cursor."""
    text = (root / case.module).read_text(encoding="utf-8")
    start = 0
    for _ in range(case.line):
        start = text.index("\n", start) + 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    line = text[start:end]
    indent = len(line) - len(line.lstrip(" \t"))
    return text[: start + indent] + text[end:], start + indent


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


# --------------------------------------------------------------------------------------------


def raw_phase(root: Path, cases: Sequence[Case], settings: Settings) -> dict[str, list[str]]:
    """raw, raw+code, raw+comments: our engine in this process, greedy, stop at "\\n"."""
    out: dict[str, list[str]] = {"raw": [], "raw+code": [], "raw+comments": []}

    async def run_all(engine: Engine) -> None:
        count = token_counter(engine.backend)

        async def generate(prompt: str) -> str:
            (choice,) = await engine.collect(raw_line_request(prompt, settings))
            return choice.text

        for number, case in enumerate(cases):
            text, cursor = document_of(root, case)
            window = context_window(
                text[:cursor], "", count, prefix_budget=settings.prefix_tokens, suffix_budget=0
            )
            defining = (root / case.defining).read_text(encoding="utf-8")
            uri = (root / case.module).as_uri()
            other = (root / case.defining).as_uri()
            snap = DocumentSnapshot.at(text, cursor, uri=uri)
            context = NeighborContext().context_for(
                snap,
                {other: OtherDocument(uri=other, version=1, text=defining)},
                budget=CONTEXT_TOKENS,
                count_tokens=count,
                roots=[root.as_uri()],
            )
            assert context is not None
            out["raw"].append(await generate(window.prefix))
            for style in PlainStyle:
                lead = render_plain(context, style) if context.snippets else ""
                out[f"raw+{style}"].append(await generate(lead + window.prefix))
            if (number + 1) % 10 == 0:
                log.info("raw: %d/%d", number + 1, len(cases))

    run_on_raw_engine(settings, run_all)
    return out


async def ours_phase(
    root: Path, cases: Sequence[Case], options: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """ours-off, then ours-on: the real server, one fresh pair of documents per case."""
    client = ServerClient({**options, "contextTokens": 0})
    out: dict[str, list[dict[str, Any]]] = {"ours-off": [], "ours-on": []}
    try:
        status = await client.start(root=root)
        log.info("server ready: %s", status.get("model"))
        for variant, budget in (("ours-off", 0), ("ours-on", CONTEXT_TOKENS)):
            client.configure({"contextTokens": budget})
            for number, case in enumerate(cases):
                text, cursor = document_of(root, case)
                other = (root / case.defining).as_uri()
                uri = (root / case.module).as_uri()
                client.open(other, (root / case.defining).read_text(encoding="utf-8"))
                client.open(uri, text)
                count = await client.job_count()
                row: dict[str, Any] = {"text": "", "seconds": None, "prompt_tokens": None}
                try:
                    items, pending = await client.inline(uri, cursor)
                    row["seconds"] = pending.seconds
                    row["text"] = insert_text_of(items[0]) if items else ""
                except Exception as e:  # an error response: recorded, the run goes on
                    row["error"] = str(e)
                jobs = await client.jobs_since(count, at_least=1, wait_s=2.0)
                if jobs:
                    row["prompt_tokens"] = jobs[-1].prompt_tokens
                # Warm: the user types the hidden line's first character (and a blank line at
                # the end, so the type-ahead cache cannot answer): the prompt's start is kept.
                client.edit_many(
                    uri, [(cursor, cursor, case.hidden[0]), client.toggle_tail_edit(uri)]
                )
                try:
                    _, pending = await client.inline(uri, cursor + 1)
                    row["warm_seconds"] = pending.seconds
                except Exception as e:
                    row["warm_error"] = str(e)
                client.close(uri)
                client.close(other)
                out[variant].append(row)
                if (number + 1) % 10 == 0:
                    log.info("%s: %d/%d", variant, number + 1, len(cases))
    finally:
        await client.stop()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=100, help="cases, spread evenly (100)")
    parser.add_argument("--package", default="click==8.1.7", help="pinned PyPI package")
    parser.add_argument("--model", help="completion model (default: the default one)")
    parser.add_argument("--json", type=Path, default=RESULTS / "crossfile.json", help="output")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    started = time.perf_counter()

    package = args.package.partition("==")[0]
    root = install(args.package)
    everything = find_cases(root, package)
    limit = min(args.limit, len(everything))
    cases = [everything[i * len(everything) // limit] for i in range(limit)]
    log.info("%d qualifying lines, %d cases", len(everything), len(cases))

    options, settings = server_options(args.model)
    texts: dict[str, list[str]] = dict(raw_phase(root, cases, settings))
    ours = asyncio.run(ours_phase(root, cases, options))
    for variant, rows in ours.items():
        texts[variant] = [row["text"] for row in rows]

    table = []
    for variant in VARIANTS:
        got = [first_line(t) for t in texts[variant]]
        exact = sum(g == c.hidden for g, c in zip(got, cases, strict=True))
        sims = [similarity(g, c.hidden) for g, c in zip(got, cases, strict=True)]
        named = sum(c.name in g for g, c in zip(got, cases, strict=True))
        table.append(
            {
                "variant": variant,
                "exact": exact,
                "edit_similarity": statistics.fmean(sims),
                "uses_name": named,
                "cases": len(cases),
            }
        )
    latency: dict[str, Any] = {}
    for variant, rows in ours.items():
        seconds = [r["seconds"] for r in rows if r["seconds"] is not None]
        tokens = [r["prompt_tokens"] for r in rows if r["prompt_tokens"] is not None]
        warm = [r["warm_seconds"] for r in rows if r.get("warm_seconds") is not None]
        latency[variant] = {
            "warm_median_ms": 1000 * median(warm) if warm else None,
            "median_ms": 1000 * median(seconds) if seconds else None,
            "mean_ms": 1000 * statistics.fmean(seconds) if seconds else None,
            "mean_prompt_tokens": statistics.fmean(tokens) if tokens else None,
        }
    paired = [
        (on["seconds"] - off["seconds"]) * 1000
        for off, on in zip(ours["ours-off"], ours["ours-on"], strict=True)
        if off["seconds"] is not None and on["seconds"] is not None
    ]
    extra_ms = median(paired) if paired else None
    paired_warm = [
        (on["warm_seconds"] - off["warm_seconds"]) * 1000
        for off, on in zip(ours["ours-off"], ours["ours-on"], strict=True)
        if off.get("warm_seconds") is not None and on.get("warm_seconds") is not None
    ]
    extra_warm_ms = median(paired_warm) if paired_warm else None

    print(f"\ncross-file: {args.package}, {len(cases)} of {len(everything)} qualifying lines")
    scores = Table(
        Column("variant", 14, "<"),
        Column("exact", 7),
        Column("edit sim", 9, spec=".3f"),
        Column("uses name", 10),
    )
    print(scores.titles())
    for row in table:
        print(
            scores.row(
                row["variant"],
                f"{row['exact']:>3}/{row['cases']:<3}",
                row["edit_similarity"],
                f"{row['uses_name']:>6}/{row['cases']:<3}",
            )
        )
    times = Table(
        Column("server", 10, "<"),
        Column("cold median ms", 15, spec=".0f"),
        Column("cold mean ms", 13, spec=".0f"),
        Column("warm median ms", 15, spec=".0f"),
        Column("prompt tokens", 14, spec=".0f"),
    )
    print("\n" + times.titles())
    for variant, row in latency.items():
        keys = ("median_ms", "mean_ms", "warm_median_ms", "mean_prompt_tokens")
        print(times.row(variant, *(row[key] or 0 for key in keys)))
    if extra_ms is not None and extra_warm_ms is not None:
        print(
            f"extra latency of the context per request (median of paired differences): "
            f"cold {extra_ms:.0f} ms, warm (one character typed) {extra_warm_ms:.0f} ms"
        )
    elapsed = time.perf_counter() - started
    print(f"({elapsed:.0f} s)")
    write_json(
        args.json,
        {
            "package": args.package,
            "qualifying_lines": len(everything),
            "machine": platform.platform(),
            "context_tokens": CONTEXT_TOKENS,
            "table": table,
            "latency": latency,
            "extra_ms_median": extra_ms,
            "extra_warm_ms_median": extra_warm_ms,
            "seconds": elapsed,
            "cases": [
                {
                    "module": c.module,
                    "line": c.line + 1,
                    "name": c.name,
                    "defining": c.defining,
                    "hidden": c.hidden,
                    **{v: texts[v][i] for v in VARIANTS},
                }
                for i, c in enumerate(cases)
            ],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
