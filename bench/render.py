"""The docs' benchmark pages, rendered from the records: docs/benchmarks/SUITE.md (what the suite
measures, from its module's docstring; how to run it; its latest record's figures), an index,
and the summary table between README.md's `bench-summary` markers. Rendering reads the suites'
source, never imports it, so it needs no model and no library of theirs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from bench.record import RECORDS, ROOT, Metric, Record, latest
from bench.suites import SUITES, Suite

DOCS = ROOT / "docs" / "benchmarks"
README = ROOT / "README.md"
START = "<!-- bench-summary:start -->"
END = "<!-- bench-summary:end -->"

#: The five figures the README shows: what a user notices first (how much the server adds to
#: the model's time, a first request against the next keystroke's, how often a line is right, memory
#: after a long day, next edits found).
SUMMARY: tuple[tuple[str, str], ...] = (
    ("latency", "warm request, server / raw engine, median position"),
    ("latency", "warm / cold, server"),
    ("humaneval", "passed, ours through the server"),
    ("soak", "resident memory, after / once warm"),
    ("next_edit", "same-substitution hunks reproduced, propagation"),
)


def docstring(suite: Suite) -> str:
    path = ROOT / "bench" / f"{suite.name}.py"
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def _value(m: Metric) -> str:
    if m.value is None:
        return "-"
    if isinstance(m.value, float):
        text = f"{m.value:,.4g}" if abs(m.value) < 1e4 else f"{m.value:,.0f}"
    elif isinstance(m.value, int):
        text = f"{m.value:,}"
    else:
        text = m.value
    return f"{text} {m.unit}".strip()


def _met(m: Metric) -> str:
    return "" if m.met is None else ("yes" if m.met else "**no**")


def metrics_table(record: Record) -> str:
    rows = [f"| {m.name} | {_value(m)} | {m.target or ''} | {_met(m)} |" for m in record.metrics]
    return "\n".join(["| metric | value | target | met |", "|---|---|---|---|", *rows])


def _where(record: Record) -> str:
    machine = record.machine
    gpu = f", {machine.gpu}" if machine.gpu else ""
    dirty = " (with uncommitted changes)" if record.dirty else ""
    return (
        f"{record.date}, commit `{record.commit[:10]}`{dirty}; {machine.cpu}, "
        f"{machine.cores} cores, {machine.memory_gib:g} GiB{gpu}; load average "
        f"{record.load.start:g} at the start, {record.load.end:g} at the end, "
        f"{record.load.highest:g} at most; {record.wall_s:g} s"
    )


def suite_page(suite: Suite, record: Record | None) -> str:
    lines = [f"# `{suite.name}`: {suite.summary}", "", docstring(suite), "", "## Run", ""]
    lines += ["```sh", f"python -m bench {suite.name}", "```", "", "## Latest record", ""]
    if record is None:
        lines += ["No record yet: the command above writes one to `bench/records/`."]
        return "\n".join(lines) + "\n"
    lines += [_where(record) + ".", ""]
    if record.models:
        models = ", ".join(f"{m.name} (sha256 `{m.sha256[:12]}`)" for m in record.models)
        lines += [f"Models: {models}.", ""]
    if record.parameters:
        params = ", ".join(f"`{k}` {v}" for k, v in record.parameters.items())
        lines += [f"Parameters: {params}.", ""]
    lines.append(metrics_table(record))
    return "\n".join(lines) + "\n"


def _met_count(record: Record) -> str:
    judged = [m for m in record.metrics if m.met is not None]
    return f"{sum(1 for m in judged if m.met)} of {len(judged)}" if judged else ""


def index_page(records: dict[str, Record]) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Rendered by `python -m bench render` from the records in `bench/records/` (one per",
        "run, written by `python -m bench SUITE`); `python -m bench --list` lists the suites.",
        "Questions the benchmarks answered for good are in [../decisions/](../decisions/).",
        "",
        "| suite | measures | latest record | targets met |",
        "|---|---|---|---|",
    ]
    for suite in SUITES.values():
        record = records.get(suite.name)
        date = record.date[:10] if record else "no record yet"
        met = _met_count(record) if record else ""
        lines.append(f"| [{suite.name}]({suite.name}.md) | {suite.summary} | {date} | {met} |")
    return "\n".join(lines) + "\n"


def summary_table(records: dict[str, Record]) -> str:
    lines = ["| measure | value | target | suite, date |", "|---|---|---|---|"]
    for suite, name in SUMMARY:
        record = records.get(suite)
        found = next((m for m in record.metrics if m.name == name), None) if record else None
        link = f"[{suite}](docs/benchmarks/{suite}.md)"
        if record is None or found is None:
            lines.append(f"| {name} | no record yet | | {link} |")
        else:
            target = f"{found.target} ({_met(found) or 'met'})" if found.target else ""
            lines.append(f"| {name} | {_value(found)} | {target} | {link}, {record.date[:10]} |")
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str | None:
    """`text` with the lines between the summary markers replaced by `block`; None where the
    markers are not both there, in order."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[: start + len(START)] + "\n" + block + "\n" + text[end:]


def pages(records: dict[str, Record], docs: Path = DOCS) -> dict[Path, str]:
    """Every page of docs/benchmarks/ and its text."""
    out = {docs / f"{s.name}.md": suite_page(s, records.get(s.name)) for s in SUITES.values()}
    out[docs / "README.md"] = index_page(records)
    return out


def render_all(folder: Path = RECORDS, readme: Path = README, docs: Path = DOCS) -> Iterable[Path]:
    """Write every page, and README.md's summary where it has the markers."""
    records = latest(folder)
    docs.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in pages(records, docs).items():
        path.write_text(text)
        written.append(path)
    if readme.is_file():
        replaced = replace_block(readme.read_text(), summary_table(records))
        if replaced is not None:
            readme.write_text(replaced)
            written.append(readme)
    return written
