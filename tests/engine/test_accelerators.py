"""Accelerators as llama.cpp and torch see them, and where a llama.cpp model's layers go, since a
model that silently stays on the CPU is slow without a word why: the words `doctor` prints, from
fabricated devices; the real views on this machine; the default completion model asked for GPU
layers on a build that has none, and on a GPU."""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine import accelerators
from engine.accelerators import (
    DeviceKind,
    GgmlDevice,
    LlamaCppView,
    TorchGpu,
    describe_device,
    describe_devices,
    gib,
    llama_cpp_view,
    llama_placement,
    load_backends,
    torch_view,
)
from engine.backends.llama_cpp import LlamaCppBackend, llama_params
from engine.models import model_spec
from engine.specs import ModelOptions, ModelSpec
from engine.types import Role, SamplingParams

#: What this machine's llama-cpp-python can do: CI's is a CPU build.
LLAMA = llama_cpp_view()
CPU_BUILD_ONLY = pytest.mark.skipif(
    bool(LLAMA.gpu_offload), reason="llama-cpp-python here has GPU support (see the gpu tests)"
)

H200 = GgmlDevice(
    name="CUDA0",
    description="NVIDIA H200",
    kind=DeviceKind.GPU,
    backend="CUDA",
    memory_free=140 * 2**30,
    memory_total=150_110_011_392,
)
CPU = GgmlDevice(
    name="CPU",
    description="AMD EPYC",
    kind=DeviceKind.CPU,
    backend="CPU",
    memory_free=20 * 2**30,
    memory_total=24 * 2**30,
)
CPU_ONLY = LlamaCppView(installed=True, version="0.3.36", gpu_offload=False, backends=("CPU",))
ONE_H200 = LlamaCppView(
    installed=True, gpu_offload=True, backends=("CUDA", "CPU"), devices=(H200, CPU)
)


# --- words -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "words"),
    [
        (0, "0.0 GiB"),
        (2**30, "1.0 GiB"),
        (512 * 2**20, "0.5 GiB"),
        (150_110_011_392, "139.8 GiB"),
        (24 * 2**30 + 2**29, "24.5 GiB"),
    ],
)
def test_memory_is_shown_in_gib_to_a_tenth(size: int, words: str) -> None:
    assert gib(size) == words


def test_a_device_in_words_has_its_name_memory_and_where_it_is() -> None:
    assert H200.in_words() == "NVIDIA H200, 139.8 GiB (CUDA0)"
    assert TorchGpu(index=1, name="NVIDIA H200", memory_total=150_110_011_392).in_words() == (
        "NVIDIA H200, 139.8 GiB (cuda:1)"
    )
    assert describe_device("CPU", None, "CPU") == "CPU"  # unknown memory, no repeated name
    unnamed = replace(H200, description="", memory_total=None)
    assert unnamed.in_words() == "CUDA0"
    assert describe_devices([]) is None
    assert describe_devices([H200, replace(H200, name="CUDA1")]) == (
        "NVIDIA H200, 139.8 GiB (CUDA0); NVIDIA H200, 139.8 GiB (CUDA1)"
    )


# --- where the layers go ---------------------------------------------------------------------

TWO_GPUS = replace(ONE_H200, devices=(H200, replace(H200, name="CUDA1"), CPU))
IGPU = replace(
    H200, name="Vulkan0", description="AMD Radeon 780M", kind=DeviceKind.IGPU, backend="Vulkan"
)
VULKAN_IGPU = LlamaCppView(
    installed=True, gpu_offload=True, backends=("Vulkan", "CPU"), devices=(IGPU, CPU)
)


@pytest.mark.parametrize(
    ("view", "gpu_layers", "n_layer", "device", "gpu"),
    [
        pytest.param(ONE_H200, 0, 18, "cpu", None, id="none asked"),
        pytest.param(
            ONE_H200, -1, 18, "cuda (all 19 layers)", H200.in_words(), id="all: blocks + output"
        ),
        pytest.param(ONE_H200, 19, 18, "cuda (all 19 layers)", H200.in_words(), id="exactly all"),
        pytest.param(ONE_H200, 999, 18, "cuda (all 19 layers)", H200.in_words(), id="more"),
        pytest.param(ONE_H200, 10, 18, "cuda (10 of 19 layers)", H200.in_words(), id="some"),
        pytest.param(ONE_H200, -1, None, "cuda (all layers)", H200.in_words(), id="count unknown"),
        pytest.param(
            TWO_GPUS,
            -1,
            24,
            "cuda (all 25 layers)",
            "NVIDIA H200, 139.8 GiB (CUDA0); NVIDIA H200, 139.8 GiB (CUDA1)",
            id="split over two GPUs",
        ),
        pytest.param(
            VULKAN_IGPU,
            -1,
            18,
            "vulkan (all 19 layers)",
            "AMD Radeon 780M, 139.8 GiB (Vulkan0)",
            id="an integrated GPU",
        ),
        pytest.param(
            replace(ONE_H200, backends=("Vulkan", "CUDA", "CPU"), devices=(IGPU, H200, CPU)),
            -1,
            18,
            "cuda (all 19 layers)",
            H200.in_words(),
            id="integrated GPUs only when there is no other",
        ),
    ],
)
def test_the_placement_counts_the_output_layer_as_llama_cpp_does(
    view: LlamaCppView, gpu_layers: int, n_layer: int | None, device: str, gpu: str | None
) -> None:
    placement = llama_placement(view, gpu_layers, n_layer)
    assert (placement.device, placement.gpu, placement.warnings) == (device, gpu, ())


