"""`infill-lsp engine`: the models of both roles, loaded once, served over HTTP by uvicorn.

Start-up: refuse what would expose the models (a host others can reach without a key unless
`--allow-no-key`, CORS for every origin without a key), bind the socket (port 0: any free
one), print `infill-lsp engine: listening on http://HOST:PORT` to stderr, start loading the
models in the background (completion first), and serve; /health says when they are ready.
SIGINT or SIGTERM: stop accepting, abort the running jobs (their streams end with an error
event), then free the models on a thread.

uvicorn runs with the connection deadlines of `connections`, at most `max_connections` open
connections (one more is answered 503), and no proxy headers: a client cannot claim another
address with X-Forwarded-For.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from engine.api.app import DEFAULT_MAX_JOBS, build_app
from engine.api.connections import Deadlines, protocol_with
from engine.api.leases import Leases
from engine.api.loader import ModelLoader
from engine.api.schema import DEFAULT_TOKEN_BUDGET
from engine.models import ModelSet, model_spec
from engine.net import bare_host, host_port, is_loopback
from engine.specs import REMOTE_BACKEND, ModelOptions
from engine.types import Role

log = logging.getLogger(__name__)

DEFAULT_PORT = 8012
#: Seconds open connections get to finish once the server is told to stop (jobs are aborted
#: first, so streams end at once; this bounds a client that never reads).
GRACEFUL_SECONDS = 10


#: What a client gets for each part of a request (`connections`).
DEADLINES = Deadlines()
#: Open connections at once (slow ones included); one more request is answered 503.
DEFAULT_MAX_CONNECTIONS = 512
#: What lets other machines in without a key.
NO_KEY_FLAGS = "--api-key-file, --api-key or INFILL_API_KEY"


def exposure_problem(
    host: str, api_key: str | None, *, allow_no_key: bool = False, cors_origins: Sequence[str] = ()
) -> str | None:
    """Why the server must not start as asked (None when it may): a host other machines can
    reach without a key, unless `allow_no_key`; CORS for every origin without a key (any web
    page a user opens could use the models)."""
    if api_key:
        return None
    if "*" in cors_origins:
        return (
            f"--cors-origin '*' lets any web page call the server: it needs a key ({NO_KEY_FLAGS})"
        )
    if is_loopback(host) or allow_no_key:
        return None
    return (
        f"--host {host} can be reached by other machines, and there is no API key: anyone who "
        f"can reach it could use the models. Set one ({NO_KEY_FLAGS}), or add --allow-no-key "
        "to listen there anyway"
    )


def open_to_others(host: str, api_key: str | None) -> str | None:
    """The warning for a server on `host` that other machines can reach and no key guards
    (started with --allow-no-key); None when only this machine can reach it, or a key is
    needed."""
    if is_loopback(host) or api_key:
        return None
    return (
        f"listening on {host}, which other machines can reach, without an API key: anyone who "
        f"can reach it can use the models ({NO_KEY_FLAGS} sets one)"
    )


def read_key_file(path: str | Path) -> str:
    """The key in a file (its first line, without surrounding spaces): a key on the command
    line is visible to every user in `ps`. ValueError saying why when there is none."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the API key file {path}: {e}") from e
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise ValueError(f"the API key file {path} is empty")
    return key


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: any free port)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        bare_host(host), port, type=socket.SOCK_STREAM
    )[0]
    sock = socket.socket(family, kind, proto)
    if sys.platform != "win32":
        # A restart binds at once despite the old socket's TIME_WAIT. On Windows the option
        # lets another process take a port in use, so it stays off there.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix domain socket at `path`, which only this user may connect to (made
    0600 before it listens; its folder is the user's own too: engine/shared.py). A file left
    there by an engine that died is replaced: whoever calls this holds the engine's lock."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def uvicorn_config(
    app: Any,
    *,
    deadlines: Deadlines = DEADLINES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> uvicorn.Config:
    """How uvicorn serves `app`: h11 with our deadlines, bounded connections, no proxy
    headers, our logging (stderr; the access log never shows headers)."""
    return uvicorn.Config(
        app,
        http=protocol_with(deadlines),
        log_config=None,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        lifespan="off",
        proxy_headers=False,
        limit_concurrency=max_connections,
    )


