"""Many sequences per pass in the llama.cpp backend, on the real default models computing on 1
thread: a branch's tokens do not depend on the branches beside it (Gemma 3 270M, the
completion model) and, where llama.cpp's passes of up to 8 rows give the logits of one row at
a time (SmolLM2-135M, the chat model), branches written together are the greedy answers one at
a time gives; scorings together are the scorings one at a time (up to rounding); the live
cache and the kept documents are what they were (README "Many sequences per pass")."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from local_models import load_llama
from test_llama_drafts import greedy, programs, suggestion_prompt

from engine.backend import Backend
from engine.backends.llama_cpp import LlamaCppBackend
from engine.engine import Engine
from engine.specs import ModelOptions
from engine.types import (
    BranchRequest,
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    StopConditions,
)

pytestmark = pytest.mark.slow

BRANCH_TOKENS = 24


@pytest.fixture(scope="module")
def loaded() -> Iterator[tuple[LlamaCppBackend, Engine]]:
    """The default completion model on 1 thread (where the machine's load changes no logit:
    LlamaContext.exact_batches), its rows together whatever they cost here (the backend
    measures that at load: `sequences`), and an engine over it."""
    backend = load_llama(Role.COMPLETION, ModelOptions(threads=1))
    together(backend)
    engine = Engine(backend, name="completion")
    yield backend, engine
    engine.close()


def together(backend: LlamaCppBackend) -> None:
    """Rows together, as many as the context has sequences for (8 at least)."""
    backend.sequences = backend._context.sequences
    backend.group_from = 2  # requests under way at once too (tests/engine/test_llama_together.py)
    assert backend.sequences >= 8


@pytest.fixture
def backend(loaded: tuple[LlamaCppBackend, Engine]) -> LlamaCppBackend:
    return loaded[0]


@contextlib.contextmanager
def one_at_a_time(backend: LlamaCppBackend) -> Iterator[None]:
    before = backend.sequences, backend.group_from
    backend.sequences, backend.group_from = 1, 0
    try:
        yield
    finally:
        backend.sequences, backend.group_from = before


def line_end(backend: LlamaCppBackend) -> Callable[[int, int], bool]:
    """A branch ends at a token that writes a line end, or an end-of-generation token."""
    eog = backend.eog_token_ids
    return lambda _index, token: token in eog or b"\n" in backend.token_bytes(token)


def first_tokens(backend: LlamaCppBackend, ids: list[int], count: int = 8) -> list[int]:
    scores = backend.score(ids, [], count, threading.Event())
    assert scores is not None
    return [token for token, _ in scores.top]


def live_sequences(backend: LlamaCppBackend) -> list[int]:
    """The sequences other than the live one that hold any cell."""
    context = backend._context
    memory = context._memory()
    lib = context._lib
    return [
        seq
        for seq in range(1, context.sequences + 1)
        if lib.llama_memory_seq_pos_max(memory, seq) >= 0
    ]


def prompts(third_party_data: Path, count: int) -> list[str]:
    return [suggestion_prompt(p) for p in programs(third_party_data)[:count]]


@pytest.fixture(scope="module")
def chat_backend() -> Iterator[LlamaCppBackend]:
    """The default chat model (SmolLM2-135M) on 1 thread: its passes of up to 9 tokens give
    the logits of a pass per token (LlamaContext.exact_batches), Gemma's not past 3."""
    backend = load_llama(Role.CHAT, ModelOptions(threads=1))
    together(backend)
    yield backend
    backend.close()


