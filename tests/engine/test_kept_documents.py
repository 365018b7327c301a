"""Many warm documents on the real default completion model (llama.cpp, Gemma 3 270M).

Coming back to a document restores its KV state: the model evaluates one token instead of the
whole prompt, and answers exactly what it answered before it left. A prompt evaluation that a newer
request supersedes stops within one batch, keeping what it computed. Each test loads its own
backend (0.6 s), so that what other tests left in the cache does not count.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from busy import busy_core

from engine.backends.llama_cpp import EVAL_CHUNK, LlamaCppBackend
from engine.models import model_spec
from engine.prefix_cache import common_prefix
from engine.specs import ModelOptions, ModelSpec
from engine.threads import read_cpu_sample, usable_cores
from engine.types import Role, SamplingParams

ROOT = Path(__file__).resolve().parents[2]


def make_backend(*, threads: int | None = 2, kv_cache_mb: int | None = None) -> LlamaCppBackend:
    """The default completion model. Two threads unless told otherwise: llama.cpp's numbers
    for the same tokens differ slightly between thread counts, and the adaptive count would
    follow the machine's load, so tests that compare two answers would flake on a busy one."""
    spec = model_spec(Role.COMPLETION, ModelOptions(), environ={})
    assert isinstance(spec, ModelSpec)
    return LlamaCppBackend(
        replace(spec, context_size=2048, threads=threads, kv_cache_mb=kv_cache_mb)
    )


@pytest.fixture
def backend() -> Iterator[LlamaCppBackend]:
    backend = make_backend()
    yield backend
    backend.close()


def document(backend: LlamaCppBackend, path: str, tokens: int = 400) -> list[int]:
    """About `tokens` tokens of a real file of this repository, as a prompt."""
    ids = backend.tokenize((ROOT / path).read_text(encoding="utf-8"), add_bos=True, special=False)
    return ids[:tokens]


def greedy(
    backend: LlamaCppBackend,
    prompt: Sequence[int],
    key: str | None,
    n: int = 8,
    cancelled: threading.Event | None = None,
) -> list[int]:
    out: list[int] = []
    tokens = backend.iter_token_ids(
        prompt, SamplingParams(max_tokens=n), cancelled or threading.Event(), cache_key=key
    )
    for token_id in tokens:
        out.append(token_id)
        if len(out) == n:
            break
    tokens.close()
    return out


def test_back_in_a_document_evaluates_one_token_and_answers_as_a_cold_cache(
    backend: LlamaCppBackend,
) -> None:
    a = document(backend, "engine/worker.py")
    b = document(backend, "engine/fim.py")
    first = greedy(backend, a, "file:///a.py")
    assert backend.last_prefill_tokens == len(a)
    greedy(backend, b, "file:///b.py")
    again = greedy(backend, a, "file:///a.py")
    assert backend.last_prefill_tokens == 1
    assert again == first
    status = backend.cache_status()
    assert (status.states, status.restored) == (1, 1)  # B is kept now, A is live
    assert status.live_tokens >= len(a)
    # Typing one token in A after the restore: still a keystroke's cost, and the answer of a
    # backend that never left A. (Not necessarily a cold cache's: llama.cpp's numbers for a
    # token differ slightly between a batch of one and a longer one.)
    typed = [*a, first[0]]
    after = greedy(backend, typed, "file:///a.py")
    assert backend.last_prefill_tokens == 1
    stayed = make_backend()
    try:
        greedy(stayed, a, "file:///a.py")
        assert greedy(stayed, typed, "file:///a.py") == after
        assert stayed.cache_status().restored == 0
    finally:
        stayed.close()