def url_of(sock: socket.socket) -> str:
    """`http://HOST:PORT` of a bound socket, with the port it really got."""
    return f"http://{host_port(*sock.getsockname()[:2])}"


class _Server(uvicorn.Server):
    """uvicorn's server, which aborts the running jobs before it waits for connections to end
    (a long stream would hold the shutdown) and frees the models afterwards.

    The models are freed here rather than after `serve` returns: uvicorn re-raises a captured
    SIGTERM once it is done, which ends the process at once."""

    def __init__(
        self, config: uvicorn.Config, models: ModelLoader, leases: Leases | None = None
    ) -> None:
        super().__init__(config)
        self._models = models
        self._leases = leases

    async def on_tick(self, counter: int) -> bool:
        # uvicorn calls this every 0.1 s; once a second is enough to notice an idle engine.
        if counter % 10 == 0 and self._leases is not None and self._leases.should_exit():
            log.info("no client for %.0f s: the engine exits", self._leases.idle_exit or 0)
            return True
        return await super().on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own re-raises the signal after a graceful shutdown, so SIGTERM would end
        # the process with status 143 after all; a clean stop here exits 0.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._models.stop()
        await super().shutdown(sockets)
        await asyncio.to_thread(self._models.close)


def run_server(
    options: ModelOptions,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    allow_no_key: bool = False,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    max_jobs: int = DEFAULT_MAX_JOBS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    socket_path: Path | None = None,
    idle_exit: float | None = None,
) -> int:
    """Serve both roles' models until SIGINT or SIGTERM (or, with `idle_exit`, that many
    seconds after the last client left); the exit status. `socket_path`: listen on that Unix
    domain socket instead of `host`:`port` (a shared engine, engine/shared.py)."""
    if options.backend == REMOTE_BACKEND:
        print(
            "infill-lsp engine: error: the engine server serves local models (llama.cpp or "
            "transformers); --backend openai names a remote server, which editors can use "
            "directly",
            file=sys.stderr,
        )
        return 2
    problem = exposure_problem(host, api_key, allow_no_key=allow_no_key, cors_origins=cors_origins)
    if problem:
        print(f"infill-lsp engine: error: {problem}", file=sys.stderr)
        return 2
    if warning := open_to_others(host, api_key):
        log.warning("%s", warning)
    # Resolving the paths first: a default model that is not installed fails here, clearly.
    specs = {role: model_spec(role, options) for role in (Role.COMPLETION, Role.CHAT)}
    leases = Leases(idle_exit=idle_exit)
    models = ModelLoader.for_model_set(ModelSet(specs), busy=leases.busy)
    app = build_app(
        models,
        api_key=api_key,
        cors_origins=cors_origins,
        loopback=is_loopback(host),
        token_budget=token_budget,
        max_jobs=max_jobs,
        leases=leases,
    )
    where = f"{host}:{port}" if socket_path is None else str(socket_path)
    try:
        sock = bind(host, port) if socket_path is None else bind_unix(socket_path)
    except OSError as e:
        print(f"infill-lsp engine: error: cannot listen on {where}: {e}", file=sys.stderr)
        return 1
    # The socket file's own inode: at the end, the file is removed only if it is still ours.
    bound = None if socket_path is None else os.stat(socket_path).st_ino
    url = url_of(sock) if socket_path is None else f"unix:{socket_path}"
    print(f"infill-lsp engine: listening on {url}", file=sys.stderr, flush=True)
    models.start()
    config = uvicorn_config(app, max_connections=max_connections)
    try:
        _Server(config, models, leases).run(sockets=[sock])
    finally:
        sock.close()
        if socket_path is not None and bound is not None:
            _remove_own(socket_path, bound)
    return 0


def _remove_own(path: Path, inode: int) -> None:
    """Remove the socket file at `path` if it is still this server's (`inode`): a newer
    engine may have replaced it after this one stopped answering."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            path.unlink()
