"""The llama.cpp context as a live KV cache (engine/local_backend.py `LiveCache`): evaluating
tokens in it with as many threads as the machine's load leaves (engine/threads.py), cutting it
back, and copying its state out to RAM and back when the user switches documents.

The live cache is sequence 0. A job may add sequences beside it that share its cells
(`branches`, `continuation_log_probs`: many short texts after one prompt, a row of each in
every pass) and removes them before it ends, so that between jobs only sequence 0 exists:
what is set aside and restored is that one.

A kept state is the serialized bytes of the context's sequence, in a numpy buffer. Buffers are
reused: the memory of states restored or let go of, and one that a long prompt makes ahead, so
that a switch of documents does not pay for a new buffer's page faults.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.local_backend import LiveCache
from engine.threads import ThreadPolicy

log = logging.getLogger(__name__)

#: llama.cpp's "every sequence" id in the state functions.
_ALL_SEQUENCES = -1
#: Prompt tokens evaluated between two looks at the cancel event (and at the machine's load):
#: a newer request waits at most this long for an older prompt (0.3-0.6 s on 2 CPU cores). A
#: 1,950-token prompt took 4.61 s in batches of 512, 4.78 s in batches of 128 (median of 6).
#: docs/decisions/prompt-chunks.md (Gemma 3 270M, a 1,500-token cold prompt, medians of 5
#: interleaved rounds on
#: 2 CPU cores shared with other work): batches of 256 / 512 / 1536 took 3.21 / 3.34 /
#: 3.23 s on 2 threads as the load fell below 1, 13.8 / 14.5 / 12.2 s on 1 thread under load
#: (4.2): within the noise. Only 2 threads on a loaded machine, which the adaptive thread
#: count avoids, favoured 512 (15.5 / 10.3 / 10.4 s). Larger batches would need llama.cpp's
#: abort callback to keep a cancel this quick (it stops a pass 2-57 ms after a cancel, and the
#: cache is sound after), but as a Python callback it waits for the GIL after each of a pass's
#: ~400 operations: 1.35-1.56x the time while another Python thread computes. So 256 stays.
EVAL_CHUNK = 256
#: The live cache's sequence; the others exist only within a job.
LIVE_SEQUENCE = 0
#: Rows of logits one pass of several sequences' tokens gives at most: each row is a vocabulary
#: of floats (1 MB for Gemma 3's 262,144 tokens), in llama.cpp's buffer and ours.
SCORE_ROWS = 128
#: A pass of several sequences' rows has a multiple of this many (see `LlamaContext.branches`).
ROW_GROUP = 4
#: Spare state buffers kept for reuse, and the room a new one leaves to grow (1/8).
SPARE_BUFFERS = 2
SPARE_HEADROOM = 8
#: Tokens a spare buffer made ahead leaves for the answer after the prompt.
SPARE_GENERATED = 64

State = npt.NDArray[np.uint8]  # a kept state: the sequence's serialized bytes
LogProbs = npt.NDArray[np.float32]  # rows of log-probabilities over the vocabulary


class SequencesRefusedError(RuntimeError):
    """llama.cpp refused a pass of several sequences' rows (it found no cells for them)."""


@dataclass(frozen=True, slots=True)
class Branched:
    """What `LlamaContext.branches` wrote: each branch's tokens, and the branches still going
    where a pass was refused (none when every branch ended)."""

    written: list[list[int]]
    going: list[int]


