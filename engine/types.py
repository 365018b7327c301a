"""Data that crosses the engine's thread and module boundaries.

Everything here is frozen: a request is built on the event loop, read on the worker thread,
and its deltas travel back; nobody may change them on the way.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace


class FinishReason(enum.StrEnum):
    """Why a choice ended. The values are the strings the CLI and the LSP layer print."""

    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    ERROR = "error"


class LoadState(enum.StrEnum):
    """Where a model is: loading, ready to serve, or failed to load (what the language
    server's status and the engine server's `/health` report)."""

    LOADING = "loading"
    READY = "ready"
    ERROR = "error"


class Role(enum.StrEnum):
    """What a model is used for. Each role has its own model (they may be the same one)."""

    COMPLETION = "completion"
    CHAT = "chat"
    #: The model that rewrites the region around the cursor (engine/next_edit_model.py): the
    #: completion model unless one is named. Its jobs wait for inline completions, as chat's.
    NEXT_EDIT = "next_edit"


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """How tokens are picked. Temperature 0 is greedy decoding; `seed` makes sampling repeatable."""

    max_tokens: int = 64
    min_tokens: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    seed: int | None = None
    n: int = 1

    def __post_init__(self) -> None:
        problems = []
        if self.max_tokens < 1:
            problems.append(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            problems.append(f"min_tokens must not be negative, got {self.min_tokens}")
        if self.temperature < 0:
            problems.append(f"temperature must not be negative, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must not be negative (0 turns it off), got {self.top_k}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be positive, got {self.repetition_penalty}")
        if self.n < 1:
            problems.append(f"n must be at least 1, got {self.n}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def most_likely_each(self) -> bool:
        """Whether each token is the most likely one after the tokens before it, whatever
        else a pass computes: greedy and unpenalized. Such tokens may come from checked
        drafts, or from a pass that carries other requests' rows."""
        return self.greedy and self.repetition_penalty == 1.0

    def for_choice(self, index: int) -> SamplingParams:
        """The parameters of choice `index`: each sampled choice gets its own seed."""
        if self.seed is None or index == 0:
            return self
        return replace(self, seed=self.seed + index)


