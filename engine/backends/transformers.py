"""The transformers backend: a Hugging Face model folder, or a GGUF file that transformers
dequantizes, on CUDA (bf16) or the CPU (float32).

We run our own decode loop instead of `model.generate()`: it yields one token at a time, checks
the cancel event before every step, and keeps the KV cache between requests. A new request
crops the cache to the longest token prefix it shares with the previous one and feeds only the
rest, so while the user types each request costs a few new tokens instead of the whole prompt.
The caches of recently used documents are kept too, within a memory budget
(engine/prefix_cache.py): going back to a file costs what a keystroke costs. The prompt is fed
in chunks, so that a cancel stops a long one within a chunk, keeping what was computed.

Three decode loops (`DecodePath`, setting `decode`):
- dynamic: a cache that grows with each token, one eager forward per token. It keeps every
  layer's keys and values in full, sliding-window layers included, so it can be cropped to any
  length. The CPU's default: there the Python overhead per token is small beside the matmuls.
- static: one cache preallocated for the whole context, written in place. Cutting it back only
  moves its length. Other documents' caches are kept as copies of their used part.
- compiled: the static cache with the one-token decode step under `torch.compile`; on CUDA
  with CUDA graphs ("reduce-overhead"), which replay a step's hundreds of kernel launches as
  one. The prompt still runs eagerly: its length changes with every request. Compiled once at
  load, with a few warm-up steps, so that no request waits for it. CUDA's default.
A loop that cannot be used (no static cache for this model, sliding-window layers that a long
static cache could not cut back, a compile that fails) falls back to the next simpler one,
with one log line saying why.

Left for later (DESIGN §2): caches for models whose attention is not plain key/value (linear
attention, state-space layers).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
import transformers

from engine.accelerators import torch_model_gpu
from engine.backend import Backend, ModelInfo, Vocabulary, scoring_prompt
from engine.detokenizer import DecodeStreamDetokenizer, Detokenizer
from engine.errors import ModelLoadError, PromptTooLongError
from engine.prefix_cache import CacheStatus, PrefixCache
from engine.prefix_cache import common_prefix as _common_prefix
from engine.sampling import Sampler
from engine.specs import ModelSpec, check_device
from engine.types import SamplingParams, Scores

log = logging.getLogger(__name__)

#: Prompt tokens per forward on the CPU: a cancel stops a long prompt within one chunk.
PREFILL_CHUNK = 256
#: On CUDA a prompt goes in one forward up to this many tokens (a 4,096-token forward of a
#: 1.5B model takes tens of milliseconds there, so a cancel still waits little).
CUDA_PREFILL_CHUNK = 4096
#: Decode steps run at load to compile the step and record its CUDA graph: dynamo compiles on
#: the first call, CUDA graph trees warm up on the next and record on the one after.
WARMUP_STEPS = 3


class DecodePath(StrEnum):
    """How tokens are decoded (module docstring)."""

    DYNAMIC = "dynamic"
    STATIC = "static"
    COMPILED = "compiled"


def wanted_decode_path(setting: str, device: str) -> DecodePath:
    """The loop the `decode` setting asks for on `device` ("auto": compiled on CUDA, dynamic on
    the CPU, where compiling costs a minute of load for little)."""
    if setting == "auto":
        return DecodePath.COMPILED if device.startswith("cuda") else DecodePath.DYNAMIC
    return DecodePath(setting)


class TransformersBackend(Backend):
    """A Hugging Face model folder (config.json, weights, tokenizer.json) loaded with torch."""

    def __init__(self, spec: ModelSpec) -> None:
        path = spec.path.expanduser()
        started = time.perf_counter()
        source = _check_source(path)
        try:
            target = _resolve_device(spec.device)
            with _quiet_progress():
                tokenizer: Any = transformers.AutoTokenizer.from_pretrained(
                    source.folder, local_files_only=True, **source.kwargs
                )
            # Our detokenizer is the `tokenizers` library's DecodeStream: a fast tokenizer only.
            backend_tokenizer = getattr(tokenizer, "backend_tokenizer", None)
            if backend_tokenizer is None:
                raise ModelLoadError(f"cannot load model {path}: it has no fast tokenizer.json")
            model, placed_on = _load_model(source, target, spread=_spread(spec.device, source))
        except ModelLoadError:
            raise
        except Exception as e:  # transformers raises OSError, ValueError, KeyError, ImportError...
            raise ModelLoadError(f"cannot load model {path}: {_first_line(e)}") from e
        self._tokenizer: Any = tokenizer
        self._backend_tokenizer: Any = backend_tokenizer
        self._model: Any = model
        # Calls into the tokenizer flip a flag on the shared Rust tokenizer (special tokens
        # split or not), so tokenize() may not run on two threads at once.
        self._tokenizer_lock = threading.Lock()

        # The forward's keyword names changed across transformers releases.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._logits_arg = next(
            (name for name in ("logits_to_keep", "num_logits_to_keep") if name in params), None
        )
        self._input_device = model.get_input_embeddings().weight.device
        on_cuda = self._input_device.type == "cuda"
        self._prefill_chunk = CUDA_PREFILL_CHUNK if on_cuda else PREFILL_CHUNK

        # The KV cache kept between requests and exactly the token ids whose keys it holds.
        self._cache: Any = None
        self._cached_ids: list[int] = []
        self._last_prefill_tokens = 0
        # Other documents' caches, set aside while the live one serves another (the dynamic
        # loop keeps the cache itself, the static ones a `_Snapshot` of it).
        self._kept: PrefixCache[Any] = PrefixCache(spec.cache_bytes)

        config = model.config.get_text_config()
        max_positions = getattr(config, "max_position_embeddings", None) or getattr(
            config, "n_positions", None
        )
        context_size = min(spec.context_size, max_positions or spec.context_size)
        model_vocab = getattr(config, "vocab_size", None) or len(tokenizer)
        # Logits past the tokenizer's vocabulary (embedding rows padded for speed) are never
        # sampled: no detokenizer could show them.
        self._vocab_size = min(len(tokenizer), model_vocab)
        self._decode = DecodePath.DYNAMIC
        self._step: Callable[..., Any] | None = None  # the compiled decode step
        self._fallbacks: list[str] = []  # why a faster loop was not used (doctor shows them)
        self._choose_decode(wanted_decode_path(spec.decode, str(self._input_device)), context_size)
        self._bos_id: int | None = tokenizer.bos_token_id
        self._special_ids = _special_tokens(tokenizer)
        template = tokenizer.chat_template
        if isinstance(template, dict):  # named templates (transformers 4): the default one
            template = template.get("default")
        adds_bos = self._bos_id is not None and (
            tokenizer("x").input_ids[:1] == [self._bos_id]
            or bool(getattr(tokenizer, "add_bos_token", False))
        )
        vocab = Vocabulary(
            bos_token=tokenizer.bos_token,
            eos_token=tokenizer.eos_token,
            adds_bos=adds_bos,
            chat_template=template or None,
        )

        eog_ids = _eog_ids(tokenizer.eos_token_id, getattr(model, "generation_config", None))
        info = ModelInfo(
            name=_model_name(getattr(model.config, "_name_or_path", ""), path),
            path=str(path),
            backend="transformers",
            device=placed_on,
            gpu=torch_model_gpu(model),
            context_size=context_size,
            vocab_size=self._vocab_size,
            eog_tokens=tuple(
                (i, str(tokenizer.convert_ids_to_tokens(i)))
                for i in eog_ids
                if 0 <= i < self._vocab_size
            ),
            has_chat_template=vocab.chat_template is not None,
            load_seconds=time.perf_counter() - started,
            warnings=tuple(self._fallbacks),
        )
        super().__init__(info=info, vocab=vocab)
        for line in self._fallbacks:
            log.warning("%s", line)
        log.info(
            "loaded %s on %s (%s, %s decode) in %.1f s",
            path,
            placed_on,
            str(model.dtype).removeprefix("torch."),
            self._decode.value,
            info.load_seconds,
        )

    # --- the decode loop ---------------------------------------------------------------------

    @property
    def decode_path(self) -> DecodePath:
        """The decode loop in use, after any fallback. For doctor, tests and benchmarks."""
        return self._decode

    def _choose_decode(self, wanted: DecodePath, context_size: int) -> None:
        """Set up the `wanted` loop, or the simpler one it falls back to (one log line why)."""
        if wanted is DecodePath.DYNAMIC:
            self._reset_cache()
            return
        why = self._make_static_cache(context_size)
        if why is not None:
            self._fallbacks.append(
                f"decode: {wanted.value} loop not used ({why}); using the dynamic one"
            )
            self._decode = DecodePath.DYNAMIC
            self._reset_cache()
            return
        self._decode = DecodePath.STATIC
        if wanted is DecodePath.COMPILED:
            why = (
                self._compile_step()
                if self._decode_steps_static()
                else (
                    "its sliding-window layers keep their length in Python, for which a compiled "
                    "step would be compiled again at every token"
                )
            )
            if why is None:
                self._decode = DecodePath.COMPILED
            else:
                self._fallbacks.append(
                    f"decode: compiled loop not used ({why}); using the static one"
                )

    def _make_static_cache(self, context_size: int) -> str | None:
        """Preallocate a static cache for `context_size` tokens; why it cannot be, or None."""
        if (
            getattr(self._model, "hf_device_map", None)
            and len({str(d) for d in self._model.hf_device_map.values()}) > 1
        ):
            return "the model is spread over several devices"
        try:
            cache = transformers.StaticCache(config=self._model.config, max_cache_len=context_size)
        except Exception as e:  # a model whose config has no static cache layout
            return f"no static cache for this model: {_first_line(e)}"
        stuck = [
            type(layer).__name__
            for layer in getattr(cache, "layers", ())
            if not getattr(layer, "is_croppable", False)
        ]
        if stuck or not getattr(cache, "layers", None):
            # A sliding window shorter than the context: once the window has slid, a crop
            # cannot bring the evicted keys back, and transformers' crop would not say so.
            return f"its {stuck[0] if stuck else 'cache'} layers cannot be cut back"
        self._cache, self._cached_ids = cache, []
        return None

    def _decode_steps_static(self) -> bool:
        return not any(getattr(layer, "is_sliding", False) for layer in self._cache.layers)

    def _compile_step(self) -> str | None:
        """Compile the one-token decode step and run it `WARMUP_STEPS` times; why it failed, or
        None. On CUDA the step is recorded as a CUDA graph."""
        started = time.perf_counter()
        on_cuda = self._input_device.type == "cuda"
        try:
            first = self._bos_or_zero()
            # An eager forward first: the static cache allocates its tensors on its first
            # write, which must not happen inside the compiled graph.
            self._feed([first])
            self._step = torch.compile(
                self._model.forward,
                mode="reduce-overhead" if on_cuda else None,
                fullgraph=True,
                dynamic=False,
            )
            for _ in range(WARMUP_STEPS):
                self._feed([first])
        except Exception as e:  # dynamo, inductor, triton or CUDA graph errors
            self._step = None
            self._reset_cache()
            return f"{type(e).__name__}: {_first_line(e)}"
        self._reset_cache()
        log.info("decode: compiled the decode step in %.1f s", time.perf_counter() - started)
        return None

    def _bos_or_zero(self) -> int:
        bos = getattr(self._tokenizer, "bos_token_id", None)
        return bos if isinstance(bos, int) and bos >= 0 else 0

    # --- tokenizer ---------------------------------------------------------------------------

    @property
    def last_prefill_tokens(self) -> int:
        """How many prompt tokens the last request fed to the model (the rest came from the
        KV cache). For tests and benchmarks."""
        return self._last_prefill_tokens

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        # The tokenizer's own template would add BOS and maybe EOS; we add BOS ourselves.
        with self._tokenizer_lock:
            ids: list[int] = self._tokenizer(
                text, add_special_tokens=False, split_special_tokens=not special
            ).input_ids
        if add_bos and self._bos_id is not None and ids[:1] != [self._bos_id]:
            ids.insert(0, self._bos_id)
        return ids

    def special_token_id(self, text: str) -> int | None:
        return self._special_ids.get(text)

    def new_detokenizer(self) -> Detokenizer:
        return DecodeStreamDetokenizer(self._backend_tokenizer)

    # --- generation --------------------------------------------------------------------------

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        if self._model is None:
            raise RuntimeError(f"the model {self.info.name} is closed")
        if cancelled.is_set():
            return
        prompt = list(prompt_ids)
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if len(prompt) > self.context_size:
            raise PromptTooLongError(len(prompt), self.context_size)
        logits = self._prefill(prompt, cache_key, cancelled)
        if logits is None:
            return
        sampler = Sampler(
            sampling, vocab_size=self._vocab_size, prompt_ids=prompt, device=logits.device
        )
        try:
            while not cancelled.is_set():
                token = sampler(logits)
                # The consumer may stop here for good: the cache then holds everything but
                # `token`, which `_cached_ids` says, so the next request stays exact.
                yield token
                if cancelled.is_set() or len(self._cached_ids) >= self.context_size:
                    return
                logits = self._feed([token])
        finally:
            self._kept.set_live(cache_key, len(self._cached_ids))

    @property
    def can_score(self) -> bool:
        return True

    def score(
        self,
        prompt_ids: Sequence[int],
        continuations: Sequence[Sequence[int]],
        top: int,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Scores | None:
        if self._model is None:
            raise RuntimeError(f"the model {self.info.name} is closed")
        prompt = scoring_prompt(prompt_ids, continuations, self.context_size)
        if cancelled.is_set():
            return None
        logits = self._prefill(prompt, cache_key, cancelled)
        if logits is None:
            return None
        after_prompt = torch.log_softmax(logits, dim=-1)
        scored = []
        try:
            for continuation in continuations:
                if cancelled.is_set():
                    return None
                rows = after_prompt[None, :]
                if len(continuation) > 1:
                    # On the prompt alone (a cache that cannot be cut starts over: the prompt
                    # again), every position's logits.
                    if self._crop(len(prompt)) < len(prompt):
                        self._feed(prompt)
                    fed = self._feed(list(continuation[:-1]), keep=len(continuation) - 1)
                    self._last_prefill_tokens += len(continuation) - 1
                    rows = torch.cat([rows, torch.log_softmax(fed, dim=-1)])
                picked = rows.gather(1, torch.tensor(continuation, device=rows.device)[:, None])
                scored.append(tuple(float(x) for x in picked[:, 0].tolist()))
        finally:
            self._crop(len(prompt))  # the prompt stays: a generation after it starts at once
            self._kept.set_live(cache_key, len(self._cached_ids))
        values, ids = torch.topk(after_prompt, min(top, after_prompt.shape[-1]))
        return Scores(
            continuations=tuple(scored),
            top=tuple(zip((int(i) for i in ids.tolist()), values.tolist(), strict=True)),
        )

    def _crop(self, length: int) -> int:
        """Cut the cache back to its first `length` tokens; how many it keeps (none, afresh,
        where it cannot be cut)."""
        if len(self._cached_ids) <= length:
            return len(self._cached_ids)
        try:
            with torch.inference_mode():
                # A negative length removes that many tokens (transformers 4 and 5 alike).
                self._cache.crop(length - len(self._cached_ids))
        except (RuntimeError, ValueError):
            log.warning("the KV cache cannot be cropped; computing the prompt afresh")
            self._reset_cache()
            return 0
        del self._cached_ids[length:]
        return length

    def cache_status(self) -> CacheStatus:
        return self._kept.status

    def _prefill(
        self, prompt: list[int], key: str | None, cancelled: threading.Event
    ) -> torch.Tensor | None:
        """Bring the cache to `prompt` and return the logits after its last token; None if
        `cancelled` stopped it (what was fed stays in the cache for the next request).

        1. Start from the live cache, or from a kept one that shares more of the prompt (the
           live one is kept when it belongs to another document).
        2. Keep the longest prefix the cache shares with the prompt, but never all of the
           prompt: its last token is fed again, because only a forward gives fresh logits.
        3. Crop the cache to that prefix (or start a new one when nothing is shared).
        4. Feed the rest of the prompt, `PREFILL_CHUNK` tokens per forward.
        """
        plan = self._kept.plan(prompt, key, self._cached_ids)
        if plan.save_live and self._cache is not None and self._cached_ids:
            self._kept.size_budget(self._bytes_per_token(), self.context_size)
            tokens = list(self._cached_ids)
            kept, nbytes = self._set_aside()
            self._kept.keep(self._kept.live_key, tokens, kept, nbytes)
        if plan.restore is not None:
            self._bring_back(plan.restore, plan.restore_tokens)
        # From here on the live cache is this document's, whatever happens to the prompt.
        self._kept.set_live(key, len(self._cached_ids))
        shared = min(_common_prefix(self._cached_ids, prompt), len(prompt) - 1)
        if self._cache is None or shared == 0:
            self._reset_cache()
            shared = 0
        else:
            shared = self._crop(shared)
        self._last_prefill_tokens = len(prompt) - shared
        rest = prompt[shared:]
        logits: torch.Tensor | None = None
        for start in range(0, len(rest), self._prefill_chunk):
            if cancelled.is_set():
                break
            logits = self._feed(rest[start : start + self._prefill_chunk])
        self._kept.set_live(key, len(self._cached_ids))
        return None if cancelled.is_set() else logits

    def _bytes_per_token(self) -> int:
        """What one token's keys and values take in the model's cache, from its config."""
        config = self._model.config.get_text_config()
        layers = getattr(config, "num_hidden_layers", 0) or 0
        heads = getattr(config, "num_attention_heads", 0) or 0
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or (
            (getattr(config, "hidden_size", 0) or 0) // max(1, heads)
        )
        return int(2 * layers * kv_heads * head_dim * self._model.dtype.itemsize)

    def _feed(self, ids: list[int], keep: int = 1) -> torch.Tensor:
        """Run `ids` through the model on top of the cache; the logits after the last one
        (with `keep` > 1: after each of the last `keep`, one row each)."""
        kwargs: dict[str, Any] = {self._cache_arg: self._cache, "use_cache": True}
        if self._logits_arg is not None:
            kwargs[self._logits_arg] = keep
        input_ids = torch.tensor([ids], dtype=torch.long, device=self._input_device)
        step = self._step if len(ids) == 1 and keep == 1 else None
        try:
            with torch.inference_mode():
                if step is None:
                    output = self._model(input_ids=input_ids, **kwargs)
                else:
                    # Each replay of the CUDA graph writes over the last one's outputs: the
                    # logits are copied out below, before the next step.
                    _mark_step_begin()
                    output = step(input_ids=input_ids, **kwargs)
        except BaseException:
            # A forward that failed half-way (out of memory, interrupted) leaves some layers
            # updated and others not: nothing in the cache can be trusted.
            self._reset_cache()
            raise
        self._cached_ids.extend(ids)
        held, fed = int(self._cache.get_seq_length()), len(self._cached_ids)
        if held != fed:  # a model whose cache this loop does not understand
            self._reset_cache()
            raise RuntimeError(f"the KV cache holds {held} tokens where {fed} were fed")
        if keep > 1:
            rows: torch.Tensor = output.logits[0, -keep:, : self._vocab_size]
            return rows.float()
        logits: torch.Tensor = output.logits[0, -1, : self._vocab_size]
        return logits.float() if step is None else logits.float().clone()

    def _reset_cache(self) -> None:
        """An empty cache. The static one stays the same object: a compiled step has its
        tensors' addresses baked in."""
        if self._decode is DecodePath.DYNAMIC or self._cache is None:
            self._cache = transformers.DynamicCache()
        elif held := int(self._cache.get_seq_length()):
            with torch.inference_mode():
                self._cache.crop(-held)
        self._cached_ids = []

    def _set_aside(self) -> tuple[Any, int]:
        """The live cache as the kept caches hold it, and its bytes; the live one is then
        empty."""
        if self._decode is DecodePath.DYNAMIC:
            cache = self._cache
            nbytes = _cache_bytes(cache) or self._bytes_per_token() * len(self._cached_ids)
            self._cache, self._cached_ids = None, []
            return cache, nbytes
        snapshot = _Snapshot.of(self._cache, len(self._cached_ids))
        self._reset_cache()
        return snapshot, snapshot.nbytes

    def _bring_back(self, kept: Any, tokens: Sequence[int]) -> None:
        """Make a kept cache the live one."""
        if self._decode is DecodePath.DYNAMIC:
            self._cache = kept
        else:
            self._reset_cache()
            with torch.inference_mode():
                kept.into(self._cache)
        self._cached_ids = list(tokens)

    def close(self) -> None:
        on_cuda = self._input_device.type == "cuda"
        self._kept.clear()
        self._cache = None
        self._cached_ids = []
        self._step = None
        self._model = None
        if on_cuda:
            torch.cuda.empty_cache()


