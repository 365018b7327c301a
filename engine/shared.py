"""One engine per machine: the language servers of a user's editor windows share one engine
process (`python -m engine.api`) per set of model settings, instead of each loading its own copy
of the models (three language servers held three copies, 1,420 MB; and a model that fits a GPU
once does not fit twice).

- **Where**: a Unix domain socket in the user's runtime folder (`$XDG_RUNTIME_DIR/infill-lsp`,
  else a folder of the temporary folder named for the user), a folder only the user may open
  (made 0700, refused when another user owns it or others may enter it): no port, no key, no
  other user can connect.
- **Which**: an engine per set of model settings (`SharedEngine.key`: each role's model spec
  as resolved, the Python that runs it and the package's version). Windows whose settings
  differ get different engines: each engine keeps its own models' memory, and one with both
  sets would need a router between models that the API does not have.
- **Found or started**: `find_or_start` asks the socket's `/health`; when nothing answers it
  takes the engine's file lock, asks again (another window may have started it meanwhile),
  and starts one, detached from the language server, whose log goes to a file beside the
  socket. Two windows opening at once start one engine.
- **Held**: `SharedEngineLink` renews the language server's lease every `RENEW_SECONDS` on a
  thread of its own (engine/api/leases.py: the engine exits a while after its last lease
  ended); when the engine does not answer (killed, out of memory, a crash in llama.cpp) it
  finds or starts another at once, and the next request is served by it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from filelock import FileLock, Timeout

from engine.errors import EngineError, ModelLoadError
from engine.models import model_spec
from engine.specs import REMOTE_BACKEND, LoadOptions, ModelOptions, ModelSpec
from engine.types import Role

log = logging.getLogger(__name__)

#: Seconds between two renewals of a lease (engine/api/leases.py `LEASE_SECONDS` is three).
RENEW_SECONDS = 10.0
#: Seconds an engine stays after its last client left: a window closed and opened again within
#: minutes finds its model loaded.
DEFAULT_IDLE_EXIT = 300.0
#: Seconds a started engine has to answer on its socket (Python and the server's imports: about
#: 1.5 s on this project's 2-core test machine); its models load after that.
START_SECONDS = 60.0
#: Seconds /health may take: it answers at a p99 of 42 ms under load (docs/engine-server.md).
PING_SECONDS = 5.0
#: Bytes a socket's path may have: sun_path holds 108 on Linux, 104 on macOS, with its NUL.
MAX_SOCKET_PATH = 100
#: Bytes of an engine's log kept when it starts again: the log of a crash is read afterwards.
LOG_BYTES = 4 << 20
#: The folder of the user's shared engines in the runtime folder.
RUNTIME_NAME = "infill-lsp"
#: The host requests name: the engine server answers loopback Host names only.
BASE_URL = "http://localhost"


class SharedEngineError(EngineError):
    """The user's shared engine cannot be found, started or reached; the message says why."""


def runtime_folder(environ: Mapping[str, str] | None = None) -> Path:
    """The folder of the user's shared engines: `$XDG_RUNTIME_DIR/infill-lsp` (a folder the
    session owns, emptied at logout), else `infill-lsp-UID` in the temporary folder; a socket
    path too long for either falls back to `/tmp`. Made 0700 where missing; SharedEngineError
    when another user owns it or others may enter it (someone else could then put a socket
    there for our language server to send its code to)."""
    environ = os.environ if environ is None else environ
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    candidates = [Path(runtime) / RUNTIME_NAME] if runtime else []
    candidates.append(Path(tempfile.gettempdir()) / f"infill-lsp-{os.getuid()}")
    candidates.append(Path("/tmp") / f"infill-lsp-{os.getuid()}")
    # engine-KEY.sock: 7 + 16 + 5 bytes after the folder.
    fitting = [c for c in candidates if len(os.fsencode(c)) + 29 <= MAX_SOCKET_PATH]
    if not fitting:
        raise SharedEngineError(
            f"no runtime folder with a path short enough for a socket: {runtime}"
        )
    return private_folder(fitting[0])


