"""The interface one model backend implements.

A backend owns one loaded model. Everything but `iter_token_ids` is cheap and may be called
from any thread; `iter_token_ids` runs only on the model's worker thread. The backends that
compute in this process (llama.cpp, transformers) share their KV-cache handling, generation and
scoring in engine/local_backend.py.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.detokenizer import Detokenizer
from engine.errors import PromptTooLongError
from engine.prefix_cache import CacheStatus
from engine.types import SamplingParams, Scores


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInfo:
    """What `doctor` and the status request report about a loaded model."""

    name: str
    path: str
    backend: str
    device: str
    context_size: int
    vocab_size: int
    eog_tokens: tuple[tuple[int, str], ...]  # (id, text) of each end-of-generation token
    has_chat_template: bool
    load_seconds: float
    #: The GPU(s) the model's weights are on, in words ("NVIDIA H200, 139.8 GiB (CUDA0)");
    #: None on the CPU (engine/accelerators.py).
    gpu: str | None = None
    #: What the user should know about how the model loaded: a GPU asked for but not used,
    #: and what to do about it. `doctor` prints them; the backend logs them when it loads.
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Vocabulary:
    """The special tokens and chat template a model ships: what prompts are built with."""

    bos_token: str | None
    eos_token: str | None
    adds_bos: bool  # whether the model wants BOS before a prompt (Gemma does, or it babbles)
    chat_template: str | None  # the model's own Jinja chat template, if it ships one


class Tokenizer(Protocol):
    """What building a prompt and ranking lines need of a model: its tokenizer and special
    tokens, nothing that runs it. A `Backend` is one; so is a model's vocabulary loaded alone,
    beside a remote server that serves the same model file (`LlamaTokenizer.vocab_only`,
    engine/backends/llama_cpp.py), so that prompts sent there are the model's exact ids."""

    @property
    def vocab(self) -> Vocabulary:
        """BOS and its rule (prompts start with it where the model wants it)."""

    @property
    def model_path(self) -> str:
        """Where the model comes from, for messages."""

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        """As `Backend.tokenize`."""

    def special_token_id(self, text: str) -> int | None:
        """As `Backend.special_token_id`."""

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """As `Backend.detokenize`."""


def scoring_prompt(
    prompt_ids: Sequence[int], continuations: Sequence[Sequence[int]], context_size: int
) -> list[int]:
    """The prompt of a scoring (`Backend.score`), checked: not empty, and room in the context
    for it and its longest continuation."""
    prompt = list(prompt_ids)
    if not prompt:
        raise ValueError("the prompt has no tokens")
    longest = max((len(c) for c in continuations), default=0)
    if len(prompt) + longest > context_size:
        raise PromptTooLongError(len(prompt) + longest, context_size)
    return prompt


def branch_prompt(prompt_ids: Sequence[int], max_tokens: int, context_size: int) -> list[int]:
    """The prompt of a branching (`Backend.branch`), checked: not empty, room in the context
    for it and a first token, and a token limit a request could have (one after another, each
    branch is a request of that limit, refused the same way)."""
    SamplingParams(max_tokens=max_tokens)
    prompt = list(prompt_ids)
    if not prompt:
        raise ValueError("the prompt has no tokens")
    if len(prompt) + 1 > context_size:
        raise PromptTooLongError(len(prompt) + 1, context_size)
    return prompt


class Joined(enum.Enum):
    """What came of a request's joining a `StepGroup`."""

    JOINED = "joined"
    #: The cache has no room for it beside the members now: it waits for the group to end,
    #: then goes alone.
    NO_ROOM = "no room"
    CANCELLED = "cancelled"


class StepRefusedError(RuntimeError):
    """The backend could not take a pass of every member of a `StepGroup` now (its cache
    found no cells for them): the members go on one at a time."""


