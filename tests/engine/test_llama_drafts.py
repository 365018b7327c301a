"""Drafts from the document in the llama.cpp backend, on the real default models: a greedy
answer is the same token for token whether drafts were checked or not, and the cache holds
exactly what was handed over whenever the consumer stops (README "Drafts from the document")."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from job_events import JobWatch
from local_models import load_llama

from engine.backends.llama_cpp import DRAFT_TOKENS, DraftChecking, LlamaCppBackend
from engine.engine import Engine
from engine.specs import ModelOptions
from engine.types import FinishReason, GenerationRequest, Role, SamplingParams, StopConditions

pytestmark = pytest.mark.slow

_DEF = re.compile(r"^def \w+\((\w+)", re.MULTILINE)


def programs(third_party_data: Path) -> list[str]:
    """HumanEval's programs (written by others), one per task, in file order."""
    path = third_party_data / "human-eval-infilling" / "HumanEval-SingleLineInfilling.jsonl.gz"
    found: dict[str, str] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            task = row["task_id"].rsplit("/", 1)[0]
            found.setdefault(task, row["prompt"] + row["canonical_solution"])
    return list(found.values())


def suggestion_prompt(program: str) -> str:
    """The program up to its docstring's end: the answer is the function's body."""
    end = program.find('"""\n', program.find('"""') + 3)
    return program[: end + 4] if end >= 0 else program


def rewrite_prompt(program: str) -> str:
    """A region shown, then the same code with its first parameter renamed, begun: the
    answer repeats the region, so that most drafts stand."""
    match = _DEF.search(program)
    assert match is not None
    region = "\n".join(program[match.start() :].splitlines()[:16])
    old, new = match[1], match[1] + "_in"
    edited = re.sub(rf"\b{re.escape(old)}\b", new, region)
    return (
        f"Original:\n```python\n{region}\n```\n\nThe same code with `{old}` renamed to "
        f"`{new}`:\n```python\n{edited.splitlines()[0]}\n"
    )


def greedy(
    backend: LlamaCppBackend,
    ids: list[int],
    n: int,
    *,
    key: str | None = None,
    max_tokens: int | None = None,
) -> list[int]:
    """The first `n` greedy tokens after `ids` (of an answer of `max_tokens`, default `n`:
    the consumer stops there, as at a stop string or a cancel)."""
    sampling = SamplingParams(max_tokens=max_tokens or n)
    tokens = backend.iter_token_ids(ids, sampling, threading.Event(), cache_key=key)
    with contextlib.closing(tokens):
        return list(itertools.islice(tokens, n))


@contextlib.contextmanager
def drafting(backend: LlamaCppBackend, checking: DraftChecking, tokens: int) -> Iterator[None]:
    """`backend` checks drafts this way for the block's length (the fixture is shared)."""
    before = backend.draft_checking, backend.draft_tokens
    backend.draft_checking, backend.draft_tokens = checking, tokens
    try:
        yield
    finally:
        backend.draft_checking, backend.draft_tokens = before


@pytest.fixture(scope="module", params=["completion", "chat"])
def loaded(request: pytest.FixtureRequest) -> Iterator[tuple[LlamaCppBackend, Engine]]:
    """Each default model computing on 1 thread, and an engine over it. A pass of one token on
    2 threads gives other logits than on 1 once 256 tokens are cached (LlamaContext.
    exact_batches): with the count following the machine's load, an answer would then depend
    on the load, drafts or not."""
    backend = load_llama(Role(request.param), ModelOptions(threads=1))
    engine = Engine(backend, name=request.param)
    yield backend, engine
    engine.close()  # and the model


@pytest.fixture
def backend(loaded: tuple[LlamaCppBackend, Engine]) -> LlamaCppBackend:
    """The model, where some pass of several tokens gives the logits of one token at a time:
    else it has no draft to check that keeps its answer exact."""
    chosen = loaded[0]
    if chosen.exact_pass_tokens < 2:
        pytest.skip(
            f"{chosen.info.name}: on this machine no pass of 2 tokens gives the logits of one "
            "token at a time, so no draft is checked"
        )
    return chosen


