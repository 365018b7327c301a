"""Shared fixtures: the real default models, loaded once per test session."""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# A stand-in for the Hugging Face hub (tests/fake_hub.py).
from fake_hub import fake_hub  # noqa: F401
from local_models import load_llama

# Our engine server over scripted engines (tests/scripted_servers.py).
from scripted_servers import make_server, serve  # noqa: F401

from engine.backends.llama_cpp import LlamaCppBackend
from engine.engine import Engine
from engine.shared import stop_engines
from engine.types import Role

#: Test data written by others, kept in the repository with its licences (third_party/README.md).
THIRD_PARTY_DATA = Path(__file__).resolve().parents[1] / "third_party" / "data"

# Every server a test starts (and the servers they start: the variable is inherited) keeps its
# usage counts here, never in the user's own state folder (lsp_server/usage_file.py).
os.environ.setdefault("INFILL_STATE_DIR", tempfile.mkdtemp(prefix="infill-test-state-"))
# Each server a test starts holds its own models (`INFILL_ENGINE=auto pytest ...` runs them all
# through one shared engine instead); the shared engine's own tests ask for it. Engines they
# start listen in a runtime folder of the session's, never the user's, and are stopped at its
# end (`pytest_sessionfinish`).
os.environ.setdefault("INFILL_ENGINE", "here")
os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="infill-rt-", dir="/tmp")

#: The order the tests run in, to show they pass in any order (none needs another's leftovers):
#: `INFILL_TEST_ORDER=reverse`, or `shuffle` / `shuffle:SEED` (modules in a random order, and
#: the tests of each module too, those that share a module-scoped parametrized fixture kept
#: together so that its server starts once per parameter). Unset: pytest's own order.
TEST_ORDER = "INFILL_TEST_ORDER"


def _shared_instance(item: pytest.Item) -> tuple[tuple[str, str], ...]:
    """The parameters of the module- or wider-scoped fixtures the test uses: tests with the
    same ones share those fixtures' instances."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return ()
    # pytest keeps an item's fixture definitions private (and untyped on pytest.Item).
    definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    return tuple(
        sorted(
            (name, repr(value))
            for name, value in callspec.params.items()
            if name in definitions and definitions[name][-1].scope != "function"
        )
    )


@pytest.hookimpl(trylast=True)  # after pytest has grouped tests by their fixtures' parameters
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = os.environ.get(TEST_ORDER, "")
    if not order:
        return
    if order == "reverse":
        items.reverse()
        return
    kind, _, seed = order.partition(":")
    if kind != "shuffle":
        raise pytest.UsageError(f"{TEST_ORDER} is reverse, shuffle or shuffle:SEED, not {order!r}")
    rng = random.Random(int(seed) if seed else None)
    modules: dict[str, dict[tuple[tuple[str, str], ...], list[pytest.Item]]] = {}
    for item in items:
        groups = modules.setdefault(item.nodeid.split("::")[0], {})
        groups.setdefault(_shared_instance(item), []).append(item)
    shuffled: list[pytest.Item] = []
    for module in rng.sample(list(modules.values()), len(modules)):
        for group in rng.sample(list(module.values()), len(module)):
            shuffled.extend(rng.sample(group, len(group)))
    items[:] = shuffled


def pytest_report_header(config: pytest.Config) -> str | None:
    order = os.environ.get(TEST_ORDER)
    return f"{TEST_ORDER}={order}" if order else None


@pytest.fixture(scope="session")
def third_party_data() -> Path:
    if not THIRD_PARTY_DATA.is_dir():
        pytest.fail(f"the third-party data folder is missing: {THIRD_PARTY_DATA}")
    return THIRD_PARTY_DATA


@pytest.fixture(scope="session")
def completion_backend() -> LlamaCppBackend:
    return load_llama(Role.COMPLETION)


@pytest.fixture(scope="session")
def chat_backend() -> LlamaCppBackend:
    return load_llama(Role.CHAT)


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the shared engines the session's servers started (they would stay for their idle
    time after the last server left)."""
    stop_engines(Path(os.environ["XDG_RUNTIME_DIR"]))
