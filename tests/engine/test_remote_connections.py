"""The remote backend keeps its connections: an answer read to its end gives its connection back
to the pool for the next request, and a cancelled one closes its own (engine/backends/openai.py).

Before, the reader stopped at the choice's end and was cancelled while its response closed: the
pool counted that connection as in use for good, a new one was opened for every request, and
after 100 of them (httpx's limit) every request waited for the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from engine.backends.openai import RemoteEngine
from engine.backends.openai_discovery import Discovery
from engine.specs import RemoteSpec
from engine.types import FinishReason, GenerationRequest, Role, SamplingParams, StopConditions

REQUESTS = 120  # more than httpx's 100 connections


def _answer() -> bytes:
    """A streamed completion as our engine server sends it: a piece, the end (with usage),
    the usage chunk, `[DONE]`."""
    events = [
        {"choices": [{"index": 0, "text": "x = 1", "finish_reason": None}]},
        {
            "choices": [{"index": 0, "text": "", "finish_reason": "stop", "stop_reason": "\n"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        },
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return body.encode()


class Server:
    """An HTTP/1.1 server that answers every POST with `_answer()` and keeps the connection
    open; it counts the connections it accepted, and those still open. `slow`: it sends the
    first event, then waits for the client to go away (a model still generating)."""

    def __init__(self, *, slow: bool = False) -> None:
        self.slow = slow
        self.connections = 0
        self.open = 0
        self._closed = asyncio.Event()  # set when a connection closes
        self.requests = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        body = _answer()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests += 1
                if self.slow:
                    first = body[: body.index(b"\n\n") + 2]
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n"
                        + f"{len(first):x}\r\n".encode()
                        + first
                        + b"\r\n"
                    )
                    await writer.drain()
                    await reader.read()  # until the client closes the connection
                    return
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            self._closed.set()
            writer.close()

    async def all_closed(self) -> bool:
        """Whether the clients close every connection (within a second: the server sees a
        close once its loop reads it)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                while self.open:
                    self._closed.clear()
                    await self._closed.wait()
        return self.open == 0

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = Server()
    yield server
    await server.stop()


@pytest.fixture
async def slow_server() -> AsyncIterator[Server]:
    server = Server(slow=True)
    yield server
    await server.stop()


def _engine(endpoint: str) -> RemoteEngine:
    spec = RemoteSpec(role=Role.COMPLETION, endpoint=endpoint)
    discovery = Discovery(model="m", context_size=4096, fim_family=None, ours=True, extensions=True)
    return RemoteEngine(spec, discovery)


def _request() -> GenerationRequest:
    return GenerationRequest(
        prompt="def f():\n    ",
        sampling=SamplingParams(max_tokens=16),
        stops=StopConditions(stop=("\n",)),
    )


async def test_answers_read_to_their_end_reuse_one_connection(server: Server) -> None:
    engine = _engine(await server.start())
    try:
        for _ in range(REQUESTS):
            async with asyncio.timeout(10):  # not the pool's timeout (120 s)
                deltas = [d async for d in engine.generate(_request())]
            assert "".join(d.text for d in deltas) == "x = 1"
            assert deltas[-1].finish_reason == FinishReason.STOP
    finally:
        engine.close()
    assert server.requests == REQUESTS
    # The connection of the answer just over may still be reading its last lines when the
    # next request starts: two at most.
    assert server.connections <= 2


async def test_cancelled_requests_close_their_connections(slow_server: Server) -> None:
    engine = _engine(await slow_server.start())
    try:
        for _ in range(REQUESTS):
            request = _request()
            deltas = []
            async with asyncio.timeout(10):  # not the pool's timeout (120 s)
                async for delta in engine.generate(request):
                    deltas.append(delta)
                    if delta.text:
                        assert engine.cancel(request.request_id)
            assert deltas[-1].finish_reason == FinishReason.CANCELLED
        assert await slow_server.all_closed()  # the engine keeps none of them
    finally:
        engine.close()
    assert slow_server.requests == REQUESTS
