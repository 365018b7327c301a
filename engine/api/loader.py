"""The models the engine server serves, loaded in the background, with their health.

`ModelLoader` knows each role's model (id, path) before it is loaded, so that `/health` and
`/v1/models` can answer at once; a thread loads the roles one after the other, completion first,
through a `load(role) -> Engine` callable: `ModelSet.engine` in the command (one model named for
both roles loads once), or a dict of ready engines in tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.completion import CompletionModel
from engine.engine import Engine
from engine.errors import ModelLoadError
from engine.models import ModelSet
from engine.specs import ModelSpec
from engine.types import LoadState, Role

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "the engine server is shutting down"
#: Seconds between two looks at whether requests are being answered (`ModelLoader`'s `busy`).
BUSY_POLL_SECONDS = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """A local engine ready to serve, as a completion model: its FIM format renders the
    prompts of /v1/completions, and the family's fill-ending ids are hidden stops of each."""

    engine: Engine
    model: CompletionModel


@dataclass(slots=True)
class _Model:
    """One model (which may serve both roles) and its load state; guarded by the loader's lock."""

    id: str
    path: str
    roles: list[Role]
    state: dict[Role, LoadState] = field(default_factory=dict)
    errors: dict[Role, str] = field(default_factory=dict)
    loaded: Loaded | None = None
    loads: int = 0


def _combined(states: list[LoadState]) -> LoadState:
    """Several roles' states as one: an error wins, then loading."""
    if LoadState.ERROR in states:
        return LoadState.ERROR
    if all(s is LoadState.READY for s in states):
        return LoadState.READY
    return LoadState.LOADING


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleStatus:
    """A role's model as a route sees it: its id, and the engine once loaded."""

    model_id: str
    state: LoadState
    loaded: Loaded | None
    error: str | None


def model_id(path: str | Path) -> str:
    """What clients call a model: its file's name without `.gguf`, or its folder's name."""
    name = Path(path).name
    return name.removesuffix(".gguf") or str(path)


def local_engine(engine: object) -> Loaded:
    """`engine` with its backend's FIM facts, if it is a local engine (one whose backend we can
    tokenize with); else ValueError: the engine server serves local models only."""
    if not isinstance(engine, Engine):
        raise ValueError(
            "infill-lsp engine serves local models (llama.cpp or transformers); "
            f"this model is served by {type(engine).__name__}"
        )
    return Loaded(engine=engine, model=CompletionModel.of(engine, None))


def _fim_family(loaded: Loaded | None) -> str | None:
    fim = None if loaded is None else loaded.model.format.fim
    return None if fim is None else fim.family


