"""`infill-lsp serve`: the language server's process.

Logging goes to stderr (or `--log-file`), and INFO and above from our own loggers also to
the client; the protocol runs on stdin and a stdout of its own (`protocol_stdout`), or on a
TCP socket (`tcp.py`). Building the server and its handlers is `server.py`'s.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import BinaryIO

from lsp_server.settings import Settings

#: The log line of every command: time, level, logger, message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def run_serve(
    base: Settings,
    *,
    log_file: str | None,
    verbose: bool,
    tcp: tuple[str, int] | None,
) -> int:
    """Run the language server until its client exits, on stdio or on the TCP `(host, port)`;
    `base` is the settings the client's own override. The exit status."""
    from lsp_server.server import build_server

    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("pygls").setLevel(logging.DEBUG if verbose else logging.WARNING)
    server = build_server(base)
    # INFO and above from our own loggers also reach the client (window/logMessage).
    server.client_log.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    for name in ("engine", "lsp_server"):
        logging.getLogger(name).addHandler(server.client_log)
    try:
        if tcp is not None:
            from lsp_server.tcp import serve_tcp

            return serve_tcp(server, *tcp)
        server.start_io(sys.stdin.buffer, protocol_stdout())
    finally:
        server.usage.close()  # a client gone without `shutdown`: the counts still written
    return 0


def protocol_stdout() -> BinaryIO:
    """A stream of our own for the protocol, and file descriptor 1 pointed at stderr.

    Native code writes to descriptor 1 behind Python's back: llama.cpp prints there, and
    llama-cpp-python points descriptors 1 and 2 at /dev/null while it loads a model, which
    swallowed every message the server sent meanwhile (a request answered then never got its
    answer). Neither can touch a duplicate of the original descriptor.
    """
    sys.stdout.flush()
    stream = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return stream
