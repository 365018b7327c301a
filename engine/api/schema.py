"""OpenAI's wire format, the asking half: request bodies parsed into our types, and errors.

Plain functions, no web framework: a route parses the body with `parse_completion` or
`parse_chat` (which raise `ApiError` naming the field), runs the engine, and builds its answer
with `responses`. Field names and defaults follow OpenAI's API, with vLLM's extensions
(`top_k`, `min_tokens`, `repetition_penalty`, `stop_token_ids`, `include_stop_str_in_output`,
`ignore_eos`, and a `stop_reason` per choice).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.types import ChatMessage, SamplingParams, StopConditions

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
    common = _common(
        body, max_tokens_fields=("max_tokens",), default_max_tokens=DEFAULT_COMPLETION_MAX_TOKENS
    )
    # A completions field (chat has none): refused rather than ignored, as `_unsupported` does.
    best_of = body.get("best_of")
    if best_of is not None and best_of != body.get("n", 1):
        raise invalid("best_of", "best_of is not supported (only equal to n)")
    return CompletionParams(common=common, prompt=_prompt(body["prompt"]), suffix=suffix or None)


def parse_chat(body: Mapping[str, Any], *, default_max_tokens: int) -> ChatParams:
    """A /v1/chat/completions body, validated; ApiError (400, naming the field) when it is not.
    `default_max_tokens`: what an unset max_tokens means (the worker caps it at the room left)."""
    common = _common(
        body,
        # OpenAI's newer name, taken when max_tokens is unset.
        max_tokens_fields=("max_tokens", "max_completion_tokens"),
        default_max_tokens=default_max_tokens,
    )
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


def _common(
    body: Mapping[str, Any], *, max_tokens_fields: Sequence[str], default_max_tokens: int
) -> Common:
    model = _optional(body, "model", str, "a string")
    _unsupported(body)
    max_tokens = _max_tokens(body, max_tokens_fields, default_max_tokens)
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


def _max_tokens(body: Mapping[str, Any], fields: Sequence[str], default: int) -> int:
    """The first of `fields` the body sets, else `default`; at least 1. An error names the
    first field the body has, else the last one."""
    value = None
    for name in fields:
        value = _optional(body, name, int, "an integer")
        if value is not None:
            break
    value = default if value is None else value
    field = next((name for name in fields if name in body), fields[-1])
    if value < 1:
        raise invalid(field, f"{field} must be at least 1, got {value}")
    return int(value)


def _unsupported(body: Mapping[str, Any]) -> None:
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
