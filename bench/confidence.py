"""The confidence gate: suggestions shown against suggestions right, through the real server,
on cases no weight or threshold was chosen on.

    python -m bench confidence [--humaneval 150] [--pypi 30] [--sdists DIR]
                               [--cases PATH] [--fit] [--json PATH]

Cases, each split once and for all into a tuning part and a held-out part:

- HumanEval single-line (`third_party/data/human-eval-infilling`): the hole's line opened and
  indented as an auto-indenting editor leaves it (the humaneval suite's "indent" layout), the
  returned item applied, scored by the task's tests. Tasks of even-numbered problems tune,
  odd-numbered ones are held out (no function has holes in both parts); `--humaneval N`
  per part, spread evenly over it.
- Lines cut from real files of PyPI packages (sdists `pip download`ed into `--sdists`, a
  cache folder: `pip download --no-binary :all: --no-deps -d DIR attrs==23.2.0 click==8.1.7
  packaging==24.0 more-itertools==10.2.0`): a line of code (not a comment, at least 10
  characters) emptied but for its indentation, the cursor after it ("line"); and the same
  line cut after its first bracket, "=", "." or "," past its start, the cursor at the line's
  end ("rest"). Right when the suggestion, stripped, is what was cut, stripped. attrs and
  click tune, packaging and more-itertools are held out; `--pypi N` lines per package,
  picked with a seeded random generator per package.

The server runs with `minConfidence` 0 (everything shown) and `debounceMs` 0; after each
request `infill/stats` gives the gate's judgement of the suggestion (its features, its
confidence, the time it took). The curve is then computed from the recorded features with
`lsp_server/inline/confidence.py` itself, for every threshold: what would be shown, right
and wrong. The gate is deterministic, so this is what the server shows at each setting.

`--fit` fits the logistic model's weights on the tuning part only and prints them (they are
pasted into confidence.py by hand); `--cases PATH` reads recorded cases instead of running
the server. Prints the curves to stdout; writes every case and the curves to
bench/results/confidence.json. Target, held-out Python cases at the default:
wrong suggestions shown at least 40% fewer, right ones at most 10% fewer, median added
latency under 2 ms.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import random
import statistics
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    HUMAN_EVAL,
    RESULTS,
    humaneval_rows,
    setup_logging,
    suite_parser,
    write_json,
)
from bench._compare import model_paths, server_options
from bench._lsp import ServerClient, apply_item
from bench.humaneval import full_program, layout_document, run_program
from bench.record import Outcome, metric
from lsp_server.client import insert_text_of
from lsp_server.inline.confidence import BIAS, WEIGHTS, Features, confidence, passes
from lsp_server.settings import Settings

log = logging.getLogger("bench.confidence")

TUNING_PACKAGES = ("attrs", "click")
HELD_OUT_PACKAGES = ("packaging", "more-itertools", "more_itertools")
#: The thresholds the curve is drawn at.
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(0, 20))
#: Most right suggestions the default may hide on the tuning part (the target allows 10%
#: on the held-out part; the margin is for the difference between the parts).
TUNING_RIGHT_LOSS = 0.07


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One cursor in one document, and how its suggestion is scored."""

    id: str
    part: str  # "tuning" or "held-out"
    source: str  # "humaneval" or "pypi"
    document: str
    cursor: int
    expected: str | None = None  # pypi: the line, stripped
    task: dict[str, Any] | None = None  # humaneval: the task's row


# --------------------------------------------------------------------------------------------
# Cases


