"""The model servers the benchmarks start beside the language server (which bench/_lsp.py starts):
our engine server (`infill-lsp engine`) and llama.cpp's own `llama-server`.

Each is a subprocess on the loopback interface (`ModelServer`): started, ready once a request to
it says so (while the process lives; a server that never gets there is stopped), and stopped by
`close()`. One port finder serves those that need a port named up front.

`llama-server` is the engine llama.vim and llama.vscode complete through: one slot per
conversation, each with its own KV cache (`cache_prompt`). It is not part of the project and
not needed by its tests: `make llama-server` builds it from the llama.cpp sources that
llama-cpp-python vendors (bench/build_llama_server.sh), so that both run the same llama.cpp
code. Where the binary is absent, the benchmark that needs it says so and skips itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench._common import ROOT

#: Where `make llama-server` puts the binary (`LLAMA_SERVER` overrides).
DEFAULT_BINARY = ROOT / "build" / "llama-server" / "bin" / "llama-server"
LISTENING = re.compile(r"listening on (http://\S+)")


def free_port() -> int:
    """A loopback port no one listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class ModelServer:
    """A model server subprocess on the loopback interface, its output in a log file in
    `log_dir` (None: discarded)."""

    def __init__(self, label: str, command: list[str], log_dir: Path | None) -> None:
        self.label = label
        self.command = command
        self.log_path = None if log_dir is None else log_dir / f"{label.replace(' ', '_')}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self._log: IO[bytes] | None = None if self.log_path is None else self.log_path.open("wb")
        output = subprocess.DEVNULL if self._log is None else self._log
        self._process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
        )
        self.url = ""  # the base URL, without /v1

    @property
    def pid(self) -> int:
        return self._process.pid

    def log_text(self) -> str:
        return "" if self.log_path is None else self.log_path.read_text(errors="replace")

    def check_alive(self) -> None:
        if self._process.poll() is not None:
            tail = self.log_text()[-1500:]
            raise RuntimeError(f"{self.label} exited with {self._process.returncode}:\n{tail}")

    def wait_ready(self, ready: Callable[[], bool], wait_s: float) -> None:
        """Until `ready()` (a request to the server; one that cannot connect yet is not
        ready), while the process lives; closes the server if it never gets there."""
        deadline = time.monotonic() + wait_s
        try:
            while True:
                self.check_alive()
                with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
                    if ready():
                        return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.label} was not ready after {wait_s:.0f} s")
                time.sleep(0.2)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._log is not None:
            self._log.close()


# --- our engine server ------------------------------------------------------------------------


def start_engine_server(
    model: str,
    threads: int,
    context: int,
    log_dir: Path,
    wait_s: float = 300.0,
    extra_args: Sequence[str] = (),
) -> ModelServer:
    """`infill-lsp engine --port 0`: its URL from the line it prints, then `/health` ready.
    `extra_args` go at the end of its command line (a flag under test)."""
    server = ModelServer(
        "infill-lsp engine",
        [
            sys.executable,
            "-m",
            "lsp_server.cli",
            "engine",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--model",
            model,
            "--threads",
            str(threads),
            "--context-size",
            str(context),
            *extra_args,
        ],
        log_dir,
    )
    deadline = time.monotonic() + wait_s
    try:
        while not server.url:
            server.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{server.label} printed no address in {wait_s:.0f} s")
            found = LISTENING.search(server.log_text())
            if found:
                server.url = found[1].rstrip("/")
            else:
                time.sleep(0.1)
    except BaseException:
        server.close()
        raise

    def ready() -> bool:
        status = get_json(f"{server.url}/health").get("status")
        if status == "error":
            raise RuntimeError(f"{server.label} could not load its models: see its log")
        return bool(status == "ready")

    server.wait_ready(ready, max(1.0, deadline - time.monotonic()))
    return server


# --- llama.cpp's llama-server -----------------------------------------------------------------


def find_binary(given: str | None = None) -> Path | None:
    """The llama-server binary: `given`, else $LLAMA_SERVER, else `DEFAULT_BINARY`; None if
    it is not there."""
    path = Path(given or os.environ.get("LLAMA_SERVER") or DEFAULT_BINARY)
    return path if path.is_file() and os.access(path, os.X_OK) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerRun:
    seconds: float  # from sending the request to its full response
    prompt_evaluated: int  # prompt tokens llama-server evaluated (the rest came from a slot)
    generated: int


class LlamaServer:
    """A `llama-server` subprocess on a free loopback port (its output in a log file in
    `log_dir`, or discarded), and its `/completion` request. Its context is split among its
    slots: `context_per_slot` each. `extra_args` go at the end of its command line."""

    def __init__(
        self,
        binary: Path,
        model: str,
        *,
        threads: int,
        slots: int = 4,
        context_per_slot: int = 4096,
        extra_args: Sequence[str] = (),
        log_dir: Path | None = None,
    ) -> None:
        self.label = f"llama-server -t {threads} -tb {threads} -np {slots}"
        port = free_port()
        command = [
            str(binary),
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--threads",
            str(threads),
            "--threads-batch",
            str(threads),
            "--parallel",
            str(slots),
            "--ctx-size",
            str(context_per_slot * slots),
            *extra_args,
        ]
        self.server = ModelServer(self.label, command, log_dir)
        self.server.url = f"http://127.0.0.1:{port}"
        self.server.wait_ready(
            lambda: get_json(f"{self.server.url}/health").get("status") == "ok", 120.0
        )

    @property
    def pid(self) -> int:
        return self.server.pid

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def command(self) -> list[str]:
        return self.server.command

    def complete(self, prompt: str, n: int) -> PeerRun:
        """Greedy `/completion` on the prompt text (llama-server tokenizes it and adds BOS, as
        our server tokenizes the document: both sides pay for it) for exactly `n` tokens,
        reusing a slot's cache (`cache_prompt`); llama-server picks the slot whose prompt
        shares the most."""
        body = json.dumps(
            {
                "prompt": prompt,
                "n_predict": n,
                "temperature": 0.0,
                "cache_prompt": True,
                "ignore_eos": True,  # the same token count as ours, whatever comes out
                "id_slot": -1,
            }
        ).encode()
        request = urllib.request.Request(
            f"{self.server.url}/completion", body, {"Content-Type": "application/json"}
        )
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.load(response)
        seconds = time.perf_counter() - started
        timings = answer.get("timings", {})
        return PeerRun(
            seconds=seconds,
            prompt_evaluated=int(timings.get("prompt_n", -1)),
            generated=int(timings.get("predicted_n", -1)),
        )

    def close(self) -> None:
        self.server.close()
