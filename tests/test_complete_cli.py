"""`infill-lsp complete PATH:LINE:COL` as a user runs it: a real server, a real suggestion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_helpers import server_env

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "lsp_server.cli", "complete"]


def run_complete(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=server_env(),
        check=False,
    )


@pytest.mark.slow
def test_the_demo_position_gets_a_suggestion_with_its_range_timings_and_model() -> None:
    result = run_complete("examples/fibonacci.py:5:5", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["items"], report
    item = report["items"][0]
    assert item["insert_text"].strip()
    assert item["range"]["start"] == [4, 4]  # LINE:COL are 1-based, LSP's 0-based
    assert set(report["timings_ms"]) == {"startup_and_load", "completion"}
    assert report["model"]


@pytest.mark.slow
def test_the_plain_output_is_the_suggestion_text() -> None:
    result = run_complete("examples/fibonacci.py:5:5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("examples/fibonacci.py", "expected PATH:LINE:COL"),
        ("examples/fibonacci.py:0:1", "LINE and COL start at 1"),
        ("examples/fibonacci.py:999:1", "past the end of the file"),
        ("examples/no-such-file.py:1:1", "No such file"),
    ],
)
def test_a_bad_location_is_one_line_on_stderr_and_exit_status_1(
    location: str, message: str
) -> None:
    result = run_complete(location)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("infill-lsp: error: "), result.stderr
    assert message in line, result.stderr