def humaneval_cases(per_part: int) -> list[Case]:
    rows = humaneval_rows(HUMAN_EVAL)
    cases = []
    for part, parity in (("tuning", 0), ("held-out", 1)):
        pool = [r for r in rows if int(r["task_id"].split("/")[2]) % 2 == parity]
        picked = sorted({i * len(pool) // per_part for i in range(min(per_part, len(pool)))})
        for i in picked:
            row = pool[i]
            document, cursor = layout_document(row, "indent")
            cases.append(
                Case(
                    id=row["task_id"],
                    part=part,
                    source="humaneval",
                    document=document,
                    cursor=cursor,
                    task=row,
                )
            )
    return cases


def _package_of(sdist: Path) -> str:
    return sdist.name.rsplit("-", 1)[0]


def _code_lines(text: str) -> list[int]:
    """Indexes of the lines worth a case: code, not a comment or a string, 10+ characters."""
    out = []
    for i, line in enumerate(text.split("\n")):
        stripped = line.strip()
        if len(stripped) < 10 or stripped[0] in "#\"'@" or stripped.startswith(('"""', "'''")):
            continue
        out.append(i)
    return out


def pypi_cases(sdists: Path, per_package: int) -> list[Case]:
    cases: list[Case] = []
    for sdist in sorted(sdists.glob("*.tar.gz")):
        package = _package_of(sdist)
        if package in TUNING_PACKAGES:
            part = "tuning"
        elif package in HELD_OUT_PACKAGES:
            part = "held-out"
        else:
            continue
        files: list[tuple[str, str]] = []
        with tarfile.open(sdist) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                name = member.name
                skip = ("/tests/", "/test/", "/docs/", "/doc/", "setup.py", "conftest.py")
                if not name.endswith(".py") or any(s in name for s in skip):
                    continue
                data = tar.extractfile(member)
                if data is None or member.size > 100_000:
                    continue
                files.append((name, data.read().decode("utf-8", "replace")))
        spots = [(name, text, i) for name, text in files for i in _code_lines(text)]
        rng = random.Random(package)  # the same lines every run
        for name, text, index in rng.sample(spots, min(per_package, len(spots))):
            lines = text.split("\n")
            line = lines[index]
            above = "\n".join(lines[:index]) + ("\n" if index else "")
            below = "\n" + "\n".join(lines[index + 1 :])
            # The whole line, the cursor after its indentation; and its rest after the first
            # bracket, "=", "." or ", " past its start, the cursor at the line's end.
            indent = len(line) - len(line.lstrip(" \t"))
            cut = next(
                (i + 1 for i in range(indent + 3, len(line) - 3) if line[i] in "(=.,["), None
            )
            for kind, at in (("line", indent), ("rest", cut)):
                if at is None:
                    continue
                before = above + line[:at]
                cases.append(
                    Case(
                        id=f"{name}:{index + 1}:{kind}",
                        part=part,
                        source="pypi",
                        document=before + below,
                        cursor=len(before),
                        expected=line[at:].strip(),
                    )
                )
    return cases


# --------------------------------------------------------------------------------------------
# The server


async def judged_count(client: ServerClient) -> int:
    """How many suggestions the server's gate has judged so far (`infill/stats`)."""
    count: int = (await client.client.stats())["gate"]["judged"]
    return count


async def last_judgement(client: ServerClient, judged: int) -> tuple[dict[str, Any] | None, int]:
    """The gate's judgement of the request just answered (its `Judgement.json()`), None where
    the gate judged nothing since `judged` (no suggestion); and the new count."""
    gate = (await client.client.stats())["gate"]
    return (gate["last"] if gate["judged"] > judged else None), gate["judged"]


async def collect(
    cases: Sequence[Case], options: dict[str, Any], partial: Path
) -> list[dict[str, Any]]:
    """Each case's suggestion (`minConfidence` 0) and the gate's judgement of it; what is
    done so far is written to `partial` every 25 cases (a long run on a busy machine)."""
    client = ServerClient({**options, "minConfidence": 0})
    out = []
    try:
        status = await client.start()
        log.info("server ready: %s", status.get("model"))
        judged = await judged_count(client)
        for number, case in enumerate(cases):
            uri = f"file:///bench/confidence/c{number:04d}.py"
            client.open(uri, case.document)
            started = time.perf_counter()
            items, _ = await client.inline(uri, case.cursor)
            seconds = time.perf_counter() - started
            judgement, judged = await last_judgement(client, judged)
            record: dict[str, Any] = {
                "id": case.id,
                "part": case.part,
                "source": case.source,
                "seconds": round(seconds, 3),
                "inserted": None,
                "program": None,
                "judgement": judgement,
                "expected": case.expected,
            }
            if items:
                program, _, _ = apply_item(case.document, items[0], case.cursor)
                record["inserted"] = insert_text_of(items[0])
                if case.task is not None:
                    record["program"] = full_program(program, case.task)
            client.close(uri)
            out.append(record)
            if (number + 1) % 25 == 0:
                log.info("%d/%d", number + 1, len(cases))
                write_json(partial, {"cases": out})
    finally:
        await client.stop()
    return out


def score(records: list[dict[str, Any]], timeout: float) -> None:
    """Each record's `right`: its tests pass (HumanEval) or it is the line (PyPI)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            pool.submit(run_program, r["program"], timeout): r
            for r in records
            if r["program"] is not None
        }
        for future in concurrent.futures.as_completed(futures):
            futures[future]["right"] = future.result()[0]
    for r in records:
        if r["source"] == "pypi":
            inserted = r["inserted"]
            r["right"] = inserted is not None and inserted.strip() == r["expected"]
        r.setdefault("right", False)


# --------------------------------------------------------------------------------------------
# Analysis


def _features(record: dict[str, Any]) -> Features | None:
    judgement = record["judgement"]
    if judgement is None or judgement["features"] is None:
        return None
    return Features(**judgement["features"])


def shown_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records whose suggestion is shown with the gate off (an item came back)."""
    return [r for r in records if r["inserted"] is not None]


def curve(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per threshold (`THRESHOLDS`): suggestions shown, right and wrong among them. A record
    needs `inserted` (None: no suggestion), `right` and `judgement` (the gate's, recorded with
    `minConfidence` 0; its features are weighed again here, so the curve is today's weights')."""
    shown = shown_records(records)
    scores = []
    for r in shown:
        features = _features(r)
        scores.append((None if features is None else confidence(features), r["right"]))
    rows = []
    for threshold in THRESHOLDS:
        kept = [right for s, right in scores if passes(s, threshold)]
        rows.append(
            {
                "threshold": threshold,
                "shown": len(kept),
                "right": sum(kept),
                "wrong": len(kept) - sum(kept),
            }
        )
    return rows


def choose_default(rows: list[dict[str, Any]]) -> float:
    """The highest threshold that keeps all but `TUNING_RIGHT_LOSS` of the right ones."""
    base = rows[0]
    best = 0.0
    for row in rows:
        if row["right"] >= base["right"] * (1 - TUNING_RIGHT_LOSS):
            best = max(best, row["threshold"])
    return best


def fit(records: list[dict[str, Any]], names: Sequence[str], l2: float = 1.0) -> dict[str, Any]:
    """A logistic model of `right` over the named features (Newton's method, an L2 penalty
    on the weights, not on the bias), on the records given (the tuning part's)."""
    import numpy as np

    data = [(f.vector(), r["right"]) for r in shown_records(records) if (f := _features(r))]
    x = np.array([[1.0, *(v[n] for n in names)] for v, _ in data])
    y = np.array([float(right) for _, right in data])
    w = np.zeros(x.shape[1])
    penalty = np.eye(x.shape[1]) * l2
    penalty[0, 0] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + penalty @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + penalty
        w -= np.linalg.solve(hessian, gradient)
    p = 1 / (1 + np.exp(-(x @ w)))
    loss = -float(np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12)))
    return {
        "bias": float(w[0]),
        "weights": dict(zip(names, map(float, w[1:]), strict=True)),
        "log_loss": loss,
        "cases": len(data),
    }


def precision(row: dict[str, Any]) -> float:
    """Right among shown at a curve's row (0 where nothing is shown)."""
    return float(row["right"] / row["shown"]) if row["shown"] else 0.0


def print_curve(
    title: str,
    rows: list[dict[str, Any]],
    default: float,
    *,
    right: str = "right",
    wrong: str = "wrong",
) -> None:
    """A curve as a table; `right` and `wrong` name those columns (a benchmark that scores
    by exact match says "exact" and "not exact")."""
    base = rows[0]
    print(f"\n{title}")
    kept_name, cut_name = f"{right} kept", f"{wrong} cut"
    widths = [max(6, len(right)), max(6, len(wrong)), len(kept_name), len(cut_name)]
    print(
        f"{'threshold':>9} {'shown':>6} {right:>{widths[0]}} {wrong:>{widths[1]}} "
        f"{'precision':>9} {kept_name:>{widths[2]}} {cut_name:>{widths[3]}}"
    )
    for row in rows:
        kept = row["right"] / base["right"] if base["right"] else 1.0
        cut = 1 - row["wrong"] / base["wrong"] if base["wrong"] else 0.0
        mark = "  <- default" if math.isclose(row["threshold"], default) else ""
        print(
            f"{row['threshold']:>9.2f} {row['shown']:>6} {row['right']:>{widths[0]}} "
            f"{row['wrong']:>{widths[1]}} {precision(row):>9.0%} {kept:>{widths[2]}.0%} "
            f"{cut:>{widths[3]}.0%}{mark}"
        )


def at(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    return next(r for r in rows if math.isclose(r["threshold"], threshold))


def change_at(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """What the gate at `threshold` changes against showing everything (the curve's first
    row, threshold 0): the share of wrong and of right suggestions it hides (0 where there
    were none to hide), and the precision before and after."""
    base, gated = rows[0], at(rows, threshold)
    return {
        "threshold": threshold,
        "shown": (base["shown"], gated["shown"]),
        "right": (base["right"], gated["right"]),
        "wrong": (base["wrong"], gated["wrong"]),
        "wrong_cut": 1 - gated["wrong"] / base["wrong"] if base["wrong"] else 0.0,
        "right_cut": 1 - gated["right"] / base["right"] if base["right"] else 0.0,
        "precision": (precision(base), precision(gated)),
    }


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("confidence", __doc__)
    parser.add_argument("--humaneval", type=int, default=150, help="HumanEval cases per part")
    parser.add_argument("--pypi", type=int, default=30, help="lines per PyPI package")
    parser.add_argument("--sdists", type=Path, default=None, help="folder of PyPI sdists")
    parser.add_argument("--cases", type=Path, default=None, help="recorded cases (no server)")
    parser.add_argument("--fit", action="store_true", help="fit the weights on the tuning part")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--model", default=None)
    parser.add_argument("--json", type=Path, default=RESULTS / "confidence.json")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)

    if args.cases is not None:
        records = json.loads(args.cases.read_text(encoding="utf-8"))["cases"]
        if any("right" not in r for r in records):  # a partial run's, not scored yet
            score(records, args.timeout)
    else:
        cases = humaneval_cases(args.humaneval)
        if args.sdists is not None:
            cases += pypi_cases(args.sdists, args.pypi)
        options, _ = server_options(args.model)
        partial = args.json.with_suffix(".partial.json")
        records = asyncio.run(collect(cases, options, partial))
        score(records, args.timeout)

    tuning = [r for r in records if r["part"] == "tuning"]
    held = [r for r in records if r["part"] == "held-out"]
    result: dict[str, Any] = {"cases": records, "weights": {"bias": BIAS, **WEIGHTS}}
    if args.fit:
        names = sorted(next(f for r in tuning if (f := _features(r))).vector())
        fitted = fit(tuning, names)
        print(json.dumps(fitted, indent=2))
        result["fit"] = fitted

    tuning_rows = curve(tuning)
    default = choose_default(tuning_rows)
    print(f"weights: bias {BIAS}, {dict(WEIGHTS)}")
    print(
        f"default chosen on the tuning part: {default:.2f} (Settings: "
        f"{Settings().min_confidence:.2f})"
    )
    print_curve("tuning part (the weights and the default were chosen here)", tuning_rows, default)
    result["curves"] = {"tuning": tuning_rows}
    for name, part in (
        ("held-out", held),
        ("held-out HumanEval", [r for r in held if r["source"] == "humaneval"]),
        ("held-out PyPI", [r for r in held if r["source"] == "pypi"]),
    ):
        if not part:
            continue
        rows = curve(part)
        result["curves"][name] = rows
        print_curve(f"{name} part", rows, Settings().min_confidence)
    ms = [r["judgement"]["ms"] for r in records if r["judgement"] is not None]
    if ms:
        print(
            f"\ngate's added latency: median {statistics.median(ms):.3f} ms, "
            f"max {max(ms):.3f} ms over {len(ms)} suggestions"
        )
        result["gate_ms"] = {"median": statistics.median(ms), "max": max(ms)}
    write_json(args.json, result)
    metrics = [metric("cases", len(records)), metric("held-out cases", len(held))]
    if held:
        change = change_at(result["curves"]["held-out"], Settings().min_confidence)
        metrics += [
            metric(
                "held-out, wrong shown, fewer", change["wrong_cut"] * 100, "%", target=(">=", 40)
            ),
            metric(
                "held-out, right shown, fewer", change["right_cut"] * 100, "%", target=("<=", 10)
            ),
        ]
    if ms:
        metrics.append(
            metric(
                "the gate's time per suggestion, median",
                statistics.median(ms),
                "ms",
                target=("<", 2),
            )
        )
    parameters = {
        "humaneval": args.humaneval,
        "pypi": args.pypi,
        "threshold": Settings().min_confidence,
    }
    return Outcome(parameters=parameters, metrics=metrics, models=model_paths(args.model))
