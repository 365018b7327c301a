"""Where the language server's models run (lsp_server/engine_place.py), which shared engine a
set of settings gets (engine/shared.py), and the engine's leases (engine/api/leases.py): plain
functions, no process started."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.api.leases import LEASE_SECONDS, Leases
from engine.api.loader import ModelLoader
from engine.errors import EngineError
from engine.models import resolve_model_path
from engine.shared import SharedEngine, SharedEngineLink, private_folder, runtime_folder
from engine.specs import RemoteSpec
from engine.types import Role
from lsp_server.engine_place import EngineMode, place, placed_specs
from lsp_server.settings import Settings


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A runtime folder with a short path (a socket's path is bounded: pytest's own temporary
    folders are too long, and the engine would fall back to the temporary folder)."""
    folder = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.delenv("INFILL_ENGINE", raising=False)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_runtime_path_too_long_for_a_socket_falls_back_to_the_temporary_folder(
    tmp_path: Path,
) -> None:
    long = tmp_path / ("x" * 80)
    folder = runtime_folder({"XDG_RUNTIME_DIR": str(long)})
    assert not folder.is_relative_to(long)
    assert len(os.fsencode(folder / "engine-0123456789abcdef.sock")) <= 100


@pytest.mark.parametrize(
    ("settings", "environ", "mode"),
    [
        (Settings(), {}, EngineMode.SHARED),
        (Settings(engine="here"), {}, EngineMode.HERE),
        (Settings(), {"INFILL_ENGINE": "here"}, EngineMode.HERE),
        (Settings(engine="http://gpu-box:8012"), {}, EngineMode.SERVER),
        (Settings(), {"INFILL_ENGINE": "http://127.0.0.1:8012/v1"}, EngineMode.SERVER),
        (Settings(engine="here"), {"INFILL_ENGINE": "http://127.0.0.1:8012"}, EngineMode.HERE),
        (Settings(backend="openai", endpoint="http://x:1"), {}, EngineMode.REMOTE),
        (Settings(backend="openai", engine="here"), {}, EngineMode.REMOTE),
    ],
)
def test_the_setting_then_the_environment_say_where_the_models_run(
    runtime: Path, settings: Settings, environ: dict[str, str], mode: EngineMode
) -> None:
    placement = place(settings, environ)
    assert placement.mode is mode
    assert placement.why_here is None
    if mode is EngineMode.SERVER:
        assert placement.url is not None
        assert placement.url.endswith("/v1")
    if mode is EngineMode.SHARED:
        assert placement.shared is not None
        assert placement.shared.socket.parent == runtime / "infill-lsp"


def test_a_bad_url_in_the_environment_runs_the_models_here_and_says_why(runtime: Path) -> None:
    placement = place(Settings(), {"INFILL_ENGINE": "ftp://x"})
    assert placement.mode is EngineMode.HERE
    assert placement.why_here is not None
    assert "INFILL_ENGINE" in placement.why_here


def test_a_runtime_folder_others_may_enter_is_refused(runtime: Path) -> None:
    shared = runtime / "infill-lsp"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    placement = place(Settings(), {})
    assert placement.mode is EngineMode.HERE
    assert placement.why_here is not None
    assert "0700" in placement.why_here
    with pytest.raises(EngineError, match="must be 0700"):
        private_folder(shared)


def test_the_runtime_folder_is_made_private(runtime: Path) -> None:
    folder = runtime_folder({"XDG_RUNTIME_DIR": str(runtime)})
    assert folder == runtime / "infill-lsp"
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_backend_only_this_process_knows_runs_here(runtime: Path) -> None:
    assert place(Settings(backend="llama.cpp"), {}).mode is EngineMode.SHARED
    placement = place(_with_backend("scripted"), {})
    assert placement.mode is EngineMode.HERE
    assert placement.why_here is not None
    assert "this process only" in placement.why_here