class StepGroup(abc.ABC):
    """Greedy generations of several requests advanced together, a pass taking the next token
    of every member (continuous batching). A request joins with what it has so far and leaves
    when it ends; either happens between two passes. Runs only on the model's worker thread.
    The backend's live cache and kept documents are only read while the group exists; `close`
    removes what the group added to the cache."""

    #: The most members the group takes.
    capacity: int

    @abc.abstractmethod
    def join(
        self,
        member: int,
        history: Sequence[int],
        ahead: int,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> tuple[Joined, int]:
        """Make `member` a member: `history` is its prompt and the tokens it has so far (the
        next pass gives the token after them), `ahead` the most tokens it may still write.
        With the outcome, the history's tokens that were evaluated (the rest came from the
        live cache or a kept document)."""

    @abc.abstractmethod
    def step(self) -> dict[int, tuple[int, float]]:
        """One pass: every member's next token (the most likely one; ties to the lowest id)
        and its log-probability. StepRefusedError if the backend cannot take the pass."""

    @abc.abstractmethod
    def leave(self, member: int) -> None:
        """`member` is done (or set aside): what it held in the cache goes."""

    @abc.abstractmethod
    def close(self) -> None:
        """Every member leaves."""


class Backend(abc.ABC):
    """One loaded model: tokenizer, special tokens, chat template and a token generator.

    A subclass loads its model, then hands what it learnt to `__init__`: `info` (what is
    reported) and `vocab` (what prompts are built with) never change afterwards.
    """

    #: The log-probability of the token `iter_token_ids` yielded last (natural log, under the
    #: model's distribution before any sampling filter), set before each yield by a backend
    #: that knows it; None where it does not. Read on the worker thread, between two tokens.
    last_logprob: float | None = None

    def __init__(self, *, info: ModelInfo, vocab: Vocabulary) -> None:
        self.info = info
        self.vocab = vocab

    @property
    def context_size(self) -> int:
        return self.info.context_size

    @property
    def model_path(self) -> str:
        return self.info.path

    @property
    def eog_token_ids(self) -> frozenset[int]:
        """End-of-generation ids the model declares (tokenizer, GGUF metadata, config)."""
        return frozenset(token_id for token_id, _ in self.info.eog_tokens)

    @abc.abstractmethod
    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        """Token ids of `text`. With `special`, special-token text (`<fim_prefix>`, ...) in it
        becomes those tokens; without, it is plain text (use that for the user's code)."""

    @abc.abstractmethod
    def special_token_id(self, text: str) -> int | None:
        """The id of the special token written `text`, or None if the model has no such token."""

    @abc.abstractmethod
    def new_detokenizer(self) -> Detokenizer:
        """A fresh incremental detokenizer for one choice (special tokens are not shown)."""

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """The full decode of `token_ids`: what the joined deltas of a detokenizer equal."""
        detokenizer = self.new_detokenizer()
        return "".join(detokenizer.step(t) for t in token_ids) + detokenizer.finish()

    @abc.abstractmethod
    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        """Sampled token ids, one at a time, until the caller stops or `cancelled` is set.

        `cancelled` is checked before every step, so a cancel stops the model within one token
        (and a long prompt within one batch of its evaluation). Implementations reuse whatever
        they can of earlier prompts: the live KV cache, or the state kept for `cache_key`'s
        document (`cache_status`).
        """

    def branch(
        self,
        prompt_ids: Sequence[int],
        first_tokens: Sequence[int],
        max_tokens: int,
        ended: Callable[[int, int], bool],
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> list[list[int]] | None:
        """The greedy tokens after `prompt_ids` and each of `first_tokens` (that token not
        included): each new token of branch `i` is handed to `ended(i, token)`, which says
        whether the branch ends with it; a branch has at most `max_tokens` tokens. None if
        `cancelled` stopped it. Runs only on the model's worker thread.

        Here one branch after another, each a greedy generation (`iter_token_ids`): the
        answer every backend gives. A backend may write them together (llama.cpp, where many
        rows per pass pay); its kernels may then round otherwise than for one row, and a
        branch part from what this gives (docs/how-it-works.md, "Many sequences per pass").
        """
        branches: list[list[int]] = []
        for index, first in enumerate(first_tokens):
            written = self.branch_alone(
                prompt_ids, first, [], index, max_tokens, ended, cancelled, cache_key=cache_key
            )
            if written is None:
                return None
            branches.append(written)
        return branches

    def branch_alone(
        self,
        prompt_ids: Sequence[int],
        first: int,
        written: list[int],
        index: int,
        max_tokens: int,
        ended: Callable[[int, int], bool],
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> list[int] | None:
        """Branch `index` of `branch`, which has `written` after `first` so far, continued
        on its own: its tokens in all (`written` grown); None if `cancelled`."""
        greedy = SamplingParams(max_tokens=max_tokens)
        room = max_tokens - len(written)
        if room > 0:
            tokens = self.iter_token_ids(
                [*prompt_ids, first, *written], greedy, cancelled, cache_key=cache_key
            )
            with contextlib.closing(tokens):
                for token in tokens:
                    written.append(token)
                    if ended(index, token) or len(written) >= max_tokens:
                        break
        return None if cancelled.is_set() else written

    @property
    def can_score(self) -> bool:
        """Whether `score` is implemented (a reranker is only offered where it is)."""
        return False

    #: The least greedy generations under way at once that the worker writes together
    #: (`step_group`): where that many cost less together than in turns. 0: never (the
    #: worker gives requests turns).
    group_from: int = 0

    @property
    def group_size(self) -> int:
        """The most greedy generations `step_group` advances together."""
        return 1

    def step_group(self) -> StepGroup:
        """A new, empty group of generations advanced together (`group_from` > 0 only)."""
        raise NotImplementedError(f"the {self.info.backend} backend writes one request at a time")

    def score(
        self,
        prompt_ids: Sequence[int],
        continuations: Sequence[Sequence[int]],
        top: int,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Scores | None:
        """Log-probabilities of each continuation's tokens after `prompt_ids`, and the `top`
        most likely tokens after the prompt; None if `cancelled` stopped it. Runs only on the
        model's worker thread; reuses the KV cache as `iter_token_ids` does, and leaves the
        prompt in it (a generation from the same prompt then starts at once)."""
        raise NotImplementedError(f"the {self.info.backend} backend does not score text")

    @property
    def last_prefill_tokens(self) -> int | None:
        """How many prompt tokens the last generation evaluated (the rest came from the KV
        cache or a kept state); None if the backend does not say."""
        return None

    def cache_status(self) -> CacheStatus | None:
        """What the backend keeps of earlier prompts; None if it keeps nothing."""
        return None

    def close(self) -> None:
        """Free the model."""
        return None
