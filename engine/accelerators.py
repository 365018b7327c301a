"""The machine's accelerators as each model library sees them, and where a model's layers go
(what `doctor` and the status report about the GPU).

llama.cpp's view is ggml's backend registry, read through ctypes from the library
llama-cpp-python itself loaded: symbols are looked up through libllama's handle, which searches
its dependencies, so the ggml we read is the one that places the model. (Opening
`llama_cpp/lib/libggml.so` by its path would load a second copy, with a registry of its own:
the wheel ships `libggml.so` and `libggml.so.0` as two files, not a link.) torch's view is
`torch.cuda`, imported only when asked for.

Reading never raises: a library, symbol or device that cannot be read becomes a note saying
what is unknown, so `doctor` always has something to print.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import importlib.util
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIB = 1 << 30


def llama_cuda_build(version: str | None) -> str:
    """The command that rebuilds llama-cpp-python (`version` of it) with CUDA: it compiles
    llama.cpp from source when it installs, and pip's cache would hand back the CPU build."""
    package = f"llama-cpp-python=={version}" if version else "llama-cpp-python"
    return f'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir {package}'


#: Registries that are no GPU backend: their presence says nothing about GPU support.
_NOT_GPU_BACKENDS = frozenset({"CPU", "BLAS", "RPC"})


class DeviceKind(enum.Enum):
    """ggml's `enum ggml_backend_dev_type`, plus what a newer ggml may add."""

    CPU = "cpu"
    GPU = "gpu"
    IGPU = "igpu"  # an integrated GPU, sharing the host's memory
    ACCEL = "accel"  # an accelerator used beside the CPU (BLAS, AMX, ...), not a layer's home
    OTHER = "other"


_GGML_DEVICE_KINDS = {0: DeviceKind.CPU, 1: DeviceKind.GPU, 2: DeviceKind.IGPU, 3: DeviceKind.ACCEL}


