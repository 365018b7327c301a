"""OpenAI's wire format: request bodies parsed into our types, responses and chunks built.

Plain functions, no web framework: a route parses the body with `parse_completion` or
`parse_chat` (which raise `ApiError` naming the field), runs the engine, and builds its answer
with the `*_response` / `*_chunk` functions. Field names and defaults follow OpenAI's API, with
vLLM's extensions (`top_k`, `min_tokens`, `repetition_penalty`, `stop_token_ids`,
`include_stop_str_in_output`, `ignore_eos`, and a `stop_reason` per choice).
"""

from __future__ import annotations

import enum
import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.types import ChatMessage, FinishReason, SamplingParams, StopConditions

#: OpenAI's default for /v1/completions (chat defaults to as many tokens as the context holds).
DEFAULT_COMPLETION_MAX_TOKENS = 16
#: More choices than any editor asks for; a bound so one request cannot occupy the model for long.
MAX_CHOICES = 128
CHAT_ROLES = ("system", "user", "assistant")


class ErrorType(enum.StrEnum):
    """OpenAI's error `type` values."""

    INVALID_REQUEST = "invalid_request_error"
    AUTHENTICATION = "authentication_error"
    NOT_FOUND = "not_found_error"
    UNAVAILABLE = "service_unavailable"
    SERVER = "server_error"


class ApiError(Exception):
    """An error answer: HTTP status and OpenAI's `{"error": {message, type, param, code}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: ErrorType | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _default_type(status)
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI sends with an error."""
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def _default_type(status: int) -> ErrorType:
    if status == 401:
        return ErrorType.AUTHENTICATION
    if status == 404:
        return ErrorType.NOT_FOUND
    if status == 503:
        return ErrorType.UNAVAILABLE
    if status >= 500:
        return ErrorType.SERVER
    return ErrorType.INVALID_REQUEST