def private_folder(folder: Path) -> Path:
    """`folder`, made 0700 if missing; SharedEngineError when it is not the user's alone."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError as e:
        raise SharedEngineError(f"cannot make the runtime folder {folder}: {e}") from e
    if not stat.S_ISDIR(info.st_mode):
        raise SharedEngineError(f"{folder} is not a folder")
    if info.st_uid != os.getuid():
        raise SharedEngineError(f"{folder} belongs to another user")
    if info.st_mode & 0o077:
        raise SharedEngineError(
            f"others may open {folder} (mode {stat.S_IMODE(info.st_mode):o}): it must be 0700"
        )
    return folder


def engine_options(options: ModelOptions) -> ModelOptions:
    """What an engine is started with: each role's model and how models load. Not the
    prompt's format, the next-edit model or a remote server's: the language server decides
    those, and windows that differ only in them share one engine."""
    load = {f.name: getattr(options, f.name) for f in dataclasses.fields(LoadOptions)}
    load.update(fim_family=None, endpoint=None, api_key=None)
    return ModelOptions(**load, model=options.model, chat_model=options.chat_model)


def completion_backend(options: ModelOptions) -> str:
    """The backend that runs the completion model `options` name (`openai` for a remote one).
    ModelLoadError when the model cannot be resolved."""
    spec = model_spec(Role.COMPLETION, options)
    return spec.resolved_backend() if isinstance(spec, ModelSpec) else REMOTE_BACKEND


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedEngine:
    """The user's engine for one set of model settings: where it listens, its lock and log."""

    options: ModelOptions  # what it loads (`engine_options`)
    folder: Path
    key: str  # what tells engines apart (module docstring, "Which")

    @classmethod
    def of(cls, options: ModelOptions, folder: Path | None = None) -> SharedEngine:
        """The engine for `options` in `folder` (default: `runtime_folder()`). The models are
        resolved first (settings, then environment, then defaults), so that two windows naming
        one model in different ways share it. ModelLoadError when one cannot be resolved."""
        options = engine_options(options)
        specs = {
            role.value: dataclasses.asdict(model_spec(role, options))
            for role in (Role.COMPLETION, Role.CHAT)
        }
        identity = {"specs": specs, "python": sys.executable, "version": _version()}
        text = json.dumps(identity, sort_keys=True, default=str)
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cls(options=options, folder=folder or runtime_folder(), key=key)

    @property
    def socket(self) -> Path:
        return self.folder / f"engine-{self.key}.sock"

    @property
    def lock(self) -> Path:
        return self.folder / f"engine-{self.key}.lock"

    @property
    def log(self) -> Path:
        return self.folder / f"engine-{self.key}.log"

    @property
    def endpoint(self) -> str:
        """The API's base URL, reached through `socket`."""
        return f"{BASE_URL}/v1"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("infill-lsp")
    except PackageNotFoundError:
        return "unknown"


def http_client(sock: Path, timeout: float = PING_SECONDS) -> httpx.Client:
    """A client whose requests go to the engine at `sock`."""
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(sock)),
        timeout=timeout,
        # Plain HTTP over the socket: loading the CA certificates would take 25-55 ms, which a
        # language server that is exiting may not have to tell the engine it left.
        verify=False,
        headers={"Accept-Encoding": "identity"},
    )


def ping(sock: Path, timeout: float = PING_SECONDS) -> dict[str, Any] | None:
    """The engine's /health at `sock`; None when nothing answers there."""
    if not sock.exists():
        return None
    try:
        with http_client(sock, timeout) as client:
            response = client.get(f"{BASE_URL}/health")
            if response.status_code != 200:
                return None
            health = response.json()
    except (httpx.HTTPError, ValueError, OSError):
        return None
    return health if isinstance(health, dict) else None


def engine_pid(sock: Path, timeout: float = PING_SECONDS) -> int | None:
    """The process id of the engine answering at `sock`; None when none answers."""
    pid = ((ping(sock, timeout) or {}).get("engine") or {}).get("pid")
    return pid if isinstance(pid, int) else None


