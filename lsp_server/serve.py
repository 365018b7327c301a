"""`infill-lsp serve`: the language server's process.

Logging goes to stderr (or `--log-file`, opened by `open_log_file`: 0600, never through a
link), and INFO and above from our own loggers also to the client; the protocol runs on stdin
and a stdout of its own (`protocol_stdout`), or on a TCP socket (`tcp.py`). Building the
server and its handlers is `server.py`'s.

`-v` logs our own DEBUG lines, which name documents, sizes and times but never their text.
pygls logs every message the server sends whole (at INFO), completions and rewrites of the
user's code in them: its lines are logged only with `--log-protocol`, which says so.
"""

from __future__ import annotations

import io
import logging
import os
import stat
import sys
from typing import BinaryIO, TextIO

from lsp_server.settings import Settings

#: The log line of every command: time, level, logger, message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFileError(Exception):
    """The log file cannot be used safely; the message says why."""


def open_log_file(path: str) -> TextIO:
    """`path` opened to append log lines: created 0600 (a log names the user's files), never
    through a symbolic link (another user's link must not point our writes at their choice),
    and only a regular file of our own (a FIFO would block the server). An existing file that
    others may read is made 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    # O_NONBLOCK: opening a FIFO without a reader fails at once instead of waiting.
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    if os.path.islink(path):  # where O_NOFOLLOW is missing (Windows)
        raise LogFileError(f"the log file {path} is a symbolic link; name the file itself")
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if os.path.islink(path):
            raise LogFileError(
                f"the log file {path} is a symbolic link; name the file itself"
            ) from e
        raise LogFileError(f"cannot open the log file {path}: {e.strerror or e}") from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LogFileError(f"the log file {path} is not a regular file")
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise LogFileError(f"the log file {path} belongs to another user")
        if hasattr(os, "fchmod") and stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return io.TextIOWrapper(io.FileIO(fd, "a"), encoding="utf-8", line_buffering=True)
    except BaseException:
        os.close(fd)
        raise


def run_serve(
    base: Settings,
    *,
    log_file: str | None,
    verbose: bool,
    tcp: tuple[str, int] | None,
    log_protocol: bool = False,
) -> int:
    """Run the language server until its client exits, on stdio or on the TCP `(host, port)`;
    `base` is the settings the client's own override. The exit status."""
    from lsp_server.server import build_server

    try:
        stream = sys.stderr if log_file is None else open_log_file(log_file)
    except LogFileError as e:
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 2
    handler: logging.Handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose or log_protocol else logging.INFO)
    # pygls writes every message it sends whole, the user's code in them: only when asked.
    logging.getLogger("pygls").setLevel(logging.DEBUG if log_protocol else logging.WARNING)
    if log_protocol:
        logging.getLogger(__name__).warning(
            "--log-protocol: the messages the server sends are logged whole, your code in them"
        )
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
