"""The OpenAPI document the engine server serves at `/openapi.json`: the request bodies are
`schema`'s models, the answers are the models below (what `responses` writes, checked against
real answers by the tests), built once.

The document is OpenAPI 3.1, whose schemas are JSON Schema 2020-12: pydantic's own output.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from engine.api.clients import STATS_CLIENT_PARAM
from engine.api.infill import BRANCH_PATH, SCORE_PATH
from engine.api.schema import (
    MAX_BODY_BYTES,
    BranchBody,
    ChatBody,
    CompletionBody,
    ExtractCodeBody,
    GenerateBody,
    RestChatBody,
    ScoreBody,
)
from engine.types import CLIENT_HEADER, CLIENT_NAME

VERSION = "1"


class _Answer(BaseModel):
    # Our answers may carry more than documented (vLLM's fields); clients ignore the rest.
    model_config = ConfigDict(extra="allow")


class ErrorDetail(_Answer):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(_Answer):
    """OpenAI's error body."""

    error: ErrorDetail


class Usage(_Answer):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


FinishName = Literal["stop", "length"] | None


class CompletionLogprobs(_Answer):
    """A choice's tokens (with `logprobs`): each with the text the choice gained with it, so
    that they join to the choice's text (a withheld start of a stop string comes with the token
    that releases it), its log-probability (null for text without a token of its own), and
    where its text starts in the choice's text. The alternatives are not computed."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: None
    text_offset: list[int]


class CompletionChoice(_Answer):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = Field(
        description="with logprobs in the request (streamed: each chunk's tokens)"
    )
    finish_reason: FinishName
    stop_reason: str | int | None = Field(
        description="the user's stop string or id that ended the choice (vLLM's field)"
    )


class CompletionResponse(_Answer):
    """A whole /v1/completions answer (streamed: `data:` events of chunks of this shape)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(_Answer):
    role: Literal["assistant"]
    content: str


class ChatChoice(_Answer):
    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: FinishName
    stop_reason: str | int | None


class ChatResponse(_Answer):
    """A whole /v1/chat/completions answer (streamed: `chat.completion.chunk` events)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ModelEntry(_Answer):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    roles: list[str]
    context_size: int | None
    max_model_len: int | None
    fim_family: str | None
    device: str | None = Field(
        None, description='where the model computes ("cpu", "cuda:0", ...); null until loaded'
    )
    capabilities: list[Literal["score", "branch", "token_ids"]] = Field(
        description="our extensions the model offers: /v1/infill/score, /v1/infill/branch, "
        "prompts as token ids"
    )
    model_path: str | None = Field(None, description="the model file (to a trusted caller)")


class ModelList(_Answer):
    object: Literal["list"]
    data: list[ModelEntry]


class ContinuationScore(_Answer):
    logprobs: list[float] = Field(description="each token's log-probability (natural log)")


class TopToken(_Answer):
    token_id: int
    logprob: float


class PromptUsage(_Answer):
    prompt_tokens: int


class ScoreResponse(_Answer):
    """A /v1/infill/score answer (our extension)."""

    id: str
    object: Literal["infill.score"]
    model: str
    continuations: list[ContinuationScore]
    top: list[TopToken] = Field(description="the most likely next tokens, most likely first")
    usage: PromptUsage


class Branch(_Answer):
    index: int
    text: str = Field(description="the text after the first token (its own text not included)")
    finish_reason: Literal["stop", "length"]


class BranchResponse(_Answer):
    """A /v1/infill/branch answer (our extension)."""

    id: str
    object: Literal["infill.branch"]
    model: str
    branches: list[Branch]


class Health(_Answer):
    """Without the key (where one is needed) only `status` and `model_loaded`."""

    status: Literal["loading", "ready", "error"]
    model_loaded: bool
    backend: str | None = None
    device: str | None = None
    models: list[dict[str, Any]] | None = None


# --- the plain REST routes' answers -----------------------------------------------------------


class GeneratedSequence(_Answer):
    generated_text: str
    num_tokens: int = Field(description="tokens the sequence generated")
    finish_reason: FinishName


class GenerateResponse(GeneratedSequence):
    """A /generate or /generate/raw answer: the first sequence's fields at the top,
    every sequence (the first included) in `sequences`."""

    prompt: str
    model: str
    sequences: list[GeneratedSequence]


class ChatSequence(_Answer):
    message: str = Field(description="the assistant's text")
    num_tokens: int = Field(description="tokens the sequence generated")
    finish_reason: FinishName


class RestChatResponse(ChatSequence):
    """A /chat answer: the first sequence's fields at the top, every sequence (the first
    included) in `sequences`."""

    model: str
    sequences: list[ChatSequence]


class ExtractCodeResponse(_Answer):
    code: str = Field(description="the first fenced block's code, or the text when none")


_REST_MODELS: list[type[BaseModel]] = [
    GenerateBody,
    RestChatBody,
    ExtractCodeBody,
    GenerateResponse,
    RestChatResponse,
    ExtractCodeResponse,
]


def _rest(body: str, answer: str, summary: str, *errors: int) -> dict[str, Any]:
    """A plain REST route: a JSON body, a JSON answer (never streamed)."""
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {"200": _json(answer, "the answer"), **_errors(*errors)},
        }
    }


def _rest_paths() -> dict[str, Any]:
    generation = (400, 401, 404, 413, 415, 500, 503)
    return {
        "/generate": _rest(
            "GenerateBody",
            "GenerateResponse",
            "the prompt continued; the code of a fenced block where the model wrote one",
            *generation,
        ),
        "/generate/raw": _rest(
            "GenerateBody", "GenerateResponse", "the prompt continued, untouched", *generation
        ),
        "/chat": _rest("RestChatBody", "RestChatResponse", "the assistant's answer", *generation),
        "/extract-code": _rest(
            "ExtractCodeBody",
            "ExtractCodeResponse",
            "the code of the first fenced markdown block (no model)",
            400,
            401,
            413,
            415,
        ),
    }


_MODELS: list[type[BaseModel]] = [
    CompletionBody,
    ChatBody,
    CompletionResponse,
    ChatResponse,
    ScoreBody,
    ScoreResponse,
    BranchBody,
    BranchResponse,
    ModelList,
    Health,
    ErrorResponse,
    *_REST_MODELS,
]


def _errors(*statuses: int) -> dict[str, Any]:
    return {
        str(status): {
            "description": description,
            "content": {"application/json": {"schema": _ref("ErrorResponse")}},
        }
        for status, description in (
            (400, "a bad request: the field it names"),
            (401, "no valid key (when the server has one)"),
            (403, "a route that needs a key, on a server without one"),
            (404, "no such model or route"),
            (413, f"a body over {MAX_BODY_BYTES} bytes"),
            (415, "a body that is not application/json"),
            (500, "the model failed"),
            (503, "the model is loading, or too many requests wait: retry after Retry-After"),
        )
        if status in statuses
    }


def _client_parameter(where: Literal["header", "query"], name: str) -> dict[str, Any]:
    """A client's name as a parameter (engine/api/clients.py): a header or /stats's query."""
    return {
        "name": name,
        "in": where,
        "required": False,
        "description": "the client (an editor window's language server) that asks"
        if where == "header"
        else "only this client's jobs",
        "schema": {"type": "string", "pattern": f"^{CLIENT_NAME.pattern}$"},
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _extension(body: str, answer: str, summary: str) -> dict[str, Any]:
    """One of our routes beyond OpenAI's: a JSON body, a JSON answer, the generation
    routes' errors."""
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {
                "200": _json(answer, "the answer"),
                **_errors(400, 401, 404, 413, 415, 500, 503),
            },
        }
    }


