"""OpenAI-compatible servers as real processes: our own `infill-lsp engine`, and llama-cpp-python's
server (a peer that no one here wrote). Each is started through its real command and waited
for until it answers; its stderr is kept for the failure message."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from lsp_helpers import REPO, server_env

#: Loading the models takes seconds; a slow shared machine gets generous deadlines.
START_SECONDS = 180


@dataclass
class ServerProcess:
    """A server process, where it listens, and what it wrote to stderr so far."""

    process: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT, without /v1
    log: list[str]

    @property
    def api(self) -> str:
        """The OpenAI API's base URL."""
        return f"{self.url}/v1"

    def client(self, api_key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.api, api_key=api_key, max_retries=0, timeout=120)

    def get(self, path: str, api_key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        response = httpx.get(f"{self.url}{path}", headers=headers, timeout=30)
        response.raise_for_status()
        return response.json()

    def output(self) -> str:
        return "".join(self.log)


#: Our own engine server (older tests name it so).
EngineProcess = ServerProcess


def free_port() -> int:
    """A TCP port nothing listens on now (for a server that must come back on the same one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(command: Sequence[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], Any]:
    """Start `command`; its stderr lines go to a list and a queue, read on a thread so that
    the pipe never fills and blocks the server."""
    process = subprocess.Popen(
        list(command),
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    log: list[str] = []

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    return process, (lines, log)


def _wait_until_answers(server: ServerProcess, path: str, ready: Any, deadline: float) -> None:
    """Poll `path` until `ready(json)` holds; fail with the server's log if it dies first."""
    pause = threading.Event()
    while True:
        if server.process.poll() is not None:
            pytest.fail(f"{server.process.args!r} exited:\n{server.output()}")
        try:
            if ready(server.get(path)):
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            server.process.kill()
            pytest.fail(f"{server.url}{path} never became ready:\n{server.output()}")
        pause.wait(0.1)


def start_engine(*args: str, port: int = 0, env: dict[str, str] | None = None) -> ServerProcess:
    """`infill-lsp engine --port PORT ARGS`, once it says where it listens and /health is
    ready."""
    command = [sys.executable, "-m", "lsp_server.cli", "engine", "--port", str(port), *args]
    process, (lines, log) = _spawn(command, {**server_env(), **(env or {})})
    deadline = time.monotonic() + START_SECONDS
    url = None
    while url is None:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            process.kill()
            pytest.fail(f"infill-lsp engine did not say where it listens:\n{''.join(log)}")
        if "listening on " in line:
            url = line.split("listening on ", 1)[1].strip()
    engine = ServerProcess(process, url, log)
    _wait_until_answers(engine, "/health", lambda h: h["status"] == "ready", deadline)
    return engine


def stop_engine(engine: ServerProcess) -> None:
    """SIGTERM, which ends our engine server cleanly (status 0)."""
    engine.process.terminate()
    try:
        assert engine.process.wait(60) == 0, "SIGTERM ends the server cleanly"
    finally:
        if engine.process.poll() is None:
            engine.process.kill()


def start_llama_cpp_server(models: Sequence[dict[str, Any]], folder: Path) -> ServerProcess:
    """`python -m llama_cpp.server --config_file FILE` serving `models` (llama-cpp-python's
    ModelSettings, each with a `model_alias`) on a free port, once it lists them."""
    port = free_port()
    config = folder / "llama_cpp_server.json"
    config.write_text(json.dumps({"host": "127.0.0.1", "port": port, "models": list(models)}))
    command = [sys.executable, "-m", "llama_cpp.server", "--config_file", str(config)]
    process, (_, log) = _spawn(command, server_env())
    server = ServerProcess(process, f"http://127.0.0.1:{port}", log)
    aliases = {m["model_alias"] for m in models}
    _wait_until_answers(
        server,
        "/v1/models",
        lambda listed: {m["id"] for m in listed["data"]} == aliases,
        time.monotonic() + START_SECONDS,
    )
    return server


def stop_process(server: ServerProcess) -> None:
    """SIGTERM, then SIGKILL if it does not end (for a server whose exit status is not ours
    to check)."""
    server.process.terminate()
    try:
        server.process.wait(60)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(60)
