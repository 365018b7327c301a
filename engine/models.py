"""Which model serves each role, and loading it once.

A role's model is chosen, first match wins, by: the explicit setting (`--model`,
`--chat-model`, or the LSP configuration), then `INFILL_MODEL` / `INFILL_CHAT_MODEL`, then the
default (engine/default_models.py). Any GGUF file or Hugging Face model folder may be named,
or a model on the hub as `hf:ORG/REPO/FILE.gguf` / `hf:ORG/REPO` (engine/hub.py downloads it,
once, when it is first loaded); when both roles name the same model it is loaded once and
serves both.

The command line's flags and the LSP settings both come down to one `ModelOptions`
(engine/specs.py), and `model_spec` turns it into the `ModelSpec` of a role: the one place a
spec is built. `load_backend` loads it with the backend its name is registered under
(`LOADERS`): the product's llama.cpp and transformers, or a test's double.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from engine.backend import Backend
from engine.chat_template import check_chat_template
from engine.default_models import default_chat_model, default_completion_model
from engine.engine import BaseEngine, Engine
from engine.errors import (
    BackendUnavailableError,
    ChatTemplateError,
    EngineError,
    ModelLoadError,
)
from engine.hub import ProgressSink, fetch, model_path
from engine.specs import (
    API_KEY_ENV,
    BACKENDS,
    REMOTE_BACKEND,
    ROWS_CHOICES,
    ROWS_ENV,
    HubModel,
    LoadOptions,
    ModelOptions,
    ModelSpec,
    RemoteSpec,
    parse_hub_model,
    remote_base_url,
)
from engine.types import Role

ENV_VARS = {
    Role.COMPLETION: "INFILL_MODEL",
    Role.CHAT: "INFILL_CHAT_MODEL",
    Role.NEXT_EDIT: "INFILL_NEXT_EDIT_MODEL",
}


def resolve_model_path(
    role: Role,
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    completion_model: str | None = None,
) -> Path:
    """The model file or folder for `role`: explicit setting, then environment, then default.
    The next-edit role's default is the completion model (its setting, environment, default):
    a model trained for next edits completes code too, and one model then serves both. A hub
    model's path is where it is (or will be) in our cache (engine/hub.py)."""
    return _resolve(role, explicit, environ, completion_model)[0]


def _resolve(
    role: Role,
    explicit: str | None,
    environ: Mapping[str, str] | None,
    completion_model: str | None,
) -> tuple[Path, HubModel | None]:
    environ = os.environ if environ is None else environ
    chosen = explicit or environ.get(ENV_VARS[role])
    if chosen:
        try:
            hub = parse_hub_model(chosen)
        except ValueError as e:
            where = "" if explicit else f"${ENV_VARS[role]}: "
            raise ModelLoadError(f"{where}{e}") from e
        if hub is not None:
            return model_path(hub), hub
        return Path(chosen).expanduser().resolve(), None
    if role is Role.NEXT_EDIT:
        return _resolve(Role.COMPLETION, completion_model, environ, None)
    default = default_completion_model() if role is Role.COMPLETION else default_chat_model()
    return default, None


def model_spec(
    role: Role, options: ModelOptions, environ: Mapping[str, str] | None = None
) -> ModelSpec | RemoteSpec:
    """The spec of `role`'s model: its path resolved (setting, environment, default) and the
    options every model is loaded with; or, with the remote backend, the server and model to
    ask. The one place a spec is built from options."""
    environ = os.environ if environ is None else environ
    if options.backend == REMOTE_BACKEND:
        if not options.endpoint:
            raise ModelLoadError(
                "the openai backend needs the server's URL: --endpoint URL, or the "
                "endpoint setting (for example http://127.0.0.1:8012/v1)"
            )
        name = options.remote_model
        if role is Role.CHAT:
            name = options.remote_chat_model or name
        elif role is Role.NEXT_EDIT:
            name = options.remote_next_edit_model or name
        return RemoteSpec(
            role=role,
            endpoint=remote_base_url(options.endpoint),
            api_key=options.api_key or environ.get(API_KEY_ENV) or None,
            model=name,
            context_size=options.context_size,
            fim_family=options.fim_family,
        )
    explicit = {
        Role.COMPLETION: options.model,
        Role.CHAT: options.chat_model,
        Role.NEXT_EDIT: options.next_edit_model,
    }[role]
    loading = {f.name: getattr(options, f.name) for f in fields(LoadOptions)}
    for remote in ("endpoint", "api_key"):
        loading[remote] = None  # not the local model's: two specs differing here are one model
    path, hub = _resolve(role, explicit, environ, options.model)
    rows = environ.get(ROWS_ENV) or "auto"
    if rows not in ROWS_CHOICES:
        raise ModelLoadError(f"${ROWS_ENV} must be one of {', '.join(ROWS_CHOICES)}, not {rows!r}")
    return ModelSpec(path=path, hub=hub, rows=rows, **loading)


def _load_llama_cpp(spec: ModelSpec) -> Backend:
    from engine.backends.llama_cpp import LlamaCppBackend

    return LlamaCppBackend(spec)


