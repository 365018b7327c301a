"""The engine server's Starlette app: OpenAI-compatible routes over the loaded engines.

Routes are thin: read the body, parse it (`schema`), pick the role's engine (`loader`), run the
generation (`run_*` below), build the answer (`schema`). Every error is an OpenAI error body,
and the server keeps serving after each one.

A client that goes away cancels its generation: a stream's generator is closed as soon as the
disconnect arrives (`EventStream`), and a non-streamed request waits on its generation and
on the disconnect together (`until_disconnect`). Closing `Engine.generate` aborts the job, and
the worker stops within one token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, replace
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.api.loader import Loaded, LoadState, ModelLoader
from engine.api.schema import (
    ApiError,
    ChatParams,
    Choice,
    Common,
    CompletionParams,
    Header,
    Usage,
    chat_chunk,
    chat_response,
    completion_chunk,
    completion_response,
    new_header,
    parse_chat,
    parse_completion,
    parse_json,
    sse,
    usage_chunk,
)
from engine.backends.openai import OURS
from engine.engine import Engine
from engine.errors import (
    ChatTemplateError,
    EngineClosedError,
    EngineError,
    PromptTooLongError,
)
from engine.prompts import build_fim_prompt
from engine.types import FinishReason, GenerationRequest, Role, TextDelta

log = logging.getLogger(__name__)

#: A larger body is refused (413) before it is read whole.
MAX_BODY_BYTES = 16 << 20
#: What a client is told to wait while a model loads.
RETRY_AFTER_SECONDS = 5
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


# --- the app ----------------------------------------------------------------------------------


def build_app(
    models: ModelLoader,
    *,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    loopback: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Starlette:
    """The ASGI app serving `models`. `api_key`: every route but /health needs it as a Bearer
    token. `loopback`: the server listens on loopback only, so requests must name it as their
    Host (a web page cannot reach it by DNS rebinding). `cors_origins`: the only web origins
    allowed to call it (none by default)."""
    api = _Api(models, max_body_bytes=max_body_bytes, started=int(time.time()))
    middleware = []
    if loopback:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK_HOSTS)))
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    if api_key:
        middleware.append(Middleware(KeyCheck, key=api_key))
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/stats", api.stats, methods=["GET"]),
        Route("/model-info", api.model_info, methods=["GET"]),
        Route("/v1/models", api.list_models, methods=["GET"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )


def _json_error(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    if exc.status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc.message)
    return _json_error(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}"
    return _json_error(ApiError(exc.status_code, message, headers=exc.headers))


async def _server_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback; the client gets the reason in OpenAI's shape.
    return _json_error(ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))


class KeyCheck:
    """Every route but /health needs `Authorization: Bearer KEY` (compared in constant time)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self._key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), self._key
            ):
                error = ApiError(
                    401,
                    "a valid API key is required: Authorization: Bearer KEY",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await _json_error(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# --- routes -----------------------------------------------------------------------------------


class _Api:
    """The route handlers, over one `ModelLoader`."""

    def __init__(self, models: ModelLoader, *, max_body_bytes: int, started: int) -> None:
        self.models = models
        self.max_body_bytes = max_body_bytes
        self.started = started

    async def health(self, request: Request) -> Response:
        """`{"status", "model_loaded", "backend", "device", "models": [...]}`; never needs
        the key (`model_loaded`: every role's model is, as the seed 002 API's health says)."""
        models = self.models.describe()
        first = next((m for m in models if m["backend"] is not None), None)
        status = self.models.status()
        return JSONResponse(
            {
                "status": status.value,
                "model_loaded": status is LoadState.READY,
                "backend": first["backend"] if first else None,
                "device": first["device"] if first else None,
                "models": models,
            }
        )

    async def model_info(self, request: Request) -> Response:
        """The seed 002 API's `/model-info`: each role's model path, backend and device."""
        return JSONResponse(
            {
                role: {
                    "id": m["id"],
                    "model_path": m["path"],
                    "backend": m["backend"],
                    "device": m["device"],
                    "context_size": m["context_size"],
                }
                for m in self.models.describe()
                for role in m["roles"]
            }
        )

    async def list_models(self, request: Request) -> Response:
        """OpenAI's model list, with our roles, context size and FIM family."""
        data = [
            {
                "id": m["id"],
                "object": "model",
                "created": self.started,
                "owned_by": OURS,  # how our remote backend knows its own server
                "roles": m["roles"],
                "context_size": m["context_size"],
                "max_model_len": m["context_size"],
                "fim_family": m["fim_family"],
            }
            for m in self.models.describe()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def stats(self, request: Request) -> Response:
        """The recent finished jobs of each loaded model, oldest first, and the jobs under way
        (queued or generating): a client waits on these for a job to be at work."""
        out = []
        for ident, roles, loaded in self.models.loaded_models():
            record = loaded.engine.job_record
            total, jobs = record.snapshot()
            out.append(
                {
                    "id": ident,
                    "roles": [r.value for r in roles],
                    "jobs_finished": total,
                    "recent": [asdict(job) for job in jobs],
                    "running": [
                        {
                            "request_id": event.request_id,
                            "cache_key": event.cache_key,
                            "phase": str(event.phase),
                        }
                        for event in record.running()
                    ],
                }
            )
        return JSONResponse({"models": out})

    async def completions(self, request: Request) -> Response:
        """POST /v1/completions."""
        params = parse_completion(await read_json(request, self.max_body_bytes))
        ident, loaded = self._engine(params.common.model, Role.COMPLETION)
        header = new_header(chat=False, model=ident)
        generation = await completion_request(loaded, params, request_id=header.id)
        return await run(request, loaded.engine, generation, params.common, header, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        body = await read_json(request, self.max_body_bytes)
        # Parsed twice at most: the default max_tokens is the model's context, known once
        # the model is picked, and the model is named in the body.
        model = body.get("model") if isinstance(body.get("model"), str) else None
        ident, loaded = self._engine(model, Role.CHAT)
        params = parse_chat(body, default_max_tokens=loaded.backend.context_size)
        header = new_header(chat=True, model=ident)
        generation = chat_request(params, request_id=header.id)
        return await run(request, loaded.engine, generation, params.common, header, chat=True)

    def _engine(self, name: str | None, role: Role) -> tuple[str, Loaded]:
        """The model a request names (None: `role`'s), if it is ready to serve."""
        if name is not None:
            named = self.models.role_of(name, role)
            if named is None:
                raise ApiError(
                    404,
                    f"the model {name!r} does not exist here; GET /v1/models lists the models",
                    param="model",
                    code="model_not_found",
                )
            role = named
        status = self.models.role(role)
        if status is None:
            raise ApiError(404, f"no model serves the {role.value} role", code="model_not_found")
        if status.state is LoadState.LOADING:
            raise ApiError(
                503,
                f"the {role.value} model {status.model_id} is still loading; retry shortly",
                code="model_loading",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        if status.loaded is None:
            raise ApiError(
                500,
                f"the {role.value} model {status.model_id} failed to load: {status.error}",
                code="model_load_failed",
            )
        return status.model_id, status.loaded


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object; 415 for another Content-Type (a web page cannot send JSON
    without a CORS preflight), 413 past `limit` bytes, 400 for bad JSON."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(
            415,
            f"the body must be application/json, not {media or 'untyped'}",
            param="Content-Type",
            code="unsupported_media_type",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the body is over {limit} bytes", code="request_too_large")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the body is over {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    return parse_json(b"".join(chunks))


# --- requests ---------------------------------------------------------------------------------


async def completion_request(
    loaded: Loaded, params: CompletionParams, *, request_id: str
) -> GenerationRequest:
    """The engine request of a /v1/completions body: a FIM prompt rendered with the model's
    template when there is a suffix (the user's text is never parsed for special tokens), and
    the family's fill-ending ids as hidden stops either way (as llama.cpp's server adds its
    end-of-generation tokens), so a client that renders its own FIM prompt stops as we do."""
    common = params.common
    stops = replace(common.stops, stop_token_ids_hidden=loaded.fim_stop_ids)
    prompt = params.prompt
    backend = loaded.backend
    if params.suffix is not None:
        template = loaded.fim
        if template is None:
            raise ApiError(
                400,
                f"the model {backend.info.name} has no fill-in-the-middle tokens, so it cannot "
                "take a suffix; send the prefix alone as the prompt",
                param="suffix",
                code="fim_not_supported",
            )
        if not isinstance(prompt, str):
            raise ApiError(400, "a suffix needs a text prompt, not token ids", param="suffix")
        # Tokenizing a long document is work: off the event loop.
        fim = await asyncio.to_thread(
            build_fim_prompt, backend, prompt, params.suffix, template=template
        )
        assert fim.token_ids is not None  # built from the model's own tokenizer
        prompt = fim.token_ids
    elif isinstance(prompt, tuple) and any(t >= backend.info.vocab_size for t in prompt):
        raise ApiError(
            400,
            f"prompt has token ids outside the vocabulary (size {backend.info.vocab_size})",
            param="prompt",
        )
    return GenerationRequest(
        prompt=prompt if isinstance(prompt, str) else None,
        prompt_token_ids=None if isinstance(prompt, str) else prompt,
        role=Role.COMPLETION,
        sampling=common.sampling,
        stops=stops,
        request_id=request_id,
        cache_key=common.cache_key,
    )


def chat_request(params: ChatParams, *, request_id: str) -> GenerationRequest:
    """The engine request of a chat body: the worker renders the messages with the model's own
    chat template."""
    common = params.common
    return GenerationRequest(
        messages=params.messages,
        role=Role.CHAT,
        sampling=common.sampling,
        stops=common.stops,
        request_id=request_id,
        cache_key=common.cache_key,
    )


def engine_error(error: EngineError, *, chat: bool) -> ApiError:
    """The HTTP error of an engine failure."""
    if isinstance(error, PromptTooLongError):
        return ApiError(
            400,
            str(error),
            param="messages" if chat else "prompt",
            code="context_length_exceeded",
        )
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


# --- running a generation ---------------------------------------------------------------------


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client has gone (the body was read before)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """`await work`, cancelled if the client disconnects first (then ClientGone)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise ClientGone
    return task.result()


async def run(
    request: Request,
    engine: Engine,
    generation: GenerationRequest,
    common: Common,
    header: Header,
    *,
    chat: bool,
) -> Response:
    """Generate, and answer whole or as a stream."""
    try:
        if common.stream:
            return await _stream(request, engine, generation, common, header, chat=chat)
        results = await until_disconnect(request.receive, engine.collect(generation))
    except ClientGone:
        log.info("%s: the client disconnected; generation cancelled", header.id)
        return Response(status_code=499)  # nobody reads it
    except EngineError as e:
        raise engine_error(e, chat=chat) from e
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
            )
        )
    usage = Usage(
        prompt_tokens=prompt_tokens(engine, generation.request_id),
        completion_tokens=sum(len(r.token_ids) for r in results),
    )
    build = chat_response if chat else completion_response
    return JSONResponse(build(header, choices, usage))


async def _stream(
    request: Request,
    engine: Engine,
    generation: GenerationRequest,
    common: Common,
    header: Header,
    *,
    chat: bool,
) -> Response:
    """A server-sent event stream. The first delta is awaited before the headers go out, so
    that a request the engine refuses (a prompt too long) gets its status code."""
    deltas = engine.generate(generation)
    try:
        first = await until_disconnect(request.receive, _first(deltas))
    except BaseException:
        await deltas.aclose()
        raise
    events = _events(
        deltas,
        first,
        engine=engine,
        generation=generation,
        header=header,
        chat=chat,
        include_usage=common.include_usage,
    )
    return EventStream(events, on_close=deltas.aclose)


async def _first(deltas: AsyncIterator[TextDelta]) -> TextDelta | None:
    return await anext(deltas, None)


async def _events(
    deltas: AsyncIterator[TextDelta],
    first: TextDelta | None,
    *,
    engine: Engine,
    generation: GenerationRequest,
    header: Header,
    chat: bool,
    include_usage: bool,
) -> AsyncGenerator[bytes, None]:
    """The stream's events: new text per chunk, each choice's finish on its last chunk, the
    usage on the final one, then `[DONE]`. A failure is sent as `data: {"error": ...}` and
    ends the stream."""
    n = generation.sampling.n
    open_choices = set(range(n))
    completion_tokens = 0
    last: dict[str, Any] | None = None  # held back to carry the usage
    if chat:
        for index in range(n):
            yield sse(chat_chunk(header, index, {"role": "assistant", "content": ""}))
    try:
        async with contextlib.aclosing(_chain(first, deltas)) as all_deltas:
            async for delta in all_deltas:
                if (error := _failure(delta.finish_reason, delta.error)) is not None:
                    yield sse(error.body())
                    return
                completion_tokens += len(delta.token_ids)
                chunks = delta_chunks(header, delta, chat=chat)
                if delta.finish_reason is not None:
                    open_choices.discard(delta.index)
                    if not open_choices:
                        last = chunks.pop()
                for chunk in chunks:
                    yield sse(chunk)
    except EngineError as e:
        yield sse(engine_error(e, chat=chat).body())
        return
    usage = Usage(
        prompt_tokens=prompt_tokens(engine, generation.request_id),
        completion_tokens=completion_tokens,
    )
    if last is not None:
        last["usage"] = usage.as_json()
        yield sse(last)
    if include_usage:
        yield sse(usage_chunk(header, chat=chat, usage=usage))
    yield sse("[DONE]")


def delta_chunks(header: Header, delta: TextDelta, *, chat: bool) -> list[dict[str, Any]]:
    """The chunks of one delta: its new text, then (chat) a `{}` delta with the finish; a
    completion chunk carries both."""
    finish, stop = delta.finish_reason, delta.stop_reason
    if not chat:
        if not delta.text and finish is None:
            return []
        return [completion_chunk(header, delta.index, delta.text, finish, stop)]
    chunks = []
    if delta.text:
        chunks.append(chat_chunk(header, delta.index, {"content": delta.text}))
    if finish is not None:
        chunks.append(chat_chunk(header, delta.index, {}, finish, stop))
    return chunks


async def _chain(
    first: TextDelta | None, rest: AsyncIterator[TextDelta]
) -> AsyncGenerator[TextDelta, None]:
    if first is None:
        return
    yield first
    async for delta in rest:
        yield delta


class EventStream(StreamingResponse):
    """A `text/event-stream` response that stops its generator the moment the client goes.

    Starlette's StreamingResponse, under ASGI 2.4 servers, notices a disconnect only when a
    write fails, and then leaves its generator to the garbage collector; here a disconnect
    cancels the pump at once, and the generators are closed on every way out, so the engine
    job is aborted within one token.
    """

    def __init__(
        self, events: AsyncGenerator[bytes, None], *, on_close: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._events = events
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            pump = asyncio.ensure_future(self._pump(send))
            watch = asyncio.ensure_future(wait_for_disconnect(receive))
            try:
                await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (pump, watch):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await task
        finally:
            await self._events.aclose()
            await self._on_close()

    async def _pump(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for event in self._events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
