"""From a parsed body to its answer: the engine request, the generation, and the answer whole
or as a server-sent event stream, for every generation route (its `Endpoint` says what
differs; the plain REST routes write their whole answer their own way, a `Writer`).

A client that goes away cancels its generation (`streaming`). An engine failure becomes an
OpenAI error: the status code when it comes before the first delta, an error event after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.api.clients import for_client
from engine.api.loader import Loaded
from engine.api.responses import Choice, ChoiceLogprobs, Endpoint, Header, Usage, Writer, sse
from engine.api.schema import ApiError, ChatParams, Common, CompletionParams
from engine.api.streaming import ClientGone, EventStream, until_disconnect
from engine.engine import Engine
from engine.errors import (
    ChatTemplateError,
    EngineClosedError,
    EngineError,
    PromptTooLongError,
)
from engine.types import FinishReason, GenerationRequest, Role, TextDelta

log = logging.getLogger(__name__)

T = TypeVar("T")


# --- the engine request -----------------------------------------------------------------------


async def completion_request(
    loaded: Loaded, params: CompletionParams, *, request_id: str
) -> GenerationRequest:
    """The engine request of a /v1/completions body: a FIM prompt rendered with the model's
    template when there is a suffix (the user's text is never parsed for special tokens), and
    the family's fill-ending ids as hidden stops either way (as llama.cpp's server adds its
    end-of-generation tokens), so a client that renders its own FIM prompt stops as we do."""
    common = params.common
    prompt_format = loaded.model.format
    stops = replace(common.stops, stop_token_ids_hidden=prompt_format.stop_token_ids)
    prompt = params.prompt
    info = loaded.engine.info
    check_vocabulary(common.stops.stop_token_ids, "stop_token_ids", info.vocab_size)
    if params.suffix is not None:
        if prompt_format.fim is None:
            raise ApiError(
                400,
                f"the model {info.name} has no fill-in-the-middle tokens, so it cannot "
                "take a suffix; send the prefix alone as the prompt",
                param="suffix",
                code="fim_not_supported",
            )
        if not isinstance(prompt, str):
            raise ApiError(400, "a suffix needs a text prompt, not token ids", param="suffix")
        # Tokenizing a long document is work: off the event loop.
        fim = await asyncio.to_thread(prompt_format.render, prompt, params.suffix)
        assert fim.token_ids is not None  # built from the model's own tokenizer
        prompt = fim.token_ids
    elif isinstance(prompt, tuple):
        check_vocabulary(prompt, "prompt", info.vocab_size)
    return GenerationRequest(
        prompt=prompt if isinstance(prompt, str) else None,
        prompt_token_ids=None if isinstance(prompt, str) else prompt,
        role=Role.COMPLETION,
        sampling=common.sampling,
        stops=stops,
        request_id=request_id,
        cache_key=common.cache_key,
    )


def chat_request(loaded: Loaded, params: ChatParams, *, request_id: str) -> GenerationRequest:
    """The engine request of a chat body: the worker renders the messages with the model's own
    chat template."""
    common = params.common
    check_vocabulary(common.stops.stop_token_ids, "stop_token_ids", loaded.engine.info.vocab_size)
    return GenerationRequest(
        messages=params.messages,
        role=Role.CHAT,
        sampling=common.sampling,
        stops=common.stops,
        request_id=request_id,
        cache_key=common.cache_key,
    )


def check_vocabulary(token_ids: tuple[int, ...], field: str, vocab_size: int) -> None:
    """A 400 when a token id is not the model's."""
    if any(t >= vocab_size for t in token_ids):
        raise ApiError(
            400, f"{field} has token ids outside the vocabulary (size {vocab_size})", param=field
        )


# --- failures ---------------------------------------------------------------------------------


def engine_error(error: EngineError, prompt_field: str) -> ApiError:
    """The HTTP error of an engine failure (`prompt_field`: the body's field a prompt too long
    for the context is blamed on)."""
    if isinstance(error, PromptTooLongError):
        return ApiError(400, str(error), param=prompt_field, code="context_length_exceeded")
    if isinstance(error, ChatTemplateError):
        return ApiError(400, str(error), param="messages", code="chat_template_error")
    if isinstance(error, EngineClosedError):
        return ApiError(503, str(error), code="engine_closed")
    return ApiError(500, str(error), code="generation_failed")


def _failure(reason: FinishReason | None, message: str | None) -> ApiError | None:
    """The error of a choice that ended without an answer."""
    if reason is FinishReason.ERROR:
        return ApiError(500, f"generation failed: {message}", code="generation_failed")
    if reason is FinishReason.CANCELLED:
        return ApiError(503, "the generation was cancelled", code="cancelled")
    return None


def prompt_tokens(engine: Engine, request_id: str) -> int:
    """The prompt's length in tokens, from the finished job's record."""
    _, jobs = engine.job_record.snapshot()
    return next((j.prompt_tokens for j in reversed(jobs) if j.request_id == request_id), 0)


