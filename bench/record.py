"""The one result record every suite writes: what ran (suite, parameters, models by sha256),
where (commit, machine, its load while it ran), and each metric with its target and whether
it was met. One JSON file per run in bench/records/, committed: the docs' benchmark pages are
rendered from them (bench/render.py), so no figure is copied by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "bench" / "records"

Comparison = Literal["<=", ">=", "<", ">", "=="]
#: A metric's target: a comparison and its bound.
Target = tuple[Comparison, float]
_CHECKS = {
    "<=": lambda v, b: v <= b,
    ">=": lambda v, b: v >= b,
    "<": lambda v, b: v < b,
    ">": lambda v, b: v > b,
    "==": lambda v, b: v == b,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Metric:
    """One figure of a run: its value and unit, its target ("<= 1.05", None for a figure
    reported without one) and whether the value met it (None without a target)."""

    name: str
    value: float | int | str | None
    unit: str = ""
    target: str | None = None
    met: bool | None = None


def metric(
    name: str,
    value: float | int | str | None,
    unit: str = "",
    *,
    target: Target | None = None,
) -> Metric:
    """A metric, judged against `target` (a comparison and its bound) where one is given; a
    value that is missing or not a number (NaN) never meets it."""
    if isinstance(value, float):
        # NaN is a measurement that never happened (no request of that kind in the run); the
        # rest holds what a timing can tell, not float noise.
        value = None if value != value else float(f"{value:.6g}")
    if target is None:
        return Metric(name=name, value=value, unit=unit)
    op, bound = target
    good = isinstance(value, int | float) and bool(_CHECKS[op](value, bound))
    return Metric(name=name, value=value, unit=unit, target=f"{op} {bound:g}", met=good)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a suite's run hands the harness: the parameters it ran with, its metrics, and the
    model files it measured (hashed into the record)."""

    parameters: Mapping[str, Any]
    metrics: Sequence[Metric]
    models: Sequence[Path] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    cpu: str
    cores: int
    memory_gib: float
    gpu: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """The 1-minute load average at the start and end of a run, and the highest seen between
    (sampled every few seconds): a timing taken under a load of 4 on a few cores reads
    otherwise than an idle one."""

    start: float
    end: float
    highest: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    name: str
    sha256: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    suite: str
    commit: str
    dirty: bool
    date: str
    machine: Machine
    load: Load
    wall_s: float
    models: tuple[Model, ...]
    parameters: dict[str, Any]
    metrics: tuple[Metric, ...] = field(default=())

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Record:
        data = json.loads(text)
        return cls(
            suite=data["suite"],
            commit=data["commit"],
            dirty=data["dirty"],
            date=data["date"],
            machine=Machine(**data["machine"]),
            load=Load(**data["load"]),
            wall_s=data["wall_s"],
            models=tuple(Model(**m) for m in data["models"]),
            parameters=data["parameters"],
            metrics=tuple(Metric(**m) for m in data["metrics"]),
        )


# --- where it ran ---------------------------------------------------------------------------


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def commit() -> tuple[str, bool]:
    """HEAD's commit, and whether tracked files differ from it (records written since do not
    count: they are new files)."""
    return _git("rev-parse", "HEAD") or "unknown", bool(_git("status", "--porcelain", "-uno"))


def machine() -> Machine:
    """The CPU's model, its cores, the memory and the GPUs nvidia-smi sees, if any."""
    cpu = "unknown"
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    gpu = None
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
        try:
            out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        gpu = "; ".join(line.strip() for line in out.splitlines() if line.strip()) or None
    return Machine(
        cpu=cpu, cores=os.cpu_count() or 0, memory_gib=round(memory_kib / 2**20, 1), gpu=gpu
    )


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def load_average() -> float:
    """The 1-minute load average (/proc/loadavg); NaN where there is none."""
    text = _read("/proc/loadavg")
    return float(text.split()[0]) if text else float("nan")


class LoadWatch:
    """The load average over a run: read at the start, every `every_s` seconds in a thread,
    and at the end."""

    def __init__(self, every_s: float = 5.0) -> None:
        self._every_s = every_s
        self._start = load_average()
        self._highest = self._start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-load", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._every_s):
            self._highest = max(self._highest, load_average())

    def finish(self) -> Load:
        self._stop.set()
        self._thread.join()
        end = load_average()
        return Load(start=self._start, end=end, highest=max(self._highest, end))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- reading and writing ----------------------------------------------------------------------


def record_of(
    suite: str, outcome: Outcome, load: Load, wall_s: float, at: tuple[str, bool] | None = None
) -> Record:
    """The record of one run that has just ended; `at`: the commit it started at, and whether
    the tree differed from it then (read now where not given)."""
    head, dirty = at or commit()
    return Record(
        suite=suite,
        commit=head,
        dirty=dirty,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine(),
        load=load,
        wall_s=round(wall_s, 1),
        models=tuple(Model(name=p.name, sha256=sha256(p)) for p in dict.fromkeys(outcome.models)),
        parameters=json.loads(json.dumps(dict(outcome.parameters), default=str)),
        metrics=tuple(outcome.metrics),
    )


def write(record: Record, folder: Path = RECORDS) -> Path:
    """`folder`/SUITE-YYYYMMDDTHHMMSS.json."""
    stamp = datetime.fromisoformat(record.date).strftime("%Y%m%dT%H%M%S")
    path = folder / f"{record.suite}-{stamp}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(record.to_json())
    return path


def latest(folder: Path = RECORDS) -> dict[str, Record]:
    """Each suite's newest record (the file names sort by date within a suite)."""
    found: dict[str, Record] = {}
    for path in sorted(folder.glob("*.json")):
        record = Record.from_json(path.read_text())
        if record.suite not in found or record.date >= found[record.suite].date:
            found[record.suite] = record
    return found
