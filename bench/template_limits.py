"""Hostile chat templates against the sandbox's limits (engine/template_sandbox.py, issue 26):
the time each takes to be refused, and how much the process grows meanwhile.

Run from the repository root:

    .venv/bin/python bench/template_limits.py [--json PATH]

The probes are the tests' (tests/engine/test_template_limits.py: one call that would build
100 MB to 10 GB, and runaway loops), each rendered in a fresh process on a one-message
conversation with the default limits (2 s, 1,000,012 characters), so that the peak resident
size it reports is that probe's alone.

Prints a table to stdout and writes JSON to bench/results/template_limits.json; logs go to
stderr. Targets: each refused within its deadline plus 0.1 s, the process growing by under
50 MB.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repository root in front (bench/engine.py would otherwise shadow the package), and the
# tests' folders, where the probes are.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import argparse
import json
import resource
import subprocess
import time

from bench._common import RESULTS, Column, Table, ok, suite_parser, write_json

TARGET_EXTRA_SECONDS = 0.1
TARGET_MB = 50.0


def probes() -> dict[str, str]:
    from test_template_limits import BEFORE_BUILDING, RUNAWAYS

    return {name: source for name, (source, _) in (BEFORE_BUILDING | RUNAWAYS).items()}


def measure(name: str) -> dict[str, object]:
    """Render one probe in this process: seconds to the refusal, growth of the peak resident
    size, the message."""
    from engine.chat_template import render_chat_template
    from engine.template_sandbox import DEFAULT_LIMITS
    from engine.types import ChatMessage

    source = probes()[name]
    messages = (ChatMessage(role="user", content="hi"),)
    render_chat_template("{{ 'warm' }}", messages, bos_token=None, eos_token=None)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    try:
        render_chat_template(source, messages, bos_token=None, eos_token=None)
        outcome = "rendered"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"
    seconds = time.monotonic() - started
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    deadline = DEFAULT_LIMITS.seconds + 4 * DEFAULT_LIMITS.seconds_per_input_char
    return {
        "probe": name,
        "seconds": seconds,
        "grown_mb": grown_mb,
        "outcome": outcome,
        # A template that recurses past Python's limit fails with RecursionError, at once.
        "ok": outcome.startswith(("TemplateLimitError", "ChatTemplateError"))
        and seconds <= deadline + TARGET_EXTRA_SECONDS
        and grown_mb < TARGET_MB,
    }


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("template_limits", __doc__)
    parser.add_argument("--json", type=Path, default=RESULTS / "template_limits.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a probe, in this fresh process
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return 0
    rows = []
    for name in probes():
        done = subprocess.run(
            [sys.executable, __file__, "--one", name],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        rows.append(json.loads(done.stdout.splitlines()[-1]))
    table = Table(
        Column("probe", 48, "<"),
        Column("seconds", 8, spec=".3f"),
        Column("grown MB", 9, spec=".1f"),
        Column("ok", 4),
        Column("outcome", 60, "<", gap="  "),
    )
    table.print(
        [r["probe"], r["seconds"], r["grown_mb"], ok(bool(r["ok"])), str(r["outcome"])[:90]]
        for r in rows
    )
    worst_seconds = max(float(r["seconds"]) for r in rows)  # type: ignore[arg-type]
    worst_mb = max(float(r["grown_mb"]) for r in rows)  # type: ignore[arg-type]
    print(
        f"\nworst: {worst_seconds:.3f} s, {worst_mb:.1f} MB; all within the targets: "
        f"{ok(all(r['ok'] for r in rows))}"
    )
    write_json(args.json, {"probes": rows, "worst_seconds": worst_seconds, "worst_mb": worst_mb})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
