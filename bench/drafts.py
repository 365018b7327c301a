"""Drafts from the document (engine/drafts.py): greedy answers with and without them, side by
side in one run: forward passes and time per answer, how many draft tokens stood, and whether
the tokens are the same.

    python -m bench drafts [--suggestions 20] [--rewrites 12] [--next-edit 6]
                           [--roles completion chat] [--json PATH]

Three kinds of answer, on the default completion model (Gemma 3 270M) and the default chat
model (SmolLM2-135M), all greedy:

- "suggestion": a multi-line suggestion in a real file: a HumanEval program (third_party/data,
  written by others) cut after the first lines of its solution, 64 tokens on from there.
- "rewrite": an answer that repeats a region of its prompt with a change, as a next-edit
  rewrite does: the prompt shows a ~20-line region of a HumanEval program, then asks for the
  same code with the function's first parameter renamed and starts it with the renamed
  `def` line; the answer is as long as the rest of the region.
- "next-edit copy": a next-edit rewrite that changes one line: a copy of the region (the language
  server's own next-edit prompt, Zeta v1 format, as many tokens as the region and its
  markers), through the engine, its own measuring as it is; completion model only.

Each case is answered three ways (`MODES`): "plain", a token per pass (`generate()`, no
drafts); "drafts", the default (passes no longer than the model's kernels keep exact, as much
of a draft as pays); "every draft", each draft of up to 8 tokens checked in full, exact or
not: what drafts could give. Each prompt is evaluated once first, untimed; the ways take
turns (the order rotates from case to case, so that the machine's load drifts over all
alike). "passes" counts forward passes (llama.cpp decode calls) per answer.

Exactness: every answer is compared with the plain one, token for token; for suggestions the
plain answer is also compared with itself when the prompt's last 6 tokens were evaluated
apart from the rest (as a keystroke's request evaluates them on top of the cache): how much a
greedy answer depends on how its prompt was split into passes, without any draft.

Writes every figure to bench/results/drafts.json; logs go to stderr.
Target: a rewrite at least 2x faster, its tokens the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
    humaneval_rows,
    local_spec,
    median,
    setup_logging,
    shared_prefix,
    suite_parser,
    token_counter,
    write_json,
)
from bench.record import Outcome, Target, metric
from engine.backends.llama_cpp import DRAFT_TOKENS, DraftChecking, LlamaCppBackend
from engine.drafts import DraftCounts
from engine.models import load_backend, model_spec
from engine.next_edit_model import NextEditModel
from engine.specs import ModelOptions
from engine.types import GenerationRequest, Role, SamplingParams, StopConditions
from lsp_server.documents import DocumentSnapshot
from lsp_server.next_edit.history import EditHistory
from lsp_server.next_edit.region import region_input

#: The target: a rewrite at least this many times faster with drafts.
TARGET_SPEEDUP = 2.0
SUGGESTION_TOKENS = 64
#: Lines of a program's solution before the cut where a suggestion starts.
SUGGESTION_LINES = 2
REGION_LINES = 20
#: Prompt tokens evaluated apart for the exactness baseline (`Measured.split_differs_at`).
SPLIT = 6
_DEF = re.compile(r"^def \w+\((\w+)", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One prompt and how many tokens its answer takes."""

    kind: str
    name: str
    prompt: str
    tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """One case answered one way."""

    seconds: float
    passes: int
    drafted: int
    accepted: int
    #: Where the answer parts from the one without drafts (None: it does not).
    differs_at: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """One case answered each way (`MODES`)."""

    kind: str
    name: str
    prompt_tokens: int
    tokens: int
    answers: dict[str, Answer]
    #: Where the answer without drafts parts from itself when its prompt's last tokens were
    #: evaluated apart from the rest (as after a keystroke); None: it does not; not measured
    #: for every kind.
    split_differs_at: int | None = None


def programs() -> dict[str, str]:
    """Each HumanEval task's whole program, by task."""
    found: dict[str, str] = {}
    for row in humaneval_rows():
        task = row["task_id"].rsplit("/", 1)[0]
        found.setdefault(task, row["prompt"] + row["canonical_solution"] + row["suffix"])
    return found


