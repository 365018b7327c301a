"""OpenAI's wire format, the asking half: request bodies as pydantic models with every bound
declared on them, parsed into our types, and errors.

A route reads the body (`parse_body`: at most `MAX_BODY_BYTES`, `MAX_JSON_VALUES` values,
nesting as deep as Python's JSON parser goes), validates it as `CompletionBody` or `ChatBody`
(a 400 naming the field: `ApiError`), and turns it into the engine's types with `params`. The
same models make the OpenAPI document (`openapi.py`). Field names and defaults follow OpenAI's
API, with vLLM's extensions (`top_k`, `min_tokens`, `repetition_penalty`, `stop_token_ids`,
`include_stop_str_in_output`, `ignore_eos`, and a `stop_reason` per choice). The plain REST
routes' bodies (`GenerateBody`, `RestChatBody`, `ExtractCodeBody`) are here too, with the code
servers' own names and defaults, and become the same params.

Every bound is here, so that one request cannot make the server allocate without limit nor
hold the model for hours: stop strings (16, of 256 characters), stop ids (64), choices (128),
`logprobs` (0 to 5, as OpenAI's: the chosen token's only, whatever is asked), and a token
budget per request (`n` x `max_tokens`, `DEFAULT_TOKEN_BUDGET` unless the server
is started with another).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engine.types import ChatMessage, SamplingParams, StopConditions

#: OpenAI's default for /v1/completions (chat defaults to as many tokens as the context holds).
DEFAULT_COMPLETION_MAX_TOKENS = 16
#: More choices than any editor asks for; a bound so one request cannot occupy the model for long.
MAX_CHOICES = 128
#: Tokens one request may ask for, all choices together (`n` x `max_tokens`): 4 choices of a
#: 4,096-token context. A setting (`infill-lsp engine --max-request-tokens`). A chat request
#: without `max_tokens` gets what the budget and the context allow.
DEFAULT_TOKEN_BUDGET = 16_384
#: `max_tokens` and `min_tokens` past any context a model has.
MAX_TOKENS_LIMIT = 1 << 20
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 64
MAX_MESSAGES = 4096
MAX_CONTENT_PARTS = 256
#: /v1/completions' `logprobs`: OpenAI's bound (vLLM's and llama-cpp-python's servers take it).
MAX_LOGPROBS = 5
#: A larger body is refused (413) before it is read whole. A 128K-token context of code is
#: about 512 KB of text (as a list of token ids, about 900 KB): 4 MiB leaves room for JSON's
#: escapes.
MAX_BODY_BYTES = 4 << 20
#: JSON values (outside strings) a body may hold: a prompt of 128K token ids fits. Every value
#: Python's parser makes costs 30 to 250 bytes, so this bounds the parse to about 64 MB
#: whatever the body holds (4 MiB of `[[]]` alone made 140 MB).
MAX_JSON_VALUES = 1 << 18
#: seed: a signed 64-bit integer (as vLLM takes it); top_k: a C int.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
CHAT_ROLES = ("system", "user", "assistant")


class ErrorType(enum.StrEnum):
    """OpenAI's error `type` values."""

    INVALID_REQUEST = "invalid_request_error"
    AUTHENTICATION = "authentication_error"
    PERMISSION = "permission_error"
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
    if status == 403:
        return ErrorType.PERMISSION
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


# --- what a route hands on ----------------------------------------------------------------------


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
    #: Each choice's tokens and their log-probabilities are answered (`logprobs` of
    #: /v1/completions).
    logprobs: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionParams:
    """A checked /v1/completions body."""

    common: Common
    prompt: str | tuple[int, ...]
    #: None: no fill-in-the-middle (an empty suffix is the same as none).
    suffix: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatParams:
    """A checked /v1/chat/completions body."""

    common: Common
    messages: tuple[ChatMessage, ...]


# --- the models's own checks ------------------------------------------------------------------

#: Error types raised by our own checks: their message names the field already.
_OURS = "infill_invalid"