async def job_result(request: Request, work: Awaitable[T], prompt_field: str) -> T:
    """`await work` (an engine job), which the client's going away cancels (ClientGone; the
    job stops within one token); an engine failure as its HTTP error."""
    try:
        return await until_disconnect(request.receive, work)
    except EngineError as e:
        raise engine_error(e, prompt_field) from e


# --- the answer -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One call of a generation route, its body read: the engine that runs it, and how to
    answer (the route's `Endpoint`, the answer's header, streamed or not)."""

    engine: Engine
    endpoint: Endpoint
    header: Header
    common: Common

    @classmethod
    def start(cls, endpoint: Endpoint, *, model: str, engine: Engine, common: Common) -> Call:
        """A call with a fresh answer id, which its engine request takes as its own."""
        return cls(engine=engine, endpoint=endpoint, header=endpoint.header(model), common=common)


async def answer(
    request: Request, call: Call, generation: GenerationRequest, *, write: Writer | None = None
) -> Response:
    """Generate for the client `request` names, and answer whole or as a stream. `write`: how
    a whole answer is written (a REST route's own shape); the route's `Endpoint` by default."""
    engine, endpoint = call.engine, call.endpoint
    generation = for_client(request, generation)
    logs = _logprobs(call, generation)
    try:
        if call.common.stream:
            return await _stream(request, call, generation)
        each = None if logs is None else (lambda delta: logs[delta.index].add(delta))
        results = await job_result(
            request, engine.collect(generation, each=each), endpoint.prompt_field
        )
    except ClientGone:
        log.info("%s: the client disconnected; generation cancelled", call.header.id)
        return Response(status_code=499)  # nobody reads it
    except EngineError as e:
        raise engine_error(e, endpoint.prompt_field) from e
    choices = []
    for result in results:
        if (error := _failure(result.finish_reason, result.error)) is not None:
            raise error
        choices.append(
            Choice(
                index=result.index,
                text=result.text,
                finish_reason=result.finish_reason,
                stop_reason=result.stop_reason,
                completion_tokens=len(result.token_ids),
                logprobs=None if logs is None else logs[result.index].as_json(),
            )
        )
    usage = Usage(
        prompt_tokens=prompt_tokens(engine, generation.request_id),
        completion_tokens=sum(len(r.token_ids) for r in results),
    )
    return JSONResponse((write or endpoint.response)(call.header, choices, usage))


def _logprobs(call: Call, generation: GenerationRequest) -> list[ChoiceLogprobs] | None:
    """Each choice's `logprobs`, where the request asked for them."""
    if not call.common.logprobs:
        return None
    return [ChoiceLogprobs() for _ in range(generation.sampling.n)]


async def _stream(request: Request, call: Call, generation: GenerationRequest) -> Response:
    """A server-sent event stream. The first delta is awaited before the headers go out, so
    that a request the engine refuses (a prompt too long) gets its status code."""
    deltas = call.engine.generate(generation)
    try:
        first = await until_disconnect(request.receive, _first(deltas))
    except BaseException:
        await deltas.aclose()
        raise
    return EventStream(_events(deltas, first, call, generation), on_close=deltas.aclose)


async def _first(deltas: AsyncIterator[TextDelta]) -> TextDelta | None:
    return await anext(deltas, None)


async def _events(
    deltas: AsyncIterator[TextDelta],
    first: TextDelta | None,
    call: Call,
    generation: GenerationRequest,
) -> AsyncGenerator[bytes, None]:
    """The stream's events: what opens each choice, new text per chunk, each choice's finish
    on its last chunk, the usage on the final one, then `[DONE]`. A failure is sent as
    `data: {"error": ...}` and ends the stream."""
    header, endpoint = call.header, call.endpoint
    n = generation.sampling.n
    open_choices = set(range(n))
    completion_tokens = 0
    logs = _logprobs(call, generation)
    last: dict[str, Any] | None = None  # held back to carry the usage
    for chunk in endpoint.opening_chunks(header, n):
        yield sse(chunk)
    try:
        async with contextlib.aclosing(_chain(first, deltas)) as all_deltas:
            async for delta in all_deltas:
                if (error := _failure(delta.finish_reason, delta.error)) is not None:
                    yield sse(error.body())
                    return
                completion_tokens += len(delta.token_ids)
                logprobs = None if logs is None else logs[delta.index].add(delta)
                chunks = endpoint.delta_chunks(header, delta, logprobs)
                if delta.finish_reason is not None:
                    open_choices.discard(delta.index)
                    if not open_choices:
                        last = chunks.pop()
                for chunk in chunks:
                    yield sse(chunk)
    except EngineError as e:
        yield sse(engine_error(e, endpoint.prompt_field).body())
        return
    usage = Usage(
        prompt_tokens=prompt_tokens(call.engine, generation.request_id),
        completion_tokens=completion_tokens,
    )
    if last is not None:
        last["usage"] = usage.as_json()
        yield sse(last)
    if call.common.include_usage:
        yield sse(endpoint.usage_chunk(header, usage))
    yield sse("[DONE]")


async def _chain(
    first: TextDelta | None, rest: AsyncIterator[TextDelta]
) -> AsyncGenerator[TextDelta, None]:
    if first is None:
        return
    yield first
    async for delta in rest:
        yield delta
