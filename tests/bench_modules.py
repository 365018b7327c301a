"""The benchmarks' modules, for the tests of their arithmetic (tests/bench/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str, *, as_name: str | None = None) -> ModuleType:
    """The module bench/<name>.py, imported once as `as_name` (default `name`; another where
    `name` is also a folder of the repository, such as editors/). bench/ is not a package: its
    scripts import each other by bare name, so the folder goes at the end of the path, where it
    shadows nothing of the product's."""
    key = as_name or name
    if key in sys.modules:
        return sys.modules[key]
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(key, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module
