"""What a model is asked to be: the options a user sets and the spec of each role's model.

A leaf of the engine (it imports only errors, types, and the FIM family and next-edit format
names): the backends,
the model loader (engine/models.py) and the language server's settings all read these, and
nothing here loads anything. `engine.models.model_spec` is the one place a spec is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from engine.errors import ModelLoadError
from engine.fim import FIM_FAMILIES
from engine.next_edit import NEXT_EDIT_FORMAT_SETTINGS
from engine.types import Role, check_client

#: What the settings and the command line offer. "openai": no local model; a remote
#: OpenAI-compatible server (engine/backends/openai.py). A test may offer one more local
#: backend on its own command line (engine/models.py `register_backend`), never here.
BACKENDS = ("auto", "llama.cpp", "transformers", "openai")
REMOTE_BACKEND = "openai"
#: The API key of a remote server (the remote backend) or of our own engine server, when
#: neither the command line nor the settings give one.
API_KEY_ENV = "INFILL_API_KEY"
DEVICES = "auto, cpu, cuda or cuda:N"  # what the transformers backend takes
#: The transformers backend's decode loop (engine/backends/transformers_decode.py `DecodePath`):
#: "auto" is "compiled" on CUDA and "dynamic" on the CPU.
DECODE_PATHS = ("auto", "dynamic", "static", "compiled")
DEFAULT_CONTEXT_SIZE = 4096
#: Whether llama.cpp writes several sequences' rows in one pass (branches, scorings, requests
#: under way at once): "auto" where a probe at load finds that they pay (a GPU, usually not 2
#: CPU cores), "together" or "one" (at a time) whatever it finds: for benchmarks, or a device
#: the probe misjudges. An environment setting, not a user setting.
ROWS_ENV = "INFILL_ROWS"
ROWS_CHOICES = ("auto", "together", "one")


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
    #: The next-edit model; None: $INFILL_NEXT_EDIT_MODEL, else the completion model.
    next_edit_model: str | None = None
    #: Its format (a key of next_edit.NEXT_EDIT_FAMILIES, or "none"); None: detected from its
    #: tokenizer's special tokens. Not a load option: one loaded model serves either way.
    next_edit_format: str | None = None
    # The remote backend's models: the names to ask the server for (None: the one it lists).
    remote_model: str | None = None
    remote_chat_model: str | None = None
    remote_next_edit_model: str | None = None  # None: the completion model's name


#: What names a model on the Hugging Face hub, wherever a model path is taken (settings,
#: flags, environment): `hf:ORG/REPO/FILE.gguf` (a GGUF file, for llama.cpp; FILE may be in a
#: folder of the repository) or `hf:ORG/REPO` (the repository as a model folder, for
#: transformers). engine/hub.py downloads it, once, into our cache folder.
HUB_PREFIX = "hf:"
HUB_FORMS = (
    "hf:ORG/REPO/FILE.gguf (a GGUF file, for llama.cpp) or hf:ORG/REPO (a model folder, "
    "for transformers)"
)
# The hub's own rule for user, organization and repository names: letters, digits, '-', '_'
# and '.', neither first nor last a '-' or '.', at most 96 characters.
_HUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
# A file's path in the repository, one part at a time: plain names, none hidden (no '.', no
# '..'), no separators or characters a shell or a file system would read otherwise.
_HUB_FILE_PART = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,254}")
_HUB_SPEC_LIMIT = 512


@dataclass(frozen=True, slots=True)
class HubModel:
    """A model on the hub: a repository, and the GGUF file in it (None: the repository is
    the model folder)."""

    repo_id: str  # ORG/REPO
    filename: str | None = None  # the path in the repository, '/'-separated

    def __str__(self) -> str:
        return HUB_PREFIX + self.repo_id + (f"/{self.filename}" if self.filename else "")


def parse_hub_model(text: str) -> HubModel | None:
    """The hub model `text` names, None when it names none (no `hf:` prefix: a local path).
    ValueError, saying what is wrong, for a name that starts with `hf:` but is not one."""
    if not text.startswith(HUB_PREFIX):
        return None
    if len(text) > _HUB_SPEC_LIMIT:
        raise ValueError(f"a hub model name has at most {_HUB_SPEC_LIMIT} characters")
    parts = text[len(HUB_PREFIX) :].split("/")
    if len(parts) < 2 or not all(_HUB_NAME.fullmatch(part) for part in parts[:2]):
        raise ValueError(f"{text!r} names no hub repository: write {HUB_FORMS}")
    if any(".." in part or "--" in part for part in parts[:2]):
        raise ValueError(f"{text!r}: a hub repository's name has no '..' or '--'")
    repo_id, file_parts = "/".join(parts[:2]), parts[2:]
    if not file_parts:
        return HubModel(repo_id)
    if not all(_HUB_FILE_PART.fullmatch(part) for part in file_parts):
        raise ValueError(
            f"{text!r}: the file's path may hold letters, digits and '._+-' between '/', "
            "with no empty, hidden or '..' part"
        )
    if not file_parts[-1].lower().endswith(".gguf"):
        raise ValueError(
            f"{text!r}: a file named on the hub is a .gguf file; name the repository alone "
            f"(hf:{repo_id}) for a transformers model folder"
        )
    return HubModel(repo_id, "/".join(file_parts))


def check_model_name(value: object) -> str | None:
    """`value` if it names a model (a path, or a hub model that `parse_hub_model` takes); None
    (or "") for the environment's or the default one; else ValueError."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"a path string or {HUB_FORMS}")
    try:
        parse_hub_model(value)
    except ValueError as e:
        raise ValueError(f"a path or a hub model name ({e})") from e
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(LoadOptions):
    """Everything that decides how a model is loaded. Equal specs share one loaded model."""

    #: The model's file or folder; for a hub model, where it is (or will be) in our cache.
    path: Path
    hub: HubModel | None = None  # where `path` comes from, when it is downloaded
    rows: str = "auto"  # llama.cpp: one of ROWS_CHOICES ($INFILL_ROWS)

    @property
    def cache_bytes(self) -> int | None:
        return None if self.kv_cache_mb is None else self.kv_cache_mb << 20

    def resolved_backend(self) -> str:
        """The backend's name: the one set, else found from the path (a folder is a
        transformers model, a file a GGUF for llama.cpp). Whether a backend of that name
        exists is the loader's to say (engine/models.py `load_backend`)."""
        if self.backend != "auto":
            return self.backend
        if self.hub is not None:  # before it is downloaded, the name says which it is
            return "transformers" if self.hub.filename is None else "llama.cpp"
        return "transformers" if self.path.is_dir() else "llama.cpp"


