"""A scripted backend with a tiny byte-level tokenizer, for testing the layers above the engine.

Token ids: 0-15 are special tokens (named in `SPECIAL_TOKENS`), 16-271 are the 256 bytes,
and ids from 1000 up are extra multi-byte pieces a test may add (`pieces=`). Each call of
`iter_token_ids` plays the next script entry (text, or a list of ids and texts), then ends.
Like a deterministic model, a call whose prompt is an earlier call's prompt followed by the
start of what that call played continues that play instead of taking a new entry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from engine.backend import Backend, ModelInfo, Vocabulary
from engine.detokenizer import ByteDetokenizer, Detokenizer
from engine.specs import DEFAULT_CONTEXT_SIZE
from engine.types import SamplingParams, Scores

SPECIAL_TOKENS: dict[str, int] = {
    "<bos>": 0,
    "<eos>": 1,
    "<fim_prefix>": 2,
    "<fim_suffix>": 3,
    "<fim_middle>": 4,
    "<|endoftext|>": 5,
    "<end_of_turn>": 6,
}
BYTE_OFFSET = 16

#: One script entry: what the "model" produces for one choice.
ScriptEntry = str | Sequence[int | str]


def byte_ids(text: str) -> list[int]:
    return [BYTE_OFFSET + b for b in text.encode("utf-8")]


@dataclass(slots=True)
class FakeCall:
    """What one `iter_token_ids` call saw and did."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    cache_key: str | None = None
    yielded: int = 0
    #: The call's cancel event, so that an `on_step` hook can wait for a cancel mid-token.
    cancelled: threading.Event | None = None


class FakeOptions(TypedDict, total=False):
    """What a test may set of a `FakeBackend` beside its script (the fields of the same
    names), for fixtures that make backends: `def make(script, **options:
    Unpack[FakeOptions])` passes them on checked."""

    repeat_last: bool
    eog_ids: tuple[int, ...]
    context: int
    pieces: dict[int, bytes]
    template: str | None
    step_seconds: float
    fail_after: int | None
    name: str
    device: str
    on_step: Callable[[FakeCall], object] | None
    log_prob: Callable[[Sequence[int], int], float] | None
    token_logprob: float | None


@dataclass(slots=True, kw_only=True)
class FakeBackend(Backend):
    script: list[ScriptEntry] = field(default_factory=list)
    repeat_last: bool = True
    eog_ids: tuple[int, ...] = (1, 6)
    context: int = DEFAULT_CONTEXT_SIZE
    pieces: dict[int, bytes] = field(default_factory=dict)
    template: str | None = None
    step_seconds: float = 0.0
    fail_after: int | None = None  # raise RuntimeError after this many tokens
    name: str = "fake"
    device: str = "cpu"  # what ModelInfo reports (nothing runs anywhere)
    calls: list[FakeCall] = field(default_factory=list)
    _plays: list[tuple[tuple[int, ...], list[int]]] = field(default_factory=list)
    on_step: Callable[[FakeCall], object] | None = None
    #: The "model's" log-probability of a token after some ids, for `score`; None: this
    #: backend cannot score (like a remote one).
    log_prob: Callable[[Sequence[int], int], float] | None = None
    scored: list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]] = field(default_factory=list)
    #: The log-probability every generated token reports (`Backend.last_logprob`); None: the
    #: backend does not say, as a remote one.
    token_logprob: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        names = {v: k for k, v in SPECIAL_TOKENS.items()}
        info = ModelInfo(
            name=self.name,
            path="<fake>",
            backend="fake",
            device=self.device,
            context_size=self.context,
            vocab_size=BYTE_OFFSET + 256 + len(self.pieces),
            eog_tokens=tuple((i, names.get(i, str(i))) for i in self.eog_ids),
            has_chat_template=self.template is not None,
            load_seconds=0.0,
        )
        vocab = Vocabulary(
            bos_token="<bos>", eos_token="<eos>", adds_bos=True, chat_template=self.template
        )
        # Zero-argument super() fails in a slotted dataclass (its class is created anew).
        Backend.__init__(self, info=info, vocab=vocab)

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        ids = [SPECIAL_TOKENS["<bos>"]] if add_bos else []
        i = 0
        while i < len(text):
            if special:
                match = next((t for t in SPECIAL_TOKENS if text.startswith(t, i)), None)
                if match is not None:
                    ids.append(SPECIAL_TOKENS[match])
                    i += len(match)
                    continue
            ids.extend(byte_ids(text[i]))
            i += 1
        return ids

    def special_token_id(self, text: str) -> int | None:
        return SPECIAL_TOKENS.get(text)

    def token_bytes(self, token_id: int) -> bytes:
        if token_id in self.pieces:
            return self.pieces[token_id]
        if BYTE_OFFSET <= token_id < BYTE_OFFSET + 256:
            return bytes([token_id - BYTE_OFFSET])
        if 0 <= token_id < BYTE_OFFSET:
            return b""  # special tokens are not shown
        raise ValueError(f"token id {token_id} is not in the vocabulary")

    def new_detokenizer(self) -> Detokenizer:
        return ByteDetokenizer(self.token_bytes)

    def _next_entry(self) -> ScriptEntry:
        with self._lock:
            if not self.script:
                return ""
            if len(self.script) == 1 and self.repeat_last:
                return self.script[0]
            return self.script.pop(0)

    def _continuation(self, prompt: tuple[int, ...]) -> list[int] | None:
        with self._lock:
            for earlier, played in self._plays:
                tail = list(prompt[len(earlier) :])
                extends = len(prompt) > len(earlier) and prompt[: len(earlier)] == earlier
                if extends and tail == played[: len(tail)]:
                    return played[len(tail) :]
        return None

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        call = FakeCall(
            prompt_ids=tuple(prompt_ids),
            sampling=sampling,
            cache_key=cache_key,
            cancelled=cancelled,
        )
        self.calls.append(call)
        ids = self._continuation(call.prompt_ids)
        if ids is None:
            entry = self._next_entry()
            items: Sequence[int | str] = [entry] if isinstance(entry, str) else entry
            ids = [
                i for item in items for i in (byte_ids(item) if isinstance(item, str) else [item])
            ]
            with self._lock:
                self._plays.append((call.prompt_ids, ids))
        for token_id in ids:
            if cancelled.is_set():
                return
            if self.fail_after is not None and call.yielded >= self.fail_after:
                raise RuntimeError("simulated backend failure")
            if self.step_seconds:
                time.sleep(self.step_seconds)
            call.yielded += 1
            if self.on_step is not None:
                self.on_step(call)
            self.last_logprob = self.token_logprob
            yield token_id

    @property
    def can_score(self) -> bool:
        return self.log_prob is not None

    def score(
        self,
        prompt_ids: Sequence[int],
        continuations: Sequence[Sequence[int]],
        top: int,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Scores | None:
        if self.log_prob is None:
            return Backend.score(self, prompt_ids, continuations, top, cancelled)
        log_prob = self.log_prob
        prompt = tuple(prompt_ids)
        self.scored.append((prompt, tuple(tuple(c) for c in continuations)))
        if cancelled.is_set():
            return None
        scored = tuple(
            tuple(log_prob((*prompt, *c[:i]), t) for i, t in enumerate(c)) for c in continuations
        )
        vocabulary = [*range(BYTE_OFFSET + 256), *self.pieces]
        ranked = sorted(vocabulary, key=lambda t: -log_prob(prompt, t))
        return Scores(
            continuations=scored,
            top=tuple((t, log_prob(prompt, t)) for t in ranked[:top]),
        )
