"""The benchmarks' package for the tests of their arithmetic: the repository root on the path,
where `bench` is this checkout's (the installed project holds engine/ and lsp_server/ only)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)