def test_greedy_answers_are_the_same_with_every_draft_checked(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """Multi-line suggestions (drafts mostly rejected) and rewrites of a region (drafts mostly
    accepted): every draft that passes of the model's exact size allow is checked, and each
    answer is token for token the answer without drafts."""
    sources = programs(third_party_data)
    prompts = [(suggestion_prompt(p), 32) for p in sources[:12]]
    prompts += [(rewrite_prompt(p), 80) for p in sources[12:16]]
    before = backend.draft_counts
    for index, (text, n) in enumerate(prompts):
        ids = backend.tokenize(text, add_bos=backend.vocab.adds_bos)
        with drafting(backend, DraftChecking.WORTH_IT, 0):
            plain = greedy(backend, ids, n, key=f"prompt-{index}")
        with drafting(backend, DraftChecking.EXACT, DRAFT_TOKENS):
            drafted = greedy(backend, ids, n, key=f"prompt-{index}")
        assert drafted == plain, (index, text)
    counts = backend.draft_counts - before
    total = sum(n for _, n in prompts)
    assert counts.accepted > total // 10  # drafts stood...
    assert counts.accepted < counts.drafted  # ...and some were rejected
    assert counts.steps < total  # fewer passes than tokens


def test_with_the_default_checking_a_rewrite_is_the_same_as_without_drafts(
    loaded: tuple[LlamaCppBackend, Engine], third_party_data: Path
) -> None:
    """With the default checking (`WORTH_IT`: exact passes, as much of a draft as pays here),
    a rewrite's answer is the answer without drafts."""
    backend = loaded[0]
    ids = backend.tokenize(rewrite_prompt(programs(third_party_data)[30]), add_bos=True)
    with drafting(backend, DraftChecking.WORTH_IT, 0):
        plain = greedy(backend, ids, 80)
    with drafting(backend, DraftChecking.WORTH_IT, DRAFT_TOKENS):
        assert greedy(backend, ids, 80) == plain


def test_a_stop_inside_a_draft_leaves_the_cache_holding_what_was_handed_over(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """The consumer stops after j tokens, wherever j falls in a checked draft: the live cache
    holds the prompt and those j tokens (the last one may wait to be evaluated, as without
    drafts), nothing after; and the answer resumed from them is the rest of the answer."""
    ids = backend.tokenize(rewrite_prompt(programs(third_party_data)[40]), add_bos=True)
    with drafting(backend, DraftChecking.WORTH_IT, 0):
        plain = greedy(backend, ids, 40, key="stop")
    kept_all = 0
    with drafting(backend, DraftChecking.EXACT, DRAFT_TOKENS):
        for j in range(1, 21):
            assert greedy(backend, ids, j, key="stop", max_tokens=40) == plain[:j]
            live = backend.cache_status().live_tokens
            assert len(ids) + j - 1 <= live <= len(ids) + j, j
            kept_all += live == len(ids) + j
            # Resumed from what was handed over, as the worker resumes a job that stepped
            # aside: nothing handed over is evaluated again but the last token.
            resumed = greedy(backend, [*ids, *plain[:j]], 10, key="stop")
            assert backend.last_prefill_tokens == 1
            assert resumed == plain[j : j + 10], j
    assert kept_all > 0  # stops inside drafts that stood kept them


@pytest.mark.parametrize("how", ["closing the stream", "engine.cancel"])
async def test_cancel_stops_within_one_token_with_drafts(
    backend: LlamaCppBackend,
    loaded: tuple[LlamaCppBackend, Engine],
    third_party_data: Path,
    how: str,
) -> None:
    """README: a cancelled job "stops its model work within one token", drafts or not; the
    next request on the same document is unaffected."""
    engine = loaded[1]
    prompt = rewrite_prompt(programs(third_party_data)[50])

    def request(n: int) -> GenerationRequest:
        return GenerationRequest(
            prompt=prompt,
            sampling=SamplingParams(max_tokens=n),
            stops=StopConditions(ignore_eos=True),
            cache_key="cancel",
        )

    with drafting(backend, DraftChecking.EXACT, DRAFT_TOKENS):
        (reference,) = await engine.collect(request(40))
        cancelled = request(200)
        before = backend.draft_counts
        received = 0
        with JobWatch(engine.job_record) as watch:
            async with contextlib.aclosing(engine.generate(cancelled)) as deltas:
                async for delta in deltas:
                    received += len(delta.token_ids)
                    if received >= 3:
                        if how == "engine.cancel":
                            assert engine.cancel(cancelled.request_id)
                            continue  # read on: the stream ends with the cancelled delta
                        break
            stats = await watch.ended(cancelled.request_id)
        assert (backend.draft_counts - before).drafted > 0  # drafts were checked
        assert stats.finish_reasons == (FinishReason.CANCELLED,)
        assert stats.tokens_after_cancel is not None
        assert stats.tokens_after_cancel <= 1
        assert stats.generated_tokens < 200
        (after,) = await engine.collect(request(40))
        assert after.token_ids == reference.token_ids
