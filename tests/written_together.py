"""What a greedy answer written together with other requests may differ in from the answer
alone: shared by the worker's tests (tests/engine/test_llama_together.py) and the engine
server's (tests/api/test_api_e2e.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from engine.backends.llama_cpp import LlamaCppBackend

#: How far below the most likely token's log-probability a token written together may be: the
#: rounding of a cache whose cells lie otherwise (see `most_likely_up_to_rounding`). Here the
#: tokens that parted were near ties, 0.022 to 0.054 below the best (SmolLM2, f16 cache).
ROUNDING = 0.1


def below_the_best(backend: LlamaCppBackend, history: Sequence[int], token: int) -> float:
    """How far `token` after `history` is below the most likely token, scored alone (0 when
    it is the most likely one)."""
    scores = backend.score(history, [[token]], 1, threading.Event())
    assert scores is not None
    best, best_logprob = scores.top[0]
    return 0.0 if best == token else best_logprob - scores.continuations[0][0]


def most_likely_up_to_rounding(
    backend: LlamaCppBackend, prompt: Sequence[int], tokens: Sequence[int]
) -> list[tuple[int, float]]:
    """Where `tokens` after `prompt` are not the greedy answer alone, scored alone: each
    position whose token is not the most likely one, and how far below it it is. Written
    together, a request's cells lie elsewhere in the cache than alone (among other requests',
    after the prompts of those that joined), and flash attention's sums round with where
    they lie: a near tie can then go the other way."""
    below = []
    for i, token in enumerate(tokens):
        gap = below_the_best(backend, [*prompt, *tokens[:i]], token)
        if gap:
            below.append((i, gap))
    return below


def parts_at_a_near_tie(backend: LlamaCppBackend, prompt: str, alone: str, other: str) -> float:
    """Two greedy answers to `prompt` as text (the engine server's): how far below the most
    likely token the first token where `other` parts from `alone` is, scored after the tokens
    they share (0 when they are the same). Both are tokenized again, which gives the tokens
    written for answers like these (words, digits, code)."""
    history = backend.tokenize(prompt, add_bos=backend.vocab.adds_bos)
    first = backend.tokenize(alone, add_bos=False, special=False)
    second = backend.tokenize(other, add_bos=False, special=False)
    for i, token in enumerate(second[: len(first)]):
        if token != first[i]:
            return below_the_best(backend, [*history, *first[:i]], token)
    return 0.0