def error_body(
    message: str, *, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """`{"error": {...}}` as OpenAI writes it."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid(param: str, message: str, code: str | None = None) -> ApiError:
    """A 400 naming the field."""
    return ApiError(400, message, param=param, code=code)


# --- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Common:
    """What completions and chat share: the model asked for, sampling, stops, streaming."""

    model: str | None
    sampling: SamplingParams
    #: Only the user's stops; the route adds the model's hidden ones.
    stops: StopConditions
    stream: bool
    include_usage: bool
    cache_key: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionParams:
    """A parsed /v1/completions body."""

    common: Common
    prompt: str | tuple[int, ...]
    #: None: no fill-in-the-middle (an empty suffix is the same as none).
    suffix: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatParams:
    """A parsed /v1/chat/completions body."""

    common: Common
    messages: tuple[ChatMessage, ...]


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise invalid("body", f"the request body is not valid JSON: {e}", "invalid_json") from e
    if not isinstance(body, dict):
        raise invalid("body", "the request body must be a JSON object")
    return body


def parse_completion(body: Mapping[str, Any]) -> CompletionParams:
    """A /v1/completions body, validated; ApiError (400, naming the field) when it is not."""
    if "prompt" not in body or body["prompt"] is None:
        raise invalid("prompt", "prompt is required")
    suffix = _optional(body, "suffix", str, "a string")
    common = _common(body, default_max_tokens=DEFAULT_COMPLETION_MAX_TOKENS, chat=False)
    return CompletionParams(common=common, prompt=_prompt(body["prompt"]), suffix=suffix or None)


def parse_chat(body: Mapping[str, Any], *, default_max_tokens: int) -> ChatParams:
    """A /v1/chat/completions body, validated; ApiError (400, naming the field) when it is not.
    `default_max_tokens`: what an unset max_tokens means (the worker caps it at the room left)."""
    common = _common(body, default_max_tokens=default_max_tokens, chat=True)
    return ChatParams(common=common, messages=_messages(body.get("messages")))


def _prompt(value: object) -> str | tuple[int, ...]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        if len(value) == 1 and isinstance(value[0], str):
            return value[0]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            if any(v < 0 for v in value):
                raise invalid("prompt", "token ids in prompt must not be negative")
            return tuple(value)
        if all(isinstance(v, str) for v in value):
            raise invalid("prompt", "batched prompts are not supported: send one prompt a request")
        if all(isinstance(v, list) for v in value):
            raise invalid("prompt", "batched prompts are not supported: send one prompt a request")
    raise invalid("prompt", "prompt must be a string, a list of one string, or a list of token ids")


def _messages(value: object) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise invalid("messages", "messages must be a non-empty list of {role, content} objects")
    messages = []
    for i, item in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise invalid(where, f"{where} must be an object with role and content")
        role = item.get("role")
        if role not in CHAT_ROLES:
            raise invalid(f"{where}.role", f"{where}.role must be one of {', '.join(CHAT_ROLES)}")
        messages.append(ChatMessage(role=role, content=_content(item.get("content"), where)))
    return tuple(messages)


def _content(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise invalid(
                    f"{where}.content[{j}]",
                    f'{where}.content[{j}] must be {{"type": "text", "text": ...}}: '
                    "only text parts are supported",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(f"{where}.content", f"{where}.content must be a string or a list of text parts")


def _common(body: Mapping[str, Any], *, default_max_tokens: int, chat: bool) -> Common:
    model = _optional(body, "model", str, "a string")
    _unsupported(body, chat=chat)
    max_tokens = _optional(body, "max_tokens", int, "an integer")
    if chat and max_tokens is None:
        max_tokens = _optional(body, "max_completion_tokens", int, "an integer")
    max_tokens = default_max_tokens if max_tokens is None else max_tokens
    field = "max_tokens" if "max_tokens" in body or not chat else "max_completion_tokens"
    if max_tokens < 1:
        raise invalid(field, f"{field} must be at least 1, got {max_tokens}")
    temperature = _number(body, "temperature", 1.0)
    if temperature < 0:
        raise invalid("temperature", f"temperature must not be negative, got {temperature}")
    top_p = _number(body, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise invalid("top_p", f"top_p must be in (0, 1], got {top_p}")
    top_k = _integer(body, "top_k", 0)
    if top_k < -1:
        raise invalid("top_k", f"top_k must be 0 or -1 (off) or positive, got {top_k}")
    min_tokens = _integer(body, "min_tokens", 0)
    if min_tokens < 0:
        raise invalid("min_tokens", f"min_tokens must not be negative, got {min_tokens}")
    penalty_field = "repeat_penalty" if "repetition_penalty" not in body else "repetition_penalty"
    penalty = _number(body, penalty_field, 1.0)
    if penalty <= 0:
        raise invalid(penalty_field, f"{penalty_field} must be positive, got {penalty}")
    n = _integer(body, "n", 1)
    if not 1 <= n <= MAX_CHOICES:
        raise invalid("n", f"n must be between 1 and {MAX_CHOICES}, got {n}")
    seed = _optional(body, "seed", int, "an integer")
    stream = bool(_optional(body, "stream", bool, "a boolean"))
    options = _optional(body, "stream_options", dict, "an object")
    include_usage = False
    if options is not None:
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise invalid("stream_options.include_usage", "include_usage must be a boolean")
        include_usage = bool(usage)
    sampling = SamplingParams(
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=max(top_k, 0),
        repetition_penalty=penalty,
        seed=seed,
        n=n,
    )
    stops = StopConditions(
        stop=_stop_strings(body.get("stop")),
        stop_token_ids=_token_ids(body.get("stop_token_ids"), "stop_token_ids"),
        include_stop_str_in_output=bool(
            _optional(body, "include_stop_str_in_output", bool, "a boolean")
        ),
        ignore_eos=bool(_optional(body, "ignore_eos", bool, "a boolean")),
    )
    return Common(
        model=model,
        sampling=sampling,
        stops=stops,
        stream=stream,
        include_usage=include_usage,
        cache_key=_optional(body, "cache_key", str, "a string"),
    )


def _unsupported(body: Mapping[str, Any], *, chat: bool) -> None:
    """Fields whose other values we cannot honour: refused rather than silently ignored."""
    if body.get("echo") not in (None, False):
        raise invalid("echo", "echo is not supported")
    if body.get("logprobs") not in (None, False):
        raise invalid("logprobs", "logprobs is not supported")
    if body.get("top_logprobs") is not None:
        raise invalid("top_logprobs", "top_logprobs is not supported")
    if body.get("logit_bias") not in (None, {}):
        raise invalid("logit_bias", "logit_bias is not supported")
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value is not None and (not _is_number(value) or value != 0):
            raise invalid(name, f"{name} is not supported (only 0); use repetition_penalty")
    best_of = body.get("best_of")
    if not chat and best_of is not None and best_of != body.get("n", 1):
        raise invalid("best_of", "best_of is not supported (only equal to n)")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not _is_number(value) or not math.isfinite(value):
        raise invalid(name, f"{name} must be a number, got {json.dumps(value)}")
    return float(value)


def _integer(body: Mapping[str, Any], name: str, default: int) -> int:
    value = _optional(body, name, int, "an integer")
    return default if value is None else int(value)


def _optional(body: Mapping[str, Any], name: str, kind: type, what: str) -> Any:
    """body[name] if it is of `kind` (bool is no int), None if absent or null; else a 400."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise invalid(name, f"{name} must be {what}, got {json.dumps(value)}")
    return value


def _stop_strings(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise invalid("stop", "stop must be a string or a list of strings")
    if any(not s for s in items):
        raise invalid("stop", "stop strings must not be empty")
    return tuple(items)


def _token_ids(value: object, name: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise invalid(name, f"{name} must be a list of token ids (non-negative integers)")
    return tuple(value)


# --- responses --------------------------------------------------------------------------------


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


def new_header(*, chat: bool, model: str) -> Header:
    """A fresh response id (`cmpl-...` or `chatcmpl-...`) and the creation time."""
    prefix = "chatcmpl" if chat else "cmpl"
    return Header(id=f"{prefix}-{uuid.uuid4().hex}", created=int(time.time()), model=model)


def finish_name(reason: FinishReason | None) -> str | None:
    """OpenAI's finish_reason: "stop" or "length" (a choice cut short by us reads "stop")."""
    if reason is None:
        return None
    return "length" if reason is FinishReason.LENGTH else "stop"


def _envelope(header: Header, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": header.id,
        "object": kind,
        "created": header.created,
        "model": header.model,
        "choices": choices,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One choice as the response reports it."""

    index: int
    text: str
    finish_reason: FinishReason | None
    stop_reason: str | int | None


def completion_response(header: Header, choices: Sequence[Choice], usage: Usage) -> dict[str, Any]:
    """A non-streamed `text_completion`."""
    body = _envelope(
        header,
        "text_completion",
        [
            {
                "index": c.index,
                "text": c.text,
                "logprobs": None,
                "finish_reason": finish_name(c.finish_reason),
                "stop_reason": c.stop_reason,
            }
            for c in choices
        ],
    )
    body["usage"] = usage.as_json()
    return body


def chat_response(header: Header, choices: Sequence[Choice], usage: Usage) -> dict[str, Any]:
    """A non-streamed `chat.completion`."""
    body = _envelope(
        header,
        "chat.completion",
        [
            {
                "index": c.index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": None,
                "finish_reason": finish_name(c.finish_reason),
                "stop_reason": c.stop_reason,
            }
            for c in choices
        ],
    )
    body["usage"] = usage.as_json()
    return body


def completion_chunk(
    header: Header,
    index: int,
    text: str,
    finish_reason: FinishReason | None = None,
    stop_reason: str | int | None = None,
) -> dict[str, Any]:
    """One streamed `text_completion` chunk: new text, and the finish on a choice's last one."""
    choice = _chunk_choice(index, "text", text, finish_reason, stop_reason)
    return _envelope(header, "text_completion", [choice])


def chat_chunk(
    header: Header,
    index: int,
    delta: dict[str, Any],
    finish_reason: FinishReason | None = None,
    stop_reason: str | int | None = None,
) -> dict[str, Any]:
    """One streamed `chat.completion.chunk`: a role, new content, or (`{}`) the finish."""
    choice = _chunk_choice(index, "delta", delta, finish_reason, stop_reason)
    return _envelope(header, "chat.completion.chunk", [choice])


def _chunk_choice(
    index: int,
    key: str,
    value: object,
    finish_reason: FinishReason | None,
    stop_reason: str | int | None,
) -> dict[str, Any]:
    """A streamed choice: its `key` ("text" or "delta"), and `stop_reason` on its last one."""
    choice: dict[str, Any] = {
        "index": index,
        key: value,
        "logprobs": None,
        "finish_reason": finish_name(finish_reason),
    }
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    return choice


def usage_chunk(header: Header, *, chat: bool, usage: Usage) -> dict[str, Any]:
    """The extra last chunk of `stream_options.include_usage`: no choices, the usage."""
    body = _envelope(header, "chat.completion.chunk" if chat else "text_completion", [])
    body["usage"] = usage.as_json()
    return body


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: `data: {json}` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()