def _generation(body: str, answer: str, summary: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "parameters": [_client_parameter("header", CLIENT_HEADER)],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {
                "200": {
                    "description": "the answer, or with stream: true a text/event-stream",
                    "content": {
                        "application/json": {"schema": _ref(answer)},
                        # One server-sent event each (as OpenAPI 3.2 reads it): `data:`
                        # holds a chunk as JSON, an error object, or `[DONE]` last.
                        "text/event-stream": {"schema": _EVENT},
                    },
                },
                **_errors(400, 401, 404, 413, 415, 500, 503),
            },
        }
    }


_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}},
    "required": ["data"],
}


def _get(answer: dict[str, Any], summary: str, *errors: int) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": answer, **_errors(*errors)}}}


def _stats(answer: dict[str, Any]) -> dict[str, Any]:
    """/stats: every client's jobs, or one's."""
    operation = _get(answer, "recent jobs of each model", 400, 401, 403)
    operation["get"]["parameters"] = [_client_parameter("query", STATS_CLIENT_PARAM)]
    return operation


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The document, built once."""
    _, schemas = models_json_schema(
        [(model, "validation") for model in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    free = {"description": "JSON", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "infill-lsp engine",
            "version": VERSION,
            "description": "OpenAI-compatible completions and chat over local models",
        },
        "paths": {
            "/v1/completions": _generation(
                "CompletionBody", "CompletionResponse", "a completion (fill-in-the-middle too)"
            ),
            "/v1/chat/completions": _generation("ChatBody", "ChatResponse", "a chat answer"),
            SCORE_PATH: _extension(
                "ScoreBody",
                "ScoreResponse",
                "our extension: continuations' log-probabilities and the likely next tokens",
            ),
            BRANCH_PATH: _extension(
                "BranchBody",
                "BranchResponse",
                "our extension: the greedy answer after each of some first tokens",
            ),
            "/v1/models": _get(_json("ModelList", "the models"), "the models", 401),
            "/health": _get(_json("Health", "the server's state"), "whether the models are ready"),
            "/model-info": _get(free, "each role's model", 401, 403),
            "/stats": _stats(free),
            "/openapi.json": _get(free, "this document"),
            **_rest_paths(),
        },
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }
