"""What the backends that compute in this process (llama.cpp, transformers) share: one live KV
cache kept between requests, other documents' states kept beside it, and the generation and
scoring written around them, once, in the primitives each backend supplies (`LiveCache`).

Bringing the cache to a prompt (`LocalBackend._bring_to`) is the heart of it. `PrefixCache`
(engine/prefix_cache.py) says where the prompt starts; then:

1. Set the live state aside when the store says so (it belongs to another document), and make
   a kept state live when one shares more of the prompt.
2. Keep the longest prefix the cache shares with the prompt, but never all of the prompt: its
   last token is evaluated again, because only an evaluation gives the logits to sample from.
3. Cut the cache back to that prefix.
4. Evaluate the rest in chunks, looking at the cancel event before each: a cancel stops a long
   prompt within one chunk, and what was evaluated stays for the next request.

While the user types, each request then costs a few new tokens instead of the whole prompt;
coming back to a document, one. What a state is, and how it is copied out, brought back, cut
and evaluated on, is the backend's: llama.cpp serializes a sequence into RAM, transformers
keeps the `DynamicCache` itself or a copy of a static cache's used part.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from engine.backend import Backend, ModelInfo, Vocabulary, scoring_prompt
from engine.errors import PromptTooLongError
from engine.prefix_cache import CacheStatus, PrefixCache
from engine.types import SamplingParams, Scores

S = TypeVar("S")  # a kept state, as the backend keeps it
Out = TypeVar("Out")  # what evaluating tokens gives (the logits after the last, or nothing)
D = TypeVar("D")  # a distribution over the vocabulary, as log-probabilities

#: The most sequences a job evaluates together, a row of each per forward pass: the candidate
#: lines of one ranking prompt (lsp_server/rerank.py CANDIDATES) and their scorings. Both
#: local backends size their rows by it (llama.cpp: sequences beside the live one; transformers:
#: rows of a batch over copies of the prompt's cache).
SEQUENCES = 8


class LiveCache(abc.ABC, Generic[S, Out]):
    """The primitives of one backend's live KV cache: what `LocalBackend` is written in.

    `chunk`: the most tokens one evaluation of a prompt takes, between two looks at the
    cancel event.
    """

    chunk: int

    @property
    @abc.abstractmethod
    def length(self) -> int:
        """How many tokens the cache holds."""

    @abc.abstractmethod
    def tokens(self) -> list[int]:
        """The token ids whose keys and values the cache holds, in order (a copy)."""

    @abc.abstractmethod
    def set_aside(self, tokens: list[int]) -> tuple[S, int] | None:
        """The live state, which holds `tokens`, as the store keeps it, and the bytes it takes;
        None if it cannot be copied out. The live cache is left as it was, or empty (the
        state moved out)."""

    @property
    @abc.abstractmethod
    def bytes_per_token(self) -> int:
        """What one token's state takes (0 while unknown): the store's default budget."""

    @abc.abstractmethod
    def restore(self, state: S, tokens: tuple[int, ...]) -> None:
        """Make a kept state, which holds `tokens`, the live cache; an empty cache where the
        library refuses it."""

    @abc.abstractmethod
    def cut(self, length: int) -> int:
        """Drop the tokens from position `length` on; how many it keeps (none, afresh, where
        the cache cannot be cut there)."""

    @abc.abstractmethod
    def evaluate(self, ids: list[int]) -> Out:
        """Run `ids` through the model on top of the cache."""

    def prepare_to_keep(self, tokens: int) -> None:
        """A long prompt is about to be evaluated: its state, of `tokens` tokens and what is
        generated after them, will be set aside when the user switches documents. A backend
        may get ready for that now, so that the switch (a keystroke's cost) does not."""
        return None

    def recycle(self, state: S) -> None:
        """The store let go of `state` (evicted, replaced) or made it live: its memory may be
        reused."""
        return None

    def close(self) -> None:
        """Let the model and the cache's memory go."""
        return None


@dataclass(frozen=True, slots=True)
class Prefilled(Generic[Out]):
    """The cache holds the prompt (all of it, or all but the last token; see `LocalBackend`)."""

    output: Out | None  # what the last evaluation gave; None where nothing was evaluated


class LocalBackend(Backend, Generic[S, Out, D]):
    """A backend that computes in this process, in the live cache `live`, keeping other
    documents' states within `cache_bytes` (None: sized from the model; 0: none).

    A subclass says whether bringing the cache to a prompt evaluates the prompt's last token
    too (`evaluate_last`), and supplies sampling and the log-probabilities scoring asks for.
    """

    #: Whether the prompt's last token is evaluated with the rest, for the logits after it
    #: (transformers), or left to the sampler (llama.cpp's `generate()` evaluates it itself).
    evaluate_last: ClassVar[bool]

    def __init__(
        self,
        *,
        info: ModelInfo,
        vocab: Vocabulary,
        live: LiveCache[S, Out],
        cache_bytes: int | None,
    ) -> None:
        super().__init__(info=info, vocab=vocab)
        self._live = live
        self._kept: PrefixCache[S] = PrefixCache(cache_bytes, on_drop=live.recycle)
        self._last_prefill_tokens = 0
        self._closed = False

    # --- what subclasses supply -------------------------------------------------------------

    @abc.abstractmethod
    def _sample(
        self,
        prompt: list[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        first: Out | None,
    ) -> Iterator[int]:
        """Sampled token ids after `prompt`, which the cache holds (`first`: what evaluating
        its end gave), until the caller stops or `cancelled` is set."""

    @abc.abstractmethod
    def _after_prompt(self, prompt: list[int], first: Out | None) -> D:
        """The log-probabilities of the token after `prompt`, which the cache holds (all of
        it, or all but its last token)."""

    @abc.abstractmethod
    def _log_probs(self, prompt: list[int], continuation: Sequence[int], after: D) -> list[float]:
        """The log-probability of each of `continuation`'s tokens after `prompt` (`after`: the
        first one's distribution), evaluating the others on top of the prompt in the cache."""

    @abc.abstractmethod
    def _most_likely(self, after: D, top: int) -> tuple[tuple[int, float], ...]:
        """The `top` most likely tokens of the distribution `after`, and their log-probabilities,
        most likely first."""

    # --- generation and scoring --------------------------------------------------------------

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        self._check_open()
        if cancelled.is_set():
            return
        prompt = list(prompt_ids)
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if len(prompt) > self.context_size:
            raise PromptTooLongError(len(prompt), self.context_size)
        prefilled = self._bring_to(prompt, cache_key, cancelled)
        if prefilled is None:
            return
        try:
            # The consumer may stop at any token for good: the cache then holds everything
            # before it, which `tokens()` says, so the next request stays exact.
            yield from self._sample(prompt, sampling, cancelled, prefilled.output)
        finally:
            self._kept.set_live(cache_key, self._live.length)

    @property
    def can_score(self) -> bool:
        return True

    def score(
        self,
        prompt_ids: Sequence[int],
        continuations: Sequence[Sequence[int]],
        top: int,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Scores | None:
        self._check_open()
        prompt = scoring_prompt(prompt_ids, continuations, self.context_size)
        if cancelled.is_set():
            return None
        prefilled = self._bring_to(prompt, cache_key, cancelled)
        if prefilled is None:
            return None
        try:
            after = self._after_prompt(prompt, prefilled.output)
            scored = self._score_continuations(prompt, continuations, after, cancelled)
            if scored is None:
                return None
            self._last_prefill_tokens += sum(len(c) - 1 for c in continuations)
            return Scores(continuations=tuple(scored), top=self._most_likely(after, top))
        finally:
            self._live.cut(len(prompt))  # the prompt stays: a generation after it starts at once
            self._kept.set_live(cache_key, self._live.length)

    def _score_continuations(
        self,
        prompt: list[int],
        continuations: Sequence[Sequence[int]],
        after: D,
        cancelled: threading.Event,
    ) -> list[tuple[float, ...]] | None:
        """Each continuation's log-probabilities after `prompt`, which the cache holds (`after`:
        the distribution of their first tokens); None if `cancelled`. Here one after another;
        a backend may evaluate them together."""
        scored = []
        for continuation in continuations:
            if cancelled.is_set():
                return None
            scored.append(tuple(self._log_probs(prompt, continuation, after)))
        return scored

    def _bring_to(
        self, prompt: list[int], key: str | None, cancelled: threading.Event
    ) -> Prefilled[Out] | None:
        """Bring the live cache to `prompt`, the document `key`'s, in the steps of the module
        docstring; None if `cancelled` stopped it (what was evaluated stays in the cache)."""
        live, kept = self._live, self._kept
        # 1. Where the prompt starts: the live cache, or a kept state that shares more.
        tokens = live.tokens()
        plan = kept.plan(prompt, key, tokens)
        if plan.save_live:
            saved = live.set_aside(tokens)
            if saved is not None:
                state, nbytes = saved
                kept.size_budget(live.bytes_per_token, self.context_size)
                kept.keep(kept.live_key, tokens, state, nbytes)
        if plan.restore is not None:
            live.restore(plan.restore, plan.restore_tokens)
        # From here on the live cache is this document's, whatever happens to the prompt.
        kept.set_live(key, live.length)
        # 2. The prefix kept: a live state set aside by moving it out, or a restore the library
        # refused, leaves an empty cache, which shares nothing.
        shared = min(plan.shared, live.length, len(prompt) - 1)
        # 3. The cache cut back to it.
        shared = live.cut(shared)
        # 4. The rest, chunk by chunk; the last token is counted where the sampler evaluates it.
        rest = prompt[shared:] if self.evaluate_last else prompt[shared:-1]
        self._last_prefill_tokens = len(prompt) - shared
        if len(rest) > live.chunk and kept.budget_bytes != 0:
            live.prepare_to_keep(len(prompt))
        output: Out | None = None
        for start in range(0, len(rest), live.chunk):
            if cancelled.is_set():
                break
            output = live.evaluate(rest[start : start + live.chunk])
        kept.set_live(key, live.length)
        return None if cancelled.is_set() else Prefilled(output)

    # --- what is kept ------------------------------------------------------------------------

    @property
    def last_prefill_tokens(self) -> int:
        """How many prompt tokens the last request evaluated (the rest came from the live cache
        or a kept state). For tests and benchmarks."""
        return self._last_prefill_tokens

    def cache_status(self) -> CacheStatus:
        return self._kept.status

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the model {self.info.name} is closed")

    def close(self) -> None:
        self._closed = True
        self._kept.clear()
        self._live.close()
