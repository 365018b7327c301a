"""Slow and greedy clients against the engine server over real sockets on loopback: one client must
not hold the server's connections or its model from the others. Trickled heads and bodies are cut
off at their deadlines while /health answers, a stream nobody reads is cut off and its generation
cancelled, and the bounds on connections and on generation requests answer 503 rather than queue
without end."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fake_backend import BYTE_OFFSET
from scripted_servers import Server, serve_in_thread, wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.api.connections import Deadlines
from engine.api.serve import DEADLINES, bind, url_of

#: The deadlines of the tests that do not measure the defaults: short, so the tests are.
SHORT = Deadlines(head_seconds=2.0, body_seconds=2.0, send_seconds=2.0)


def address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


class Sockets:
    """Raw client sockets, and which of them the server has closed."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.open: set[socket.socket] = set()

    def connect(self, where: tuple[str, int], first: bytes, **options: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        for option, value in options.items():
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, option), value)
        sock.connect(where)
        sock.sendall(first)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)
        self.open.add(sock)
        return sock

    def trickle(self, data: bytes) -> None:
        """One more piece on every open socket (a socket the server closed may refuse it)."""
        for sock in list(self.open):
            try:
                sock.send(data)
            except OSError:
                self._closed(sock)

    def reap(self) -> None:
        """Forget the sockets the server closed (end of stream or reset)."""
        for key, _ in self.selector.select(timeout=0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._closed(sock)

    def _closed(self, sock: socket.socket) -> None:
        if sock in self.open:
            self.open.discard(sock)
            self.selector.unregister(sock)
            sock.close()

    def close(self) -> None:
        for sock in list(self.open):
            self._closed(sock)
        self.selector.close()


def read_to_end(sock: socket.socket) -> str:
    """Read until the server closes: "reset" or "closed" (socket.timeout if it does not)."""
    sock.setblocking(True)
    sock.settimeout(30)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return "reset"
    return "closed"


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    opened = Sockets()
    yield opened
    opened.close()


def test_hundreds_of_trickling_heads_are_closed_within_15_s_while_health_answers(
    make_server: Callable[..., Server], sockets: Sockets
) -> None:
    """Slowloris with the default deadlines: 300 sockets each send a request line, then a
    header line a second, never the blank line that ends the head."""
    assert DEADLINES.head_seconds <= 10
    server = make_server()
    where = address(server)
    for _ in range(300):
        sockets.connect(where, b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
    started = time.monotonic()
    answers = []
    pause = threading.Event()
    with httpx.Client(base_url=server.url, timeout=5) as http:
        while sockets.open and time.monotonic() - started < 15:
            sockets.trickle(b"X-Slow: 1\r\n")
            answers.append(http.get("/health").status_code)
            sockets.reap()
            pause.wait(1.0)
    assert not sockets.open, f"{len(sockets.open)} of 300 trickling sockets open after 15 s"
    assert answers, "/health was asked while they trickled"
    assert set(answers) == {200}, answers


def test_a_trickled_body_is_cut_off_at_its_deadline_and_nothing_generates(
    make_server: Callable[..., Server], sockets: Sockets
) -> None:
    server = make_server(server={"deadlines": SHORT})
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    sockets.connect(address(server), head + b'{"prompt": "')
    started = time.monotonic()
    pause = threading.Event()
    while sockets.open and time.monotonic() - started < SHORT.body_seconds + 5:
        sockets.trickle(b"x")
        sockets.reap()
        pause.wait(0.2)
    assert not sockets.open, "the trickled body's connection is still open"
    assert server.completion.calls == [], "no generation for a body that never came"
    with server.http() as http:
        assert (
            http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200
        )


def test_a_stream_nobody_reads_is_cut_off_and_its_generation_cancelled(
    make_server: Callable[..., Server], sockets: Sockets
) -> None:
    """The client asks for a long stream and never reads: once the server's buffers are full
    for the send deadline, the connection is aborted and the job ends cancelled."""
    # 4,000 characters a token, 6,000 tokens in about 18 s: the kernel's buffers on both
    # sides (a few MB) are full after a few seconds, long before the end.
    tokens, big = 6_000, BYTE_OFFSET + 256
    server = make_server(
        {"script": [[big] * tokens], "pieces": {big: b"x" * 4000}, "step_seconds": 0.003},
        server={"deadlines": SHORT},
        token_budget=tokens,
    )
    body = f'{{"prompt": "p", "max_tokens": {tokens}, "stream": true}}'.encode()
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    # A small receive window, so that the server's side fills soon.
    sock = sockets.connect(address(server), head + body, SO_RCVBUF=4096)

    def ended_jobs() -> list[dict[str, Any]]:
        (model,) = [m for m in server.stats()["models"] if "completion" in m["roles"]]
        return list(model["recent"])

    (job,) = wait_until(ended_jobs, "the unread stream's job to end", give_up_after=60)
    assert job["finish_reasons"] == ["cancelled"]
    assert job["generated_tokens"] < tokens
    # What the kernel already had may still arrive; then the connection ends (no timeout).
    assert read_to_end(sock) in ("reset", "closed")


def test_one_generation_request_over_the_bound_is_503_with_retry_after(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["x" * 200], "step_seconds": 0.05}, max_jobs=1)
    stream = server.client().completions.create(
        model="completion", prompt="p", max_tokens=200, stream=True
    )
    next(iter(stream))  # the first request runs
    with server.http() as http:
        response = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert response.status_code == 503
        assert response.headers["retry-after"].isdigit()
        assert response.json()["error"]["code"] == "too_many_requests"
        assert http.get("/health").status_code == 200, "other routes are not bounded"
        stream.close()
        wait_until(
            lambda: (
                http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code
                == 200
            ),
            "a slot once the stream ended",
        )


def test_bodies_still_trickling_in_take_no_place_of_a_generation_request(
    make_server: Callable[..., Server], sockets: Sockets
) -> None:
    """With room for one generation request, three clients that sent a completion's head and
    trickle its body do not lock the others out: a whole request is served meanwhile (each
    place is taken once a body is in, as /health is answered whatever the sockets do)."""
    server = make_server({"script": ["ok"]}, max_jobs=1)
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    for _ in range(3):
        sockets.connect(address(server), head)
    sockets.trickle(b" ")
    with server.http() as http:
        response = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"] == "ok"
    sockets.reap()
    assert len(sockets.open) == 3  # still trickling: they were not refused either


def test_connections_over_the_bound_get_503(
    make_server: Callable[..., Server], sockets: Sockets
) -> None:
    server = make_server(server={"max_connections": 4})
    for _ in range(4):
        sockets.connect(address(server), b"")
    with httpx.Client(base_url=server.url, timeout=5) as http:
        assert http.get("/health").status_code == 503
        sockets.close()
        wait_until(lambda: http.get("/health").status_code == 200, "room once they closed")


def test_a_forwarded_for_header_does_not_change_the_clients_address() -> None:
    async def client(request: Request) -> JSONResponse:
        assert request.client is not None
        return JSONResponse({"host": request.client.host})

    sock = bind("127.0.0.1", 0)
    stop = serve_in_thread(Starlette(routes=[Route("/", client)]), sock)
    try:
        response = httpx.get(url_of(sock), headers={"X-Forwarded-For": "203.0.113.9"})
        assert response.json() == {"host": "127.0.0.1"}
    finally:
        stop()