def _refuse(message: str, param: str | None = None) -> PydanticCustomError:
    return PydanticCustomError(_OURS, message, {"param": param} if param else None)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole(value: object) -> object:
    """An integer written as a float (`60.0`) is that integer, as JSON Schema's `integer`
    says; `60.5`, `"60"` and `true` are not integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _whole_list(value: object) -> object:
    return [_whole(v) for v in value] if isinstance(value, list) else value


def _check_prompt(value: object) -> object:
    """A string, a list of one string (taken as the string), or a list of token ids."""
    if value is None:
        raise _refuse("prompt is required")
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        value = _whole_list(value)
        assert isinstance(value, list)
        if len(value) == 1 and isinstance(value[0], str):
            return value[0]
        if all(_is_int(v) for v in value):
            if any(v < 0 for v in value):
                raise _refuse("token ids in prompt must not be negative")
            return value
        if all(isinstance(v, str | list) for v in value):
            raise _refuse("batched prompts are not supported: send one prompt a request")
    raise _refuse("prompt must be a string, a list of one string, or a list of token ids")


def _check_stop(value: object) -> object:
    """One string or a list of them, each non-empty, within the bounds."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _refuse("stop must be a string or a list of strings")
    if len(items) > MAX_STOP_STRINGS:
        raise _refuse(f"stop takes at most {MAX_STOP_STRINGS} strings, got {len(items)}")
    if any(not s for s in items):
        raise _refuse("stop strings must not be empty")
    if any(len(s) > MAX_STOP_CHARS for s in items):
        raise _refuse(f"stop strings must be at most {MAX_STOP_CHARS} characters long")
    return items


def _check_stop_ids(value: object) -> object:
    if value is None:
        return None
    value = _whole_list(value)
    if not isinstance(value, list) or not all(_is_int(v) and v >= 0 for v in value):
        raise _refuse("stop_token_ids must be a list of token ids (non-negative integers)")
    if len(value) > MAX_STOP_TOKEN_IDS:
        raise _refuse(f"stop_token_ids takes at most {MAX_STOP_TOKEN_IDS} ids, got {len(value)}")
    return value


