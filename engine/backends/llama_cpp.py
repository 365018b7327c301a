"""The llama.cpp backend (llama-cpp-python), for GGUF models on the CPU or with CUDA offload.

Generation goes token by token through `Llama.generate()`, which keeps the KV cache of the
previous prompt and re-evaluates only what differs after the longest shared token prefix:
while the user types, each request costs a few new tokens instead of the whole prompt.

We tokenize and build prompts ourselves: llama-cpp-python's own `suffix=` FIM path is broken
(it inserts token 0 as every FIM marker), and its helpers allocate a context-sized buffer per
call, which per-line token counting cannot afford.
"""

from __future__ import annotations

import ctypes
import logging
import os
import random
import threading
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.backend import Backend, ModelInfo, Vocabulary
from engine.detokenizer import ByteDetokenizer, Detokenizer
from engine.errors import BackendUnavailableError, ModelLoadError
from engine.gguf_file import diagnose
from engine.types import SamplingParams

if TYPE_CHECKING:
    from engine.models import ModelSpec

log = logging.getLogger(__name__)


def default_threads() -> int:
    """Half the cores, at most 8. On a 2-core machine that is 1: with 2 threads, generation
    collapses (115 to 3 tokens/s) whenever another process takes a core, while 1 thread holds
    70-76 tokens/s (shared/data/README.md). Configurable with `threads`."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


#: Prompt tokens evaluated per batch (at most the context size).
BATCH_SIZE = 512


def llama_params(spec: ModelSpec) -> dict[str, Any]:
    """The `llama_cpp.Llama` arguments our backend loads `spec` with (the benchmarks' raw
    baseline loads its model with the same ones)."""
    threads = spec.threads or default_threads()
    return {
        "model_path": str(spec.path.expanduser()),
        "n_ctx": spec.context_size,
        "n_batch": min(BATCH_SIZE, spec.context_size),
        "n_threads": threads,
        # As many as for decoding: with all cores, the few-token prompt evaluation of each
        # keystroke stalled for seconds whenever another process took a core.
        "n_threads_batch": threads,
        "n_gpu_layers": spec.gpu_layers,
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


class LlamaCppBackend(Backend):
    """A GGUF model loaded with llama.cpp."""

    def __init__(self, spec: ModelSpec) -> None:
        path = spec.path.expanduser()
        _check_readable(path)
        lib = _import_llama_cpp()
        self._lib = lib
        started = time.perf_counter()
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
        offload = spec.gpu_layers != 0 and bool(lib.llama_supports_gpu_offload())
        info = ModelInfo(
            name=metadata.get("general.name") or path.stem,
            path=str(path),
            backend="llama.cpp",
            device=f"cuda ({_layers(spec.gpu_layers)} layers offloaded)" if offload else "cpu",
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
        super().__init__(info=info, vocab=vocab)
        if spec.gpu_layers != 0 and not offload:
            log.warning(
                "gpu_layers=%d asked, but llama-cpp-python has no GPU support: using the CPU",
                spec.gpu_layers,
            )

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

    # --- generation --------------------------------------------------------------------------

    def iter_token_ids(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, cancelled: threading.Event
    ) -> Generator[int, None, None]:
        if cancelled.is_set():
            return
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(31)
        self._llm.set_seed(seed)
        tokens = self._llm.generate(
            list(prompt_ids),
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
        finally:
            tokens.close()

    def close(self) -> None:
        self._llm.close()


def _layers(gpu_layers: int) -> str:
    return "all" if gpu_layers < 0 else str(gpu_layers)


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
