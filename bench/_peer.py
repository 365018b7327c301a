"""llama.cpp's own `llama-server` as a peer for the latency benchmarks (bench/documents.py).

`llama-server` is the engine llama.vim and llama.vscode complete through: one slot per
conversation, each with its own KV cache (`cache_prompt`). It is not part of the project and
not needed by its tests: `make llama-server` builds it from the llama.cpp sources that
llama-cpp-python vendors (bench/build_llama_server.sh), so that both run the same llama.cpp
code. Where the binary is absent, the benchmark that needs it says so and skips itself.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT

#: Where `make llama-server` puts the binary (`LLAMA_SERVER` overrides).
DEFAULT_BINARY = ROOT / "build" / "llama-server" / "bin" / "llama-server"


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
    """A `llama-server` subprocess on a free loopback port."""

    def __init__(
        self,
        binary: Path,
        model: str,
        *,
        threads: int,
        slots: int = 4,
        context_per_slot: int = 4096,
    ) -> None:
        self.label = f"llama-server -t {threads} -tb {threads} -np {slots}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        command = [
            str(binary),
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--threads-batch",
            str(threads),
            "--parallel",
            str(slots),
            "--ctx-size",
            str(context_per_slot * slots),
        ]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready()

    @property
    def pid(self) -> int:
        return self._process.pid

    def _wait_ready(self, wait_s: float = 120.0) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self._process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if json.load(r).get("status") == "ok":
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.label} was not ready after {wait_s:.0f} s")

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
            f"http://127.0.0.1:{self.port}/completion",
            body,
            {"Content-Type": "application/json"},
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
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def rss_mib(pid: int) -> float:
    """Resident memory of process `pid`, MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
