"""The llama.cpp backend (llama-cpp-python), for GGUF models on the CPU or with CUDA offload.

We bring the KV cache to all of the prompt but its last token ourselves (engine/local_backend.py,
on the context of engine/backends/llama_context.py): from the live cache or from the kept state
of the request's document, whichever shares more, then the rest in batches that a cancel stops
between. `Llama.generate()` then finds that prefix, evaluates the last token and samples token
by token. The thread count follows the machine's load (engine/threads.py).

We tokenize and build prompts ourselves: llama-cpp-python's own `suffix=` FIM path is broken
(it inserts token 0 as every FIM marker), and its helpers allocate a context-sized buffer per
call, which per-line token counting cannot afford.
"""

from __future__ import annotations

import ctypes
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.accelerators import (
    Placement,
    llama_cpp_view,
    llama_n_layer,
    llama_placement,
    prepare_llama_cpp,
)
from engine.backend import ModelInfo, Vocabulary
from engine.backends.llama_context import EVAL_CHUNK as EVAL_CHUNK
from engine.backends.llama_context import LlamaContext, LogProbs, State
from engine.detokenizer import ByteDetokenizer, Detokenizer
from engine.errors import BackendUnavailableError, ModelLoadError
from engine.gguf_file import diagnose
from engine.local_backend import LocalBackend
from engine.threads import default_max_threads
from engine.types import SamplingParams

if TYPE_CHECKING:
    from engine.specs import ModelSpec

log = logging.getLogger(__name__)


#: Prompt tokens evaluated per batch (at most the context size).
BATCH_SIZE = 512


def llama_params(spec: ModelSpec) -> dict[str, Any]:
    """The `llama_cpp.Llama` arguments our backend loads `spec` with (the benchmarks' raw
    baseline loads its model with the same ones)."""
    threads = spec.threads or default_max_threads()
    # Also loads the backends of a build that loads them at run time, before any model.
    can_offload = prepare_llama_cpp(_import_llama_cpp())
    offloads = spec.gpu_layers != 0 and can_offload
    return {
        "model_path": str(spec.path.expanduser()),
        "n_ctx": spec.context_size,
        "n_batch": min(BATCH_SIZE, spec.context_size),
        # The starting count; without a `threads` setting the backend adapts it to the
        # machine's load before every decode (engine/threads.py).
        "n_threads": threads,
        "n_threads_batch": threads,
        "n_gpu_layers": spec.gpu_layers,
        # On the CPU, flash attention is 7% faster on a cold prompt and 12% on a keystroke
        # (Gemma 3 270M, 1,355 tokens, 2 threads), as llama-server uses it. With GPU layers it is
        # left off: llama-cpp-python can only force it on, not let llama.cpp probe the device.
        # GPU layers asked of a build that cannot offload leave the model on the CPU: on, then.
        "flash_attn": not offloads,
        "verbose": False,
    }


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as e:
        raise BackendUnavailableError(
            "the llama.cpp backend needs llama-cpp-python: pip install 'infill-lsp[llama]'"
        ) from e
    return llama_cpp