@dataclass(frozen=True, slots=True)
class _Source:
    """Where transformers loads the model from: a folder, and the GGUF file in it, if any."""

    folder: Path
    gguf_file: str | None = None

    @property
    def kwargs(self) -> dict[str, Any]:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def _check_source(path: Path) -> _Source:
    if not path.exists():
        raise ModelLoadError(f"model folder not found: {path}")
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            if importlib.util.find_spec("gguf") is None:
                raise ModelLoadError(
                    f"cannot load model {path}: transformers reads GGUF files with the `gguf` "
                    "package: pip install 'infill-lsp[transformers]'"
                )
            return _Source(path.parent, path.name)
        raise ModelLoadError(
            f"{path} is a file; the transformers backend needs a Hugging Face model folder "
            "or a GGUF file"
        )
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json; it is not a Hugging Face model folder")
    return _Source(path)


def _mark_step_begin() -> None:
    """Tell CUDA graph trees that a new step starts (older torch has no such call)."""
    mark: Any = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    if mark is not None:
        mark()


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
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


@dataclass(slots=True)
class _Snapshot:
    """A static cache's first tokens, copied out: what a kept document holds, since keeping
    whole static caches would take the context's full size each."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def of(cls, cache: Any, length: int) -> _Snapshot:
        return cls(
            [
                (layer.keys[:, :, :length].clone(), layer.values[:, :, :length].clone())
                for layer in cache.layers
                if length and layer.is_initialized
            ]
        )

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.layers)

    def into(self, cache: Any) -> None:
        """Write the copied keys and values into an empty static cache, in place."""
        for layer, (keys, values) in zip(cache.layers, self.layers, strict=False):
            layer.update(keys, values)


def _resolve_device(device: str) -> str:
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


def weights_bytes(source: _Source) -> int:
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


def _spread(device: str, source: _Source) -> bool:
    if device != "auto" or not torch.cuda.is_available():
        return False
    has_accelerate = importlib.util.find_spec("accelerate") is not None
    free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
    size = weights_bytes(source) if has_accelerate else 0
    return should_spread(device, size, free, has_accelerate=has_accelerate)


def _load_model(source: _Source, device: str, *, spread: bool) -> tuple[Any, str]:
    """The model in eval mode, and where it is, in words: bf16 on CUDA (fp16 on GPUs without
    bf16), float32 on the CPU."""
    if device.startswith("cuda"):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        dtype = torch.float32
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True, **source.kwargs}
    if spread:
        kwargs["device_map"] = "auto"
    with _quiet_progress():
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(source.folder, **kwargs)
    if spread:
        places = sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()})
        placed_on = f"device_map=auto over {', '.join(places) or device}"
    else:
        model.to(device)
        placed_on = device
    model.eval()
    return model, placed_on


def _special_tokens(tokenizer: Any) -> dict[str, int]:
    """Every token the tokenizer matches whole in text: its added tokens and special tokens."""
    found: dict[str, int] = {str(k): int(v) for k, v in tokenizer.get_added_vocab().items()}
    for text in tokenizer.all_special_tokens:
        token_id = tokenizer.convert_tokens_to_ids(text)
        if isinstance(token_id, int) and token_id >= 0:
            found.setdefault(text, token_id)
    return found


def _eog_ids(tokenizer_eos: int | None, generation_config: Any) -> list[int]:
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


def _model_name(name_or_path: str, path: Path) -> str:
    """The config's model name when it is a hub name (`org/model`), else the folder's name:
    loading from a folder sets `_name_or_path` to the folder itself."""
    if name_or_path and not Path(name_or_path).expanduser().exists():
        return name_or_path
    return path.name


def _cache_bytes(cache: Any) -> int:
    """The bytes a `DynamicCache`'s tensors take (transformers 5 keeps them per layer, 4 in
    two lists); 0 if its layout is unknown."""
    tensors: list[Any] = []
    for layer in getattr(cache, "layers", None) or ():
        tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
    for name in ("key_cache", "value_cache"):
        if not tensors:
            tensors += list(getattr(cache, name, None) or ())
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
