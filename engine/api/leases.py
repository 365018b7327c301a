"""Who uses a shared engine server, and when it may exit.

The language server of each editor window that shares the user's engine (engine/shared.py)
holds a lease on it, renewed every `engine.shared.RENEW_SECONDS`; a lease not renewed within
`LEASE_SECONDS` has ended (its window closed, or its process was killed and could not say so).
An engine started with an idle exit ends that long after its last lease ended and its last
request was answered: a window reopened within minutes finds its model loaded, and a machine
whose editors are all closed gets its memory back.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

#: The routes the completion model answers (the chat model waits for them to be quiet before
#: it loads: engine/api/loader.py).
COMPLETION_PATHS = frozenset(
    {"/v1/completions", "/v1/infill/score", "/v1/infill/branch", "/generate", "/generate/raw"}
)
#: Seconds a lease lasts without being renewed: three renewals missed (a language server whose
#: event loop is busy for a few seconds keeps its lease).
LEASE_SECONDS = 30.0


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux's /proc), else its peak (other Unixes);
    None where neither can be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if os.uname().sysname == "Darwin" else peak * 1024  # bytes there, KiB here


@dataclass(slots=True)
class Leases:
    """The leases of the engine's clients and the requests under way; whether the engine has
    been idle for `idle_exit` seconds (None: it never exits on its own). Used on the event
    loop only."""

    idle_exit: float | None = None
    _leases: dict[str, float] = field(default_factory=dict)  # name: when it ends
    _requests: int = 0
    #: Since when no lease was held nor request under way; None: since the first look.
    _idle_since: float | None = None
    _completions: int = 0  # requests under way on COMPLETION_PATHS
    _completion_ended_at: float | None = None

    def renew(self, name: str, now: float | None = None) -> None:
        """`name` holds a lease for `LEASE_SECONDS` more."""
        now = time.monotonic() if now is None else now
        self._expire(now)
        self._leases[name] = now + LEASE_SECONDS

    def leave(self, name: str, now: float | None = None) -> None:
        """`name` has left (its language server is shutting down)."""
        now = time.monotonic() if now is None else now
        if self._leases.pop(name, None) is not None:
            self._expire(now)
            if not self._leases:
                self._idle_since = now

    def names(self, now: float | None = None) -> list[str]:
        """The clients holding a lease, in the order they first took it."""
        self._expire(time.monotonic() if now is None else now)
        return list(self._leases)

    def request_started(self, path: str = "") -> None:
        self._requests += 1
        if path in COMPLETION_PATHS:
            self._completions += 1

    def request_ended(self, path: str = "", now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._requests -= 1
        self._idle_since = now
        if path in COMPLETION_PATHS:
            self._completions -= 1
            self._completion_ended_at = now

    def busy(self, quiet: float = 2.0) -> bool:
        """Whether the completion model is answering a request, or answered one less than
        `quiet` seconds ago (read from the model loader's thread: plain numbers, each read
        whole)."""
        ended = self._completion_ended_at
        return bool(self._completions) or (ended is not None and time.monotonic() - ended < quiet)

    def should_exit(self, now: float | None = None) -> bool:
        """Whether the engine has had no lease and no request for `idle_exit` seconds."""
        if self.idle_exit is None:
            return False
        now = time.monotonic() if now is None else now
        self._expire(now)
        if self._leases or self._requests:
            return False
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since >= self.idle_exit

    def _expire(self, now: float) -> None:
        ended = {name: until for name, until in self._leases.items() if until <= now}
        for name in ended:
            del self._leases[name]
        if ended and not self._leases:
            # Idle since the last lease ended, not since it was last renewed.
            self._idle_since = max(self._idle_since or 0.0, *ended.values())

    def describe(self, now: float | None = None) -> dict[str, Any]:
        """What /health tells a trusted caller about the engine process and its clients."""
        return {
            "pid": os.getpid(),
            "resident_bytes": resident_bytes(),
            "clients": self.names(now),
            "requests": self._requests,
            "idle_exit_seconds": self.idle_exit,
        }


class RequestCount:
    """Counts the requests under way (a stream until its end) into `Leases`, so that an
    engine never exits in the middle of an answer."""

    def __init__(self, app: ASGIApp, leases: Leases) -> None:
        self.app = app
        self._leases = leases

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        self._leases.request_started(path)
        try:
            await self.app(scope, receive, send)
        finally:
            self._leases.request_ended(path)