def test_branches_together_are_the_greedy_answers_one_at_a_time(
    chat_backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """For many prompts, the 8 most likely first tokens, each continued to its line's end:
    written together (a sequence each, a row of each per pass), every branch is token for
    token the greedy answer after the prompt and its first token, one at a time."""
    backend = chat_backend
    if backend.exact_pass_tokens < 8:
        pytest.skip(
            f"{backend.info.name}: here passes of {backend.exact_pass_tokens + 1} tokens "
            "already give other logits than a pass per token"
        )
    parted = []
    for index, text in enumerate(prompts(third_party_data, 16)):
        ids = backend.tokenize(text, add_bos=backend.vocab.adds_bos)
        firsts = first_tokens(backend, ids)
        key = f"prompt-{index}"
        ended = line_end(backend)
        together = backend.branch(
            ids, firsts, BRANCH_TOKENS, ended, threading.Event(), cache_key=key
        )
        with one_at_a_time(backend):
            alone = backend.branch(
                ids, firsts, BRANCH_TOKENS, ended, threading.Event(), cache_key=key
            )
        assert together is not None
        assert alone is not None
        assert all(branch for branch in together)
        parted += [
            (index, i) for i, (a, b) in enumerate(zip(together, alone, strict=False)) if a != b
        ]
        assert live_sequences(backend) == []
    assert parted == []


def test_a_branch_does_not_depend_on_the_branches_beside_it(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """The first two branches written with 6 others beside them, or alone together, or with
    one of them ended at its first token: each other branch's tokens are the same (Gemma's
    passes of 4 rows and more give other logits than passes of 1-3: every pass of branches
    is a whole number of groups of 4 rows)."""
    text = prompts(third_party_data, 20)[19]
    ids = backend.tokenize(text, add_bos=backend.vocab.adds_bos)
    firsts = first_tokens(backend, ids)
    ended = line_end(backend)
    every = backend.branch(ids, firsts, BRANCH_TOKENS, ended, threading.Event())
    pair = backend.branch(ids, firsts[:2], BRANCH_TOKENS, ended, threading.Event())
    assert every is not None
    assert pair is not None
    assert pair == every[:2]

    def first_stops_at_once(index: int, token: int) -> bool:
        return index == 0 or ended(index, token)

    cut = backend.branch(ids, firsts, BRANCH_TOKENS, first_stops_at_once, threading.Event())
    assert cut is not None
    assert cut[0] == every[0][:1]
    assert cut[1:] == every[1:]


def test_scores_together_are_the_scores_one_at_a_time(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """Candidate lines and the code after them, 12 continuations (two groups of sequences):
    together, each token's log-probability is the one scoring one at a time gives, up to the
    rounding of a pass's size (Gemma's kernels multiply 4 rows at a time, the last 1-3 of a
    pass one by one: tokens differed by up to 0.30 here, as logits do by up to 1.3), and the
    continuations rank in the same order."""
    program = programs(third_party_data)[3]
    cut = program.index("\n    ", program.index('"""\n', program.index('"""') + 3)) + 1
    ids = backend.tokenize(program[:cut], add_bos=backend.vocab.adds_bos)
    after = backend.tokenize(program[cut:], add_bos=False, special=False)
    lines = [" " * 4 + w + "\n" for w in ("return x", "pass", "y = 0", "for i in range(3):")]
    continuations = [
        backend.tokenize(line, add_bos=False, special=False)[:12] + after[:k]
        for line in lines
        for k in (8, 24, 40)
    ]
    together = backend.score(ids, continuations, 3, threading.Event(), cache_key="scored")
    with one_at_a_time(backend):
        alone = backend.score(ids, continuations, 3, threading.Event(), cache_key="scored")
    assert together is not None
    assert alone is not None
    assert together.top == alone.top
    for a, b in zip(together.continuations, alone.continuations, strict=True):
        assert a == pytest.approx(b, abs=0.5)

    def order(scored: tuple[tuple[float, ...], ...]) -> list[int]:
        return sorted(range(len(scored)), key=lambda i: -sum(scored[i]))

    assert order(together.continuations) == order(alone.continuations)
    assert live_sequences(backend) == []
    assert backend._context.length == len(ids)  # the prompt stays, as a scoring leaves it


def test_a_cancel_stops_the_branches_and_leaves_the_live_cache(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    text = prompts(third_party_data, 2)[1]
    ids = backend.tokenize(text, add_bos=backend.vocab.adds_bos)
    firsts = first_tokens(backend, ids)
    cancelled = threading.Event()
    seen = 0

    def cancel_after_a_few(_index: int, _token: int) -> bool:
        nonlocal seen
        seen += 1
        if seen == 12:
            cancelled.set()
        return False

    assert backend.branch(ids, firsts, BRANCH_TOKENS, cancel_after_a_few, cancelled) is None
    assert seen < 12 + len(firsts)  # within one pass
    assert live_sequences(backend) == []
    assert backend._context.tokens() == ids  # the prompt, as before the branches


def test_a_token_limit_below_one_is_refused_together_as_one_after_another(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    ids = backend.tokenize(prompts(third_party_data, 1)[0], add_bos=backend.vocab.adds_bos)
    firsts = first_tokens(backend, ids, 4)
    for way in (contextlib.nullcontext(), one_at_a_time(backend)):
        with way, pytest.raises(ValueError, match="max_tokens must be at least 1, got 0"):
            backend.branch(ids, firsts, 0, line_end(backend), threading.Event())
    assert live_sequences(backend) == []


def test_kept_documents_come_back_exactly_after_branches(
    backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """Branches of document A, then document B, then back to A: A's greedy answer is the one
    a fresh cache gives, and A's state came back (one token evaluated)."""
    first, second = prompts(third_party_data, 6)[4:6]
    a = backend.tokenize(first, add_bos=backend.vocab.adds_bos)
    b = backend.tokenize(second, add_bos=backend.vocab.adds_bos)
    fresh = greedy(backend, a, 16, key="fresh")
    backend.branch(
        a,
        first_tokens(backend, a),
        BRANCH_TOKENS,
        line_end(backend),
        threading.Event(),
        cache_key="A",
    )
    greedy(backend, b, 8, key="B")
    assert greedy(backend, a, 16, key="A") == fresh
    assert backend.last_prefill_tokens == 1


def test_the_base_backend_branches_one_after_another(backend: LlamaCppBackend) -> None:
    """`Backend.branch`, the fallback every backend has, stops each branch at its limit."""
    ids = backend.tokenize("def f(x):\n    return", add_bos=backend.vocab.adds_bos)
    firsts = first_tokens(backend, ids, 3)
    never = lambda _index, _token: False  # noqa: E731
    branches = Backend.branch(backend, ids, firsts, 5, never, threading.Event())
    assert branches is not None
    assert [len(b) for b in branches] == [5, 5, 5]


async def test_a_branch_request_gives_each_line_and_its_finish(
    loaded: tuple[LlamaCppBackend, Engine],
) -> None:
    """Through the engine: each branch's text stops at the request's stop string (hidden),
    as a generation with that first token does (branches one at a time: the same passes),
    and written together, it is the text of the branch's tokens up to that stop."""
    backend, engine = loaded
    ids = backend.tokenize("def area(w, h):\n    return", add_bos=backend.vocab.adds_bos)
    firsts = tuple(first_tokens(backend, ids, 4))
    request = BranchRequest(
        prompt_token_ids=tuple(ids),
        first_tokens=firsts,
        sampling=SamplingParams(max_tokens=BRANCH_TOKENS),
        stops=StopConditions(stop=("\n",)),
    )
    with one_at_a_time(backend):
        alone = await engine.branch(request)
    assert alone is not None
    assert len(alone.texts) == len(firsts)
    for first, text, finish in zip(firsts, alone.texts, alone.finish_reasons, strict=True):
        (generated,) = await engine.collect(
            GenerationRequest(
                prompt_token_ids=(*ids, first), sampling=request.sampling, stops=request.stops
            )
        )
        assert (text, finish) == (generated.text, generated.finish_reason)
        assert finish in (FinishReason.STOP, FinishReason.LENGTH)
    together = await engine.branch(request)
    assert together is not None
    tokens = backend.branch(ids, firsts, BRANCH_TOKENS, line_end(backend), threading.Event())
    assert tokens is not None
    expected = tuple(backend.detokenize(t).split("\n", 1)[0] for t in tokens)
    assert together.texts == expected