def _with_backend(name: str) -> Settings:
    # The settings take BACKENDS only; the command line takes a registered one (`--backend`).
    settings = Settings()
    object.__setattr__(settings, "backend", name)
    return settings


def test_windows_share_an_engine_unless_their_model_settings_differ(runtime: Path) -> None:
    base = SharedEngine.of(Settings().model_options())
    # What the language server applies itself does not split engines.
    assert SharedEngine.of(Settings(fim_family="none").model_options()).key == base.key
    assert SharedEngine.of(Settings(next_edit_format="zeta1").model_options()).key == base.key
    # What the engine loads does.
    assert SharedEngine.of(Settings(context_size=2048).model_options()).key != base.key
    assert SharedEngine.of(Settings(kv_cache_mb=0).model_options()).key != base.key
    # The completion model named for chat too: another engine, one model serving both roles.
    chat = Settings(chat_model=str(resolve_model_path(Role.COMPLETION)))
    assert SharedEngine.of(chat.model_options()).key != base.key
    # The same model named by its path and left to the default: one engine.
    named = Settings(model=str(resolve_model_path(Role.COMPLETION)))
    assert SharedEngine.of(named.model_options()).key == base.key


def test_the_shared_engine_serves_completion_and_chat_and_the_default_next_edit_model(
    runtime: Path,
) -> None:
    placement = place(Settings(), {})
    assert placement.shared is not None
    link = SharedEngineLink(placement.shared, client="window-1")
    specs = placed_specs(Settings(), placement, link, "window-1")
    for role in Role:
        spec = specs[role]
        assert isinstance(spec, RemoteSpec), role
        assert spec.socket == str(placement.shared.socket)
        assert spec.client == "window-1"
        assert spec.on_unreachable is not None


def test_a_lease_ends_unless_renewed_and_the_engine_exits_its_idle_time_after() -> None:
    leases = Leases(idle_exit=60)
    leases.renew("a", now=0)
    leases.renew("b", now=5)
    assert leases.names(now=10) == ["a", "b"]
    assert not leases.should_exit(now=20)
    leases.leave("b", now=21)
    assert leases.names(now=29) == ["a"]
    # a's lease ended at LEASE_SECONDS (its process was killed): idle from then on.
    assert leases.names(now=LEASE_SECONDS + 1) == []
    assert not leases.should_exit(now=LEASE_SECONDS + 59)
    assert leases.should_exit(now=LEASE_SECONDS + 61)


def test_a_request_under_way_keeps_the_engine() -> None:
    leases = Leases(idle_exit=1)
    leases.request_started()
    assert not leases.should_exit(now=1e9)
    leases.request_ended(now=100)
    assert not leases.should_exit(now=100.5)
    assert leases.should_exit(now=101.5)


def test_an_engine_without_an_idle_exit_never_exits_on_its_own() -> None:
    assert not Leases().should_exit(now=1e12)


def test_only_the_completion_models_requests_keep_the_chat_model_waiting() -> None:
    leases = Leases()
    leases.request_started("/v1/chat/completions")
    leases.request_started("/health")
    assert not leases.busy()
    leases.request_started("/v1/completions")
    assert leases.busy()
    leases.request_ended("/v1/completions")
    assert leases.busy(quiet=60)  # it answered one a moment ago
    assert not leases.busy(quiet=0)


def test_the_chat_model_loads_once_the_completion_model_is_quiet() -> None:
    loaded: list[Role] = []
    quiet = threading.Event()

    def load(role: Role) -> object:
        loaded.append(role)
        raise EngineError("a double: nothing is loaded")

    def busy() -> bool:
        return not quiet.is_set()

    loader = ModelLoader(
        load, {Role.COMPLETION: ("coder", "/c"), Role.CHAT: ("chat", "/t")}, busy=busy
    )
    loader.start()
    assert not loader.wait(0.5)
    assert loaded == [Role.COMPLETION]
    quiet.set()
    assert loader.wait(5)
    assert loaded == [Role.COMPLETION, Role.CHAT]