def test_gpu_layers_on_a_cpu_only_build_run_on_the_cpu_and_say_how_to_rebuild() -> None:
    placement = llama_placement(CPU_ONLY, -1, 18)
    assert (placement.device, placement.gpu) == ("cpu", None)
    (warning,) = placement.warnings
    assert warning.startswith("gpuLayers=-1 asked (--gpu-layers -1), but this llama-cpp-python")
    assert "has no GPU support; the model runs on the CPU" in warning
    assert (
        'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir '
        "llama-cpp-python==0.3.36" in warning
    )
    assert "make install LLAMA_CUDA=1" in warning


def test_a_cuda_build_that_finds_no_gpu_says_so_instead_of_asking_for_a_rebuild() -> None:
    no_device = LlamaCppView(installed=True, gpu_offload=False, backends=("CUDA", "CPU"))
    (warning,) = llama_placement(no_device, 12, 18).warnings
    assert "llama.cpp's CUDA backend finds no GPU; the model runs on the CPU" in warning
    assert "CUDA_VISIBLE_DEVICES" in warning
    assert "Rebuild" not in warning


# --- reading llama.cpp through ctypes, robustly ----------------------------------------------


class FakeFunction:
    """A ctypes function as `lib[name]` gives it: typed by the caller, then called."""

    def __init__(self, body: Any) -> None:
        self.body = body
        self.restype: Any = None
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.body(*args)


class FakeLibrary:
    """A llama.cpp library with only the symbols given (names to plain functions)."""

    def __init__(self, **symbols: Any) -> None:
        self.symbols = symbols
        self.calls: list[str] = []

    def __getitem__(self, name: str) -> FakeFunction:
        if name not in self.symbols:
            raise AttributeError(name)  # what ctypes raises for an undefined symbol
        self.calls.append(name)
        return FakeFunction(self.symbols[name])


def test_a_build_with_dynamically_loaded_backends_gets_them_loaded_from_its_folder(
    tmp_path: Path,
) -> None:
    registered: list[bytes] = []
    lib = FakeLibrary(
        ggml_backend_reg_count=lambda: len(registered),
        ggml_backend_load_all_from_path=registered.append,
        ggml_backend_load_all=lambda: None,
    )
    note = load_backends(lib, tmp_path)
    assert registered == [str(tmp_path).encode()]
    assert note == f"backends loaded at run time from {tmp_path} (GGML_BACKEND_DL build)"
    # Registered now: nothing more to do.
    assert load_backends(lib, tmp_path) is None
    assert registered == [str(tmp_path).encode()]


def test_a_build_with_linked_backends_loads_nothing(tmp_path: Path) -> None:
    lib = FakeLibrary(ggml_backend_reg_count=lambda: 1, ggml_backend_load_all=lambda: None)
    assert load_backends(lib, tmp_path) is None
    assert lib.calls == ["ggml_backend_reg_count"]


def test_missing_symbols_become_notes_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    # An older llama.cpp: a registry count, and none of the device functions.
    lib = FakeLibrary(ggml_backend_reg_count=lambda: 0, llama_supports_gpu_offload=lambda: False)
    monkeypatch.setattr(accelerators, "_library", lambda _module: lib)
    view = llama_cpp_view()
    assert view.installed
    assert (view.gpu_offload, view.backends, view.devices) == (False, (), ())
    assert "this llama.cpp has no ggml_backend_dev_count" in view.notes
    assert "no ggml backend is registered, and none could be loaded" in view.notes
    # And the warning for GPU layers says the devices could not be read, and why.
    (warning,) = llama_placement(view, -1, 18).warnings
    assert "the devices of this llama-cpp-python build cannot be read" in warning
    assert "ggml_backend_dev_count" in warning


