"""Our engine server over scripted engines, on a free loopback port in this process: the
fixtures `serve` and `make_server` (registered in conftest.py) and what tests need with them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from fake_backend import FakeBackend

from engine.api.app import build_app
from engine.api.loader import ModelLoader
from engine.api.serve import bind, url_of, uvicorn_config
from engine.engine import Engine
from engine.types import Role

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
KEY = "sk-test-key"


class NoFimBackend(FakeBackend):
    """The scripted backend without FIM tokens (as Gemma and SmolLM2 have none)."""

    def special_token_id(self, text: str) -> int | None:
        return None if text.startswith("<fim") else FakeBackend.special_token_id(self, text)


@dataclass
class Server:
    url: str
    completion: FakeBackend
    chat: FakeBackend
    api_key: str | None = None

    def client(self, api_key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=api_key or self.api_key or "none", max_retries=0
        )

    def http(self, api_key: str | None = None) -> httpx.Client:
        key = api_key or self.api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stats(self) -> dict[str, Any]:
        with self.http() as http:
            stats: dict[str, Any] = http.get("/stats").json()
            return stats

    def job(self, request_id: str) -> dict[str, Any] | None:
        for model in self.stats()["models"]:
            recent: list[dict[str, Any]] = model["recent"]  # JSON
            for job in recent:
                if job["request_id"] == request_id:
                    return job
        return None


def wait_until(predicate: Callable[[], Any], what: str, give_up_after: float = 30) -> Any:
    """Poll `predicate` until it returns something true; fail after a deadline."""
    deadline = time.monotonic() + give_up_after
    pause = threading.Event()
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        pause.wait(0.01)
    pytest.fail(f"timed out waiting for {what}")


def serve_in_thread(app: Any, sock: socket.socket, **config: Any) -> Callable[[], None]:
    """Serve the ASGI `app` with uvicorn on `sock` (bound) in a thread, configured as the
    engine server configures it (`config`: `uvicorn_config`'s deadlines and bounds); returns
    its stop. A socket that already listens keeps requests in its backlog until uvicorn
    accepts."""
    server = uvicorn.Server(uvicorn_config(app, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(30)

    return stop


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Start the app on a free loopback port in a thread; returns its URL."""
    running: list[tuple[Callable[[], None], ModelLoader]] = []

    def start(models: ModelLoader, *, server: dict[str, Any] | None = None, **kw: Any) -> str:
        """`kw`: `build_app`'s; `server`: `uvicorn_config`'s."""
        sock = bind("127.0.0.1", 0)
        running.append((serve_in_thread(build_app(models, **kw), sock, **(server or {})), models))
        return url_of(sock)

    yield start
    for stop, models in running:
        models.stop()
        stop()
        models.close()


@pytest.fixture
def make_server(serve: Callable[..., str]) -> Callable[..., Server]:
    """A server over scripted engines: a completion model with starcoder FIM tokens and a chat
    model with a chat template (`shared`: one model for both)."""

    def make(
        completion: dict[str, Any] | None = None,
        chat: dict[str, Any] | None = None,
        *,
        shared: bool = False,
        no_fim: bool = False,
        **app_kw: Any,
    ) -> Server:
        kind = NoFimBackend if no_fim else FakeBackend
        completion_backend = kind(name="fake-coder", **(completion or {"script": ["hello"]}))
        engines = {Role.COMPLETION: Engine(completion_backend)}
        chat_backend = completion_backend
        if shared:
            engines[Role.CHAT] = engines[Role.COMPLETION]
        else:
            chat_kw = {"script": ["Hi there!"], "template": CHAT_TEMPLATE, **(chat or {})}
            chat_backend = FakeBackend(name="fake-chat", **chat_kw)
            engines[Role.CHAT] = Engine(chat_backend)
        models = ModelLoader.from_engines(engines)
        models.load_all()
        url = serve(models, **app_kw)
        return Server(url, completion_backend, chat_backend, app_kw.get("api_key"))

    return make