def _check_messages(value: object) -> object:
    if not isinstance(value, list) or not value:
        raise _refuse("messages must be a non-empty list of {role, content} objects")
    if len(value) > MAX_MESSAGES:
        raise _refuse(f"messages takes at most {MAX_MESSAGES} messages, got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            where = f"messages[{i}]"
            raise _refuse(f"{where} must be an object with role and content", where)
    return value


def _check_content(value: object, info: ValidationInfo) -> object:
    """A string, or a list of text parts (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) <= MAX_CONTENT_PARTS:
        texts = []
        for j, part in enumerate(value):
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise PydanticCustomError(
                    _OURS,
                    'content[{part}] must be {"type": "text", "text": ...}: '
                    "only text parts are supported",
                    {"part": j},
                )
            texts.append(part["text"])
        return "".join(texts)
    raise _refuse(f"content must be a string or a list of at most {MAX_CONTENT_PARTS} text parts")


#: Fields taken as JSON numbers, finite: NaN and infinities are refused.
Number = Annotated[float, Field(allow_inf_nan=False)]
#: On a field taken as a JSON integer: `2.0` too. (After the bounds, so that the document
#: says them as JSON Schema does.)
WHOLE = BeforeValidator(_whole)
MaxTokens = Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT), WHOLE]

_M = TypeVar("_M", bound=BaseModel)

#: One stop string or a list of them (what `stop` takes).
StopStrings = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None,
    BeforeValidator(_check_stop),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS},
                {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS},
                    "maxItems": MAX_STOP_STRINGS,
                },
                {"type": "null"},
            ]
        }
    ),
]
#: The user's stop token ids.
StopTokenIds = Annotated[
    list[Annotated[int, Field(ge=0), WHOLE]] | None,
    Field(max_length=MAX_STOP_TOKEN_IDS, description="inside the model's vocabulary"),
    BeforeValidator(_check_stop_ids),
]


class StreamOptions(BaseModel):
    """OpenAI's `stream_options`."""

    model_config = ConfigDict(strict=True, extra="ignore")

    include_usage: bool | None = Field(
        None, description="a last chunk without choices carries the usage"
    )


class TextPart(BaseModel):
    """A part of a message's content: only text."""

    type: Literal["text"]
    text: str


class Message(BaseModel):
    """A chat message."""

    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: Annotated[str | list[TextPart], BeforeValidator(_check_content)]


def chat_messages(messages: list[Message]) -> tuple[ChatMessage, ...]:
    """Checked messages as the engine takes them (text parts are joined by the check)."""
    return tuple(
        ChatMessage(role=m.role, content=m.content if isinstance(m.content, str) else "")
        for m in messages
    )


class _Body(BaseModel):
    """What completions and chat share. Unknown fields are ignored, as OpenAI's clients send
    some (`user`); fields whose other values we cannot honour are refused rather than
    silently ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str | None = Field(None, description="a model id or role; default: the route's role")
    max_tokens: MaxTokens | None = None
    temperature: Annotated[Number, Field(ge=0)] | None = Field(None, description="default 1.0")
    top_p: Annotated[Number, Field(gt=0, le=1)] | None = Field(None, description="default 1.0")
    top_k: Annotated[int, Field(ge=-1, le=INT32_MAX), WHOLE] | None = Field(
        None, description="0 or -1: off"
    )
    min_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS_LIMIT), WHOLE] | None = None
    repetition_penalty: Annotated[Number, Field(gt=0)] | None = None
    repeat_penalty: Annotated[Number, Field(gt=0)] | None = Field(
        None, description="llama.cpp's name, used when repetition_penalty is unset"
    )
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES), WHOLE] | None = Field(
        None, description="default 1"
    )
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX), WHOLE] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: StopStrings = None
    stop_token_ids: StopTokenIds = None
    include_stop_str_in_output: bool | None = None
    ignore_eos: bool | None = None
    cache_key: str | None = Field(
        None, description="the document a prompt comes from: its KV cache is kept for it"
    )
    echo: Literal[False] | None = Field(None, description="not supported")
    top_logprobs: None = Field(None, description="not supported")
    logit_bias: dict[str, Any] | None = Field(None, description="not supported (only {})")
    presence_penalty: Number | None = Field(None, description="only 0")
    frequency_penalty: Number | None = Field(None, description="only 0")

    @field_validator("echo", "top_logprobs", mode="before")
    @classmethod
    def _unsupported(cls, value: object, info: ValidationInfo) -> object:
        if value is not None and value is not False:  # 0 == False, and is refused
            raise _refuse(f"{info.field_name} is not supported")
        return value

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _no_bias(cls, value: object) -> object:
        if value not in (None, {}):
            raise _refuse("logit_bias is not supported")
        return value

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _zero(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value not in (None, 0):
            name = info.field_name
            raise _refuse(f"{name} is not supported (only 0); use repetition_penalty")
        return value

    @model_validator(mode="after")
    def _within_budget(self, info: ValidationInfo) -> _Body:
        """`n` x `max_tokens` within the server's budget (a setting: the validation context)."""
        budget = _budget(info)
        n = self.n or 1
        fields = self._max_tokens_fields()
        field = next((name for name in fields if getattr(self, name) is not None), None)
        if field is not None and n * getattr(self, field) > budget:
            raise _refuse(
                f"n x {field} must be at most {budget} tokens (this server's budget for one "
                f"request), got {n} x {getattr(self, field)}",
                field,
            )
        return self

    def _max_tokens_fields(self) -> tuple[str, ...]:
        return ("max_tokens",)

    def _answers_logprobs(self) -> bool:
        return False

    def common(self, *, default_max_tokens: int, budget: int) -> Common:
        """Our types: the sampling parameters (defaults filled in), the user's stops."""
        n = self.n or 1
        max_tokens = next(
            (getattr(self, f) for f in self._max_tokens_fields() if getattr(self, f) is not None),
            None,
        )
        if max_tokens is None:
            # What an unset max_tokens means, within the budget (the worker also caps it at
            # the room the context has left).
            max_tokens = max(1, min(default_max_tokens, budget // n))
        penalty = self.repetition_penalty if self.repetition_penalty is not None else None
        if penalty is None:
            penalty = self.repeat_penalty
        sampling = SamplingParams(
            max_tokens=max_tokens,
            min_tokens=self.min_tokens or 0,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=max(self.top_k or 0, 0),
            repetition_penalty=1.0 if penalty is None else penalty,
            seed=self.seed,
            n=n,
        )
        stops = StopConditions(
            stop=tuple(self.stop or ()),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            include_stop_str_in_output=bool(self.include_stop_str_in_output),
            ignore_eos=bool(self.ignore_eos),
        )
        options = self.stream_options
        return Common(
            model=self.model,
            sampling=sampling,
            stops=stops,
            stream=bool(self.stream),
            include_usage=bool(options and options.include_usage),
            cache_key=self.cache_key,
            logprobs=self._answers_logprobs(),
        )


def _budget(info: ValidationInfo) -> int:
    context = info.context if isinstance(info.context, dict) else {}
    budget = context.get("budget", DEFAULT_TOKEN_BUDGET)
    return int(budget)


class CompletionBody(_Body):
    """A /v1/completions body."""

    prompt: Annotated[
        str | list[Annotated[int, Field(ge=0), WHOLE]],
        BeforeValidator(_check_prompt),
        Field(description="a string, a list of one string, or a list of token ids"),
        # What the check takes, a list of one string included (taken as the string).
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1},
                    {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                ],
                "description": "a string, a list of one string, or a list of token ids",
            }
        ),
    ]
    suffix: str | None = Field(
        None, description="the text after the cursor: a fill-in-the-middle prompt"
    )
    best_of: Annotated[int, Field(ge=1, le=MAX_CHOICES), WHOLE] | None = Field(
        None, description="only equal to n"
    )
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS), WHOLE] | None = Field(
        None,
        description="any value: each choice's tokens with their log-probabilities "
        "(top_logprobs is null: the alternatives are not computed)",
    )

    @model_validator(mode="after")
    def _best_of(self) -> CompletionBody:
        # A completions field (chat has none): refused rather than ignored.
        if self.best_of is not None and self.best_of != (self.n or 1):
            raise _refuse("best_of is not supported (only equal to n)", "best_of")
        return self

    def _answers_logprobs(self) -> bool:
        return self.logprobs is not None

    def params(self, *, budget: int = DEFAULT_TOKEN_BUDGET) -> CompletionParams:
        common = self.common(default_max_tokens=DEFAULT_COMPLETION_MAX_TOKENS, budget=budget)
        prompt = self.prompt if isinstance(self.prompt, str) else tuple(self.prompt)
        return CompletionParams(common=common, prompt=prompt, suffix=self.suffix or None)