def suggestion_cases(count: int) -> list[Case]:
    """Programs cut after the first lines of their solution: the suggestion goes on."""
    cases = []
    for task, program in programs().items():
        lines = program.splitlines(keepends=True)
        body = next((i for i, line in enumerate(lines) if line.strip().endswith('"""')), None)
        # The docstring's last line, then the solution's first lines.
        if body is None or body + SUGGESTION_LINES + 1 >= len(lines):
            continue
        prefix = "".join(lines[: body + 1 + SUGGESTION_LINES])
        cases.append(Case(kind="suggestion", name=task, prompt=prefix, tokens=SUGGESTION_TOKENS))
        if len(cases) == count:
            break
    return cases


def rewrite_cases(count: int, count_tokens: Callable[[str], int]) -> list[Case]:
    """A region of a program, and the start of the same code with its first parameter
    renamed: the answer repeats the region with the change."""
    cases = []
    for task, program in programs().items():
        match = _DEF.search(program)
        if match is None or len(match[1]) < 2:
            continue
        old, new = match[1], match[1] + "_in"
        start = program.count("\n", 0, match.start())
        lines = program.splitlines()[start : start + REGION_LINES]
        if len(lines) < REGION_LINES // 2:
            continue
        region = "\n".join(lines)
        edited = re.sub(rf"\b{re.escape(old)}\b", new, region)
        first, rest = edited.split("\n", 1)
        prompt = (
            f"Original:\n```python\n{region}\n```\n\n"
            f"The same code with `{old}` renamed to `{new}`:\n```python\n{first}\n"
        )
        cases.append(
            Case(kind="rewrite", name=task, prompt=prompt, tokens=count_tokens(rest + "\n```"))
        )
        if len(cases) == count:
            break
    return cases


@dataclass(frozen=True, slots=True)
class Mode:
    """A way to answer: how many draft tokens a step may check, and which drafts."""

    draft_tokens: int
    checking: DraftChecking


#: The ways each case is answered: without drafts (a token per pass, `generate()`), as
#: shipped, and every draft checked in full whether or not the passes keep the output exact.
MODES = {
    "plain": Mode(0, DraftChecking.WORTH_IT),
    "drafts": Mode(DRAFT_TOKENS, DraftChecking.WORTH_IT),
    "every draft": Mode(DRAFT_TOKENS, DraftChecking.EVERY),
}


def use_mode(backend: LlamaCppBackend, mode: Mode) -> None:
    backend.draft_tokens = mode.draft_tokens
    backend.draft_checking = mode.checking


def answer(
    backend: LlamaCppBackend, ids: Sequence[int], n: int, key: str
) -> tuple[list[int], float]:
    """Greedy tokens after `ids` until `n` came out, and the seconds they took."""
    started = time.perf_counter()
    out: list[int] = []
    tokens = backend.iter_token_ids(
        ids, SamplingParams(max_tokens=n), threading.Event(), cache_key=key
    )
    try:
        for token in tokens:
            out.append(token)
            if len(out) >= n:
                break
    finally:
        tokens.close()
    return out, time.perf_counter() - started


def measure(backend: LlamaCppBackend, case: Case, index: int) -> Measured:
    ids = backend.tokenize(case.prompt, add_bos=backend.vocab.adds_bos)
    key = f"{case.kind}-{index}"
    use_mode(backend, MODES["plain"])
    answer(backend, ids, 1, key)  # the prompt, evaluated once and untimed
    names = list(MODES)
    names = names[index % len(names) :] + names[: index % len(names)]  # turns in rotation
    runs: dict[str, tuple[list[int], float, DraftCounts]] = {}
    for name in names:
        use_mode(backend, MODES[name])
        before = backend.draft_counts
        tokens, seconds = answer(backend, ids, case.tokens, key)
        runs[name] = (tokens, seconds, backend.draft_counts - before)
    plain = runs["plain"][0]
    split_differs_at = None
    if case.kind == "suggestion":
        # The baseline of exactness: the same answer without drafts, its prompt evaluated in
        # two passes instead of one (the last SPLIT tokens apart, as a keystroke's request
        # evaluates them on top of the previous one's cache).
        use_mode(backend, MODES["plain"])
        answer(backend, ids[:-SPLIT], 1, key + "-split")
        split, _ = answer(backend, ids, case.tokens, key + "-split")
        split_differs_at = None if split == plain else shared_prefix(split, plain)
    return Measured(
        kind=case.kind,
        name=case.name,
        prompt_tokens=len(ids),
        tokens=len(plain),
        split_differs_at=split_differs_at,
        answers={
            name: Answer(
                seconds=seconds,
                passes=counts.steps if counts.steps else len(tokens),
                drafted=counts.drafted,
                accepted=counts.accepted,
                differs_at=None if tokens == plain else shared_prefix(tokens, plain),
            )
            for name, (tokens, seconds, counts) in runs.items()
        },
    )


