"""OpenAI's answers: whole responses, streamed chunks and server-sent events.

The two generation routes write the same envelope and the same choices, except for a few
things each writes its own way: those are one `Endpoint` each, `COMPLETIONS` and `CHAT`, and
the route hands its endpoint to the code that answers (`generate.answer`).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.markdown import code_or_text
from engine.types import FinishReason, TextDelta


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token counts of one request, all choices together."""

    prompt_tokens: int
    completion_tokens: int

    def as_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """What every response and chunk of one request repeats."""

    id: str
    created: int
    model: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One choice as the response reports it."""

    index: int
    text: str
    finish_reason: FinishReason | None
    stop_reason: str | int | None
    #: Tokens the choice generated (the REST routes' `num_tokens`).
    completion_tokens: int = 0
    #: OpenAI's `logprobs` object, where the request asked for it (`ChoiceLogprobs`).
    logprobs: Mapping[str, Any] | None = None


def finish_name(reason: FinishReason | None) -> str | None:
    """OpenAI's finish_reason: "stop" or "length" (a choice cut short by us reads "stop")."""
    if reason is None:
        return None
    return "length" if reason is FinishReason.LENGTH else "stop"


#: A piece of a streamed delta: the value of its chunk's text field, and whether the choice's
#: finish goes with it.
Piece = tuple[object, bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """What one generation route writes its own way; the rest of an answer is shared."""

    #: The `object` of a whole answer, and of each streamed chunk.
    answer_object: str
    chunk_object: str
    #: How the route's answer ids start (`cmpl-...`, `chatcmpl-...`).
    id_prefix: str
    #: The request field an error about the prompt names (a prompt over the context).
    prompt_field: str
    #: A choice's text in a whole answer: the key and the value it is written as.
    answer_field: Callable[[str], tuple[str, object]]
    #: The key of the text in a streamed choice.
    chunk_key: str
    #: The pieces one delta is streamed as, a chunk each (none: nothing to send).
    pieces: Callable[[TextDelta], list[Piece]]
    #: What each choice's stream opens with, before any text (None: nothing).
    opening: Mapping[str, str] | None = None

    def header(self, model: str) -> Header:
        """A fresh response id and the creation time."""
        return Header(
            id=f"{self.id_prefix}-{uuid.uuid4().hex}", created=int(time.time()), model=model
        )

    def response(self, header: Header, choices: Sequence[Choice], usage: Usage) -> dict[str, Any]:
        """A whole (non-streamed) answer."""
        written = []
        for c in choices:
            key, value = self.answer_field(c.text)
            written.append(
                {
                    "index": c.index,
                    key: value,
                    "logprobs": c.logprobs,
                    "finish_reason": finish_name(c.finish_reason),
                    "stop_reason": c.stop_reason,
                }
            )
        body = _envelope(header, self.answer_object, written)
        body["usage"] = usage.as_json()
        return body

    def chunk(
        self,
        header: Header,
        index: int,
        value: object,
        finish_reason: FinishReason | None = None,
        stop_reason: str | int | None = None,
        *,
        logprobs: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One streamed chunk of choice `index`, and `stop_reason` on the choice's last one."""
        choice: dict[str, Any] = {
            "index": index,
            self.chunk_key: value,
            "logprobs": logprobs,
            "finish_reason": finish_name(finish_reason),
        }
        if finish_reason is not None:
            choice["stop_reason"] = stop_reason
        return _envelope(header, self.chunk_object, [choice])

    def opening_chunks(self, header: Header, n: int) -> list[dict[str, Any]]:
        """The chunks that open the stream, one a choice, before any text."""
        if self.opening is None:
            return []
        return [self.chunk(header, index, dict(self.opening)) for index in range(n)]

    def delta_chunks(
        self, header: Header, delta: TextDelta, logprobs: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The chunks of one delta: its new text, and its choice's finish; `logprobs` (the
        delta's entries, `ChoiceLogprobs.add`) go with the first."""
        finish, stop = delta.finish_reason, delta.stop_reason
        chunks = [
            self.chunk(header, delta.index, value, *((finish, stop) if finishes else ()))
            for value, finishes in self.pieces(delta)
        ]
        if logprobs is not None:
            if not chunks:
                # A token whose text is withheld (the start of a stop string) is still a token
                # with a log-probability: it goes out with no text. Only completions answer
                # log-probabilities, whose chunk value is the text.
                chunks.append(self.chunk(header, delta.index, ""))
            chunks[0]["choices"][0]["logprobs"] = logprobs
        return chunks

    def usage_chunk(self, header: Header, usage: Usage) -> dict[str, Any]:
        """The extra last chunk of `stream_options.include_usage`: no choices, the usage."""
        body = _envelope(header, self.chunk_object, [])
        body["usage"] = usage.as_json()
        return body


def token_entries(delta: TextDelta) -> list[tuple[str, float | None]]:
    """A delta's entries in its choice's `logprobs`: each token with the text the choice gained
    with it, and its log-probability (None where the engine does not know it).

    A delta's text goes to its first token and any others get "": so the entries' texts join
    to the choice's text, withheld text included (it comes with the token that releases it;
    text cut at a stop string never does). Text that came without a token of its own (what
    was withheld when the model ended a choice itself) is an entry of its own, without a
    log-probability."""
    count = len(delta.token_ids) or len(delta.logprobs or ())
    if count == 0:
        return [(delta.text, None)] if delta.text else []
    known = delta.logprobs if delta.logprobs is not None and len(delta.logprobs) == count else None
    return [
        (delta.text if i == 0 else "", None if known is None else _finite(known[i]))
        for i in range(count)
    ]


def _finite(value: float) -> float | None:
    # JSON has no infinities: a token the model gave no chance is a log-probability unknown.
    return value if math.isfinite(value) else None


@dataclass(slots=True)
class ChoiceLogprobs:
    """One choice's OpenAI `logprobs` (of /v1/completions), built as its deltas come; held by
    one request's answer on the event loop.

    `tokens[i]` is the text the choice gained with token i (`token_entries`), so the tokens
    join to the choice's text; `text_offset[i]` is where it starts in that text (vLLM's
    offsets: from the choice's start, the prompt not counted). `top_logprobs` is null: the
    engine knows the chosen token's log-probability, and the alternatives would cost a top-k
    over the vocabulary at every token."""

    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)
    length: int = 0  # characters of the choice's text so far

    def add(self, delta: TextDelta) -> dict[str, Any] | None:
        """Take a delta's entries; they are also returned as its chunk's `logprobs` (None: the
        delta has none)."""
        entries = token_entries(delta)
        if not entries:
            return None
        start = len(self.tokens)
        for text, logprob in entries:
            self.tokens.append(text)
            self.token_logprobs.append(logprob)
            self.text_offset.append(self.length)
            self.length += len(text)
        return self._json(start)

    def as_json(self) -> dict[str, Any]:
        """The whole choice's `logprobs`."""
        return self._json(0)

    def _json(self, start: int) -> dict[str, Any]:
        return {
            "tokens": self.tokens[start:],
            "token_logprobs": self.token_logprobs[start:],
            "top_logprobs": None,
            "text_offset": self.text_offset[start:],
        }


def _envelope(header: Header, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": header.id,
        "object": kind,
        "created": header.created,
        "model": header.model,
        "choices": choices,
    }


def _text_pieces(delta: TextDelta) -> list[Piece]:
    """A completion streams a delta as one chunk with its finish; a delta with neither text
    nor a finish is not sent."""
    if not delta.text and delta.finish_reason is None:
        return []
    return [(delta.text, True)]


def _message_pieces(delta: TextDelta) -> list[Piece]:
    """Chat streams the new content, then the finish in a `{}` delta of its own."""
    pieces: list[Piece] = []
    if delta.text:
        pieces.append(({"content": delta.text}, False))
    if delta.finish_reason is not None:
        pieces.append(({}, True))
    return pieces


COMPLETIONS = Endpoint(
    answer_object="text_completion",
    chunk_object="text_completion",
    id_prefix="cmpl",
    prompt_field="prompt",
    answer_field=lambda text: ("text", text),
    chunk_key="text",
    pieces=_text_pieces,
)
CHAT = Endpoint(
    answer_object="chat.completion",
    chunk_object="chat.completion.chunk",
    id_prefix="chatcmpl",
    prompt_field="messages",
    answer_field=lambda text: ("message", {"role": "assistant", "content": text}),
    chunk_key="delta",
    pieces=_message_pieces,
    opening={"role": "assistant", "content": ""},
)


#: How an answer is written whole from its choices (`Endpoint.response`, or a REST route's).
Writer = Callable[[Header, Sequence[Choice], Usage], dict[str, Any]]


def sequences_writer(key: str, *, extract: bool = False, prompt: str | None = None) -> Writer:
    """The answer of a REST route (/generate, /generate/raw, /chat): the first sequence's
    text under `key`, `num_tokens` and `finish_reason` at the top, as a client that asks for
    one sequence reads them, and `sequences` listing every sequence (the first included) with
    the same three keys. `extract`: each text is the code of its first fenced markdown block
    where it has one. `prompt`: echoed as `prompt`."""

    def write(header: Header, choices: Sequence[Choice], usage: Usage) -> dict[str, Any]:
        sequences = [
            {
                key: code_or_text(c.text) if extract else c.text,
                "num_tokens": c.completion_tokens,
                "finish_reason": finish_name(c.finish_reason),
            }
            for c in choices
        ]
        top = {**sequences[0], "model": header.model}
        if prompt is not None:
            top["prompt"] = prompt
        return {**top, "sequences": sequences}

    return write


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: `data: {json}` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()
