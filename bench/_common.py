"""What the benchmarks share: where things are, the HumanEval data, and writing results."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
HUMAN_EVAL_RANDOM_SPAN = (
    ROOT.parent
    / "shared"
    / "data"
    / "human-eval-infilling"
    / "HumanEval-RandomSpanInfilling.jsonl.gz"
)
HUMAN_EVAL = (
    ROOT.parent
    / "shared"
    / "data"
    / "human-eval-infilling"
    / "HumanEval-SingleLineInfilling.jsonl.gz"
)


def humaneval_rows(path: Path = HUMAN_EVAL) -> list[dict[str, Any]]:
    """Every HumanEval infilling task of a set (single-line by default), in file order."""
    if not path.is_file():
        raise SystemExit(f"HumanEval data not found at {path} (see shared/data/README.md)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def humaneval_task(task_id: str) -> dict[str, Any]:
    row = next((r for r in humaneval_rows() if r["task_id"] == task_id), None)
    if row is None:
        raise SystemExit(f"no task {task_id!r} in {HUMAN_EVAL}")
    return row


def write_json(path: Path, result: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