def stop_engines(runtime: Path, sig: int = signal.SIGTERM) -> None:
    """Send `sig` to every engine answering in the runtime folder `runtime` (what
    `XDG_RUNTIME_DIR` names): a test session's or a benchmark's own engines at their end."""
    for sock in (runtime / RUNTIME_NAME).glob("engine-*.sock"):
        pid = engine_pid(sock, timeout=2.0)
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def completion_state(health: Mapping[str, Any]) -> tuple[str, str | None]:
    """The completion model's load state in an engine's /health, and its error."""
    for model in health.get("models") or ():
        if isinstance(model, dict) and Role.COMPLETION.value in (model.get("roles") or ()):
            return str(model.get("status")), model.get("error")
    return str(health.get("status")), None


def start(engine: SharedEngine, *, idle_exit: float | None) -> subprocess.Popen[bytes]:
    """Start `engine`'s process, detached (its own session: a language server that exits or
    is killed leaves it serving the others), its stderr appended to `engine.log`."""
    with contextlib.suppress(OSError):
        if engine.log.stat().st_size > LOG_BYTES:
            engine.log.unlink()
    options = {
        f.name: getattr(engine.options, f.name)
        for f in dataclasses.fields(ModelOptions)
        if getattr(engine.options, f.name) != f.default
    }
    command = [
        sys.executable,
        "-m",
        "engine.api",
        "--socket",
        str(engine.socket),
        "--options",
        json.dumps(options),
    ]
    if idle_exit is not None:
        command += ["--idle-exit", str(idle_exit)]
    fd = os.open(engine.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fd,
            cwd=engine.folder,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)


def find_or_start(
    engine: SharedEngine, *, idle_exit: float | None, timeout: float
) -> tuple[dict[str, Any], subprocess.Popen[bytes] | None]:
    """The engine's /health once its completion model is ready, and the process if this call
    started it. Under the engine's lock only until the started engine answers: the others
    waiting for the lock then find it. SharedEngineError when it cannot be started or does not
    answer in time; ModelLoadError when its completion model failed to load."""
    deadline = time.monotonic() + timeout
    process = None
    health = ping(engine.socket)
    if health is None:
        try:
            with FileLock(str(engine.lock), timeout=max(0.0, deadline - time.monotonic())):
                health = ping(engine.socket)
                if health is None:
                    process = start(engine, idle_exit=idle_exit)
                    health = _await_socket(engine, process, deadline)
        except Timeout as e:
            raise SharedEngineError(f"another process holds {engine.lock} too long") from e
    return _await_ready(engine, health, process, deadline), process


def _await_socket(
    engine: SharedEngine, process: subprocess.Popen[bytes], deadline: float
) -> dict[str, Any]:
    limit = min(deadline, time.monotonic() + START_SECONDS)
    while time.monotonic() < limit:
        if process.poll() is not None:
            raise SharedEngineError(
                f"the engine exited with status {process.returncode} as it started: "
                f"{_log_tail(engine.log)}"
            )
        health = ping(engine.socket)
        if health is not None:
            return health
        time.sleep(0.05)
    process.kill()
    raise SharedEngineError(
        f"the engine did not answer on {engine.socket} within {START_SECONDS:.0f} s"
    )


def _await_ready(
    engine: SharedEngine,
    health: dict[str, Any],
    process: subprocess.Popen[bytes] | None,
    deadline: float,
) -> dict[str, Any]:
    while True:
        state, error = completion_state(health)
        if state == "ready":
            return health
        if state == "error":
            raise ModelLoadError(error or f"the engine's model failed to load; see {engine.log}")
        if time.monotonic() >= deadline:
            raise SharedEngineError(f"the engine's model did not load in time ({engine.log})")
        time.sleep(0.1)
        again = ping(engine.socket)
        if again is None:
            code = None if process is None else process.poll()
            raise SharedEngineError(
                f"the engine stopped answering while its model loaded"
                f"{'' if code is None else f' (exit status {code})'}: {_log_tail(engine.log)}"
            )
        health = again


