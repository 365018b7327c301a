"""The engine server's route handlers: thin adapters over the loaded models.

Each reads the body, parses it (`schema`), picks the role's engine (`loader`), and hands the
generation to `generate` with its route's `Endpoint`; the GET routes describe the models and
their jobs.
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from engine.api import infill
from engine.api.clients import stats_client
from engine.api.generate import Call, answer, chat_request, completion_request
from engine.api.infill import CAPABILITIES
from engine.api.leases import Leases
from engine.api.loader import Loaded, ModelLoader
from engine.api.responses import CHAT, COMPLETIONS, sequences_writer
from engine.api.schema import (
    ApiError,
    BranchBody,
    ChatBody,
    CompletionBody,
    ExtractCodeBody,
    GenerateBody,
    RestChatBody,
    ScoreBody,
    parse_body,
)
from engine.api.streaming import ClientGone
from engine.backends.openai import OURS
from engine.jobs import ReportWords, record_json
from engine.markdown import code_or_text
from engine.types import LoadState, Role, check_client

#: What a client is told to wait while a model loads.
RETRY_AFTER_SECONDS = 5

#: /stats's names for the fields the two job reports name their own way: `cache_key` is what
#: a client of this API sends (the language server's `infill/stats` says `document`).
STATS_WORDS = ReportWords(finished="jobs_finished", recent="recent", document="cache_key")


class Routes:
    """The route handlers, over one `ModelLoader`."""

    def __init__(
        self,
        models: ModelLoader,
        *,
        max_body_bytes: int,
        token_budget: int,
        started: int,
        leases: Leases | None = None,
    ) -> None:
        self.models = models
        self.leases = Leases() if leases is None else leases
        self.max_body_bytes = max_body_bytes
        self.token_budget = token_budget
        self.started = started

    async def health(self, request: Request) -> Response:
        """`{"status", "model_loaded"}` for anyone; for a trusted caller (the key, or any on
        a loopback server without one) also `backend`, `device` and `models` (paths and load
        errors included). `model_loaded` (every role's model is) and the first loaded model's
        `backend` and `device` are for a client that knows of one model; `models` has each."""
        status = self.models.status()
        short = {"status": status.value, "model_loaded": status is LoadState.READY}
        if not getattr(request.state, "trusted", False):
            return JSONResponse(short)
        models = self.models.describe()
        first = next((m for m in models if m["backend"] is not None), None)
        return JSONResponse(
            {
                **short,
                "backend": first["backend"] if first else None,
                "device": first["device"] if first else None,
                "models": models,
                "engine": self.leases.describe(),
            }
        )

    async def lease(self, request: Request) -> Response:
        """POST /v1/infill/clients/{name}: the client (a language server sharing this engine)
        holds a lease for `LEASE_SECONDS` more; the answer is what /health's `engine` says."""
        self.leases.renew(_client_name(request))
        return JSONResponse(self.leases.describe())

    async def leave(self, request: Request) -> Response:
        """DELETE /v1/infill/clients/{name}: the client has left."""
        self.leases.leave(_client_name(request))
        return JSONResponse(self.leases.describe())

    async def model_info(self, request: Request) -> Response:
        """Each role's model path, backend, device and context: which model answers which role."""
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
        """OpenAI's model list, with our roles, context size, FIM family and what each model
        offers beyond OpenAI's routes (`capabilities`); for a trusted caller also the model
        file's path, so that a client on this machine can load its tokenizer."""
        trusted = getattr(request.state, "trusted", False)
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
                # Where it computes: a client decides by it what pays (ranking lines on a CPU).
                "device": m["device"],
                "capabilities": self._capabilities(m["id"]),
                **({"model_path": m["path"]} if trusted else {}),
            }
            for m in self.models.describe()
        ]
        return JSONResponse({"object": "list", "data": data})

    def _capabilities(self, ident: str) -> list[str]:
        """What model `ident` offers: every capability (both local backends score), less
        scoring and branching once it is loaded on a backend that cannot score."""
        loaded = next((e for i, _, e in self.models.loaded_models() if i == ident), None)
        if loaded is None or loaded.engine.can_score:
            return list(CAPABILITIES)
        return [c for c in CAPABILITIES if c not in ("score", "branch")]

    async def infill_score(self, request: Request) -> Response:
        """POST /v1/infill/score (our extension)."""
        body = parse_body(
            await read_body(request, self.max_body_bytes), ScoreBody, budget=self.token_budget
        )
        params = body.params()
        ident, loaded = self._scoring_engine(params.model)
        return await infill.score(request, ident, loaded, params)

    async def infill_branch(self, request: Request) -> Response:
        """POST /v1/infill/branch (our extension)."""
        body = parse_body(
            await read_body(request, self.max_body_bytes), BranchBody, budget=self.token_budget
        )
        params = body.params()
        ident, loaded = self._scoring_engine(params.model)
        return await infill.branch(request, ident, loaded, params)

    def _scoring_engine(self, name: str | None) -> tuple[str, Loaded]:
        """The model a scoring or branching names (None: completion's), if it can score."""
        ident, loaded = self._engine(name, Role.COMPLETION)
        if not loaded.engine.can_score:
            raise ApiError(
                400,
                f"the model {ident} cannot score text ({loaded.engine.info.backend})",
                param="model",
                code="score_not_supported",
            )
        return ident, loaded

    async def stats(self, request: Request) -> Response:
        """The recent finished jobs of each loaded model, oldest first, and the jobs under way
        (queued or generating): a client waits on these for a job to be at work. With
        `?client=NAME`, that client's jobs only."""
        client = stats_client(request)
        out = [
            {
                "id": ident,
                "roles": [r.value for r in roles],
                **record_json(loaded.engine.job_record, STATS_WORDS, client=client),
            }
            for ident, roles, loaded in self.models.loaded_models()
        ]
        return JSONResponse({"models": out})

    async def completions(self, request: Request) -> Response:
        """POST /v1/completions."""
        body = parse_body(
            await read_body(request, self.max_body_bytes), CompletionBody, budget=self.token_budget
        )
        params = body.params(budget=self.token_budget)
        ident, loaded = self._engine(params.common.model, Role.COMPLETION)
        call = Call.start(COMPLETIONS, model=ident, engine=loaded.engine, common=params.common)
        generation = await completion_request(loaded, params, request_id=call.header.id)
        return await answer(request, call, generation)

    async def chat_completions(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        body = parse_body(
            await read_body(request, self.max_body_bytes), ChatBody, budget=self.token_budget
        )
        ident, loaded = self._engine(body.model, Role.CHAT)
        # An unset max_tokens is the model's context (within the budget): known once the
        # model is picked.
        params = body.params(context_size=loaded.engine.info.context_size, budget=self.token_budget)
        call = Call.start(CHAT, model=ident, engine=loaded.engine, common=params.common)
        return await answer(request, call, chat_request(loaded, params, request_id=call.header.id))

    async def generate(self, request: Request) -> Response:
        """POST /generate: the completion model continues the prompt; the code of the
        first fenced markdown block where the model wrote one."""
        return await self._generate(request, extract=True)

    async def generate_raw(self, request: Request) -> Response:
        """POST /generate/raw: /generate, the text untouched."""
        return await self._generate(request, extract=False)

    async def _generate(self, request: Request, *, extract: bool) -> Response:
        body = parse_body(
            await read_body(request, self.max_body_bytes), GenerateBody, budget=self.token_budget
        )
        params = body.params()
        ident, loaded = self._engine(None, Role.COMPLETION)
        call = Call.start(COMPLETIONS, model=ident, engine=loaded.engine, common=params.common)
        generation = await completion_request(loaded, params, request_id=call.header.id)
        write = sequences_writer("generated_text", extract=extract, prompt=body.prompt)
        return await answer(request, call, generation, write=write)

    async def chat(self, request: Request) -> Response:
        """POST /chat: the chat model answers the user's last message."""
        body = parse_body(
            await read_body(request, self.max_body_bytes), RestChatBody, budget=self.token_budget
        )
        params = body.params()
        ident, loaded = self._engine(None, Role.CHAT)
        call = Call.start(CHAT, model=ident, engine=loaded.engine, common=params.common)
        generation = chat_request(loaded, params, request_id=call.header.id)
        return await answer(request, call, generation, write=sequences_writer("message"))

    async def extract_code(self, request: Request) -> Response:
        """POST /extract-code: the code of the first fenced markdown block, no model."""
        body = parse_body(await read_body(request, self.max_body_bytes), ExtractCodeBody)
        # A 4 MiB text (130,000 lines) is read in about 150 ms: off the event loop.
        return JSONResponse({"code": await asyncio.to_thread(code_or_text, body.prompt)})

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
            # Why is in the log and in /health for a trusted caller (it may name paths).
            raise ApiError(
                500,
                f"the {role.value} model {status.model_id} failed to load; /health says why",
                code="model_load_failed",
            )
        return status.model_id, status.loaded


def _client_name(request: Request) -> str:
    name = str(request.path_params["name"])
    try:
        check_client(name)
    except ValueError as e:
        raise ApiError(400, str(e), param="name", code="invalid_client") from None
    return name


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, which must be JSON: 415 for another Content-Type (a web page cannot
    send JSON without a CORS preflight), 413 past `limit` bytes."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(
            415,
            f"the body must be application/json, not {media[:40] or 'untyped'}",
            param="Content-Type",
            code="unsupported_media_type",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the body is over {limit} bytes", code="request_too_large")
    chunks = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the body is over {limit} bytes", code="request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone from None
    return b"".join(chunks)
