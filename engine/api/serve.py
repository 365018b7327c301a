"""`infill-lsp engine`: the models of both roles, loaded once, served over HTTP by uvicorn.

Start-up: bind the socket (port 0: any free one), print `infill-lsp engine: listening on
http://HOST:PORT` to stderr, start loading the models in the background (completion first),
and serve; /health says when they are ready. SIGINT or SIGTERM: stop accepting, abort the
running jobs (their streams end with an error event), then free the models on a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Sequence

import uvicorn

from engine.api.app import build_app
from engine.api.loader import ModelLoader
from engine.models import ModelSet, model_spec
from engine.net import bare_host, host_port, is_loopback
from engine.specs import REMOTE_BACKEND, ModelOptions
from engine.types import Role

log = logging.getLogger(__name__)

DEFAULT_PORT = 8012
#: Seconds open connections get to finish once the server is told to stop (jobs are aborted
#: first, so streams end at once; this bounds a client that never reads).
GRACEFUL_SECONDS = 10


def open_to_others(host: str, api_key: str | None) -> str | None:
    """The warning for a server on `host` that other machines can reach and no key guards;
    None when only this machine can reach it, or a key is needed."""
    if is_loopback(host) or api_key:
        return None
    return (
        f"listening on {host}, which other machines can reach, without an API key: anyone who "
        "can reach it can use the models (set --api-key or INFILL_API_KEY)"
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: any free port)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        bare_host(host), port, type=socket.SOCK_STREAM
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """`http://HOST:PORT` of a bound socket, with the port it really got."""
    return f"http://{host_port(*sock.getsockname()[:2])}"


class _Server(uvicorn.Server):
    """uvicorn's server, which aborts the running jobs before it waits for connections to end
    (a long stream would hold the shutdown) and frees the models afterwards.

    The models are freed here rather than after `serve` returns: uvicorn re-raises a captured
    SIGTERM once it is done, which ends the process at once."""

    def __init__(self, config: uvicorn.Config, models: ModelLoader) -> None:
        super().__init__(config)
        self._models = models

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
) -> int:
    """Serve both roles' models until SIGINT or SIGTERM; the exit status."""
    if options.backend == REMOTE_BACKEND:
        print(
            "infill-lsp engine: error: the engine server serves local models (llama.cpp or "
            "transformers); --backend openai names a remote server, which editors can use "
            "directly",
            file=sys.stderr,
        )
        return 2
    if warning := open_to_others(host, api_key):
        log.warning("%s", warning)
    # Resolving the paths first: a default model that is not installed fails here, clearly.
    specs = {role: model_spec(role, options) for role in (Role.COMPLETION, Role.CHAT)}
    models = ModelLoader.for_model_set(ModelSet(specs))
    app = build_app(models, api_key=api_key, cors_origins=cors_origins, loopback=is_loopback(host))
    try:
        sock = bind(host, port)
    except OSError as e:
        print(f"infill-lsp engine: error: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    print(f"infill-lsp engine: listening on {url_of(sock)}", file=sys.stderr, flush=True)
    models.start()
    config = uvicorn.Config(
        app,
        log_config=None,  # our logging (stderr); the access log never shows headers
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        lifespan="off",
    )
    try:
        _Server(config, models).run(sockets=[sock])
    finally:
        sock.close()
    return 0
