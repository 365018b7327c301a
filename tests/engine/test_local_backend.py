"""Bringing the live KV cache to a prompt, and the generation and scoring around it
(engine/local_backend.py), on a cache of plain token lists: what each request evaluates, in
which chunks, where a cancel stops it, and which document's state it starts from. The real
backends run the same code on their own primitives (test_kept_documents.py,
test_transformers_backend.py).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence

import pytest

from engine.backend import ModelInfo, Vocabulary
from engine.detokenizer import Detokenizer
from engine.errors import PromptTooLongError
from engine.local_backend import LiveCache, LocalBackend
from engine.types import SamplingParams

CHUNK = 4
CONTEXT = 512
BYTES_PER_TOKEN = 10


class ListCache(LiveCache[tuple[int, ...], int]):
    """A live cache that is the list of its tokens. Evaluating gives the last token evaluated.

    `moves_out`: setting the state aside empties the live cache (transformers' dynamic loop)
    instead of copying it (llama.cpp). `refuses`: every restore fails (an empty cache).
    """

    chunk = CHUNK

    def __init__(self, *, moves_out: bool = False, refuses: bool = False) -> None:
        self.held: list[int] = []
        self.evaluated: list[list[int]] = []  # each evaluation's tokens, in order
        self.moves_out = moves_out
        self.refuses = refuses
        self.on_evaluate: list[threading.Event] = []  # set after the evaluation of that index

    @property
    def length(self) -> int:
        return len(self.held)

    def tokens(self) -> list[int]:
        return list(self.held)

    def set_aside(self, tokens: list[int]) -> tuple[tuple[int, ...], int]:
        state = tuple(self.held)
        if self.moves_out:
            self.held = []
        return state, BYTES_PER_TOKEN * len(state)

    @property
    def bytes_per_token(self) -> int:
        return BYTES_PER_TOKEN

    def restore(self, state: tuple[int, ...], tokens: tuple[int, ...]) -> None:
        assert state == tokens
        self.held = [] if self.refuses else list(state)

    def cut(self, length: int) -> int:
        del self.held[length:]
        return len(self.held)

    def evaluate(self, ids: list[int]) -> int:
        self.evaluated.append(list(ids))
        self.held.extend(ids)
        if len(self.on_evaluate) >= len(self.evaluated):
            self.on_evaluate[len(self.evaluated) - 1].set()
        return ids[-1]


class ListBackend(LocalBackend[tuple[int, ...], int, dict[int, float]]):
    """Samples the prompt's last token + 1, then the next, ...; scores every token -1.0 but
    the prompt's last token + 1, the most likely. Where bringing the cache to the prompt leaves
    its last token, sampling and scoring evaluate it, as llama.cpp's `generate()` does.
    This one evaluates the whole prompt; `list_backend` gives either kind."""

    evaluate_last = True

    def __init__(self, live: ListCache, *, cache_bytes: int | None = None):
        info = ModelInfo(
            name="list",
            path="",
            backend="list",
            device="cpu",
            context_size=CONTEXT,
            vocab_size=1000,
            eog_tokens=(),
            has_chat_template=False,
            load_seconds=0.0,
        )
        vocab = Vocabulary(bos_token=None, eos_token=None, adds_bos=False, chat_template=None)
        super().__init__(info=info, vocab=vocab, live=live, cache_bytes=cache_bytes)
        self.cache = live

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        raise NotImplementedError

    def special_token_id(self, text: str) -> int | None:
        return None

    def new_detokenizer(self) -> Detokenizer:
        raise NotImplementedError

    def _sample(
        self,
        prompt: list[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        first: int | None,
    ) -> Iterator[int]:
        if not self.evaluate_last:
            self.cache.evaluate(prompt[-1:])
        token = prompt[-1] + 1
        while not cancelled.is_set():
            yield token
            self.cache.evaluate([token])
            token += 1

    def _after_prompt(self, prompt: list[int], first: int | None) -> dict[int, float]:
        if not self.evaluate_last:
            self.cache.evaluate(prompt[-1:])
        return {prompt[-1] + 1: -0.5}

    def _log_probs(
        self, prompt: list[int], continuation: Sequence[int], after: dict[int, float]
    ) -> list[float]:
        if len(continuation) > 1:
            self.cache.cut(len(prompt))
            self.cache.evaluate(list(continuation[:-1]))
        return [after.get(continuation[0], -1.0), *[-1.0] * (len(continuation) - 1)]

    def _most_likely(self, after: dict[int, float], top: int) -> tuple[tuple[int, float], ...]:
        return tuple(sorted(after.items(), key=lambda kv: -kv[1])[:top])


class ListBackendLeavingLast(ListBackend):
    """A ListBackend that leaves the prompt's last token out of the cache: sampling and
    scoring evaluate it."""

    evaluate_last = False


def list_backend(
    live: ListCache, *, evaluate_last: bool, cache_bytes: int | None = None
) -> ListBackend:
    """A ListBackend over `live` that evaluates the prompt's last token with the rest or not
    (`LocalBackend.evaluate_last` is the class's)."""
    kind = ListBackend if evaluate_last else ListBackendLeavingLast
    return kind(live, cache_bytes=cache_bytes)


def generate(
    backend: ListBackend,
    prompt: Sequence[int],
    key: str | None = None,
    n: int = 2,
    cancelled: threading.Event | None = None,
) -> list[int]:
    """The first `n` tokens, the consumer then stopping for good (as the engine's stop stage
    does)."""
    sampling = SamplingParams(max_tokens=n)
    tokens = backend.iter_token_ids(prompt, sampling, cancelled or threading.Event(), cache_key=key)
    out = list(itertools.islice(tokens, n))
    tokens.close()
    return out


PROMPT = list(range(100, 110))  # 10 tokens


@pytest.mark.parametrize(
    ("evaluate_last", "chunks"),
    [
        (True, [[100, 101, 102, 103], [104, 105, 106, 107], [108, 109]]),
        (False, [[100, 101, 102, 103], [104, 105, 106, 107], [108]]),  # the sampler's last
    ],
)
def test_a_cold_prompt_is_evaluated_in_chunks(evaluate_last: bool, chunks: list[list[int]]) -> None:
    backend = list_backend(ListCache(), evaluate_last=evaluate_last)
    assert generate(backend, PROMPT) == [110, 111]
    assert backend.cache.evaluated[: len(chunks)] == chunks
    assert backend.last_prefill_tokens == len(PROMPT)


@pytest.mark.parametrize("evaluate_last", [True, False])
@pytest.mark.parametrize(
    ("follow_up", "new_tokens"),
    [
        ([*PROMPT, 110, 111], 2),  # typing on: the two new tokens
        (PROMPT, 1),  # the same prompt: its last token again, for fresh logits
        ([*PROMPT[:6], 55, 56], 2),  # back over a line: from the first token that differs
    ],
)
def test_a_follow_up_evaluates_only_what_the_cache_does_not_hold(
    evaluate_last: bool, follow_up: list[int], new_tokens: int
) -> None:
    backend = list_backend(ListCache(), evaluate_last=evaluate_last)
    generate(backend, PROMPT, "a", n=1)
    backend.cache.evaluated.clear()
    generate(backend, follow_up, "a", n=1)
    assert backend.last_prefill_tokens == new_tokens
    assert [t for chunk in backend.cache.evaluated for t in chunk] == follow_up[-new_tokens:]


def test_a_cancel_stops_between_chunks_and_keeps_what_was_evaluated() -> None:
    cache = ListCache()
    backend = list_backend(cache, evaluate_last=True)
    cancelled = threading.Event()
    cache.on_evaluate = [threading.Event(), cancelled]  # a newer request during the second
    assert generate(backend, PROMPT, "a", cancelled=cancelled) == []
    assert len(cache.evaluated) == 2  # no third chunk
    assert backend.cache_status().live_tokens == 2 * CHUNK
    assert generate(backend, PROMPT, "a", n=1) == [110]
    assert backend.last_prefill_tokens == len(PROMPT) - 2 * CHUNK


def test_a_request_cancelled_before_it_starts_evaluates_nothing() -> None:
    backend = list_backend(ListCache(), evaluate_last=True)
    cancelled = threading.Event()
    cancelled.set()
    assert generate(backend, PROMPT, cancelled=cancelled) == []
    assert backend.cache.evaluated == []


DOC_A = list(range(1000, 1040))
DOC_B = list(range(2000, 2040))


@pytest.mark.parametrize("moves_out", [True, False])
@pytest.mark.parametrize("evaluate_last", [True, False])
def test_back_in_a_document_its_kept_state_is_restored(
    moves_out: bool, evaluate_last: bool
) -> None:
    backend = list_backend(ListCache(moves_out=moves_out), evaluate_last=evaluate_last)
    generate(backend, DOC_A, "a")
    generate(backend, DOC_B, "b")
    assert backend.last_prefill_tokens == len(DOC_B)  # nothing shared: all of it
    generate(backend, DOC_A, "a")
    assert backend.last_prefill_tokens == 1
    status = backend.cache_status()
    assert (status.restored, status.states) == (1, 1)  # B is kept now
    assert status.bytes == BYTES_PER_TOKEN * (len(DOC_B) + 1)  # its prompt and one sample


def test_a_restore_the_library_refuses_evaluates_the_prompt_afresh() -> None:
    backend = list_backend(ListCache(refuses=True), evaluate_last=True)
    generate(backend, DOC_A, "a")
    generate(backend, DOC_B, "b")
    generate(backend, DOC_A, "a")
    assert backend.last_prefill_tokens == len(DOC_A)
    assert backend.cache.held[: len(DOC_A)] == DOC_A


def test_a_zero_budget_keeps_no_state() -> None:
    backend = list_backend(ListCache(), evaluate_last=True, cache_bytes=0)
    for doc, key in ((DOC_A, "a"), (DOC_B, "b"), (DOC_A, "a")):
        generate(backend, doc, key)
    assert backend.last_prefill_tokens == len(DOC_A)
    assert backend.cache_status().states == 0


@pytest.mark.parametrize(
    ("prompt", "error"),
    [([], ValueError), (list(range(CONTEXT + 1)), PromptTooLongError)],
)
def test_an_empty_or_too_long_prompt_is_refused(prompt: list[int], error: type[Exception]) -> None:
    backend = list_backend(ListCache(), evaluate_last=True)
    with pytest.raises(error):
        generate(backend, prompt)
    assert backend.cache.evaluated == []


def test_a_closed_backend_refuses_work() -> None:
    backend = list_backend(ListCache(), evaluate_last=True)
    backend.close()
    with pytest.raises(RuntimeError, match="closed"):
        generate(backend, PROMPT)


@pytest.mark.parametrize("evaluate_last", [True, False])
def test_scoring_leaves_the_prompt_in_the_cache(evaluate_last: bool) -> None:
    backend = list_backend(ListCache(), evaluate_last=evaluate_last)
    scores = backend.score(PROMPT, [[110, 7], [5]], 1, threading.Event(), cache_key="a")
    assert scores is not None
    assert scores.continuations == ((-0.5, -1.0), (-1.0,))
    assert scores.top == ((110, -0.5),)
    assert backend.last_prefill_tokens == len(PROMPT) + 1  # and the continuations' tokens
    assert backend.cache.held == PROMPT
    assert backend.cache_status().live_tokens == len(PROMPT)
    generate(backend, PROMPT, "a", n=1)
    assert backend.last_prefill_tokens == 1


def test_a_cancelled_scoring_answers_nothing_and_leaves_the_prompt() -> None:
    cache = ListCache()
    backend = list_backend(cache, evaluate_last=True)
    cancelled = threading.Event()
    cache.on_evaluate = [threading.Event()] * 3 + [cancelled]  # during the first continuation
    assert backend.score(PROMPT, [[110, 7], [5, 6]], 1, cancelled, cache_key="a") is None
    assert len(cache.evaluated) == 4  # the prompt's 3 chunks and one continuation
    assert cache.held == PROMPT


@pytest.mark.parametrize(("moves_out", "shared"), [(False, 20), (True, 0)])
def test_another_document_starts_from_what_the_live_cache_still_shares(
    moves_out: bool, shared: int
) -> None:
    """Two files with the same first lines: the second starts from them where setting the
    first's state aside copies it, and from nothing where it moves it out."""
    backend = list_backend(ListCache(moves_out=moves_out), evaluate_last=True)
    other = [*DOC_A[:20], *DOC_B[:20]]
    generate(backend, DOC_A, "a")
    generate(backend, other, "b")
    assert backend.cache_status().states == 1  # A is kept
    assert backend.last_prefill_tokens == len(other) - shared
