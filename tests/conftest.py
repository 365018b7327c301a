"""Shared fixtures: the real default models, loaded once per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# Our engine server over scripted engines (tests/scripted_servers.py).
from scripted_servers import make_server, serve  # noqa: F401

from engine.backends.llama_cpp import LlamaCppBackend
from engine.engine import Engine
from engine.models import ModelOptions, load_backend, model_spec
from engine.types import Role

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared data folder is missing: {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def completion_backend() -> Iterator[LlamaCppBackend]:
    backend = load_backend(model_spec(Role.COMPLETION, ModelOptions(), environ={}))
    assert isinstance(backend, LlamaCppBackend)
    return backend


@pytest.fixture(scope="session")
def chat_backend() -> Iterator[LlamaCppBackend]:
    backend = load_backend(model_spec(Role.CHAT, ModelOptions(), environ={}))
    assert isinstance(backend, LlamaCppBackend)
    return backend


@pytest.fixture(scope="session")
def completion_engine(completion_backend: LlamaCppBackend) -> Iterator[Engine]:
    engine = Engine(completion_backend, name="completion")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def chat_engine(chat_backend: LlamaCppBackend) -> Iterator[Engine]:
    engine = Engine(chat_backend, name="chat")
    yield engine
    engine.close()