class ChatBody(_Body):
    """A /v1/chat/completions body."""

    messages: Annotated[
        list[Message],
        BeforeValidator(_check_messages),
        Field(min_length=1, max_length=MAX_MESSAGES),
    ]
    max_completion_tokens: MaxTokens | None = Field(
        None, description="OpenAI's newer name, used when max_tokens is unset"
    )
    logprobs: Literal[False] | None = Field(None, description="not supported")

    @field_validator("logprobs", mode="before")
    @classmethod
    def _no_logprobs(cls, value: object) -> object:
        if value is not None and value is not False:
            raise _refuse("logprobs is not supported on chat; /v1/completions answers them")
        return value

    def _max_tokens_fields(self) -> tuple[str, ...]:
        return ("max_tokens", "max_completion_tokens")

    def params(self, *, context_size: int, budget: int = DEFAULT_TOKEN_BUDGET) -> ChatParams:
        """`context_size`: what an unset max_tokens means (within the budget)."""
        common = self.common(default_max_tokens=context_size, budget=budget)
        return ChatParams(common=common, messages=chat_messages(self.messages))


# --- the plain REST routes: /generate, /generate/raw, /chat, /extract-code -------------------

#: The REST routes' bounds and defaults: the code servers' own (a short answer, a little
#: randomness, a mild repetition penalty), not OpenAI's.
REST_MAX_TOKENS = 4096
REST_DEFAULT_MAX_TOKENS = 512
REST_DEFAULT_TEMPERATURE = 0.2
REST_MAX_TEMPERATURE = 2.0
REST_DEFAULT_TOP_P = 0.95
REST_DEFAULT_REPETITION_PENALTY = 1.1
REST_MAX_REPETITION_PENALTY = 2.0
REST_MAX_SEQUENCES = 10
LAST_MESSAGE_NOT_USER = "Last message must be from user"