def test_every_kept_document_comes_back_and_the_budget_evicts_the_oldest() -> None:
    probe = make_backend()
    docs = [
        document(probe, path) for path in ("engine/worker.py", "engine/fim.py", "engine/stops.py")
    ]
    greedy(probe, docs[0], "file:///0.py")
    greedy(probe, docs[1], "file:///1.py")
    one_state = probe.cache_status().bytes
    probe.close()
    # Room for one state of these documents, not two: keeping a second pushes the oldest out.
    budget_mb = -(-one_state * 16 // 10 >> 20)
    backend = make_backend(kv_cache_mb=budget_mb)
    try:
        for number, doc in enumerate(docs):
            greedy(backend, doc, f"file:///{number}.py")
        status = backend.cache_status()
        assert status.bytes <= budget_mb << 20
        assert status.evicted >= 1
        # The last document is live, the one before it kept, the first one evicted.
        greedy(backend, docs[1], "file:///1.py")
        assert backend.last_prefill_tokens == 1
        greedy(backend, docs[0], "file:///0.py")
        # Nothing kept for it: only what it shares with the live document (the docstring's
        # opening) is not evaluated again.
        assert backend.last_prefill_tokens == len(docs[0]) - common_prefix(docs[0], docs[1])
    finally:
        backend.close()


def test_a_zero_budget_keeps_only_the_live_cache() -> None:
    backend = make_backend(kv_cache_mb=0)
    try:
        a = document(backend, "engine/worker.py")
        b = document(backend, "engine/fim.py")
        greedy(backend, a, "file:///a.py")
        greedy(backend, b, "file:///b.py")
        greedy(backend, a, "file:///a.py")
        assert backend.last_prefill_tokens == len(a) - common_prefix(a, b)
        assert backend.cache_status().states == 0
    finally:
        backend.close()


@contextlib.contextmanager
def cancel_after_chunks(chunks: int) -> Iterator[tuple[threading.Event, Callable[[], int]]]:
    """A cancel event that the prompt's `chunks`-th batch sets, as a newer request would while
    it runs; and a count of the batches evaluated. Counted at llama-cpp-python's public
    `Llama.eval`, which the backend evaluates each batch of a prompt with."""
    import llama_cpp

    cancelled = threading.Event()
    evaluate = llama_cpp.Llama.eval
    calls = 0

    def counting_eval(llm: llama_cpp.Llama, tokens: Sequence[int]) -> None:
        nonlocal calls
        calls += 1
        evaluate(llm, tokens)
        if calls == chunks:
            cancelled.set()

    with pytest.MonkeyPatch.context() as patch:  # undone when the block ends
        patch.setattr(llama_cpp.Llama, "eval", counting_eval)
        yield cancelled, lambda: calls


def test_a_superseded_prompt_stops_within_one_batch_and_keeps_what_it_computed(
    backend: LlamaCppBackend,
) -> None:
    long = document(backend, "engine/worker.py", tokens=4 * EVAL_CHUNK + 10)
    with cancel_after_chunks(2) as (cancelled, batches):
        assert greedy(backend, long, "file:///a.py", cancelled=cancelled) == []
    assert batches() == 2  # the cancel came during the second batch: no third one ran
    assert backend.cache_status().live_tokens == 2 * EVAL_CHUNK
    # The newer request shares that prefix: it evaluates only the rest.
    newer = [*long, 236743]
    out = greedy(backend, newer, "file:///a.py")
    assert backend.last_prefill_tokens == len(newer) - 2 * EVAL_CHUNK
    cold = make_backend()
    try:
        assert greedy(cold, newer, None) == out
    finally:
        cold.close()


def test_with_a_competing_process_llama_cpp_computes_on_the_cores_left_free() -> None:
    if read_cpu_sample() is None:
        pytest.skip("this system has no /proc/stat to see other processes with")
    backend = make_backend(threads=None)  # the default: as many as the machine leaves free
    prompt = document(backend, "engine/worker.py", tokens=3 * EVAL_CHUNK)
    try:
        with busy_core():
            greedy(backend, prompt, None, n=16)
            used = backend.threads
    finally:
        backend.close()
    assert used <= max(1, usable_cores() - 1)
    fixed = make_backend(threads=2)
    try:
        with busy_core():
            greedy(fixed, prompt[:40], None)
        assert fixed.threads == 2  # the user's count stays
    finally:
        fixed.close()
