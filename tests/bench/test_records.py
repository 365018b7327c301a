"""The benchmarks' harness without a model: the registry lists every suite, a record survives
its JSON, a metric is judged against its target, the newest record of each suite is the one
rendered, and README.md's summary block is replaced between its markers and nowhere else."""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench import record, render
from bench.record import Load, Machine, Metric, Model, Record, metric
from bench.suites import SUITES

RECORD = Record(
    suite="stops",
    commit="0123456789abcdef",
    dirty=False,
    date="2026-12-07T12:00:00+00:00",
    machine=Machine(cpu="a CPU", cores=2, memory_gib=23.5, gpu=None),
    load=Load(start=0.5, end=1.5, highest=2.0),
    wall_s=66.4,
    models=(Model(name="m.gguf", sha256="ab" * 32),),
    parameters={"tokens": 2000},
    metrics=(
        metric("stops per token, 50 strings, share of a decode step", 0.01, "%", target=("<", 1)),
        metric("decode step", 20.5, "ms"),
    ),
)


def test_every_suite_is_a_module_with_a_docstring_and_a_main() -> None:
    for suite in SUITES.values():
        tree = ast.parse((record.ROOT / "bench" / f"{suite.name}.py").read_text())
        assert ast.get_docstring(tree), suite.name
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert mains, f"bench/{suite.name}.py has no main()"


def test_list_names_every_suite_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(SUITES)
    assert all(SUITES[line.split()[0]].summary in line for line in lines)


def test_an_unknown_suite_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["no-such-suite"]) == 2
    assert "stops" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "target", "met"),
    [
        (1.02, ("<=", 1.05), True),
        (1.06, ("<=", 1.05), False),
        (0, ("==", 0), True),
        (47, (">=", 31), True),
        (math.nan, ("<=", 1.05), False),
        (None, ("<", 2), False),
        ("ready", ("==", 0), False),
    ],
)
def test_a_metric_is_judged_against_its_target(
    value: float | None, target: tuple[record.Comparison, float], met: bool
) -> None:
    judged = metric("m", value, target=target)
    assert judged.met is met
    assert judged.target == f"{target[0]} {target[1]:g}"


def test_a_metric_without_a_target_is_not_judged() -> None:
    assert metric("m", 3.0, "ms") == Metric(name="m", value=3.0, unit="ms")


def test_a_record_survives_its_json() -> None:
    assert Record.from_json(RECORD.to_json()) == RECORD


def test_records_are_written_one_file_a_run_and_the_newest_is_read(tmp_path: Path) -> None:
    older = replace(RECORD, date="2026-12-06T09:30:00+00:00", wall_s=1.0)
    assert record.write(older, tmp_path).name == "stops-20261206T093000.json"
    record.write(RECORD, tmp_path)
    record.write(replace(RECORD, suite="engine"), tmp_path)
    found = record.latest(tmp_path)
    assert sorted(found) == ["engine", "stops"]
    assert found["stops"] == RECORD


def test_the_record_of_a_run_names_its_models_by_sha256(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    outcome = record.Outcome(parameters={"n": 1}, metrics=[metric("x", 1)], models=[model, model])
    done = record.record_of("stops", outcome, RECORD.load, 2.0)
    digest = "9a129038d9a00aed0cf6a7ea059ca50a813449061ab87848cf1a13eafdf33b2c"
    assert done.models == (Model(name="m.gguf", sha256=record.sha256(model)),)
    assert record.sha256(model) == digest
    assert done.machine.cores > 0


def test_a_suite_page_shows_the_latest_record_with_its_targets() -> None:
    page = render.suite_page(SUITES["stops"], RECORD)
    assert "python -m bench stops" in page
    assert "commit `0123456789`" in page
    assert "| stops per token, 50 strings, share of a decode step | 0.01 % | < 1 | yes |" in page
    assert "No record yet" in render.suite_page(SUITES["stops"], None)


def test_the_summary_replaces_only_the_block_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    before = f"# title\n\ntext\n{render.START}\nold table\n{render.END}\n\nafter\n"
    readme.write_text(before)
    records_dir = tmp_path / "records"
    record.write(
        replace(RECORD, suite="soak", metrics=(metric(render.SUMMARY[3][1], 1.1),)), records_dir
    )
    render.render_all(records_dir, readme, tmp_path / "docs")
    text = readme.read_text()
    assert text.startswith(f"# title\n\ntext\n{render.START}\n| measure |")
    assert text.endswith(f"{render.END}\n\nafter\n")
    assert "old table" not in text
    assert "| resident memory, after / once warm | 1.1 |" in text
    assert text.count("no record yet") == 4


def test_a_readme_without_the_markers_is_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# title\n")
    written = list(render.render_all(tmp_path / "records", readme, tmp_path / "docs"))
    assert readme.read_text() == "# title\n"
    assert readme not in written
    assert (tmp_path / "docs" / "README.md") in written


def test_the_committed_pages_are_what_render_makes_of_the_committed_records() -> None:
    """docs/benchmarks/ never drifts from bench/records/: `python -m bench render` rewrites it."""
    pages = render.pages(record.latest())
    for path, text in pages.items():
        assert path.is_file(), f"{path} is missing: run `python -m bench render`"
        assert path.read_text() == text, f"{path} differs: run `python -m bench render`"
    assert set(render.DOCS.glob("*.md")) == set(pages), "pages of no suite: remove them"