def check_fim_family(value: object) -> str | None:
    """`value` if it names a FIM family (or "none"); None (or "") for the detected one."""
    if value is None or value == "":
        return None
    if value != "none" and value not in FIM_FAMILIES:
        raise ValueError("one of " + ", ".join(("none", *FIM_FAMILIES)))
    return str(value)


def check_next_edit_format(value: object) -> str | None:
    """`value` if it names a next-edit format (or "none"); None (or "") for the detected one."""
    if value is None or value == "":
        return None
    if value not in NEXT_EDIT_FORMAT_SETTINGS:
        raise ValueError("one of " + ", ".join(NEXT_EDIT_FORMAT_SETTINGS))
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
    #: A Unix domain socket the server is reached through (the user's shared engine,
    #: engine/shared.py); None: the endpoint's host and port.
    socket: str | None = None
    #: Called (on the event loop, returning at once) when a request could not reach the
    #: server: the shared engine's link then looks at once whether it must start another.
    on_unreachable: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    #: The name every request gives the server as `X-Infill-Client` (engine/types.py
    #: `CLIENT_HEADER`): an engine server shared by several editor windows takes turns among
    #: them and reports each one's jobs. None: the header is not sent.
    client: str | None = None

    def __post_init__(self) -> None:
        try:
            check_client(self.client)
        except ValueError as e:
            raise ModelLoadError(str(e)) from None


def remote_base_url(endpoint: str) -> str:
    """The API's base URL from what a user writes: `http://host:8012`, `.../v1` or `.../v1/`
    all give `http://host:8012/v1`. ModelLoadError for anything but an http(s) URL."""
    url = endpoint.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelLoadError(
            f"the endpoint must be an http:// or https:// URL, such as "
            f"http://127.0.0.1:8012/v1; got {endpoint!r}"
        )
    return url if parts.path.endswith("/v1") else url + "/v1"
