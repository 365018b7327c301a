"""The llama.cpp backend (llama-cpp-python), for GGUF models on the CPU or with CUDA offload.

We bring the KV cache to all of the prompt but its last token ourselves: from the live cache
or from the kept state of the request's document (engine/prefix_cache.py), whichever shares
more, then the rest in batches that a cancel stops between. `Llama.generate()` then finds that
prefix, evaluates the last token and samples token by token. While the user types, each
request costs a few new tokens instead of the whole prompt; coming back to a document, one.
The thread count follows the machine's load (engine/threads.py).

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
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from engine.accelerators import (
    Placement,
    llama_cpp_view,
    llama_n_layer,
    llama_placement,
    prepare_llama_cpp,
)
from engine.backend import Backend, ModelInfo, Vocabulary, scoring_prompt
from engine.detokenizer import ByteDetokenizer, Detokenizer
from engine.errors import BackendUnavailableError, ModelLoadError
from engine.gguf_file import diagnose
from engine.prefix_cache import CacheStatus, PrefixCache
from engine.threads import ThreadPolicy, default_max_threads
from engine.types import SamplingParams, Scores

if TYPE_CHECKING:
    from engine.specs import ModelSpec

log = logging.getLogger(__name__)


#: llama.cpp's "every sequence" id in the state functions.
_ALL_SEQUENCES = -1
#: Prompt tokens evaluated per batch (at most the context size).
BATCH_SIZE = 512
#: Prompt tokens evaluated between two looks at the cancel event (and at the machine's load):
#: a newer request waits at most this long for an older prompt (0.3-0.6 s on 2 cores). A
#: 1,950-token prompt took 4.61 s in batches of 512, 4.78 s in batches of 128 (median of 6).
EVAL_CHUNK = 256
#: Spare state buffers kept for reuse, and the room a new one leaves to grow (1/8).
SPARE_BUFFERS = 2
SPARE_HEADROOM = 8
#: Tokens a spare buffer made ahead leaves for the answer after the prompt.
SPARE_GENERATED = 64


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


class LlamaCppBackend(Backend):
    """A GGUF model loaded with llama.cpp."""

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
        self._ctx_pointer = self._llm._ctx.ctx
        self._threads = ThreadPolicy(fixed=spec.threads)
        self._threads_set = self._threads.threads
        self._last_prefill_tokens = 0
        self._cache: PrefixCache[npt.NDArray[np.uint8]] = PrefixCache(
            spec.cache_bytes, on_drop=self._recycle
        )
        # Buffers for the next save: the memory of states restored or let go of, and one a
        # long prompt makes ahead. A new 30 MB buffer costs 20-80 ms of page faults when first
        # written, which the request that switches documents would otherwise wait for.
        self._spare: list[npt.NDArray[np.uint8]] = []
        self._state_bytes_per_token = 0
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
        super().__init__(info=info, vocab=vocab)
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

    # --- generation --------------------------------------------------------------------------

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        if cancelled.is_set():
            return
        prompt = list(prompt_ids)
        if not prompt:
            raise ValueError("the prompt has no tokens")
        # All of the prompt but its last token, in batches that a cancel can stop between;
        # `generate()` then finds that prefix in the cache and evaluates the last token itself
        # (only a decode gives the logits to sample from).
        if not self._evaluate_prefix(prompt, cache_key, cancelled):
            return
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(31)
        llm = self._llm
        llm.set_seed(seed)
        self._use_threads()
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
                self._use_threads()
        finally:
            tokens.close()
            self._cache.set_live(cache_key, llm.n_tokens)

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
        prompt = scoring_prompt(prompt_ids, continuations, self.context_size)
        if cancelled.is_set() or not self._evaluate_prefix(prompt, cache_key, cancelled):
            return None
        # The prompt's last token gives the distribution of every continuation's first token;
        # each continuation then goes on top of the prompt, in place of the one before.
        after_prompt = self._log_probs(prompt[-1:], len(prompt) - 1)[0]
        scored = []
        for continuation in continuations:
            if cancelled.is_set():
                return None
            rows = self._log_probs(list(continuation[:-1]), len(prompt))
            scored.append(
                (
                    float(after_prompt[continuation[0]]),
                    *(float(row[t]) for row, t in zip(rows, continuation[1:], strict=True)),
                )
            )
        self._last_prefill_tokens += sum(len(c) - 1 for c in continuations)
        self._cut(len(prompt))  # the prompt stays: a generation after it starts at once
        self._cache.set_live(cache_key, self._llm.n_tokens)
        best = np.argsort(after_prompt)[::-1][:top]
        return Scores(
            continuations=tuple(scored),
            top=tuple((int(t), float(after_prompt[t])) for t in best),
        )

    def _log_probs(self, ids: list[int], at: int) -> npt.NDArray[np.float32]:
        """Evaluate `ids` at position `at` (the cache cut there first) with every position's
        logits: each row is the log-probabilities of the token after that position. The
        generation path keeps only the last position's logits; llama.cpp decides per batch."""
        llm = self._llm
        kept = self._cut(at)
        if kept < at:  # the cache started over: what it held before `at` is evaluated again
            llm.eval(llm.input_ids[kept:at].tolist())
        n_vocab = self.info.vocab_size
        out = np.empty((len(ids), n_vocab), dtype=np.float32)
        for start in range(0, len(ids), llm.n_batch):
            batch = ids[start : start + llm.n_batch]
            self._use_threads()
            llm._batch.set_batch(batch=batch, n_past=llm.n_tokens, logits_all=True)
            llm._ctx.decode(llm._batch)
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(batch), n_vocab))
            out[start : start + len(batch)] = logits
            llm.input_ids[llm.n_tokens : llm.n_tokens + len(batch)] = batch
            llm.n_tokens += len(batch)
        # log-softmax, row by row, shifted by each row's maximum so that exp cannot overflow
        out -= out.max(axis=1, keepdims=True)
        out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
        return out

    def _cut(self, length: int) -> int:
        """Drop the live cache's tokens from position `length` on; how many it keeps.

        A cache that cannot drop a tail (recurrent models), or one whose oldest cells a
        sliding-window layer has written over (llama.cpp reuses cells that slid out of the
        window once the cache wraps around), starts over: it keeps none.
        """
        llm = self._llm
        if llm.n_tokens <= length:
            return int(llm.n_tokens)
        if not llm._ctx.kv_cache_seq_rm(0, length, -1) or self._lost_cells(length):
            llm._ctx.kv_cache_seq_rm(0, 0, -1)
            length = 0
        llm.n_tokens = length
        return length

    def _evaluate_prefix(
        self, prompt: list[int], cache_key: str | None, cancelled: threading.Event
    ) -> bool:
        """Bring the live KV cache to `prompt[:-1]`: from the live cache or a kept state,
        whichever shares more, evaluating the rest in batches of `EVAL_CHUNK` tokens. False if
        `cancelled` stopped it; what was evaluated stays in the cache for the next request."""
        llm = self._llm
        live = llm.input_ids[: llm.n_tokens].tolist()
        plan = self._cache.plan(prompt, cache_key, live)
        if plan.save_live:
            self._save_live(live)
        shared = plan.shared
        if plan.restore is not None and not self._restore(plan.restore, plan.restore_tokens):
            shared = 0
        # From here on the live cache is this document's, whatever happens to the prompt.
        self._cache.set_live(cache_key, llm.n_tokens)
        shared = min(shared, len(prompt) - 1)
        if llm.n_tokens > shared:
            shared = self._cut(shared)
        rest = prompt[shared:-1]
        self._last_prefill_tokens = len(rest) + 1  # generate() evaluates the last one
        if len(rest) > EVAL_CHUNK:
            # A long prompt pays for the buffer its state will be saved in when the user
            # switches documents, so that the switch (a keystroke's cost) does not.
            self._make_spare(len(prompt) + SPARE_GENERATED)
        for start in range(0, len(rest), EVAL_CHUNK):
            if cancelled.is_set():
                break
            self._use_threads()
            llm.eval(rest[start : start + EVAL_CHUNK])
        self._cache.set_live(cache_key, llm.n_tokens)
        return not cancelled.is_set()

    def _lost_cells(self, shared: int) -> bool:
        """Whether the cache no longer holds the first of the `shared` tokens it should."""
        if shared == 0:
            return False
        memory = self._lib.llama_get_memory(self._ctx_pointer)
        return memory is not None and self._lib.llama_memory_seq_pos_min(memory, 0) > 0

    @property
    def last_prefill_tokens(self) -> int:
        """How many prompt tokens the last request evaluated (the rest came from the cache or
        a kept state). For tests and benchmarks."""
        return self._last_prefill_tokens

    def _use_threads(self) -> None:
        threads = self._threads.choose()
        if threads != self._threads_set:
            self._lib.llama_set_n_threads(self._ctx_pointer, threads, threads)
            self._threads_set = threads

    def _save_live(self, tokens: list[int]) -> None:
        """Keep the live cache's state in RAM, under the document it belongs to.

        Every cell of the cache: asked for sequence 0, llama.cpp leaves out the cells that have
        slid out of a sliding-window model's window (Gemma 3), and a later request that goes
        back a few tokens needs some of them. Asked for every sequence (-1; our context has
        only sequence 0), it writes them all, in the format a sequence is restored from.
        """
        started = time.perf_counter()
        lib, ctx = self._lib, self._ctx_pointer
        size = int(lib.llama_state_seq_get_size(ctx, _ALL_SEQUENCES))
        if size <= 0:
            return
        buffer = self._buffer(size)
        written = int(
            lib.llama_state_seq_get_data(ctx, _uint8_pointer(buffer), size, _ALL_SEQUENCES)
        )
        if written <= 0:
            log.warning("llama.cpp could not save the KV state of %d tokens", len(tokens))
            return
        self._state_bytes_per_token = -(-written // max(1, len(tokens)))  # rounded up
        self._cache.size_budget(self._state_bytes_per_token, self.context_size)
        self._cache.keep(self._cache.live_key, tokens, buffer[:written], buffer.nbytes)
        log.debug(
            "kept the state of %d tokens (%.1f MB) in %.1f ms",
            len(tokens),
            written / 1e6,
            (time.perf_counter() - started) * 1000,
        )

    def _buffer(self, size: int) -> npt.NDArray[np.uint8]:
        """A buffer of at least `size` bytes: the smallest spare one that fits, else a new one
        with room for the state to grow a little (the same document a few lines on)."""
        fitting = [b for b in self._spare if b.size >= size]
        if fitting:
            buffer = min(fitting, key=lambda b: b.size)
            self._spare = [b for b in self._spare if b is not buffer]
            return buffer
        return _new_buffer(size)  # not zero-filled: it is written over at once

    def _make_spare(self, tokens: int) -> None:
        """Have a spare buffer ready for a state of `tokens` tokens, its pages touched."""
        size = self._state_bytes_per_token * tokens
        if size == 0 or self._cache.budget_bytes == 0 or any(b.size >= size for b in self._spare):
            return
        buffer = _new_buffer(size)
        ctypes.memset(buffer.ctypes.data, 0, buffer.size)
        self._recycle(buffer)

    def _recycle(self, state: npt.NDArray[np.uint8]) -> None:
        """Keep the memory of a state the store dropped or that was restored, for reuse."""
        buffer = state.base if isinstance(state.base, np.ndarray) else state
        self._spare = sorted([*self._spare, buffer], key=lambda b: b.size)[-SPARE_BUFFERS:]

    def _restore(self, state: npt.NDArray[np.uint8], tokens: tuple[int, ...]) -> bool:
        """Make a kept state the live cache. False (and an empty cache) if llama.cpp refuses.

        Restored as sequence 0, not as the whole context (`llama_state_set_data`): that path
        leaves the cache's write position at its first cell, and the next tokens would then
        overwrite the oldest cells of a sliding-window layer instead of free ones.
        """
        started = time.perf_counter()
        llm, lib, ctx = self._llm, self._lib, self._ctx_pointer
        llm._ctx.kv_cache_seq_rm(0, 0, -1)
        read = int(lib.llama_state_seq_set_data(ctx, _uint8_pointer(state), state.size, 0))
        self._recycle(state)
        if read <= 0:
            log.warning("llama.cpp could not restore a kept KV state; evaluating afresh")
            llm._ctx.kv_cache_seq_rm(0, 0, -1)
            llm.n_tokens = 0
            return False
        llm.input_ids[: len(tokens)] = tokens
        llm.n_tokens = len(tokens)
        # The logits in the context are not this state's: generate() must decode again.
        llm._requires_eval = True
        log.debug(
            "restored the state of %d tokens in %.1f ms",
            len(tokens),
            (time.perf_counter() - started) * 1000,
        )
        return True

    def cache_status(self) -> CacheStatus:
        return self._cache.status

    def close(self) -> None:
        self._cache.clear()
        self._spare = []
        self._llm.close()


def _new_buffer(size: int) -> npt.NDArray[np.uint8]:
    """Room for a state of `size` bytes, and for it to grow a little (the same document a
    few lines on) before it needs another."""
    return np.empty(size + size // SPARE_HEADROOM, dtype=np.uint8)


def _uint8_pointer(array: npt.NDArray[np.uint8]) -> Any:
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


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
