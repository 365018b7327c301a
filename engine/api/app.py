"""The engine server's Starlette app: OpenAI-compatible routes over the loaded engines, and
the plain REST routes code-model servers offer (/generate, /chat, /extract-code).

Here the app is put together: the route table, the guards in front of it (the loopback Host
check, CORS, the API key and what a caller without it may see, the client's name, the bound
on generation requests at once), and the error handlers that turn every failure into an
OpenAI error body, so that the server keeps serving after each one. Where the rest lives:

- `routes`: the handlers, thin: read the body, parse it, pick the role's engine.
- `schema`: request bodies as pydantic models, every bound on them; `ApiError`.
- `openapi`: the OpenAPI document at /openapi.json.
- `generate`: the engine request, the generation, the answer whole or streamed, engine
  failures as HTTP errors.
- `responses`: the answers' JSON, and what each route writes its own way (`Endpoint`).
- `streaming`: a client that goes away cancels its generation within one token.
- `clients`: which client (editor window) a request comes from, checked; what /stats picks.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.api.clients import ClientCheck
from engine.api.infill import BRANCH_PATH, SCORE_PATH
from engine.api.leases import Leases, RequestCount
from engine.api.loader import ModelLoader
from engine.api.openapi import openapi_document
from engine.api.routes import RETRY_AFTER_SECONDS, Routes
from engine.api.schema import DEFAULT_TOKEN_BUDGET, MAX_BODY_BYTES, ApiError
from engine.api.streaming import ClientGone
from engine.net import is_loopback
from engine.types import CLIENT_HEADER

log = logging.getLogger(__name__)

#: Generation requests at once, running or waiting for the model; one more is answered 503
#: with Retry-After rather than queued without end.
DEFAULT_MAX_JOBS = 64
#: Routes anyone may call: whether the server is up, and what the API is.
PUBLIC_PATHS = frozenset({"/health", "/openapi.json"})
#: Routes that tell what others do (document URIs, model paths): never without the key, nor
#: on a server others can reach without one (`--allow-no-key`).
PRIVATE_PATHS = frozenset({"/stats", "/model-info"})
#: The plain REST routes that generate, beside OpenAI's (/extract-code runs no model).
REST_GENERATION_PATHS = frozenset({"/generate", "/generate/raw", "/chat"})
#: Routes that run a model's job: each holds one of the places (`JobLimit`).
GENERATION_PATHS = (
    frozenset({"/v1/completions", "/v1/chat/completions", SCORE_PATH, BRANCH_PATH})
    | REST_GENERATION_PATHS
)
#: Where the guards leave their verdict for the routes (`request.state.trusted`).
TRUSTED = "trusted"


def build_app(
    models: ModelLoader,
    *,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    loopback: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    max_jobs: int = DEFAULT_MAX_JOBS,
    leases: Leases | None = None,
) -> Starlette:
    """The ASGI app serving `models`.

    `api_key`: every route but /health and /openapi.json needs it as a Bearer token, and
    /health tells a caller without it only the status. Without a key, a caller is trusted only
    on `loopback`. `loopback`: the server listens on loopback only, so requests must name it
    as their Host (a web page cannot reach it by DNS rebinding). `cors_origins`: the only web
    origins allowed to call it (none by default). `token_budget`: tokens one request may ask
    for, all choices together. `max_jobs`: generation requests at once. `leases`: the leases
    of the language servers sharing the engine, and the requests under way (engine/shared.py)."""
    leases = Leases() if leases is None else leases
    api = Routes(
        models,
        max_body_bytes=max_body_bytes,
        token_budget=token_budget,
        started=int(time.time()),
        leases=leases,
    )
    middleware = [Middleware(RequestCount, leases=leases)]
    if loopback:
        middleware.append(Middleware(LoopbackHostCheck))
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", CLIENT_HEADER],
            )
        )
    middleware.append(Middleware(KeyCheck, key=api_key, trusted_without_key=loopback))
    middleware.append(Middleware(ClientCheck))
    middleware.append(Middleware(JobLimit, limit=max_jobs))
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/stats", api.stats, methods=["GET"]),
        Route("/model-info", api.model_info, methods=["GET"]),
        Route("/v1/models", api.list_models, methods=["GET"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
        Route("/v1/infill/clients/{name}", api.lease, methods=["POST"]),
        Route("/v1/infill/clients/{name}", api.leave, methods=["DELETE"]),
        *rest_routes(api),
        Route(SCORE_PATH, api.infill_score, methods=["POST"]),
        Route(BRANCH_PATH, api.infill_branch, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            ClientGone: _client_gone,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )


def rest_routes(api: Routes) -> list[Route]:
    """The plain REST routes code-model servers offer, for clients written against them."""
    return [
        Route("/generate", api.generate, methods=["POST"]),
        Route("/generate/raw", api.generate_raw, methods=["POST"]),
        Route("/chat", api.chat, methods=["POST"]),
        Route("/extract-code", api.extract_code, methods=["POST"]),
    ]


async def openapi(request: Request) -> Response:
    """GET /openapi.json."""
    return JSONResponse(openapi_document())


def _json_error(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    if exc.status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc.message)
    return _json_error(exc)


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=499)  # nobody reads it


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path[:200]}"
    return _json_error(ApiError(exc.status_code, message, headers=exc.headers))


async def _server_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback; the client is told only that it failed: an exception's
    # text may name paths or what a library holds.
    log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return _json_error(ApiError(500, "internal error: the server's log says why"))


def host_name(host_header: str) -> str:
    """The host a Host header names, without its port: `[::1]:8012` is `[::1]`. A header that
    is not `HOST` or `HOST:PORT` comes back whole (and names no loopback host)."""
    if host_header.startswith("["):
        end = host_header.find("]")
        rest = host_header[end + 1 :]
        if end > 0 and (not rest or (rest[0] == ":" and rest[1:].isdigit())):
            return host_header[: end + 1]
        return host_header
    name, colon, port = host_header.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        return name
    return host_header


class LoopbackHostCheck:
    """A server on loopback answers only requests that name a loopback host (`localhost`,
    `127.0.0.1`, `[::1]`): a web page that got a name to resolve to 127.0.0.1 (DNS rebinding)
    sends its own name."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            if not is_loopback(host_name(host)):
                error = ApiError(400, "invalid Host header: this server answers on loopback only")
                await _json_error(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class KeyCheck:
    """Who is trusted: a caller with `Authorization: Bearer KEY` (compared in constant time)
    where the server has a key, anyone on a loopback server without one. The untrusted get
    only the public routes (and, without a key, generation); /health says less to them."""

    def __init__(self, app: ASGIApp, key: str | None, trusted_without_key: bool) -> None:
        self.app = app
        self._key = key.encode() if key else None
        self._trusted_without_key = trusted_without_key

    def trusted(self, scope: Scope) -> bool:
        if self._key is None:
            return self._trusted_without_key
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trusted = self.trusted(scope)
        scope.setdefault("state", {})[TRUSTED] = trusted
        path = scope["path"]
        error = None
        if trusted or path in PUBLIC_PATHS:
            pass
        elif self._key is not None:
            error = ApiError(
                401,
                "a valid API key is required: Authorization: Bearer KEY",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )
        elif path in PRIVATE_PATHS:
            error = ApiError(
                403,
                f"{path} tells what other clients do: it needs the server to have an API key",
                code="key_required",
            )
        if error is not None:
            await _json_error(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class JobLimit:
    """At most `limit` generation requests at once, from the end of their body to their
    answer's end (a stream's included); one more gets 503 with Retry-After once its body is in,
    before any work (it raises from the route's read of the body, and the app's handler of
    `ApiError` answers).

    A request counts once its body is in, not while it trickles: 100 sockets sending a body
    a byte a second held all 64 places until their body deadline (30 s) and every completion
    got 503 meanwhile (bench/load.py). A connection's deadlines and the server's connection
    bound limit those.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self._limit = limit
        self._running = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        counted = False

        async def receive_then_count() -> Message:
            nonlocal counted
            message = await receive()
            body_in = message["type"] == "http.request" and not message.get("more_body", False)
            if body_in and not counted:
                if self._running >= self._limit:
                    raise ApiError(
                        503,
                        f"{self._limit} requests are already running or waiting for the "
                        "model; retry shortly",
                        code="too_many_requests",
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
                    )
                self._running += 1
                counted = True
            return message

        try:
            await self.app(scope, receive_then_count, send)
        finally:
            if counted:
                self._running -= 1