#: Completion (inline suggestions): greedy, short. The LSP layer picks max_tokens per mode.
COMPLETION_SAMPLING = SamplingParams(max_tokens=64, temperature=0.0)
#: Chat (explain, rewrite): 512 tokens hold an explanation of a function or the function
#: rewritten; repetition penalty 1.1, because small chat models (the default SmolLM2-135M)
#: otherwise fall into repeating a line until the limit; a low temperature keeps code answers
#: close to the most likely one.
CHAT_SAMPLING = SamplingParams(
    max_tokens=512, temperature=0.2, top_p=0.95, top_k=40, repetition_penalty=1.1
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopConditions:
    """Where generation ends.

    - `stop`: stop strings, hidden unless `include_stop_str_in_output`.
    - `stop_token_ids`: the user's stop tokens; hidden, and reported as `stop_reason`.
    - `stop_token_ids_hidden`: end-of-generation tokens of the model; hidden, no `stop_reason`.
    - `stop_token_ids_visible`: stop tokens whose text is kept in the output.
    - `ignore_eos`: do not stop at the model's end-of-generation tokens (benchmarks).
    """

    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    stop_token_ids_hidden: tuple[int, ...] = ()
    stop_token_ids_visible: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if any(not s for s in self.stop):
            raise ValueError("a stop string must not be empty")


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


#: The request header that names the client (an editor window's language server) sharing an
#: engine server: the worker takes turns by it, /stats picks its jobs by it.
CLIENT_HEADER = "X-Infill-Client"
#: What a client's name may be: opaque to the engine, short, and safe to log and to join to a
#: document's key (`engine.prefix_cache.kept_key`: no character of it is its separator).
CLIENT_NAME = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def check_client(client: str | None) -> None:
    """ValueError unless `client` is None (anonymous) or a name `CLIENT_NAME` takes."""
    if client is not None and CLIENT_NAME.fullmatch(client) is None:
        raise ValueError(
            "a client's name is 1 to 64 characters of letters, digits and . _ : -, "
            f"got {client[:80]!r}"
        )


_request_ids = itertools.count(1)


def next_request_id() -> str:
    return f"req-{next(_request_ids)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationRequest:
    """One generation: a prompt (text, token ids, or chat messages), how to sample, where to stop.

    Text prompts are tokenized with the model's special tokens and its BOS rule; chat messages
    are rendered with the model's own chat template first.
    """

    prompt: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    messages: tuple[ChatMessage, ...] | None = None
    role: Role = Role.COMPLETION
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stops: StopConditions = field(default_factory=StopConditions)
    request_id: str = field(default_factory=next_request_id)
    #: The document the prompt comes from: the backend keeps its KV state under this key, so
    #: that coming back to the document reuses it (engine/prefix_cache.py). None: matched by
    #: the prompt's tokens alone.
    cache_key: str | None = None
    #: Who asks (the `CLIENT_HEADER` of the engine server's request): the worker takes turns
    #: among clients, and never lets one client's jobs decide another's. None: anonymous, a
    #: client of its own (what a language server's own in-process engine sends).
    client: str | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.prompt, self.prompt_token_ids, self.messages)]
        if sum(given) != 1:
            raise ValueError("give exactly one of prompt, prompt_token_ids or messages")
        check_client(self.client)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of one choice's output. The last delta of a choice has a `finish_reason`.

    `"".join(d.text for d in deltas of a choice)` is the choice's whole output.
    """

    index: int
    text: str
    token_ids: tuple[int, ...] = ()
    #: Each of `token_ids`' log-probability (natural log, under the model's distribution
    #: before any sampling filter): what a confidence gate reads. From a remote server, which
    #: streams text without token ids: those of the tokens the text came in, as the server
    #: sent them. None where the engine does not know them (a backend or server that does not
    #: say).
    logprobs: tuple[float, ...] | None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreRequest:
    """How likely the model finds each of some continuations of one prompt, and which tokens
    it finds most likely next: what a reranker asks (no text is generated).

    The prompt is evaluated once (from the KV cache where it can be, like a generation's);
    each continuation is then evaluated after it on its own.
    """

    prompt_token_ids: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...] = ()
    #: How many of the most likely tokens after the prompt to report (0: none).
    top: int = 0
    role: Role = Role.COMPLETION
    request_id: str = field(default_factory=next_request_id)
    cache_key: str | None = None  # as in GenerationRequest
    client: str | None = None  # as in GenerationRequest

    def __post_init__(self) -> None:
        check_client(self.client)
        if not self.prompt_token_ids:
            raise ValueError("the prompt has no tokens")
        if self.top < 0:
            raise ValueError(f"top must not be negative, got {self.top}")
        if any(not c for c in self.continuations):
            raise ValueError("a continuation must have at least one token")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scores:
    """A `ScoreRequest`'s answer: natural-log probabilities."""

    #: Per continuation, each of its tokens' log-probability given the prompt and the
    #: continuation's tokens before it.
    continuations: tuple[tuple[float, ...], ...]
    #: The `top` most likely tokens after the prompt, most likely first: (id, log-probability).
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchRequest:
    """Greedy continuations of one prompt, one after each of some first tokens: what ranking
    candidate lines asks (lsp_server/rerank.py). Each branch is the greedy answer to the
    prompt followed by its first token, with `sampling`'s token limit and `stops` (the model's
    end-of-generation tokens join them); a backend may write them all together, the prompt
    evaluated once (the llama.cpp backend: one sequence per branch in one context)."""

    prompt_token_ids: tuple[int, ...]
    first_tokens: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stops: StopConditions = field(default_factory=StopConditions)
    role: Role = Role.COMPLETION
    request_id: str = field(default_factory=next_request_id)
    cache_key: str | None = None  # as in GenerationRequest
    client: str | None = None  # as in GenerationRequest
    #: Where set, a branch also ends (finish STOP) after a token that grew its text once
    #: `ends(index, its text so far)` holds: the caller's own sign of a whole answer (inline
    #: completion's: a multi-line answer's code has left the cursor's block), which a stream
    #: would have been cancelled at. Called on the model's worker thread: it must be quick.
    ends: Callable[[int, str], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_client(self.client)
        if not self.prompt_token_ids:
            raise ValueError("the prompt has no tokens")
        if not self.sampling.greedy or self.sampling.n != 1:
            raise ValueError("branches are greedy, one choice each")


@dataclass(frozen=True, slots=True, kw_only=True)
class Branches:
    """A `BranchRequest`'s answer: per first token, in order, the text written after it (the
    first token's own text not included) and how it ended."""

    texts: tuple[str, ...]
    finish_reasons: tuple[FinishReason, ...]
