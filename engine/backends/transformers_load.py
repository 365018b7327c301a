"""Loading a model with transformers: where it comes from (a Hugging Face folder or a GGUF
file), which device and dtype it goes to, whether accelerate spreads it over several GPUs, and
what its tokenizer and configs say (special tokens, end-of-generation ids, name).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from engine.errors import ModelLoadError
from engine.specs import check_device


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where transformers loads the model from: a folder, and the GGUF file in it, if any."""

    folder: Path
    gguf_file: str | None = None

    @property
    def kwargs(self) -> dict[str, Any]:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def check_source(path: Path) -> ModelSource:
    if not path.exists():
        raise ModelLoadError(f"model folder not found: {path}")
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            if importlib.util.find_spec("gguf") is None:
                raise ModelLoadError(
                    f"cannot load model {path}: transformers reads GGUF files with the `gguf` "
                    "package: pip install 'infill-lsp[transformers]'"
                )
            return ModelSource(path.parent, path.name)
        raise ModelLoadError(
            f"{path} is a file; the transformers backend needs a Hugging Face model folder "
            "or a GGUF file"
        )
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json; it is not a Hugging Face model folder")
    return ModelSource(path)


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """No progress bars while loading: GGUF tensors are dequantized one by one, each step a
    redraw on stderr, which is our log. transformers' own switch covers its bars; the GGUF
    reader calls tqdm directly (tqdm reads its environment variables only once, at import),
    so its name for tqdm is swapped for a silent one while we load."""
    utils: Any = transformers.utils.logging
    was = utils.is_progress_bar_enabled()
    utils.disable_progress_bar()
    reader: Any = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if reader is None:
        with contextlib.suppress(ImportError):
            import transformers.modeling_gguf_pytorch_utils as reader
    bar = getattr(reader, "tqdm", None)
    if bar is not None:
        reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if was:
            utils.enable_progress_bar()
        if bar is not None:
            reader.tqdm = bar


def resolve_device(device: str) -> str:
    """ "auto" is the first GPU, else the CPU; "cpu", "cuda" and "cuda:N" are taken as said."""
    try:
        check_device(device)
    except ValueError as e:
        raise ModelLoadError(f"unknown device {device!r}; use {e}") from e
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if not torch.cuda.is_available():
        raise ModelLoadError(f"device {device} asked, but torch sees no CUDA device")
    index = device.partition(":")[2]
    if index and int(index) >= torch.cuda.device_count():
        raise ModelLoadError(
            f"device {device} asked, but torch sees {torch.cuda.device_count()} CUDA devices"
        )
    return device


#: The share of the first GPU's free memory the weights may take for the model to go there
#: whole; the rest is for the KV cache, the activations and CUDA graphs.
FIT_SHARE = 0.8


def should_spread(
    device: str, weights_bytes: int, free_gpu_bytes: Sequence[int], *, has_accelerate: bool
) -> bool:
    """Whether accelerate places the model (`device_map="auto"`): only when the device is left
    to us and the weights do not fit the first GPU. Then they go over every GPU, and what
    still does not fit goes to the CPU. A model that fits stays on one GPU, where the compiled
    decode step can run."""
    if device != "auto" or not has_accelerate or not free_gpu_bytes:
        return False
    return weights_bytes > FIT_SHARE * free_gpu_bytes[0]


def weights_bytes(source: ModelSource) -> int:
    """The model's weights in bf16, counted on an empty ("meta") model: nothing is read but
    the config. Tied weights count once."""
    from accelerate import init_empty_weights

    config = transformers.AutoConfig.from_pretrained(
        source.folder, local_files_only=True, **source.kwargs
    )
    auto: Any = transformers.AutoModelForCausalLM
    with init_empty_weights():
        model = auto.from_config(config)
    return 2 * sum(int(p.numel()) for p in model.parameters())


def spread_over_gpus(device: str, source: ModelSource) -> bool:
    if device != "auto" or not torch.cuda.is_available():
        return False
    has_accelerate = importlib.util.find_spec("accelerate") is not None
    free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
    size = weights_bytes(source) if has_accelerate else 0
    return should_spread(device, size, free, has_accelerate=has_accelerate)


def load_model(source: ModelSource, device: str, *, spread: bool) -> tuple[Any, str]:
    """The model in eval mode, and where it is, in words: bf16 on CUDA (fp16 on GPUs without
    bf16), float32 on the CPU."""
    if device.startswith("cuda"):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        dtype = torch.float32
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True, **source.kwargs}
    if spread:
        kwargs["device_map"] = "auto"
    with quiet_progress():
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(source.folder, **kwargs)
    if spread:
        places = sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()})
        placed_on = f"device_map=auto over {', '.join(places) or device}"
    else:
        model.to(device)
        placed_on = device
    model.eval()
    return model, placed_on


def special_tokens(tokenizer: Any) -> dict[str, int]:
    """Every token the tokenizer matches whole in text: its added tokens and special tokens."""
    found: dict[str, int] = {str(k): int(v) for k, v in tokenizer.get_added_vocab().items()}
    for text in tokenizer.all_special_tokens:
        token_id = tokenizer.convert_tokens_to_ids(text)
        if isinstance(token_id, int) and token_id >= 0:
            found.setdefault(text, token_id)
    return found


def eog_ids(tokenizer_eos: int | None, generation_config: Any) -> list[int]:
    """End-of-generation ids: the tokenizer's EOS and the generation config's (int or list)."""
    ids: list[int] = []
    declared = getattr(generation_config, "eos_token_id", None)
    for source in (tokenizer_eos, declared):
        if source is None:
            continue
        for token_id in source if isinstance(source, list | tuple) else [source]:
            if int(token_id) not in ids:
                ids.append(int(token_id))
    return ids


def model_name(name_or_path: str, path: Path) -> str:
    """The config's model name when it is a hub name (`org/model`), else the folder's name:
    loading from a folder sets `_name_or_path` to the folder itself."""
    if name_or_path and not Path(name_or_path).expanduser().exists():
        return name_or_path
    return path.name


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
