"""`infill-lsp serve --tcp`: the language server on a TCP socket, for debugging and for
editors that connect rather than spawn.

- It listens on loopback only, unless the user names another address with `--host` and says
  `--allow-remote` too: the server has no authentication, and whoever reaches the port can
  read and edit what the editor opens.
- One client at a time: the server holds one editor's documents and settings. A second
  connection while one is open is closed at once (and logged).
- The client's disconnect ends the server cleanly: the models are closed and the process
  exits with status 0, as after `exit`, with no traceback.

pygls's own `start_tcp` does none of this: every connection takes over the one protocol's
writer, and a disconnect leaves the loop to be cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from pygls.io_ import run_async

from engine.net import bare_host, host_port, is_loopback
from lsp_server.protocol import InfillServer

log = logging.getLogger(__name__)


def listen_problem(host: str, *, allow_remote: bool) -> str | None:
    """Why the server must not listen on `host` (None when it may)."""
    if is_loopback(host) or allow_remote:
        return None
    return (
        f"--host {host} is not a loopback address: anyone who can reach it could read and edit "
        "the code the editor opens (the server has no authentication). Add --allow-remote to "
        "listen there anyway"
    )


def serve_tcp(server: InfillServer, host: str, port: int) -> int:
    """Serve one client on `host`:`port` (0: any free port); return the exit status when it
    has gone: `exit`'s (0 after `shutdown`, else 1), or 0 for a disconnect."""
    return asyncio.run(_serve(server, host, port))


async def _serve(server: InfillServer, host: str, port: int) -> int:
    ended = asyncio.Event()
    connected = False
    status = 0
    # pygls's message loop stops when this is set (pygls's `shutdown()` sets it).
    stop = server._stop_event = threading.Event()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connected, status
        peer = writer.get_extra_info("peername")
        if connected or ended.is_set():
            log.warning("refused a connection from %s: one client at a time", peer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            return
        connected = True
        log.info("client connected from %s", peer)
        server.protocol.set_writer(writer)
        try:
            await run_async(
                stop_event=stop,
                reader=reader,
                protocol=server.protocol,
                logger=log,
                error_handler=server.report_server_error,
            )
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            log.info("the connection broke: %s", e)
        except SystemExit as e:  # `exit`: pygls's handler ends the process with sys.exit
            status = e.code if isinstance(e.code, int) else 1
        finally:
            log.info("client disconnected: the server ends")
            ended.set()

    # `[::1]` passes the loopback check as the engine server's does, so it binds as there.
    listener = await asyncio.start_server(connection, bare_host(host), port)
    addresses = ", ".join(host_port(*s.getsockname()[:2]) for s in listener.sockets)
    log.info("listening on %s (one client at a time)", addresses)
    async with listener:
        await ended.wait()
    await _cancel_the_rest()
    await server.host.aclose()
    return status


async def _cancel_the_rest() -> None:
    """Cancel what still runs (a handler waiting for the model to load), as the end of the
    event loop would, without the traceback pygls's callback of a cancelled notification
    handler would log."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_quiet_cancellation)
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


def _quiet_cancellation(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)
