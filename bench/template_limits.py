"""Hostile chat templates against the sandbox's limits (engine/template_sandbox.py):
the time each takes to be refused, and how much the process grows meanwhile.

    python -m bench template_limits [--json PATH]

The probes are the tests' (tests/engine/test_template_limits.py: one call that would build
100 MB to 10 GB, and runaway loops), each rendered in a fresh process on a one-message
conversation with the default limits (2 s, 1,000,012 characters), so that the peak resident
size it reports is that probe's alone.

Writes every figure to bench/results/template_limits.json; logs go to
stderr. Targets: each refused within its deadline plus 0.1 s, the process growing by under
50 MB.
"""

from __future__ import annotations

import importlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import RESULTS, ROOT, suite_parser, write_json
from bench.record import Outcome, metric

TARGET_EXTRA_SECONDS = 0.1
TARGET_MB = 50.0


def probes() -> dict[str, str]:
    """The tests' probes (tests/engine/test_template_limits.py), by name."""
    for folder in (ROOT / "tests", ROOT / "tests" / "engine"):
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
    tests = importlib.import_module("test_template_limits")
    return {name: source for name, (source, _) in (tests.BEFORE_BUILDING | tests.RUNAWAYS).items()}


def measure(name: str) -> dict[str, Any]:
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


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("template_limits", __doc__)
    parser.add_argument("--json", type=Path, default=RESULTS / "template_limits.json")
    args = parser.parse_args(argv)
    rows = []
    for name in probes():
        # Each probe in a fresh process, so that the peak resident size is that probe's.
        code = f"import json, bench.template_limits as t; print(json.dumps(t.measure({name!r})))"
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        rows.append(json.loads(done.stdout.splitlines()[-1]))
    write_json(args.json, {"probes": rows})
    metrics = [
        metric(
            "probes refused in time, growing under 50 MB",
            sum(bool(r["ok"]) for r in rows),
            target=(">=", len(rows)),
        ),
        metric("slowest refusal", max(float(r["seconds"]) for r in rows), "s"),
        metric(
            "largest growth", max(float(r["grown_mb"]) for r in rows), "MB", target=("<", TARGET_MB)
        ),
    ]
    return Outcome(parameters={"probes": len(rows)}, metrics=metrics)