def test_an_offloading_build_whose_devices_cannot_be_read_says_the_gpu_is_not_named() -> None:
    unread = LlamaCppView(
        installed=True, gpu_offload=True, notes=("this llama.cpp has no ggml_backend_dev_count",)
    )
    placement = llama_placement(unread, 10, 18)
    assert (placement.device, placement.gpu) == ("gpu (10 of 19 layers)", None)
    (warning,) = placement.warnings
    assert "its devices cannot be read (this llama.cpp has no ggml_backend_dev_count)" in warning


def test_a_library_handle_that_moved_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerators, "_library", lambda _module: None)
    view = llama_cpp_view()
    assert view.installed
    assert view.devices == ()
    assert view.notes == ("llama-cpp-python's library handle is not where it was (llama_cpp._lib)",)


# --- this machine ----------------------------------------------------------------------------


@CPU_BUILD_ONLY
def test_this_cpu_build_lists_a_cpu_device_no_gpu_and_no_offload() -> None:
    view = llama_cpp_view()
    assert view.installed
    assert view.version
    assert view.gpu_offload is False
    assert "CPU" in view.backends
    assert view.gpu_backends() == ()
    kinds = [d.kind for d in view.devices]
    assert DeviceKind.CPU in kinds
    assert DeviceKind.GPU not in kinds
    assert DeviceKind.IGPU not in kinds
    assert view.offload_devices() == ()
    (cpu,) = (d for d in view.devices if d.kind is DeviceKind.CPU)
    assert cpu.backend == "CPU"
    assert cpu.memory_total is not None
    assert cpu.memory_total > 0
    assert view.notes == ()


def test_the_torch_view_without_cuda_says_why() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device here")
    view = torch_view()
    assert view.installed
    assert view.version == torch.__version__
    assert view.cuda_available is False
    assert view.devices == ()
    if torch.version.cuda is None:
        assert view.cuda_version is None
        assert view.notes == ("this torch build has no CUDA (a CPU build)",)
    else:
        assert view.notes == (
            f"this torch is built with CUDA {torch.version.cuda} but sees no GPU",
        )


def test_a_torch_model_on_the_cpu_has_no_gpu() -> None:
    torch = pytest.importorskip("torch")
    assert accelerators.torch_model_gpu(torch.nn.Linear(4, 4)) is None


def test_without_torch_the_view_says_it_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real(name, *a),
    )
    assert torch_view() == accelerators.TorchView(
        installed=False, notes=("torch is not installed",)
    )


# --- the default completion model ------------------------------------------------------------


def completion_spec(gpu_layers: int) -> ModelSpec:
    spec = model_spec(Role.COMPLETION, ModelOptions(gpu_layers=gpu_layers), environ={})
    assert isinstance(spec, ModelSpec)
    return spec


def first_tokens(backend: LlamaCppBackend, n: int = 4) -> list[int]:
    prompt = backend.tokenize("def add(a, b):\n", add_bos=True)
    tokens = backend.iter_token_ids(prompt, SamplingParams(), threading.Event())
    out = [token for token, _ in zip(tokens, range(n), strict=False)]
    tokens.close()
    return out


@CPU_BUILD_ONLY
def test_all_gpu_layers_on_a_cpu_only_build_load_on_the_cpu_with_a_clear_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = completion_spec(-1)
    # The model runs on the CPU, so it gets the CPU's faster attention, as with no GPU layers
    # (README "Speed": flash attention is on for the CPU).
    assert llama_params(spec)["flash_attn"] is True
    assert llama_params(completion_spec(0))["flash_attn"] is True
    with caplog.at_level("WARNING", logger="engine.backends.llama_cpp"):
        backend = LlamaCppBackend(spec)
    try:
        assert (backend.info.device, backend.info.gpu) == ("cpu", None)
        (warning,) = backend.info.warnings
        assert "this llama-cpp-python build has no GPU support; the model runs on the CPU" in (
            warning
        )
        assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in warning
        assert warning in caplog.text  # the server's log says it too
        assert len(first_tokens(backend)) == 4  # and it works
    finally:
        backend.close()


@pytest.mark.gpu
@pytest.mark.skipif(
    not LLAMA.gpu_offload, reason="needs llama-cpp-python built with GPU support and a GPU"
)
def test_all_gpu_layers_on_a_gpu_build_put_the_whole_model_on_the_gpu() -> None:
    backend = LlamaCppBackend(completion_spec(-1))
    try:
        n_layer = backend._lib.llama_model_n_layer(backend._llm._model.model)
        assert backend.info.device.endswith(f"(all {n_layer + 1} layers)"), backend.info.device
        assert backend.info.device != "cpu"
        assert backend.info.gpu is not None
        assert "GiB" in backend.info.gpu
        assert backend.info.warnings == ()
        assert len(first_tokens(backend)) == 4
    finally:
        backend.close()
