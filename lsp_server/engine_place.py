"""Where the language server's models run: the `engine` setting and what it becomes.

- `auto` (the default): the user's shared engine (engine/shared.py), found or started on a
  Unix socket, so that every editor window uses one copy of the models; where it cannot be
  (no Unix sockets, the engine server's packages missing, a runtime folder others may open, a
  backend only this process knows), the models load here and `infill/status` says why.
  `$INFILL_ENGINE` may name `here` or a URL instead.
- `here`: in this process, as one editor window alone would have them.
- a URL: an engine server already running (`infill-lsp engine` on another port or machine),
  as `backend: openai` with that endpoint.

`backend: openai` names a remote server for every role whatever this setting says.
"""

from __future__ import annotations

import enum
import importlib.util
import logging
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineError
from engine.models import model_spec
from engine.shared import SharedEngine, SharedEngineLink, completion_backend, ping
from engine.specs import REMOTE_BACKEND, ModelSpec, RemoteSpec, remote_base_url
from engine.types import Role
from lsp_server.settings import Settings

log = logging.getLogger(__name__)

#: The environment's choice where the setting is `auto`: `here`, or an engine server's URL.
ENGINE_ENV = "INFILL_ENGINE"
#: The backends a shared engine runs: the product's own (a backend registered in this process
#: only, a test's double, cannot load in another).
SHAREABLE_BACKENDS = frozenset({"llama.cpp", "transformers"})
#: What the engine server needs (the `server` packages, installed with the product).
SERVER_MODULES = ("starlette", "uvicorn", "pydantic")


class EngineMode(enum.Enum):
    SHARED = "shared"  # the user's shared engine, on a Unix socket
    HERE = "here"  # in this process
    SERVER = "server"  # an engine server at a URL (the `engine` setting)
    REMOTE = "remote"  # `backend: openai`


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where the models run, and why there when `auto` could not share them."""

    mode: EngineMode
    shared: SharedEngine | None = None
    url: str | None = None
    why_here: str | None = None


def place(settings: Settings, environ: Mapping[str, str] | None = None) -> Placement:
    """Where `settings` put the models (module docstring)."""
    if settings.backend == REMOTE_BACKEND:
        return Placement(mode=EngineMode.REMOTE)
    environ = os.environ if environ is None else environ
    choice = settings.engine
    if choice == "auto":
        choice = environ.get(ENGINE_ENV, "").strip() or "auto"
    if choice == "here":
        return Placement(mode=EngineMode.HERE)
    if choice != "auto":
        try:
            return Placement(mode=EngineMode.SERVER, url=remote_base_url(choice))
        except EngineError as e:
            return Placement(mode=EngineMode.HERE, why_here=f"{ENGINE_ENV}: {e}")
    why = _cannot_share(settings)
    if why is not None:
        return Placement(mode=EngineMode.HERE, why_here=why)
    try:
        shared = SharedEngine.of(settings.model_options())
    except EngineError as e:
        return Placement(mode=EngineMode.HERE, why_here=str(e))
    return Placement(mode=EngineMode.SHARED, shared=shared)


def _cannot_share(settings: Settings) -> str | None:
    """Why this process cannot share the user's engine; None when it can."""
    if sys.platform == "win32" or not hasattr(socket, "AF_UNIX"):
        return "this system has no Unix domain sockets for a shared engine"
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return f"the engine server's packages are not installed ({', '.join(missing)})"
    try:
        backend = completion_backend(settings.model_options())
    except EngineError:
        return None  # the shared engine reports the same error as a load here would
    if backend not in SHAREABLE_BACKENDS:
        return f"the {backend} backend runs in this process only"
    return None


def placed_specs(
    settings: Settings,
    placement: Placement,
    link: SharedEngineLink | None,
    client: str | None = None,
) -> dict[Role, ModelSpec | RemoteSpec]:
    """The model of each role where `placement` runs it; `client`: the name this window's
    requests give an engine server (its turns and figures are per window)."""
    options = settings.model_options()
    local = {role: model_spec(role, options) for role in Role}
    if placement.mode in (EngineMode.HERE, EngineMode.REMOTE):
        return local
    if placement.mode is EngineMode.SERVER:
        assert placement.url is not None
        endpoint, sock, revive = placement.url, None, None
    else:
        assert placement.shared is not None
        assert link is not None
        endpoint = placement.shared.endpoint
        sock, revive = str(placement.shared.socket), link.revive

    def remote(role: Role) -> RemoteSpec:
        return RemoteSpec(
            role=role,
            endpoint=endpoint,
            api_key=settings.api_key if placement.mode is EngineMode.SERVER else None,
            context_size=settings.context_size,
            fim_family=settings.fim_family,
            socket=sock,
            on_unreachable=revive,
            client=client,
        )

    specs: dict[Role, ModelSpec | RemoteSpec] = {
        Role.COMPLETION: remote(Role.COMPLETION),
        Role.CHAT: remote(Role.CHAT),
    }
    # The engine serves the completion and chat models; a next-edit model of its own loads
    # here (the default one is the completion model, served there).
    same = local[Role.NEXT_EDIT] == local[Role.COMPLETION]
    specs[Role.NEXT_EDIT] = remote(Role.NEXT_EDIT) if same else local[Role.NEXT_EDIT]
    return specs


def engine_report(settings: Settings) -> dict[str, Any]:
    """Where the models of `settings` run, for `doctor`: the mode, why here where `auto`
    could not share them, and the shared engine (running or not: the first editor window
    starts it) with its process, windows and memory."""
    placement = place(settings)
    report: dict[str, Any] = {"mode": placement.mode.value}
    if placement.why_here is not None:
        report["why_here"] = placement.why_here
    if placement.url is not None:
        report["url"] = placement.url
    if placement.shared is None:
        return report
    report["socket"] = str(placement.shared.socket)
    health = ping(placement.shared.socket)
    report["running"] = health is not None
    if health is not None:
        engine = health.get("engine") or {}
        report |= {
            "pid": engine.get("pid"),
            "clients": len(engine.get("clients") or ()),
            "resident_bytes": engine.get("resident_bytes"),
            "status": health.get("status"),
        }
    return report