def _log_tail(path: Path, size: int = 600) -> str:
    """The last lines of an engine's log, for an error message."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return f"its log {path} cannot be read"
    return " | ".join(line for line in text.splitlines()[-4:] if line.strip()) or "(no log)"


def client_name() -> str:
    """A language server's name as the engine knows it: its process id and a random part
    (process ids are reused)."""
    return f"{socket.gethostname()[:20]}.{os.getpid()}.{secrets.token_hex(4)}".replace("-", "_")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineView:
    """What a language server knows of its shared engine, for `infill/status` and `doctor`."""

    socket: str
    pid: int | None
    clients: int
    resident_bytes: int | None
    restarts: int
    error: str | None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SharedEngineLink:
    """A language server's hold on its shared engine: found or started (`ensure`), its lease
    renewed on a thread of its own, started again when it stops answering (`revive` asks for a
    look at once), left at the end (`close`)."""

    def __init__(
        self,
        engine: SharedEngine,
        *,
        idle_exit: float | None = DEFAULT_IDLE_EXIT,
        timeout: float = 600.0,
        client: str | None = None,
    ) -> None:
        self.engine = engine
        self.client = client or client_name()
        self.idle_exit = idle_exit
        self.timeout = timeout
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one find-or-start at a time in this process
        self._processes: list[subprocess.Popen[bytes]] = []  # started here: reaped when done
        self._engine: dict[str, Any] = {}  # /health's `engine`, or the lease's answer
        self._restarts = 0
        self._error: str | None = None
        self._ready = False

    def ensure(self) -> None:
        """Find or start the engine, wait until its completion model is ready, take the lease
        and keep it. Blocks (up to `timeout`): call it on a loading thread."""
        self._find_or_start()
        self._renew()
        if self._thread is None and not self._closed.is_set():
            self._thread = threading.Thread(
                target=self._keep, name="infill-engine-lease", daemon=True
            )
            self._thread.start()

    def revive(self) -> None:
        """A request could not reach the engine: look now (from any thread; returns at once)."""
        self._wake.set()

    def view(self) -> EngineView:
        """The engine as last heard of."""
        known = self._engine
        return EngineView(
            socket=str(self.engine.socket),
            pid=known.get("pid"),
            clients=len(known.get("clients") or ()),
            resident_bytes=known.get("resident_bytes"),
            restarts=self._restarts,
            error=self._error,
        )

    def close(self, timeout: float = 1.0) -> None:
        """Leave the engine (it exits `idle_exit` after its last client), stop renewing."""
        self._closed.set()
        self._wake.set()
        with (
            contextlib.suppress(httpx.HTTPError, OSError),
            http_client(self.engine.socket, timeout) as client,
        ):
            client.delete(f"{self.engine.endpoint}/infill/clients/{self.client}")

    # --- the lease's thread ------------------------------------------------------------------

    def _find_or_start(self) -> None:
        with self._lock:
            health, process = find_or_start(
                self.engine, idle_exit=self.idle_exit, timeout=self.timeout
            )
            if process is not None:
                self._processes.append(process)
                if self._ready:
                    self._restarts += 1
                log.info(
                    "started the shared engine (pid %s) on %s", process.pid, self.engine.socket
                )
            self._engine = health.get("engine") or {}
            self._ready = True
            self._error = None

    def _renew(self) -> None:
        with http_client(self.engine.socket) as client:
            response = client.post(f"{self.engine.endpoint}/infill/clients/{self.client}")
            response.raise_for_status()
            answer = response.json()
        if isinstance(answer, dict):
            self._engine = answer

    def _keep(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(RENEW_SECONDS)
            self._wake.clear()
            if self._closed.is_set():
                return
            self._reap()
            try:
                self._renew()
                continue
            except (httpx.HTTPError, ValueError, OSError) as e:
                gone = f"{type(e).__name__}: {e}"
            log.warning("the shared engine on %s does not answer (%s)", self.engine.socket, gone)
            try:
                self._find_or_start()
                self._renew()
            except (EngineError, httpx.HTTPError, ValueError, OSError) as e:
                self._error = str(e)
                log.error("the shared engine cannot be started again: %s", e)
                self._closed.wait(RENEW_SECONDS)  # not in a loop faster than the lease's

    def _reap(self) -> None:
        """Collect the exit status of engines started here that ended (no zombie is left)."""
        self._processes = [p for p in self._processes if p.poll() is None]
