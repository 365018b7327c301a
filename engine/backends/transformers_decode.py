"""The transformers backend's decode loops: a loaded model and its KV cache, as the live cache of
engine/local_backend.py (`LiveCache`): running tokens through the model on top of the cache,
cutting it back, and setting it aside for another document and bringing it back.

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
with one line saying why (`DecodeLoop.fallbacks`).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
import transformers

from engine.backends.transformers_load import first_line
from engine.local_backend import LiveCache

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


class DecodeLoop(LiveCache[Any, torch.Tensor]):
    """`model` (in eval mode) and the KV cache kept between requests, for `context_size`
    tokens, with the loop the `decode` setting asks for or the one it falls back to. Logits
    past `vocab_size` (the tokenizer's vocabulary) are cut off. `warmup_token` is what a
    compiled step warms up on."""

    def __init__(
        self,
        model: Any,
        *,
        vocab_size: int,
        context_size: int,
        decode: str,
        warmup_token: int,
    ) -> None:
        #: The model; None once closed.
        self.model: Any = model
        self._vocab_size = vocab_size
        # The forward's keyword names changed across transformers releases.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._logits_arg = next(
            (name for name in ("logits_to_keep", "num_logits_to_keep") if name in params), None
        )
        self._input_device = model.get_input_embeddings().weight.device
        self._on_cuda: bool = self._input_device.type == "cuda"
        self.chunk = CUDA_PREFILL_CHUNK if self._on_cuda else PREFILL_CHUNK
        # The KV cache and exactly the token ids whose keys it holds. Other documents' caches
        # are kept by the backend: the dynamic loop's as the cache itself, the static ones' as
        # a `_Snapshot` of it.
        self._cache: Any = None
        self._cached_ids: list[int] = []
        self._decode = DecodePath.DYNAMIC
        self._step: Callable[..., Any] | None = None  # the compiled decode step
        self._rows_refused = False  # `rows` said once why it cannot copy this cache
        #: Why a faster loop was not used (doctor shows them).
        self.fallbacks: list[str] = []
        wanted = wanted_decode_path(decode, str(self._input_device))
        self._choose(wanted, context_size, warmup_token)

    @property
    def on_cuda(self) -> bool:
        """Whether the model takes its input on a CUDA device."""
        return self._on_cuda

    @property
    def path(self) -> DecodePath:
        """The decode loop in use, after any fallback."""
        return self._decode

    # --- choosing the loop -------------------------------------------------------------------

    def _choose(self, wanted: DecodePath, context_size: int, warmup_token: int) -> None:
        """Set up the `wanted` loop, or the simpler one it falls back to (one line why)."""
        if wanted is DecodePath.DYNAMIC:
            self._reset_cache()
            return
        why = self._make_static_cache(context_size)
        if why is not None:
            self.fallbacks.append(
                f"decode: {wanted.value} loop not used ({why}); using the dynamic one"
            )
            self._decode = DecodePath.DYNAMIC
            self._reset_cache()
            return
        self._decode = DecodePath.STATIC
        if wanted is DecodePath.COMPILED:
            why = (
                self._compile_step(warmup_token)
                if self._decode_steps_static()
                else (
                    "its sliding-window layers keep their length in Python, for which a compiled "
                    "step would be compiled again at every token"
                )
            )
            if why is None:
                self._decode = DecodePath.COMPILED
            else:
                self.fallbacks.append(
                    f"decode: compiled loop not used ({why}); using the static one"
                )

    def _make_static_cache(self, context_size: int) -> str | None:
        """Preallocate a static cache for `context_size` tokens; why it cannot be, or None."""
        if (
            getattr(self.model, "hf_device_map", None)
            and len({str(d) for d in self.model.hf_device_map.values()}) > 1
        ):
            return "the model is spread over several devices"
        try:
            cache = transformers.StaticCache(config=self.model.config, max_cache_len=context_size)
        except Exception as e:  # a model whose config has no static cache layout
            return f"no static cache for this model: {first_line(e)}"
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

    def _compile_step(self, first: int) -> str | None:
        """Compile the one-token decode step and run it `WARMUP_STEPS` times on the token
        `first`; why it failed, or None. On CUDA the step is recorded as a CUDA graph."""
        started = time.perf_counter()
        try:
            # An eager forward first: the static cache allocates its tensors on its first
            # write, which must not happen inside the compiled graph.
            self.feed([first])
            self._step = torch.compile(
                self.model.forward,
                mode="reduce-overhead" if self._on_cuda else None,
                fullgraph=True,
                dynamic=False,
            )
            for _ in range(WARMUP_STEPS):
                self.feed([first])
        except Exception as e:  # dynamo, inductor, triton or CUDA graph errors
            self._step = None
            self._reset_cache()
            return f"{type(e).__name__}: {first_line(e)}"
        self._reset_cache()
        log.info("decode: compiled the decode step in %.1f s", time.perf_counter() - started)
        return None

    # --- running the model -------------------------------------------------------------------

    def evaluate(self, ids: list[int]) -> torch.Tensor:
        return self.feed(ids)

    def feed(self, ids: list[int], keep: int = 1) -> torch.Tensor:
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
                    output = self.model(input_ids=input_ids, **kwargs)
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

    # --- rows beside the live cache ----------------------------------------------------------

    def rows(self, length: int, count: int) -> Any | None:
        """A new `DynamicCache` holding the live cache's first `length` tokens in each of
        `count` rows (the batch dimension), copied: what runs on it never touches the live
        cache. None where the live cache cannot be copied so (logged once, with why)."""
        why = self._why_no_rows(length)
        if why is not None:
            if not self._rows_refused:
                self._rows_refused = True
                log.warning("rows together not used (%s); one after another", why)
            return None
        cache = transformers.DynamicCache()
        with torch.inference_mode():
            for index, (keys, values) in enumerate(_layer_tensors(self._cache)):
                # `update` concatenates onto an empty layer: the expanded views are copied.
                cache.update(
                    keys[:, :, :length].expand(count, -1, -1, -1),
                    values[:, :, :length].expand(count, -1, -1, -1),
                    index,
                )
        return cache

    def _why_no_rows(self, length: int) -> str | None:
        """Why the live cache's first `length` tokens cannot be copied into rows, or None."""
        if self._cache is None or not 0 < length <= len(self._cached_ids):
            return "the live cache does not hold the prompt"
        tensors = _layer_tensors(self._cache)
        if not tensors:
            return f"a {type(self._cache).__name__} keeps its keys where this loop cannot see"
        if any(getattr(layer, "is_sliding", False) for layer in getattr(self._cache, "layers", ())):
            # A static sliding-window layer holds a window written round, not the tokens in
            # order (the dynamic loop's cache keeps every layer in full).
            return f"its {type(self._cache).__name__} has sliding-window layers"
        if any(k.shape[0] != 1 or k.shape[-2] < length for k, _ in tensors):
            return "its layers do not hold one row of the prompt"
        return None

    def run_rows(self, cache: Any, ids: list[list[int]]) -> torch.Tensor:
        """Run rows of token ids, all of one length, through the model on top of `cache` (one
        of `rows`, with as many rows), eagerly; the logits after each token, (rows, tokens,
        vocabulary). No attention mask: every row is as long as the others, and a shorter
        row padded on the right has its real tokens before the padding, which a causal model
        never lets them see."""
        kwargs: dict[str, Any] = {self._cache_arg: cache, "use_cache": True}
        input_ids = torch.tensor(ids, dtype=torch.long, device=self._input_device)
        with torch.inference_mode():
            output = self.model(input_ids=input_ids, **kwargs)
        logits: torch.Tensor = output.logits[:, :, : self._vocab_size]
        return logits.float()

    # --- what the cache holds ----------------------------------------------------------------

    @property
    def length(self) -> int:
        return len(self._cached_ids)

    def tokens(self) -> list[int]:
        return list(self._cached_ids)

    def cut(self, length: int) -> int:
        """Cut the cache back to its first `length` tokens; how many it keeps (none, afresh,
        where it cannot be cut, or for none)."""
        if self._cache is None or length == 0:
            self._reset_cache()
            return 0
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

    def _reset_cache(self) -> None:
        """An empty cache. The static one stays the same object: a compiled step has its
        tensors' addresses baked in."""
        if self._decode is DecodePath.DYNAMIC or self._cache is None:
            self._cache = transformers.DynamicCache()
        elif held := int(self._cache.get_seq_length()):
            with torch.inference_mode():
                self._cache.crop(-held)
        self._cached_ids = []

    # --- kept caches -------------------------------------------------------------------------

    @property
    def bytes_per_token(self) -> int:
        """What one token's keys and values take in the model's cache, from its config."""
        config = self.model.config.get_text_config()
        layers = getattr(config, "num_hidden_layers", 0) or 0
        heads = getattr(config, "num_attention_heads", 0) or 0
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or (
            (getattr(config, "hidden_size", 0) or 0) // max(1, heads)
        )
        return int(2 * layers * kv_heads * head_dim * self.model.dtype.itemsize)

    def set_aside(self, tokens: list[int]) -> tuple[Any, int]:
        """The live cache as the kept caches hold it, and its bytes; the live one is then
        empty."""
        if self._decode is DecodePath.DYNAMIC:
            cache = self._cache
            nbytes = _cache_bytes(cache) or self.bytes_per_token * len(self._cached_ids)
            self._cache, self._cached_ids = None, []
            return cache, nbytes
        snapshot = _Snapshot.of(self._cache, len(self._cached_ids))
        self._reset_cache()
        return snapshot, snapshot.nbytes

    def restore(self, state: Any, tokens: tuple[int, ...]) -> None:
        """Make a kept cache the live one."""
        if self._decode is DecodePath.DYNAMIC:
            self._cache = state
        else:
            self._reset_cache()
            with torch.inference_mode():
                state.into(self._cache)
        self._cached_ids = list(tokens)

    def close(self) -> None:
        self._cache = None
        self._cached_ids = []
        self._step = None
        self.model = None
        if self._on_cuda:
            torch.cuda.empty_cache()


def _mark_step_begin() -> None:
    """Tell CUDA graph trees that a new step starts (older torch has no such call)."""
    mark: Any = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    if mark is not None:
        mark()


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


def _layer_pairs(cache: Any) -> list[tuple[Any, Any]]:
    """Each layer's keys and values as the cache keeps them (transformers 5 per layer, 4 in
    two lists); a layer that holds none has None or an empty placeholder there."""
    layers = getattr(cache, "layers", None)
    if layers:
        return [(getattr(la, "keys", None), getattr(la, "values", None)) for la in layers]
    keys = getattr(cache, "key_cache", None) or ()
    return list(zip(keys, getattr(cache, "value_cache", None) or (), strict=False))


def _layer_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values, (batch, heads, tokens, dimension) tensors; empty where
    the layout is unknown or a layer holds none."""
    pairs = _layer_pairs(cache)
    if not pairs or not all(
        isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor) and k.dim() == 4
        for k, v in pairs
    ):
        return []
    return [(k, v) for k, v in pairs if isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)]


def _cache_bytes(cache: Any) -> int:
    """The bytes a `DynamicCache`'s tensors take; 0 if its layout is unknown."""
    tensors = [t for pair in _layer_pairs(cache) for t in pair]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
