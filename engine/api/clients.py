"""Which client asks: the `X-Infill-Client` header (engine/types.py `CLIENT_HEADER`), with
which each language server (one per editor window) sharing this server names itself.

The worker takes turns among clients (engine/worker.py) and /stats answers one client's jobs
(`?client=NAME`). The name is checked once per request, for every route, by `ClientCheck`:
one that is not a name (`CLIENT_NAME`: 1 to 64 characters of letters, digits and . _ : -)
is a 400 that names the header, so a client that sends a wrong one learns it at once rather
than having its jobs counted as nobody's. Without the header a request is anonymous (each
of its jobs a client of its own), as any OpenAI client's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.api.schema import ApiError
from engine.types import CLIENT_HEADER, BranchRequest, GenerationRequest, ScoreRequest, check_client

#: Where `ClientCheck` leaves the request's client for the routes (`request.state.client`).
CLIENT = "client"
#: /stats's query parameter that picks one client's jobs.
STATS_CLIENT_PARAM = "client"

EngineRequest = TypeVar("EngineRequest", GenerationRequest, ScoreRequest, BranchRequest)


def client_name(value: str | None, *, param: str) -> str | None:
    """`value` as a client's name (None: none given); a 400 naming `param` if it is not one."""
    try:
        check_client(value)
    except ValueError as e:
        raise ApiError(400, f"{param}: {e}", param=param, code="invalid_client") from None
    return value


class ClientCheck:
    """Every HTTP request's `X-Infill-Client`, checked, left in `scope["state"]` for the
    routes; a bad one is answered 400 before any route runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                client = client_name(Headers(scope=scope).get(CLIENT_HEADER), param=CLIENT_HEADER)
            except ApiError as error:
                response = JSONResponse(error.body(), status_code=error.status)
                await response(scope, receive, send)
                return
            scope.setdefault("state", {})[CLIENT] = client
        await self.app(scope, receive, send)


def client_of(request: Request) -> str | None:
    """The client `request` names (checked by `ClientCheck`); None: anonymous."""
    client = getattr(request.state, CLIENT, None)
    return client if isinstance(client, str) else None


def for_client(request: Request, engine_request: EngineRequest) -> EngineRequest:
    """`engine_request` as the client of `request` asks it: what every route hands the
    engine, so that its job takes its client's turns and is counted as that client's."""
    return replace(engine_request, client=client_of(request))


def stats_client(request: Request) -> str | None:
    """The client whose jobs /stats answers (`?client=NAME`); None: every client's."""
    return client_name(request.query_params.get(STATS_CLIENT_PARAM), param=STATS_CLIENT_PARAM)