# --- next-edit copy: a region rewritten with one line changed ---------------------------

_DEF = re.compile(r"^def \w+\((\w+)", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class EditCase:
    """A program before and after the user renamed its first parameter in the `def` line,
    and the cursor after the new name."""

    name: str
    before: str
    after: str
    cursor: int


def edit_cases(count: int) -> list[EditCase]:
    """The first `count` HumanEval programs whose function takes a parameter."""
    programs: dict[str, str] = {}
    for row in humaneval_rows():
        task = row["task_id"].rsplit("/", 1)[0]
        programs.setdefault(task, row["prompt"] + row["canonical_solution"] + row["suffix"])
    found = []
    for task, program in programs.items():
        match = _DEF.search(program)
        if match is None or len(match[1]) < 2:
            continue
        new = match[1] + "_in"
        after = program[: match.start(1)] + new + program[match.end(1) :]
        found.append(
            EditCase(name=task, before=program, after=after, cursor=match.start(1) + len(new))
        )
        if len(found) == count:
            break
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyMeasured:
    case: str
    region_tokens: int
    prompt_tokens: int
    outcome: str
    rewrite_tokens: int
    rewrite_seconds: float
    first_token_seconds: float
    copy_tokens: int
    copy_seconds: float


async def measure_copy(model: NextEditModel, case: EditCase, index: int) -> CopyMeasured:
    history = EditHistory()
    uri = f"file:///bench/{case.name.replace('/', '_')}.py"
    history.opened(uri, case.before)
    history.changed(uri, case.after, now=0.0)
    snap = DocumentSnapshot.at(case.after, case.cursor, uri=uri)
    region = region_input(snap, history.recent(), model.count_tokens)
    given = region.given
    rewrite = await model.rewrite(given, cache_key=f"rewrite-{index}")
    # A copy's length: the format's answer holding the region unchanged, in this model's
    # tokens (the markers as they are written: text for a model that lacks them as tokens).
    answer = _answer(model, given.region)
    copy_tokens = model.count_tokens(answer)
    request, _ = model.request(given, cache_key=f"copy-{index}")
    copy = GenerationRequest(
        prompt_token_ids=request.prompt_token_ids,
        prompt=request.prompt,
        role=Role.NEXT_EDIT,
        sampling=SamplingParams(max_tokens=copy_tokens, temperature=0.0),
        stops=StopConditions(ignore_eos=True),
        cache_key=f"rewrite-{index}",  # the same document: its prompt is in the cache
    )
    started = time.perf_counter()
    first: float | None = None
    async with contextlib.aclosing(model.engine.generate(copy)) as deltas:
        async for _delta in deltas:
            if first is None:
                first = time.perf_counter() - started
    decode = time.perf_counter() - started - (first or 0.0)
    return CopyMeasured(
        case=case.name,
        region_tokens=model.count_tokens(given.region),
        prompt_tokens=rewrite.prompt_tokens,
        outcome=rewrite.outcome.value,
        rewrite_tokens=rewrite.output_tokens,
        rewrite_seconds=rewrite.seconds,
        first_token_seconds=rewrite.first_token_seconds or 0.0,
        copy_tokens=copy_tokens,
        # The cold prompt as the rewrite met it, then the copy's tokens one by one.
        copy_seconds=(rewrite.first_token_seconds or 0.0) + decode,
    )


def _answer(model: NextEditModel, region: str) -> str:
    if model.format.family == "zeta1":
        return f"<|editable_region_start|>\n{region}\n<|editable_region_end|>"
    return f"{region}\n>>>>>>> UPDATED"


async def next_edit_cases(backend: LlamaCppBackend, count: int) -> list[Measured]:
    """The copy of the region through the engine, each way, with its own measuring (the
    copy's decode: the time after its first token)."""
    from engine.engine import Engine

    engine = Engine(backend, name="next-edit")
    model = NextEditModel.of(engine, "zeta1")
    assert model is not None
    found = []
    try:
        for index, case in enumerate(edit_cases(count)):
            answers = {}
            measured = None
            for turn, name in enumerate(MODES):
                use_mode(backend, MODES[name])
                before = backend.draft_counts
                measured = await measure_copy(model, case, len(MODES) * index + turn)
                counts = backend.draft_counts - before
                answers[name] = Answer(
                    seconds=measured.copy_seconds - measured.first_token_seconds,
                    # The rewrite as answered and the copy both count: the measuring runs both.
                    passes=counts.steps or measured.rewrite_tokens + measured.copy_tokens,
                    drafted=counts.drafted,
                    accepted=counts.accepted,
                    differs_at=None,  # the measuring keeps no tokens
                )
            assert measured is not None
            found.append(
                Measured(
                    kind="next-edit copy",
                    name=case.name,
                    prompt_tokens=measured.prompt_tokens,
                    tokens=measured.copy_tokens,
                    answers=answers,
                )
            )
    finally:
        engine.close()  # and the backend
    return found


def summarize(measured: Sequence[Measured]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "cases": len(measured),
        "tokens_per_answer": median(m.tokens for m in measured),
    }
    if measured and measured[0].kind == "suggestion":
        parted = sorted(m.split_differs_at for m in measured if m.split_differs_at is not None)
        summary["plain_prompt_split"] = {"same": len(measured) - len(parted), "differs_at": parted}
    for name in MODES:
        answers = [m.answers[name] for m in measured]
        summary[name] = {
            "passes_per_answer": median(a.passes for a in answers),
            "ms_per_answer": median(a.seconds for a in answers) * 1000,
            "speedup": median(
                m.answers["plain"].seconds / m.answers[name].seconds for m in measured
            ),
            "acceptance": sum(a.accepted for a in answers)
            / max(1, sum(a.drafted for a in answers)),
            "same": sum(a.differs_at is None for a in answers),
            "differs_at": sorted(a.differs_at for a in answers if a.differs_at is not None),
        }
    return summary


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("drafts", __doc__)
    parser.add_argument("--suggestions", type=int, default=20, help="suggestion cases")
    parser.add_argument("--rewrites", type=int, default=12, help="rewrite cases")
    parser.add_argument("--next-edit", type=int, default=6, help="next-edit copy cases")
    parser.add_argument(
        "--roles", nargs="+", default=["completion", "chat"], choices=["completion", "chat"]
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "drafts.json")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    per_case: list[dict[str, Any]] = []
    models: dict[str, dict[str, Any]] = {}
    loads = [os.getloadavg()[0]]
    paths: list[Path] = []
    for role_name in args.roles:
        role = Role(role_name)
        backend = load_backend(local_spec(model_spec(role, ModelOptions(), environ={})))
        if not isinstance(backend, LlamaCppBackend):
            raise SystemExit("drafts are the llama.cpp backend's: the benchmark needs a GGUF")
        name = backend.info.name
        paths.append(Path(backend.info.path))
        exact = backend.exact_pass_tokens
        models[name] = {
            "role": role_name,
            "exact_pass_tokens": exact,
            "pass_ms_measured": {n: s * 1000 for n, s in backend.pass_seconds.items()},
        }
        print(
            f"{name}: passes of up to {exact} tokens give the logits of a pass per token; "
            "ms per pass of 1, 2, ... tokens: "
            + ", ".join(f"{s * 1000:.1f}" for s in backend.pass_seconds.values()),
            flush=True,
        )
        cases = [
            *suggestion_cases(args.suggestions),
            *rewrite_cases(args.rewrites, token_counter(backend)),
        ]
        measured = [measure(backend, case, i) for i, case in enumerate(cases)]
        if role is Role.COMPLETION and args.next_edit:
            measured += asyncio.run(next_edit_cases(backend, args.next_edit))
        else:
            backend.close()
        loads.append(os.getloadavg()[0])
        results[name] = {
            kind: summarize([m for m in measured if m.kind == kind])
            for kind in dict.fromkeys(m.kind for m in measured)
        }
        per_case += [{"model": name, **asdict(m)} for m in measured]
    metrics = []
    for name, kinds in results.items():
        for kind, s in kinds.items():
            way = s["drafts"]
            target: Target | None = (">=", TARGET_SPEEDUP) if kind == "rewrite" else None
            metrics.append(
                metric(f"{name}, {kind}: plain / with drafts", way["speedup"], target=target)
            )
            if kind != "next-edit copy":
                metrics.append(
                    metric(
                        f"{name}, {kind}: answers the same with drafts",
                        way["same"],
                        target=(">=", s["cases"]),
                    )
                )
    write_json(
        args.json,
        {"models": models, "load": loads, "results": results, "per_case": per_case},
    )
    return Outcome(
        parameters={k: v for k, v in vars(args).items() if k != "json"},
        metrics=metrics,
        models=paths,
    )