@dataclass(frozen=True, slots=True, kw_only=True)
class GgmlDevice:
    """One device of ggml's backend registry: `CUDA0`, `NVIDIA H200`, GPU, its memory."""

    name: str
    description: str
    kind: DeviceKind
    backend: str  # the registry it belongs to: "CPU", "CUDA", "Vulkan", ...; "" if unknown
    memory_free: int | None  # bytes; None if unknown
    memory_total: int | None

    def in_words(self) -> str:
        """The device in words: `NVIDIA H200, 139.8 GiB (CUDA0)`."""
        return describe_device(self.description or self.name, self.memory_total, self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaCppView:
    """What the installed llama-cpp-python build can use."""

    installed: bool
    version: str | None = None
    gpu_offload: bool | None = None  # llama_supports_gpu_offload(); None: unknown
    backends: tuple[str, ...] = ()  # ggml's registries: "CPU", "CUDA", ...
    devices: tuple[GgmlDevice, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be read, and anything done to read it

    def offload_devices(self) -> tuple[GgmlDevice, ...]:
        """The devices llama.cpp spreads offloaded layers over (its default layer split):
        every discrete GPU, or the integrated ones when there is none."""
        gpus = tuple(d for d in self.devices if d.kind is DeviceKind.GPU)
        return gpus or tuple(d for d in self.devices if d.kind is DeviceKind.IGPU)

    def gpu_backends(self) -> tuple[str, ...]:
        """The registries that could hold GPUs (CUDA, Vulkan, Metal, ...), found or not."""
        return tuple(b for b in self.backends if b.upper() not in _NOT_GPU_BACKENDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchGpu:
    index: int
    name: str
    memory_total: int

    def in_words(self) -> str:
        return describe_device(self.name, self.memory_total, f"cuda:{self.index}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchView:
    """What the installed torch sees."""

    installed: bool
    version: str | None = None
    cuda_version: str | None = None  # the CUDA torch was built with; None for a CPU build
    cuda_available: bool = False
    devices: tuple[TorchGpu, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where a llama.cpp model's layers are: `ModelInfo.device`, `.gpu` and `.warnings`."""

    device: str  # "cpu", "cuda (all 19 layers)", "cuda (10 of 19 layers)"
    gpu: str | None  # the GPUs holding layers, in words; None on the CPU
    warnings: tuple[str, ...] = ()


# --- words -----------------------------------------------------------------------------------


def gib(size: int) -> str:
    """`size` bytes in GiB, to a tenth: "139.8 GiB"."""
    return f"{size / GIB:.1f} GiB"


def describe_device(name: str, memory_total: int | None, where: str | None = None) -> str:
    """A device in words: "NVIDIA H200, 139.8 GiB (CUDA0)"."""
    text = name if memory_total is None else f"{name}, {gib(memory_total)}"
    return text if not where or where == name else f"{text} ({where})"


def describe_devices(devices: Iterable[GgmlDevice | TorchGpu]) -> str | None:
    """Several devices in words, "; " between them; None for none."""
    words = [d.in_words() for d in devices]
    return "; ".join(words) if words else None


# --- llama.cpp -------------------------------------------------------------------------------


def llama_placement(view: LlamaCppView, gpu_layers: int, n_layer: int | None) -> Placement:
    """Where llama.cpp puts a model of `n_layer` blocks asked to offload `gpu_layers` (-1: all).

    llama.cpp counts the output layer as one more layer (its log says "offloaded 19/19 layers
    to GPU" for 18 blocks), so a model has `n_layer + 1` offloadable layers and `gpu_layers`
    above that is all of them. On a build or machine without a GPU the model loads on the CPU
    all the same, and the warning says why and what to do.
    """
    if gpu_layers == 0:
        return Placement(device="cpu", gpu=None)
    gpus = view.offload_devices()
    if gpus:
        backends = "+".join(dict.fromkeys(d.backend.lower() or "gpu" for d in gpus))
        return Placement(
            device=f"{backends} ({_layers(gpu_layers, n_layer)})", gpu=describe_devices(gpus)
        )
    if view.gpu_offload and not view.devices:
        # llama.cpp offloads, but which device it uses could not be read.
        return Placement(
            device=f"gpu ({_layers(gpu_layers, n_layer)})",
            gpu=None,
            warnings=(
                "llama.cpp offloads layers to a GPU, but its devices cannot be read "
                f"({'; '.join(view.notes) or 'unknown why'}): the GPU is not named",
            ),
        )
    return Placement(device="cpu", gpu=None, warnings=(_no_gpu_warning(view, gpu_layers),))


def _layers(gpu_layers: int, n_layer: int | None) -> str:
    """How many layers are on the GPU, in words: "all 19 layers", "10 of 19 layers"."""
    if n_layer is None:
        return "all layers" if gpu_layers < 0 else f"{gpu_layers} layers"
    total = n_layer + 1
    on_gpu = total if gpu_layers < 0 else min(gpu_layers, total)
    return f"all {total} layers" if on_gpu == total else f"{on_gpu} of {total} layers"


def _no_gpu_warning(view: LlamaCppView, gpu_layers: int) -> str:
    asked = f"gpuLayers={gpu_layers} asked (--gpu-layers {gpu_layers}), but"
    gpu_backends = view.gpu_backends()
    if gpu_backends:
        return (
            f"{asked} llama.cpp's {'/'.join(gpu_backends)} backend finds no GPU; the model runs "
            "on the CPU. Check that the GPU driver is loaded and that CUDA_VISIBLE_DEVICES (or "
            "the backend's equivalent) does not hide the GPU: nvidia-smi should list it."
        )
    if view.installed and not view.backends:
        return (
            f"{asked} the devices of this llama-cpp-python build cannot be read "
            f"({'; '.join(view.notes) or 'unknown why'}); the model runs on the CPU."
        )
    return (
        f"{asked} this llama-cpp-python build has no GPU support; the model runs on the CPU. "
        f"Rebuild it with CUDA: {llama_cuda_build(view.version)} (in a checkout of "
        "infill-lsp: make install LLAMA_CUDA=1)"
    )


# One thread loads the dynamically loaded backends, once.
_load_lock = threading.Lock()


def llama_cpp_view() -> LlamaCppView:
    """What llama-cpp-python's llama.cpp can use: its backends, devices and GPU offload."""
    if importlib.util.find_spec("llama_cpp") is None:
        return LlamaCppView(installed=False, notes=("llama-cpp-python is not installed",))
    try:
        import llama_cpp
    except Exception as e:  # a broken build fails here with OSError, RuntimeError, ...
        return LlamaCppView(installed=False, notes=(f"llama-cpp-python cannot be imported: {e}",))
    notes: list[str] = []
    lib = _library(llama_cpp)
    if lib is None:
        notes.append("llama-cpp-python's library handle is not where it was (llama_cpp._lib)")
        return LlamaCppView(
            installed=True, version=getattr(llama_cpp, "__version__", None), notes=tuple(notes)
        )
    loaded = load_backends(lib, _library_folder(llama_cpp))
    if loaded:
        notes.append(loaded)
    offload = _call(lib, "llama_supports_gpu_offload", ctypes.c_bool, (), notes)
    return LlamaCppView(
        installed=True,
        version=getattr(llama_cpp, "__version__", None),
        gpu_offload=None if offload is None else bool(offload),
        backends=_read_backends(lib, notes),
        devices=_read_devices(lib, notes),
        notes=tuple(notes),
    )


def prepare_llama_cpp(llama_cpp: Any) -> bool:
    """Make llama-cpp-python's llama.cpp ready to load a model (its backends loaded, for a
    build that loads them at run time); whether it can offload layers to a GPU."""
    lib = _library(llama_cpp)
    if lib is not None:
        loaded = load_backends(lib, _library_folder(llama_cpp))
        if loaded:
            log.info("llama.cpp: %s", loaded)
    try:
        return bool(llama_cpp.llama_supports_gpu_offload())
    except Exception:  # a binding that moved: then no offload is promised
        return False


def _library(llama_cpp: Any) -> Any:
    """The ctypes handle of llama-cpp-python's libllama; None if it moved."""
    return getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)


def _library_folder(llama_cpp: Any) -> Path:
    return Path(llama_cpp.__file__).parent / "lib"


def load_backends(lib: Any, lib_dir: Path) -> str | None:
    """Load ggml's backends if the build loads them at run time, as llama.cpp asks before a
    model can load; a note of what was done, or None when nothing was needed.

    A build with `GGML_BACKEND_DL=ON` registers no backend by itself, and llama-cpp-python
    does not load them (abetlen/llama-cpp-python#2069): its model load then fails with "no
    backends are loaded". A build with its backends linked in has them registered already,
    and loading again would only look for modules that are not there.
    """
    with _load_lock:
        count = _call(lib, "ggml_backend_reg_count", ctypes.c_size_t, (), [])
        if count is None or count > 0:
            return None
        # The wheel keeps the backend modules beside its libraries; ggml's own search (the
        # executable's folder, the working folder) would not find them there.
        for folder in (lib_dir, lib_dir.parent / "bin"):
            if folder.is_dir():
                _call(
                    lib,
                    "ggml_backend_load_all_from_path",
                    None,
                    ((ctypes.c_char_p, str(folder).encode()),),
                    [],
                )
                if _call(lib, "ggml_backend_reg_count", ctypes.c_size_t, (), []):
                    return f"backends loaded at run time from {folder} (GGML_BACKEND_DL build)"
        _call(lib, "ggml_backend_load_all", None, (), [])
        if _call(lib, "ggml_backend_reg_count", ctypes.c_size_t, (), []):
            return "backends loaded at run time from ggml's search path (GGML_BACKEND_DL build)"
        return "no ggml backend is registered, and none could be loaded"


def _handles(lib: Any, count: str, get: str, notes: list[str]) -> Iterator[tuple[int, Any]]:
    """Each (index, handle) of one of ggml's registries: `count` says how many, `get` hands
    out each by index (an index it has no handle for is passed over)."""
    total = _call(lib, count, ctypes.c_size_t, (), notes)
    for i in range(total or 0):
        handle = _call(lib, get, ctypes.c_void_p, ((ctypes.c_size_t, i),), notes)
        if handle:
            yield i, handle


def _read_backends(lib: Any, notes: list[str]) -> tuple[str, ...]:
    names = []
    for i, reg in _handles(lib, "ggml_backend_reg_count", "ggml_backend_reg_get", notes):
        name = _call(
            lib, "ggml_backend_reg_name", ctypes.c_char_p, ((ctypes.c_void_p, reg),), notes
        )
        names.append((name or b"").decode("utf-8", "replace") or f"backend {i}")
    return tuple(names)


def _read_devices(lib: Any, notes: list[str]) -> tuple[GgmlDevice, ...]:
    devices = []
    for i, dev in _handles(lib, "ggml_backend_dev_count", "ggml_backend_dev_get", notes):
        arg = ((ctypes.c_void_p, dev),)
        name = _call(lib, "ggml_backend_dev_name", ctypes.c_char_p, arg, notes)
        description = _call(lib, "ggml_backend_dev_description", ctypes.c_char_p, arg, notes)
        kind = _call(lib, "ggml_backend_dev_type", ctypes.c_int, arg, notes)
        reg = _call(lib, "ggml_backend_dev_backend_reg", ctypes.c_void_p, arg, notes)
        backend = (
            _call(lib, "ggml_backend_reg_name", ctypes.c_char_p, ((ctypes.c_void_p, reg),), notes)
            if reg
            else None
        )
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        size_p = ctypes.POINTER(ctypes.c_size_t)
        read = _call(
            lib,
            "ggml_backend_dev_memory",
            None,
            ((ctypes.c_void_p, dev), (size_p, ctypes.byref(free)), (size_p, ctypes.byref(total))),
            notes,
        )
        known = read is not _FAILED and total.value > 0
        devices.append(
            GgmlDevice(
                name=(name or b"").decode("utf-8", "replace") or f"device {i}",
                description=(description or b"").decode("utf-8", "replace"),
                kind=_GGML_DEVICE_KINDS.get(kind, DeviceKind.OTHER)
                if kind is not None
                else DeviceKind.OTHER,
                backend=(backend or b"").decode("utf-8", "replace"),
                memory_free=free.value if known else None,
                memory_total=total.value if known else None,
            )
        )
    return tuple(devices)


#: What `_call` returns for a function without a result that could not be called.
_FAILED: Any = object()


def _call(
    lib: Any, symbol: str, restype: Any, args: tuple[tuple[Any, Any], ...], notes: list[str]
) -> Any:
    """`symbol(*args)` from `lib`, typed here: its result, or None (`_FAILED` for a function
    without a result) with a note when the library lacks it (an older or newer llama.cpp).

    `lib[symbol]` makes a new function object each time, so the types we set never touch the
    ones llama-cpp-python set on its own attribute of the same name.
    """
    try:
        function = lib[symbol]
    except (AttributeError, OSError):
        note = f"this llama.cpp has no {symbol}"
        if note not in notes:
            notes.append(note)
        return None if restype is not None else _FAILED
    function.restype = restype
    function.argtypes = [t for t, _ in args]
    return function(*(value for _, value in args))


def llama_n_layer(lib: Any, model: Any) -> int | None:
    """The model's block count (`llama_model_n_layer`), or None if this llama.cpp lacks it."""
    with contextlib.suppress(Exception):  # a binding that moved or changed its signature
        return int(lib.llama_model_n_layer(model))
    return None


# --- torch -----------------------------------------------------------------------------------


def torch_view() -> TorchView:
    """What torch sees: its version, its CUDA build, and each GPU's name and memory."""
    if importlib.util.find_spec("torch") is None:
        return TorchView(installed=False, notes=("torch is not installed",))
    try:
        import torch
    except Exception as e:  # a broken install: ImportError, OSError for a missing libcuda...
        return TorchView(installed=False, notes=(f"torch cannot be imported: {e}",))
    notes: list[str] = []
    devices: list[TorchGpu] = []
    available = False
    try:
        available = bool(torch.cuda.is_available())
        for i in range(torch.cuda.device_count() if available else 0):
            props = torch.cuda.get_device_properties(i)
            devices.append(TorchGpu(index=i, name=props.name, memory_total=props.total_memory))
    except Exception as e:  # a driver too old for this build says so here (RuntimeError)
        notes.append(f"torch.cuda failed: {e}")
    cuda = getattr(torch.version, "cuda", None)
    if not cuda:
        notes.append("this torch build has no CUDA (a CPU build)")
    elif not available:
        notes.append(f"this torch is built with CUDA {cuda} but sees no GPU")
    return TorchView(
        installed=True,
        version=str(torch.__version__),
        cuda_version=cuda,
        cuda_available=available,
        devices=tuple(devices),
        notes=tuple(notes),
    )


def torch_model_gpu(model: Any) -> str | None:
    """The GPUs a torch model's weights are on, in words ("NVIDIA H200, 139.8 GiB (cuda:0)";
    several with `device_map` spread); None when they are all on the CPU."""
    import torch

    indices: dict[int, None] = {}
    for parameter in model.parameters():
        device = parameter.device
        if device.type == "cuda":
            indices[device.index if device.index is not None else torch.cuda.current_device()] = (
                None
            )
    gpus = []
    for i in indices:
        props = torch.cuda.get_device_properties(i)
        gpus.append(TorchGpu(index=i, name=props.name, memory_total=props.total_memory))
    return describe_devices(gpus)