def padded_rows(branches: int) -> int:
    """The sequences `branches` branches take: filler to a whole number of row groups."""
    return -(-branches // ROW_GROUP) * ROW_GROUP


class LlamaContext(LiveCache[State, None]):
    """The context of a loaded `llama_cpp.Llama` (`llm`; `lib` is the `llama_cpp` module) for a
    vocabulary of `vocab_size` tokens, and the threads it computes with (`threads`: the user's
    fixed count, or None to follow the machine's load)."""

    chunk = EVAL_CHUNK

    def __init__(self, llm: Any, lib: Any, *, vocab_size: int, threads: int | None) -> None:
        self._llm = llm
        self._lib = lib
        self._vocab_size = vocab_size
        self._ctx_pointer = llm._ctx.ctx
        self._threads = ThreadPolicy(fixed=threads)
        self._threads_set = self._threads.threads
        # Buffers for the next save: the memory of states restored or let go of, and one a
        # long prompt makes ahead. A new 30 MB buffer costs 20-80 ms of page faults when first
        # written, which the request that switches documents would otherwise wait for.
        self._spare: list[State] = []
        self._state_bytes_per_token = 0
        #: Sequences a job may add beside the live one (what the context was made with).
        self.sequences = int(lib.llama_n_seq_max(self._ctx_pointer)) - 1
        self._rows = lib.llama_batch_init(max(llm.n_batch, SCORE_ROWS), 0, 1)
        self._rows_held = True

    # --- computing ---------------------------------------------------------------------------

    @property
    def threads(self) -> int:
        """The threads llama.cpp computes with now, as it reports them."""
        return int(self._lib.llama_n_threads(self._ctx_pointer))

    def use_threads(self) -> None:
        """Follow the machine's load: called before every decode."""
        threads = self._threads.choose()
        if threads != self._threads_set:
            self._lib.llama_set_n_threads(self._ctx_pointer, threads, threads)
            self._threads_set = threads

    def evaluate(self, ids: list[int]) -> None:
        self.use_threads()
        self._llm.eval(ids)

    def most_likely(self, ids: list[int]) -> list[int]:
        """Evaluate `ids` on top of the cache in one pass with every position's logits: the
        most likely token after each position. Ties go to the lowest id, as llama.cpp's greedy
        sampler breaks them, so that one position's answer is the one `generate()` gives."""
        self._decode(ids)
        best: list[int] = self._logits(len(ids)).argmax(axis=1).tolist()
        return best

    def exact_batches(self, ids: list[int]) -> tuple[int, dict[int, float]]:
        """The most tokens one pass may evaluate and still give, at every position, the very
        logits a pass per token gives (from 1 to `len(ids)`, tried on `ids` on top of the
        cache), and the seconds a pass of each of those sizes took. The cache is cut back to
        what it held (or started over, where it cannot drop a tail: then it holds nothing).

        llama.cpp's CPU kernels are chosen by the batch. On a CPU, on a short cache, Gemma 3 270M
        Q4_K_M's logits differ by up to 1.3 from passes of 4 tokens on (its Q4_K weights are
        repacked for products of 4 rows at a time), SmolLM2-135M's are the same bit for bit up
        to 16 tokens. Once the cache holds 256 tokens, with flash attention, a pass of one token
        on 2 threads gives logits that differ by up to 2.5 from those of a longer pass, and
        from those of the same pass on 1 thread: a greedy answer then depends on the machine's
        load (engine/threads.py), drafts or not. On 1 thread, SmolLM2's passes of up to 9
        tokens stay exact there too.
        Where logits differ, a checked draft could part from what a token at a time gives, at a
        near tie. Other text goes through the same kernels.
        """
        base = self.length
        seconds: dict[int, float] = {}
        try:
            one_by_one = []
            for token in ids:
                started = time.perf_counter()
                self._decode([token])
                seconds[1] = min(seconds.get(1, np.inf), time.perf_counter() - started)
                one_by_one.append(self._logits(1)[0].copy())
            exact = 1
            for size in range(2, len(ids) + 1):
                if self.cut(base) < base:  # a cache that cannot drop a tail: no drafts either
                    exact = 1
                    break
                started = time.perf_counter()
                self._decode(ids[:size])
                took = time.perf_counter() - started
                if not np.array_equal(self._logits(size), np.stack(one_by_one[:size])):
                    break
                seconds[size] = took
                exact = size
            return exact, seconds
        finally:
            self.cut(base)

    def _decode(self, ids: list[int]) -> None:
        """Evaluate `ids` on top of the cache, with every position's logits."""
        llm = self._llm
        self.use_threads()
        llm._batch.set_batch(batch=ids, n_past=llm.n_tokens, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.input_ids[llm.n_tokens : llm.n_tokens + len(ids)] = ids
        llm.n_tokens += len(ids)

    def chosen_log_probs(self, tokens: list[int]) -> list[float]:
        """Each of `tokens`' log-probability under the last decode's logits at its position
        (the first token at the pass's first position, and so on)."""
        rows = self._logits(len(tokens))
        return [token_log_prob(row, t) for row, t in zip(rows, tokens, strict=True)]

    def last_log_prob(self, token: int) -> float:
        """`token`'s log-probability under the last position's logits of the last decode:
        the row `generate()`'s sampler picked it from, before its filters."""
        pointer = self._lib.llama_get_logits_ith(self._ctx_pointer, -1)
        return token_log_prob(np.ctypeslib.as_array(pointer, shape=(self._vocab_size,)), token)

    def _logits(self, rows: int) -> LogProbs:
        """The last decode's logits, a row per position (a view of llama.cpp's buffer)."""
        return np.ctypeslib.as_array(self._llm._ctx.get_logits(), shape=(rows, self._vocab_size))

    def log_probs(self, ids: list[int], at: int) -> LogProbs:
        """Evaluate `ids` at position `at` (the cache cut there first) with every position's
        logits: each row is the log-probabilities of the token after that position. The
        generation path keeps only the last position's logits; llama.cpp decides per batch."""
        llm = self._llm
        kept = self.cut(at)
        if kept < at:  # the cache started over: what it held before `at` is evaluated again
            llm.eval(llm.input_ids[kept:at].tolist())
        n_vocab = self._vocab_size
        out = np.empty((len(ids), n_vocab), dtype=np.float32)
        for start in range(0, len(ids), llm.n_batch):
            batch = ids[start : start + llm.n_batch]
            self._decode(batch)
            out[start : start + len(batch)] = self._logits(len(batch))
        # log-softmax, row by row, shifted by each row's maximum so that exp cannot overflow
        out -= out.max(axis=1, keepdims=True)
        out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
        return out

    # --- several sequences -------------------------------------------------------------------

    def room(self) -> int:
        """Cells the cache has left beyond what the live sequence holds (sequences that share
        cells count once): what sequences added for a job may take."""
        return int(self._lib.llama_n_ctx(self._ctx_pointer)) - self.length

    def branches(
        self,
        firsts: Sequence[int],
        ended: Callable[[int, int], bool],
        cancelled: threading.Event,
    ) -> Branched | None:
        """The greedy tokens after the live cache and each of `firsts` (not included), each
        branch a sequence of its own that shares the live cache's cells: a pass evaluates the
        last token of every branch still going, one row each, and the most likely token after
        each row is that branch's next (ties to the lowest id, as `most_likely`). A branch ends
        where `ended(i, token)` says so; None if `cancelled` (looked at before every pass).
        The live cache is left as it was. At most `sequences` branches, of at most
        `room() // padded_rows(len(firsts))` tokens each (the caller's to bound).

        Every pass has a multiple of `ROW_GROUP` rows: branches that ended (or copies of the
        first, where there are fewer) go on as filler, their tokens dropped. llama.cpp's
        kernels multiply 4 rows at a time and a pass's last 1-3 rows one by one, with other
        rounding: in passes of whole groups a branch's tokens do not depend on how many
        branches go beside it, nor on which. A pass llama.cpp refuses (it found no cells) ends
        the passes there: the branches still going are in `Branched.going`.
        """
        rows = padded_rows(len(firsts))
        if rows > self.sequences:
            raise ValueError(f"{len(firsts)} branches, room for {self.sequences}")
        at = self.length
        seqs = [LIVE_SEQUENCE + 1 + i for i in range(rows)]
        memory = self._memory()
        for seq in seqs:
            self._lib.llama_memory_seq_cp(memory, LIVE_SEQUENCE, seq, -1, -1)
        written: list[list[int]] = [[] for _ in firsts]
        last = [firsts[i] if i < len(firsts) else firsts[0] for i in range(rows)]
        position = [at] * rows  # where each sequence's next token goes
        going = list(range(len(firsts)))
        try:
            while going:
                if cancelled.is_set():
                    return None
                idle = [i for i in range(rows) if i not in going]
                passed = going + idle[: (-len(going)) % ROW_GROUP]
                try:
                    self._decode_rows([(last[i], position[i], seqs[i]) for i in passed])
                except SequencesRefusedError:
                    log.warning("llama.cpp refused a pass of %d sequences", len(passed))
                    return Branched(written=written, going=going)
                best = self._logits(len(passed)).argmax(axis=1).tolist()
                still = []
                for i, token in zip(passed, best, strict=True):
                    last[i] = token
                    position[i] += 1
                    if i in going:
                        written[i].append(token)
                        if not ended(i, token):
                            still.append(i)
                going = still
            return Branched(written=written, going=[])
        finally:
            for seq in seqs:
                self._lib.llama_memory_seq_rm(memory, seq, -1, -1)

    def row_costs(self, ids: list[int], rows: int, repeats: int = 3) -> tuple[float, float]:
        """The least seconds of a pass of one sequence's row and of `rows` sequences' rows, a
        token each on top of `ids` (evaluated on the empty cache); the cache is empty after."""
        self.cut(0)
        self._decode(ids)
        memory = self._memory()
        seqs = [LIVE_SEQUENCE + 1 + i for i in range(rows)]
        for seq in seqs:
            self._lib.llama_memory_seq_cp(memory, LIVE_SEQUENCE, seq, -1, -1)
        position = len(ids)
        one = many = float("inf")
        try:
            for _ in range(repeats):
                started = time.perf_counter()
                self._decode_rows([(ids[-1], position, seqs[0])])
                one = min(one, time.perf_counter() - started)
                self._lib.llama_memory_seq_rm(memory, seqs[0], position, -1)
                started = time.perf_counter()
                self._decode_rows([(ids[-1], position, seq) for seq in seqs])
                many = min(many, time.perf_counter() - started)
                position += 1
        finally:
            for seq in seqs:
                self._lib.llama_memory_seq_rm(memory, seq, -1, -1)
            self.cut(0)
        return one, many

    def continuation_log_probs(
        self, continuations: Sequence[Sequence[int]], cancelled: threading.Event
    ) -> list[list[float]] | None:
        """For each continuation after the live cache, the log-probability of each of its
        tokens but the first (which the cache's last logits give): its tokens but the last are
        evaluated as a sequence of its own that shares the live cache's cells, all of them
        together in passes of up to `SCORE_ROWS` rows with every row's logits. None if
        `cancelled` (looked at before every pass). The live cache is left as it was. At most
        `sequences` continuations, of at most `room()` tokens together."""
        if len(continuations) > self.sequences:
            raise ValueError(f"{len(continuations)} continuations, room for {self.sequences}")
        at = self.length
        seqs = [LIVE_SEQUENCE + 1 + i for i in range(len(continuations))]
        memory = self._memory()
        for seq in seqs:
            self._lib.llama_memory_seq_cp(memory, LIVE_SEQUENCE, seq, -1, -1)
        # (token, position, sequence) of every row, and the token its logits are scored for
        rows = [
            (token, at + j, seq)
            for seq, continuation in zip(seqs, continuations, strict=True)
            for j, token in enumerate(continuation[:-1])
        ]
        targets = np.array([t for c in continuations for t in c[1:]], dtype=np.int64)
        scores = np.empty(len(rows), dtype=np.float32)
        try:
            per_pass = min(SCORE_ROWS, self._llm.n_batch)
            for start in range(0, len(rows), per_pass):
                if cancelled.is_set():
                    return None
                part = rows[start : start + per_pass]
                try:
                    self._decode_rows(part)
                except SequencesRefusedError:
                    log.warning("llama.cpp refused a pass of %d rows to score", len(part))
                    raise
                # log-softmax as `log_probs` computes it, row by row
                out = self._logits(len(part)).copy()
                out -= out.max(axis=1, keepdims=True)
                out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
                wanted = targets[start : start + len(part)]
                scores[start : start + len(part)] = out[np.arange(len(part)), wanted]
        finally:
            for seq in seqs:
                self._lib.llama_memory_seq_rm(memory, seq, -1, -1)
        found: list[list[float]] = []
        start = 0
        for continuation in continuations:
            found.append(scores[start : start + len(continuation) - 1].tolist())
            start += len(continuation) - 1
        return found

    def _memory(self) -> Any:
        return self._lib.llama_get_memory(self._ctx_pointer)

    def _decode_rows(self, rows: Sequence[tuple[int, int, int]], *, logits: bool = True) -> None:
        """One pass over `rows` (token, position, sequence), every row's logits (or none)."""
        self.use_threads()
        batch = self._rows
        batch.n_tokens = len(rows)
        for i, (token, position, seq) in enumerate(rows):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        code = int(self._lib.llama_decode(self._ctx_pointer, batch))
        if code != 0:
            raise SequencesRefusedError(f"llama_decode of {len(rows)} rows refused ({code})")

    # --- sequences beside the live one, for a group of generations (llama_group.py) ----------

    def rows_best(self, rows: Sequence[tuple[int, int, int]]) -> list[tuple[int, float]]:
        """One pass over `rows` (token, position, sequence): the most likely token after each
        row (ties to the lowest id, as `most_likely`) and its log-probability."""
        self._decode_rows(rows)
        logits = self._logits(len(rows))
        best: list[int] = logits.argmax(axis=1).tolist()
        return [(t, token_log_prob(row, t)) for row, t in zip(logits, best, strict=True)]

    def copy_sequence(self, source: int, seq: int, length: int = -1) -> None:
        """`seq` shares the cells of `source`'s first `length` tokens (all: -1)."""
        memory = self._memory()
        self._lib.llama_memory_seq_rm(memory, seq, -1, -1)
        self._lib.llama_memory_seq_cp(memory, source, seq, 0 if length >= 0 else -1, length)

    def drop_sequence(self, seq: int) -> None:
        self._lib.llama_memory_seq_rm(self._memory(), seq, -1, -1)

    def restore_beside(self, seq: int, state: State, length: int) -> int:
        """A kept state copied into sequence `seq` (the state stays the store's), cut to its
        first `length` tokens: how many it holds; 0 where llama.cpp refused it (no room) or a
        sliding-window layer lost the cells before the cut (`_lost_cells`)."""
        read = int(
            self._lib.llama_state_seq_set_data(
                self._ctx_pointer, _uint8_pointer(state), state.size, seq
            )
        )
        memory = self._memory()
        if read > 0 and length > 0:
            removed = self._lib.llama_memory_seq_rm(memory, seq, length, -1)
            if removed and self._lib.llama_memory_seq_pos_min(memory, seq) <= 0:
                return length
        self._lib.llama_memory_seq_rm(memory, seq, -1, -1)
        return 0

    def evaluate_beside(
        self, seq: int, ids: Sequence[int], at: int, cancelled: threading.Event
    ) -> bool:
        """Evaluate `ids` in sequence `seq` from position `at`, in passes of `chunk` tokens
        with no logits; False if `cancelled` stopped it (looked at before every pass)."""
        for start in range(0, len(ids), self.chunk):
            if cancelled.is_set():
                return False
            part = ids[start : start + self.chunk]
            self._decode_rows([(t, at + start + i, seq) for i, t in enumerate(part)], logits=False)
        return not cancelled.is_set()

    @property
    def cells(self) -> int:
        """The cells of the cache, which every sequence's tokens share."""
        return int(self._lib.llama_n_ctx(self._ctx_pointer))

    # --- what the cache holds ----------------------------------------------------------------

    @property
    def length(self) -> int:
        return int(self._llm.n_tokens)

    def tokens(self) -> list[int]:
        llm = self._llm
        ids: list[int] = llm.input_ids[: llm.n_tokens].tolist()
        return ids

    def cut(self, length: int) -> int:
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

    def _lost_cells(self, shared: int) -> bool:
        """Whether the cache no longer holds the first of the `shared` tokens it should."""
        if shared == 0:
            return False
        memory = self._lib.llama_get_memory(self._ctx_pointer)
        return memory is not None and self._lib.llama_memory_seq_pos_min(memory, 0) > 0

    # --- kept states -------------------------------------------------------------------------

    @property
    def bytes_per_token(self) -> int:
        return self._state_bytes_per_token

    def set_aside(self, tokens: list[int]) -> tuple[State, int] | None:
        """A copy of the live cache's state in RAM; the live cache stays as it is.

        Every cell of the cache: asked for sequence 0, llama.cpp leaves out the cells that have
        slid out of a sliding-window model's window (Gemma 3), and a later request that goes
        back a few tokens needs some of them. Asked for every sequence (-1; between jobs our
        context has only sequence 0), it writes them all, in the format a sequence is restored
        from.
        """
        started = time.perf_counter()
        lib, ctx = self._lib, self._ctx_pointer
        size = int(lib.llama_state_seq_get_size(ctx, _ALL_SEQUENCES))
        if size <= 0:
            return None
        buffer = self._buffer(size)
        written = int(
            lib.llama_state_seq_get_data(ctx, _uint8_pointer(buffer), size, _ALL_SEQUENCES)
        )
        if written <= 0:
            log.warning("llama.cpp could not save the KV state of %d tokens", len(tokens))
            return None
        self._state_bytes_per_token = -(-written // max(1, len(tokens)))  # rounded up
        log.debug(
            "saved the state of %d tokens (%.1f MB) in %.1f ms",
            len(tokens),
            written / 1e6,
            (time.perf_counter() - started) * 1000,
        )
        return buffer[:written], buffer.nbytes

    def restore(self, state: State, tokens: tuple[int, ...]) -> None:
        """Make a kept state the live cache; an empty cache if llama.cpp refuses it.

        Restored as sequence 0, not as the whole context (`llama_state_set_data`): that path
        leaves the cache's write position at its first cell, and the next tokens would then
        overwrite the oldest cells of a sliding-window layer instead of free ones.
        """
        started = time.perf_counter()
        llm, lib, ctx = self._llm, self._lib, self._ctx_pointer
        llm._ctx.kv_cache_seq_rm(0, 0, -1)
        read = int(lib.llama_state_seq_set_data(ctx, _uint8_pointer(state), state.size, 0))
        self.recycle(state)
        if read <= 0:
            log.warning("llama.cpp could not restore a kept KV state; evaluating afresh")
            llm._ctx.kv_cache_seq_rm(0, 0, -1)
            llm.n_tokens = 0
            return
        llm.input_ids[: len(tokens)] = tokens
        llm.n_tokens = len(tokens)
        # The logits in the context are not this state's: generate() must decode again.
        llm._requires_eval = True
        log.debug(
            "restored the state of %d tokens in %.1f ms",
            len(tokens),
            (time.perf_counter() - started) * 1000,
        )

    def prepare_to_keep(self, tokens: int) -> None:
        """Have a spare buffer ready for the state of `tokens` tokens and an answer after them,
        its pages touched."""
        size = self._state_bytes_per_token * (tokens + SPARE_GENERATED)
        if size == 0 or any(b.size >= size for b in self._spare):
            return
        buffer = _new_buffer(size)
        ctypes.memset(buffer.ctypes.data, 0, buffer.size)
        self.recycle(buffer)

    def recycle(self, state: State) -> None:
        """Keep the memory of a state the store dropped or that was restored, for reuse."""
        buffer = state.base if isinstance(state.base, np.ndarray) else state
        self._spare = sorted([*self._spare, buffer], key=lambda b: b.size)[-SPARE_BUFFERS:]

    def _buffer(self, size: int) -> State:
        """A buffer of at least `size` bytes: the smallest spare one that fits, else a new one
        with room for the state to grow a little (the same document a few lines on)."""
        fitting = [b for b in self._spare if b.size >= size]
        if fitting:
            buffer = min(fitting, key=lambda b: b.size)
            self._spare = [b for b in self._spare if b is not buffer]
            return buffer
        return _new_buffer(size)  # not zero-filled: it is written over at once

    def close(self) -> None:
        self._spare = []
        if self._rows_held:
            self._lib.llama_batch_free(self._rows)
            self._rows_held = False
        self._llm.close()


def token_log_prob(logits: npt.NDArray[np.float32], token: int) -> float:
    """`token`'s log-probability under a row of logits: one log-sum-exp, shifted by the
    row's maximum so that exp cannot overflow. 0.18 ms (median of 500) for a row of Gemma 3's
    262,144 tokens on a CPU, against 20-40 ms for the pass that gave it."""
    top = logits.max()
    return float(logits[token] - top - np.log(np.exp(logits - top).sum()))


def _new_buffer(size: int) -> State:
    """Room for a state of `size` bytes, and for it to grow a little (the same document a
    few lines on) before it needs another."""
    return np.empty(size + size // SPARE_HEADROOM, dtype=np.uint8)


def _uint8_pointer(array: State) -> Any:
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