class _RestBody(BaseModel):
    """The sampling fields /generate, /generate/raw and /chat share. Unknown fields are
    ignored, as on the OpenAI routes."""

    model_config = ConfigDict(strict=True, extra="ignore")

    max_tokens: Annotated[int, Field(ge=1, le=REST_MAX_TOKENS), WHOLE] = Field(
        REST_DEFAULT_MAX_TOKENS, description="tokens each sequence may have"
    )
    temperature: Annotated[Number, Field(ge=0, le=REST_MAX_TEMPERATURE)] = Field(
        REST_DEFAULT_TEMPERATURE, description="0: greedy"
    )
    top_p: Annotated[Number, Field(gt=0, le=1)] = REST_DEFAULT_TOP_P
    do_sample: bool = Field(True, description="false: greedy, whatever the temperature")
    repetition_penalty: Annotated[Number, Field(ge=1, le=REST_MAX_REPETITION_PENALTY)] = Field(
        REST_DEFAULT_REPETITION_PENALTY, description="1.0: none"
    )
    num_return_sequences: Annotated[int, Field(ge=1, le=REST_MAX_SEQUENCES), WHOLE] = Field(
        1, description="sequences generated from the one prompt"
    )

    @model_validator(mode="after")
    def _within_budget(self, info: ValidationInfo) -> _RestBody:
        """`num_return_sequences` x `max_tokens` within the server's budget."""
        budget = _budget(info)
        n, tokens = self.num_return_sequences, self.max_tokens
        if n * tokens > budget:
            raise _refuse(
                f"num_return_sequences x max_tokens must be at most {budget} tokens (this "
                f"server's budget for one request), got {n} x {tokens}",
                "max_tokens",
            )
        return self

    def common(self) -> Common:
        """Our types: greedy where `do_sample` is false, no stops of the user's, not streamed."""
        sampling = SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature if self.do_sample else 0.0,
            top_p=self.top_p,
            repetition_penalty=self.repetition_penalty,
            n=self.num_return_sequences,
        )
        return Common(
            model=None,
            sampling=sampling,
            stops=StopConditions(),
            stream=False,
            include_usage=False,
            cache_key=None,
        )


class GenerateBody(_RestBody):
    """A /generate or /generate/raw body: the completion model continues `prompt`."""

    prompt: str = Field(description="plain text the model continues (no fill-in-the-middle)")

    def params(self) -> CompletionParams:
        return CompletionParams(common=self.common(), prompt=self.prompt, suffix=None)


class RestChatBody(_RestBody):
    """A /chat body: the chat model answers the last (the user's) message."""

    messages: Annotated[
        list[Message],
        BeforeValidator(_check_messages),
        Field(min_length=1, max_length=MAX_MESSAGES, description="the last is the user's"),
    ]

    def params(self) -> ChatParams:
        """A 400 naming `messages` when the last message is not the user's."""
        if self.messages[-1].role != "user":
            raise invalid("messages", LAST_MESSAGE_NOT_USER)
        return ChatParams(common=self.common(), messages=chat_messages(self.messages))


class ExtractCodeBody(BaseModel):
    """An /extract-code body: markdown text, no model."""

    model_config = ConfigDict(strict=True, extra="ignore")

    prompt: str = Field(description="text that may hold fenced markdown blocks")


# --- our extensions: scoring and branching ------------------------------------------------------

#: Continuations one scoring may weigh: more than any ranking asks (lsp_server/rerank.py weighs
#: at most a few dozen candidate lines).
MAX_CONTINUATIONS = 256
#: Most likely next tokens a scoring may report.
MAX_TOP = 256
#: Branches one request may write (one per first token).
MAX_BRANCHES = 64


