"""`infill-lsp complete PATH:LINE:COL` as a user runs it: a real server, a real suggestion; and
the client it is built on (`lsp_server/client.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_helpers import poll_until, server_env
from lsprotocol import types

from lsp_server.client import InfillClient, insert_text_of

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.slow
def test_a_file_whose_path_holds_a_space_and_a_non_ascii_letter_gets_a_suggestion(
    tmp_path: Path,
) -> None:
    """The file's URI is percent-escaped (`my%20project/caf%C3%A9.py`): the server finds the
    document it opened under it."""
    folder = tmp_path / "my project"
    folder.mkdir()
    source = (ROOT / "examples" / "fibonacci.py").read_text(encoding="utf-8")
    path = folder / "café.py"
    path.write_text(source, encoding="utf-8")
    result = run_complete(f"{path}:5:5", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["items"], report
    assert report["items"][0]["insert_text"].strip()


@pytest.mark.slow
def test_col_counts_code_points_and_invoked_asks_for_several_items(tmp_path: Path) -> None:
    """COL counts characters as a person does: after an emoji (one character, two UTF-16
    units) the items still start at the cursor, in LSP's units; `--invoked` asks as an explicit
    invocation and gets up to `invokedSuggestions` (3) distinct items."""
    source = (ROOT / "examples" / "fibonacci.py").read_text(encoding="utf-8")
    before = 'print("🎉", fibonacci('
    path = tmp_path / "party.py"
    path.write_text(f"{source.rstrip()}\n\n\n{before}\n", encoding="utf-8")
    line = len(path.read_text(encoding="utf-8").splitlines())
    result = run_complete(f"{path}:{line}:{len(before) + 1}", "--json", "--invoked")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    assert 1 <= len(items) <= 3, items
    assert len({item["insert_text"] for item in items}) == len(items), items
    utf16 = len(before.encode("utf-16-le")) // 2
    assert utf16 == len(before) + 1
    assert all(item["range"]["start"] == [line - 1, utf16] for item in items), items


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


@pytest.mark.slow
async def test_the_shared_client_reads_status_and_the_jobs_figures_as_plain_json() -> None:
    """`lsp_server.client` (what `complete` and the benchmarks use) against the real server:
    an inline completion, then `infill/stats` holds its engine job (no work ahead: that would
    add jobs of its own)."""
    shown: list[str] = []
    client = InfillClient("infill-lsp-tests", on_show=shown.append)
    text = (ROOT / "examples" / "fibonacci.py").read_text(encoding="utf-8")
    uri = (ROOT / "examples" / "fibonacci.py").as_uri()
    try:
        await client.start(
            root_uri=ROOT.as_uri(),
            options={"debounceMs": 0, "speculativeSuggestions": 0},
            cwd=str(ROOT),
            env=server_env(),
        )
        client.open(uri, text)
        items = await client.inline(uri, types.Position(line=4, character=4))
        status = await client.status()
        engines = (
            await poll_until(
                client.stats, lambda s: s["engines"][0]["jobs"], "a job in infill/stats"
            )
        )["engines"]
    finally:
        await client.stop()
    assert items
    assert insert_text_of(items[0]).strip()
    assert status["status"] == "ready"
    (engine,) = engines
    assert engine["roles"] == ["completion"]
    assert engine["model"] == status["model"]
    (job,) = engine["jobs"]
    assert isinstance(job, dict)
    assert job["prompt_tokens"] > 0
    assert job["generated_tokens"] >= 1
    assert shown == []


def _console_script() -> list[str]:
    """`infill-lsp` as a user runs it: the console script beside this Python."""
    script = Path(sys.executable).parent / "infill-lsp"
    return [str(script)] if script.exists() else [sys.executable, "-P", "-m", "lsp_server.cli"]


@pytest.mark.slow
def test_a_folder_with_its_own_engine_package_cannot_shadow_ours(tmp_path: Path) -> None:
    """Run from a folder that holds its own `engine/` and `lsp_server/`: `complete` and the
    server it starts import our packages, not the user's (`python -m` would put the folder
    first on the import path)."""
    for name in ("engine", "lsp_server"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"raise ImportError('the user\\'s own {name} was imported')\n", encoding="utf-8"
        )
    result = subprocess.run(
        [*_console_script(), "complete", str(ROOT / "examples/fibonacci.py") + ":5:5"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=server_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "own engine" not in result.stderr
    assert result.stdout.strip()