def _load_transformers(spec: ModelSpec) -> Backend:
    try:
        from engine.backends.transformers import TransformersBackend
    except ImportError as e:
        raise BackendUnavailableError(
            "the transformers backend needs torch and transformers: "
            "pip install 'infill-lsp[transformers]'"
        ) from e
    return TransformersBackend(spec)


#: What loads a local model: the backend's constructor, in effect.
Loader = Callable[[ModelSpec], Backend]
#: The local backends by name: the product's two, and whatever `register_backend` adds. Each
#: imports its backend module only when it loads a model: a server that never runs transformers
#: never imports torch.
LOADERS: dict[str, Loader] = {
    "llama.cpp": _load_llama_cpp,
    "transformers": _load_transformers,
}


def register_backend(name: str, load: Loader) -> None:
    """Offer `load` as the local backend `name` in this process: the command line then takes
    `--backend NAME` (`backend_choices`), the LSP settings still only BACKENDS. How a test
    plugs in a double (tests/scripted_cli.py) without the shipped command offering it."""
    LOADERS[name] = load


def backend_choices() -> tuple[str, ...]:
    """The backends the command line offers in this process: BACKENDS, then any other that
    was registered."""
    return (*BACKENDS, *(name for name in LOADERS if name not in BACKENDS))


def _load_engine(
    spec: ModelSpec | RemoteSpec, role: Role, progress: ProgressSink | None
) -> BaseEngine:
    if isinstance(spec, RemoteSpec):
        from engine.backends.openai import RemoteEngine

        return RemoteEngine.connect(spec)
    return Engine(load_backend(spec, progress), name=role.value)


def load_backend(spec: ModelSpec, progress: ProgressSink | None = None) -> Backend:
    """Load one model, a hub model downloaded first (unless our cache has it: engine/hub.py),
    its progress told to `progress`. Raises ModelLoadError (naming the path) or
    BackendUnavailableError."""
    kind = spec.resolved_backend()
    if kind == REMOTE_BACKEND:
        raise ModelLoadError("the openai backend has no local model to load (see RemoteSpec)")
    load = LOADERS.get(kind)
    if load is None:
        raise ModelLoadError(
            f"unknown backend {spec.backend!r}; choose one of {', '.join(backend_choices())}"
        )
    if spec.hub is not None:
        if kind == "llama.cpp" and spec.hub.filename is None:
            raise ModelLoadError(
                f"{spec.hub} is a model folder, for transformers; llama.cpp loads a GGUF file: "
                f"name one, hf:{spec.hub.repo_id}/FILE.gguf"
            )
        fetch(spec.hub, progress)
    if not spec.path.exists():
        raise ModelLoadError(f"model not found: {spec.path}")
    if not (spec.path.is_file() or spec.path.is_dir()):
        # A FIFO would hold the loader until something writes to it; a device never ends.
        raise ModelLoadError(f"{spec.path} is not a model file or folder (a pipe or a device?)")
    try:
        return load(spec)
    except EngineError:
        raise
    except Exception as e:
        # A library's own failure on a damaged file (a KeyError from its metadata, say):
        # callers wait on our errors only, so it becomes one, naming the file.
        raise ModelLoadError(f"cannot load model {spec.path}: {type(e).__name__}: {e}") from e


@dataclass(slots=True)
class ModelSet:
    """The engines of both roles; a model named for both roles is loaded once."""

    specs: Mapping[Role, ModelSpec | RemoteSpec]
    #: Who hears of a hub model's download (engine/hub.py), on the loading thread.
    on_download: ProgressSink | None = None
    _engines: dict[Role, BaseEngine] = field(default_factory=dict)
    _by_spec: dict[ModelSpec | RemoteSpec, BaseEngine] = field(default_factory=dict)

    def engine(self, role: Role) -> BaseEngine:
        """The engine for `role`, loading its model (or asking the remote server about it) on
        first use, on the calling thread."""
        if role not in self._engines:
            spec = self.specs[role]
            engine = self._by_spec.get(spec)
            if engine is None:
                engine = _load_engine(spec, role, self.on_download)
                self._by_spec[spec] = engine
            if role is Role.CHAT and isinstance(engine, Engine):
                try:
                    check_chat_template(engine.backend)
                except ChatTemplateError as e:
                    where = spec.path if isinstance(spec, ModelSpec) else engine.info.path
                    raise ModelLoadError(f"the chat template of {where} is refused: {e}") from e
            self._engines[role] = engine
        return self._engines[role]

    def local_engine(self, role: Role) -> Engine:
        """`engine(role)`, which must run a local model (what needs its tokenizer)."""
        engine = self.engine(role)
        if not isinstance(engine, Engine):
            raise ModelLoadError(f"the {role} model is remote ({engine.info.path}), not local")
        return engine

    def shared(self) -> bool:
        """Whether one model serves every role."""
        return len(set(self.specs.values())) == 1

    def shares(self, role: Role) -> bool:
        """Whether `role`'s model serves another role too."""
        spec = self.specs[role]
        return any(other != role and each == spec for other, each in self.specs.items())

    def close(self) -> None:
        for engine in self._by_spec.values():
            engine.close()
        self._by_spec.clear()
        self._engines.clear()