def _check_continuations(value: object) -> object:
    """A list of token-id lists, each with at least one id."""
    if not isinstance(value, list) or not all(isinstance(c, list) for c in value):
        raise _refuse("continuations must be a list of token id lists")
    if len(value) > MAX_CONTINUATIONS:
        raise _refuse(f"continuations takes at most {MAX_CONTINUATIONS} lists, got {len(value)}")
    out = []
    for i, item in enumerate(value):
        ids = _whole_list(item)
        assert isinstance(ids, list)
        if not ids or not all(_is_int(t) and t >= 0 for t in ids):
            where = f"continuations[{i}]"
            raise _refuse(f"{where} must be a non-empty list of token ids", where)
        out.append(ids)
    return out


TokenIds = list[Annotated[int, Field(ge=0), WHOLE]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreParams:
    """A checked /v1/infill/score body (the prompt is tokenized once the model is known)."""

    model: str | None
    prompt: str | tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    top: int
    cache_key: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchParams:
    """A checked /v1/infill/branch body."""

    model: str | None
    prompt: str | tuple[int, ...]
    first_tokens: tuple[int, ...]
    sampling: SamplingParams
    stops: StopConditions
    cache_key: str | None


class _ExtensionBody(BaseModel):
    """What our scoring and branching routes share: the model, the prompt (text, tokenized
    with the model's BOS rule and special tokens as /v1/completions does, or token ids), and
    the document whose KV state is kept."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str | None = Field(None, description="a model id or role; default: completion")
    prompt: Annotated[
        str | TokenIds,
        BeforeValidator(_check_prompt),
        Field(description="a string, a list of one string, or a list of token ids"),
    ]
    cache_key: str | None = Field(
        None, description="the document a prompt comes from: its KV cache is kept for it"
    )

    def _prompt(self) -> str | tuple[int, ...]:
        return self.prompt if isinstance(self.prompt, str) else tuple(self.prompt)


class ScoreBody(_ExtensionBody):
    """A /v1/infill/score body: how likely the model finds each continuation after the
    prompt, and its most likely next tokens. Nothing is generated."""

    continuations: Annotated[
        list[TokenIds],
        BeforeValidator(_check_continuations),
        Field(max_length=MAX_CONTINUATIONS, description="token id lists, each non-empty"),
    ] = Field(default_factory=list)
    top: Annotated[int, Field(ge=0, le=MAX_TOP), WHOLE] = Field(
        0, description="how many of the most likely next tokens to report"
    )

    @model_validator(mode="after")
    def _within_budget(self, info: ValidationInfo) -> ScoreBody:
        budget = _budget(info)
        total = sum(len(c) for c in self.continuations)
        if total > budget:
            raise _refuse(
                f"continuations must hold at most {budget} tokens in all (this server's budget "
                f"for one request), got {total}",
                "continuations",
            )
        return self

    def params(self) -> ScoreParams:
        return ScoreParams(
            model=self.model,
            prompt=self._prompt(),
            continuations=tuple(tuple(c) for c in self.continuations),
            top=self.top,
            cache_key=self.cache_key,
        )


class BranchBody(_ExtensionBody):
    """A /v1/infill/branch body: the greedy answer after the prompt and each first token."""

    first_tokens: Annotated[
        TokenIds,
        BeforeValidator(_whole_list),
        Field(min_length=1, max_length=MAX_BRANCHES, description="one branch each"),
    ]
    max_tokens: MaxTokens = Field(
        DEFAULT_COMPLETION_MAX_TOKENS, description="each branch's token limit"
    )
    stop: StopStrings = None
    stop_token_ids: StopTokenIds = None
    include_stop_str_in_output: bool | None = None

    @model_validator(mode="after")
    def _within_budget(self, info: ValidationInfo) -> BranchBody:
        budget = _budget(info)
        n = len(self.first_tokens)
        if n * self.max_tokens > budget:
            raise _refuse(
                f"first_tokens x max_tokens must be at most {budget} tokens (this server's "
                f"budget for one request), got {n} x {self.max_tokens}",
                "max_tokens",
            )
        return self

    def params(self) -> BranchParams:
        return BranchParams(
            model=self.model,
            prompt=self._prompt(),
            first_tokens=tuple(self.first_tokens),
            sampling=SamplingParams(max_tokens=self.max_tokens, temperature=0.0),
            stops=StopConditions(
                stop=tuple(self.stop or ()),
                stop_token_ids=tuple(self.stop_token_ids or ()),
                include_stop_str_in_output=bool(self.include_stop_str_in_output),
            ),
            cache_key=self.cache_key,
        )


# --- parsing ------------------------------------------------------------------------------------

#: A JSON string, matched without backtracking (possessive), however long.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)


def count_values(raw: bytes) -> int:
    """How many JSON values `raw` holds at most, strings aside: one more than its commas and
    opening brackets outside strings (an over-estimate for bad JSON, which fails anyway)."""
    bare = _JSON_STRING.sub(b'""', raw)
    return 1 + bare.count(b",") + bare.count(b"[") + bare.count(b"{")


def parse_body(raw: bytes, model: type[_M], *, budget: int = DEFAULT_TOKEN_BUDGET) -> _M:
    """The body as `model`, or a 400 naming the field."""
    if count_values(raw) > MAX_JSON_VALUES:
        raise invalid("body", f"the request body holds more than {MAX_JSON_VALUES} JSON values")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise invalid("body", f"the request body is not valid JSON: {e}", "invalid_json") from e
    except RecursionError as e:
        raise invalid("body", "the request body nests too deeply", "invalid_json") from e
    if not isinstance(body, dict):
        raise invalid("body", "the request body must be a JSON object")
    try:
        return model.model_validate(body, context={"budget": budget})
    except ValidationError as e:
        raise error_of(e) from None
    except RecursionError as e:  # a field we validate nested past Python's limit
        raise invalid("body", "the request body nests too deeply", "invalid_json") from e


def error_of(exc: ValidationError) -> ApiError:
    """The 400 of the first thing wrong: which field (`messages[0].content`) and why."""
    error = exc.errors(include_url=False)[0]
    context = error.get("ctx") or {}
    at = param_of(error["loc"])
    param = context.get("param") or at
    if error["type"] == "missing":
        return invalid(param, f"{param} is required")
    message = error["msg"]
    if error["type"] != _OURS:
        return invalid(param, f"{param}: {message[:1].lower()}{message[1:]}{_got(error['input'])}")
    # Our own messages name their field (`content must be ...`): named in full here.
    if "part" in context:
        param = f"{param}[{context['part']}]"
    name = next((str(p) for p in reversed(error["loc"]) if p in _FIELD_NAMES), None)
    if name is not None and message.startswith(name) and name != at:
        message = at + message[len(name) :]
    elif (name or param) not in message:
        message = f"{param}: {message}"
    return invalid(param, message)


def param_of(loc: tuple[int | str, ...]) -> str:
    """`('messages', 0, 'content')` as `messages[0].content`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _FIELD_NAMES:
            out += f".{part}" if out else part
        # Anything else is a union member's tag (`str`, `list[int]`), not a field.
    return out or "body"


def _got(value: object) -> str:
    """`, got VALUE` for a scalar (cut short); a list or object is only named."""
    if isinstance(value, list):
        return ", got a list"
    if isinstance(value, dict):
        return ", got an object"
    if isinstance(value, str):
        value = value[:40] + ("..." if len(value) > 40 else "")
    elif not (value is None or isinstance(value, bool | int | float)):
        return ""
    shown = json.dumps(value)
    return f", got {shown[:40]}..." if len(shown) > 40 else f", got {shown}"


_FIELD_NAMES = frozenset(
    name
    for model in (CompletionBody, ChatBody, Message, StreamOptions, TextPart, ScoreBody, BranchBody)
    for name in model.model_fields
) | frozenset(
    name for model in (GenerateBody, RestChatBody, ExtractCodeBody) for name in model.model_fields
)