class LlamaCppBackend(LocalBackend[State, None, LogProbs]):
    """A GGUF model loaded with llama.cpp."""

    evaluate_last = False

    def __init__(self, spec: ModelSpec) -> None:
        path = spec.path.expanduser()
        _check_readable(path)
        lib = _import_llama_cpp()
        self._lib = lib
        started = time.perf_counter()
        # Only when GPU layers are asked: reading a GPU's memory starts a CUDA context on it.
        view = llama_cpp_view() if spec.gpu_layers != 0 else None
        try:
            self._llm = lib.Llama(**llama_params(spec))
        except (ValueError, RuntimeError, OSError) as e:
            # llama.cpp says only that it failed: our own walk of the file may say why.
            raise ModelLoadError(f"cannot load model {path}: {diagnose(path) or e}") from e
        self._llama_vocab = self._llm._model.vocab
        self._pieces: dict[int, bytes] = {}
        self._special_ids: dict[str, int | None] = {}
        self._lock = threading.Lock()
        metadata: dict[str, str] = dict(self._llm.metadata)
        chat_template = metadata.get("tokenizer.chat_template") or None
        n_vocab = lib.llama_vocab_n_tokens(self._llama_vocab)
        eog = tuple(
            (i, self._special_text(i))
            for i in range(n_vocab)
            if lib.llama_vocab_is_eog(self._llama_vocab, i)
        )
        bos = lib.llama_vocab_bos(self._llama_vocab)
        eos = lib.llama_vocab_eos(self._llama_vocab)
        placement = (
            llama_placement(view, spec.gpu_layers, llama_n_layer(lib, self._llm._model.model))
            if view is not None
            else Placement(device="cpu", gpu=None)
        )
        info = ModelInfo(
            name=metadata.get("general.name") or path.stem,
            path=str(path),
            backend="llama.cpp",
            device=placement.device,
            gpu=placement.gpu,
            warnings=placement.warnings,
            # llama.cpp may round the context up (to 256); llama-cpp-python's buffers keep the
            # size asked for, so that is the real limit.
            context_size=min(self._llm.n_ctx(), spec.context_size),
            vocab_size=n_vocab,
            eog_tokens=eog,
            has_chat_template=chat_template is not None,
            load_seconds=time.perf_counter() - started,
        )
        vocab = Vocabulary(
            bos_token=self._special_text(bos) if bos >= 0 else None,
            eos_token=self._special_text(eos) if eos >= 0 else None,
            adds_bos=bool(lib.llama_vocab_get_add_bos(self._llama_vocab)) and bos >= 0,
            chat_template=chat_template,
        )
        self._context = LlamaContext(self._llm, lib, vocab_size=n_vocab, threads=spec.threads)
        super().__init__(info=info, vocab=vocab, live=self._context, cache_bytes=spec.cache_bytes)
        for warning in info.warnings:
            log.warning("%s: %s", path.name, warning)

    # --- tokenizer ---------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        # At most one token per byte, plus BOS/EOS the vocabulary may add.
        capacity = len(data) + 4
        buf = (self._lib.llama_token * capacity)()
        n = self._lib.llama_tokenize(
            self._llama_vocab, data, len(data), buf, capacity, add_bos, special
        )
        if n < 0:  # never expected with this capacity; the library says how many it needs
            capacity = -n
            buf = (self._lib.llama_token * capacity)()
            n = self._lib.llama_tokenize(
                self._llama_vocab, data, len(data), buf, capacity, add_bos, special
            )
        return list(buf[:n])

    def special_token_id(self, text: str) -> int | None:
        with self._lock:
            if text in self._special_ids:
                return self._special_ids[text]
        found: int | None = None
        ids = self.tokenize(text, add_bos=False, special=True)
        if len(ids) == 1:
            attr = self._lib.llama_vocab_get_attr(self._llama_vocab, ids[0])
            special = self._lib.LLAMA_TOKEN_ATTR_CONTROL | self._lib.LLAMA_TOKEN_ATTR_USER_DEFINED
            # Compare with the vocabulary's own spelling: CodeLlama's "▁<PRE>" is shown " <PRE>".
            spelled = self._lib.llama_vocab_get_text(self._llama_vocab, ids[0])
            if attr & special and spelled == text.encode("utf-8"):
                found = ids[0]
        with self._lock:
            self._special_ids[text] = found
        return found

    def _piece(self, token_id: int, *, special: bool = False) -> bytes:
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._lib.llama_token_to_piece(self._llama_vocab, token_id, buf, size, 0, special)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    def _special_text(self, token_id: int) -> str:
        return self._piece(token_id, special=True).decode("utf-8", "replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` adds to the text (nothing for control tokens)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            if not 0 <= token_id < self.info.vocab_size:
                raise ValueError(f"token id {token_id} is outside the vocabulary")
            piece = self._piece(token_id)
            self._pieces[token_id] = piece
        return piece

    def new_detokenizer(self) -> Detokenizer:
        return ByteDetokenizer(self.token_bytes)

    # --- generation and scoring --------------------------------------------------------------

    def _sample(
        self, prompt: list[int], sampling: SamplingParams, cancelled: threading.Event, first: None
    ) -> Iterator[int]:
        # The cache holds all of the prompt but its last token: `generate()` finds that prefix
        # and evaluates the last token itself (only a decode gives the logits to sample from).
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(31)
        llm = self._llm
        llm.set_seed(seed)
        self._context.use_threads()
        tokens = llm.generate(
            prompt,
            temp=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=sampling.repetition_penalty,
            reset=True,  # with reset, generate() keeps the longest shared prefix of the KV cache
        )
        try:
            for token_id in tokens:
                yield int(token_id)
                if cancelled.is_set():
                    return
                self._context.use_threads()
        finally:
            tokens.close()

    def _after_prompt(self, prompt: list[int], first: None) -> LogProbs:
        # The prompt's last token gives the distribution of every continuation's first token;
        # each continuation then goes on top of the prompt, in place of the one before.
        after: LogProbs = self._context.log_probs(prompt[-1:], len(prompt) - 1)[0]
        return after

    def _log_probs(
        self, prompt: list[int], continuation: Sequence[int], after: LogProbs
    ) -> list[float]:
        rows = self._context.log_probs(list(continuation[:-1]), len(prompt))
        return [
            float(after[continuation[0]]),
            *(float(row[t]) for row, t in zip(rows, continuation[1:], strict=True)),
        ]

    def _most_likely(self, after: LogProbs, top: int) -> tuple[tuple[int, float], ...]:
        best = np.argsort(after)[::-1][:top]
        return tuple((int(t), float(after[t])) for t in best)

    @property
    def threads(self) -> int:
        """The threads llama.cpp computes with now: as many as the machine's load leaves free,
        or the `threads` setting. For tests and benchmarks."""
        return self._context.threads


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(f"{path} is a folder; the llama.cpp backend needs a .gguf file")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror or e}") from e
    if magic != b"GGUF":
        raise ModelLoadError(f"{path} is not a GGUF file")