class ModelLoader:
    """Each role's model, loaded on a background thread (`start`) or at once (`load_all`)."""

    def __init__(
        self,
        load: Callable[[Role], object],
        models: Mapping[Role, tuple[str, str]],
        *,
        close: Callable[[], None] | None = None,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        """`models`: (id, path) per role; roles with the same id share one model. `close`
        frees what `load` loaded (default: close each engine). `busy`: whether requests are
        being answered; a role after the first waits until it says no (polled)."""
        self._load = load
        self._close = close
        self._busy = busy
        self._lock = threading.Lock()
        self._models: dict[str, _Model] = {}
        self._by_role: dict[Role, _Model] = {}
        for role in (Role.COMPLETION, Role.CHAT):
            if role not in models:
                continue
            ident, path = models[role]
            model = self._models.setdefault(ident, _Model(id=ident, path=path, roles=[]))
            model.roles.append(role)
            model.state[role] = LoadState.LOADING
            self._by_role[role] = model
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._closing = False

    @classmethod
    def for_model_set(cls, models: ModelSet, busy: Callable[[], bool] | None = None) -> ModelLoader:
        """Load `models`' roles through `ModelSet.engine`, freed by `ModelSet.close`."""
        ids: dict[Role, tuple[str, str]] = {}
        by_spec: dict[object, str] = {}
        for role in (Role.COMPLETION, Role.CHAT):
            spec = models.specs.get(role)
            if spec is None:
                continue
            if not isinstance(spec, ModelSpec):
                raise ModelLoadError("the engine server serves local models, not a remote one")
            ident = by_spec.get(spec)
            if ident is None:
                ident = model_id(spec.path)
                if ident in by_spec.values():  # two files of the same name in two folders
                    ident = f"{ident}-{role.value}"
                by_spec[spec] = ident
            ids[role] = (ident, str(spec.path))
        return cls(models.engine, ids, close=models.close, busy=busy)

    @classmethod
    def from_engines(cls, engines: Mapping[Role, Engine]) -> ModelLoader:
        """Serve engines that are already loaded (tests): named by their model's name, and
        one engine given for both roles is one model."""
        ids = {role: (engine.info.name, engine.info.path) for role, engine in engines.items()}
        return cls(engines.__getitem__, ids)

    # --- loading ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load every role on a background thread, completion first."""
        self._thread = threading.Thread(target=self.load_all, name="model-loader", daemon=True)
        self._thread.start()

    def load_all(self) -> None:
        """Load every role now, on this thread; failures are recorded, not raised."""
        try:
            for number, (role, model) in enumerate(list(self._by_role.items())):
                # The chat model loads once the completion model's first requests are
                # answered: loading it beside a user's first suggestion made that one 1.5x
                # slower on 2 cores (docs/decisions/cold-prompt.md).
                while number and self._busy is not None and self._busy() and not self._closing:
                    time.sleep(BUSY_POLL_SECONDS)
                if self._closing:
                    break
                self._load_role(role, model)
        finally:
            self._done.set()

    def _load_role(self, role: Role, model: _Model) -> None:
        try:
            loaded = local_engine(self._load(role))
        except Exception as e:  # any failure is the role's state, shown by /health
            log.error("cannot load the %s model %s: %s", role.value, model.path, e)
            with self._lock:
                model.state[role] = LoadState.ERROR
                model.errors[role] = str(e)
            return
        with self._lock:
            if model.loaded is None or model.loaded.engine is not loaded.engine:
                model.loads += 1
                model.loaded = loaded
            model.state[role] = LoadState.READY
        log.info("%s model %s is ready (%s)", role.value, model.id, loaded.engine.info.backend)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every role has loaded or failed; False on timeout."""
        return self._done.wait(timeout)

    # --- what routes read ---------------------------------------------------------------------

    def role(self, role: Role) -> RoleStatus | None:
        """`role`'s model and state; None if no model has that role."""
        with self._lock:
            model = self._by_role.get(role)
            if model is None:
                return None
            return RoleStatus(
                model_id=model.id,
                state=model.state[role],
                loaded=model.loaded if model.state[role] is LoadState.READY else None,
                error=model.errors.get(role),
            )

    def role_of(self, name: str, preferred: Role) -> Role | None:
        """The role a request's `model` names: a role's name, or a model id (its `preferred`
        role if that model has it); None if nothing is called `name`."""
        if name in (Role.COMPLETION.value, Role.CHAT.value):
            return Role(name) if Role(name) in self._by_role else None
        model = self._models.get(name)
        if model is None:
            return None
        return preferred if preferred in model.roles else model.roles[0]

    def status(self) -> LoadState:
        """ready when every role is, error when one failed, else loading."""
        with self._lock:
            return _combined([s for m in self._models.values() for s in m.state.values()])

    def describe(self) -> list[dict[str, Any]]:
        """Each model as /health reports it."""
        with self._lock:
            out = []
            for m in self._models.values():
                state = _combined(list(m.state.values()))
                info = m.loaded.engine.info if m.loaded else None
                out.append(
                    {
                        "id": m.id,
                        "roles": [r.value for r in m.roles],
                        "status": state.value,
                        "error": "; ".join(m.errors.values()) or None,
                        "path": m.path,
                        "backend": info.backend if info else None,
                        "device": info.device if info else None,
                        "context_size": info.context_size if info else None,
                        "fim_family": _fim_family(m.loaded),
                        "loads": m.loads,
                    }
                )
            return out

    def loaded_models(self) -> list[tuple[str, list[Role], Loaded]]:
        """(id, roles, engine) of each loaded model."""
        with self._lock:
            return [(m.id, list(m.roles), m.loaded) for m in self._models.values() if m.loaded]

    # --- shutdown -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Refuse new jobs and abort the running ones (returns at once)."""
        self._closing = True
        for _, _, loaded in self.loaded_models():
            loaded.engine.stop(SHUTDOWN_REASON)

    def close(self, timeout: float = 60.0) -> None:
        """`stop`, let a load in progress end, then free the models. Blocks: call it on a thread."""
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._close is not None:
            self._close()
        else:
            for _, _, loaded in self.loaded_models():
                loaded.engine.close(SHUTDOWN_REASON)
