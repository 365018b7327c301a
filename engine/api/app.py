"""The engine server's Starlette app: OpenAI-compatible routes over the loaded engines.

Here the app is put together: the route table, the guards in front of it (the loopback Host
check, CORS, the API key), and the error handlers that turn every failure into an OpenAI error
body, so that the server keeps serving after each one. Where the rest lives:

- `routes`: the handlers, thin: read the body, parse it, pick the role's engine.
- `schema`: request bodies parsed and checked; `ApiError`.
- `generate`: the engine request, the generation, the answer whole or streamed, engine
  failures as HTTP errors.
- `responses`: the answers' JSON, and what each route writes its own way (`Endpoint`).
- `streaming`: a client that goes away cancels its generation within one token.
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
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.api.loader import ModelLoader
from engine.api.routes import Routes
from engine.api.schema import ApiError

log = logging.getLogger(__name__)

#: A larger body is refused (413) before it is read whole.
MAX_BODY_BYTES = 16 << 20
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


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
    api = Routes(models, max_body_bytes=max_body_bytes, started=int(time.time()))
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
