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

import contextlib
import ctypes
import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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
from engine.backend import ModelInfo, Vocabulary, branch_prompt
from engine.backends.llama_context import EVAL_CHUNK as EVAL_CHUNK
from engine.backends.llama_context import (
    ROW_GROUP,
    LlamaContext,
    LogProbs,
    SequencesRefusedError,
    State,
    padded_rows,
)
from engine.backends.llama_group import LlamaStepGroup
from engine.detokenizer import ByteDetokenizer, Detokenizer
from engine.drafts import Acceptance, DraftCounts, PassCosts, PromptLookup, worth_checking
from engine.errors import BackendUnavailableError, ModelLoadError
from engine.gguf_file import diagnose
from engine.local_backend import SEQUENCES, LocalBackend
from engine.threads import default_max_threads
from engine.types import SamplingParams

if TYPE_CHECKING:
    from engine.specs import ModelSpec

log = logging.getLogger(__name__)


#: Prompt tokens evaluated per batch (at most the context size).
BATCH_SIZE = 512

#: The most draft tokens a greedy step checks with the token before them (engine/drafts.py).
#: A rewrite writes 4.0 / 5.8 / 7.3 / 8.0 tokens per pass with up to 4 / 8 / 12 / 16, for
#: 0.9 / 1.2 / 1.3 / 1.5 draft tokens checked per token written (Gemma 3 270M, bench/drafts.py's
#: rewrites); where a pass costs about its tokens' worth, as on a CPU, the waste decides.
DRAFT_TOKENS = 8
#: Rows go together (`LlamaCppBackend.sequences`) where a pass of `SEQUENCES` rows costs less
#: than this share of as many passes of one. Ended branches go on as filler (a pass is whole
#: groups of 4 rows), so a job's rows are often half filler. On 2 CPU cores a pass of 8 rows
#: took 4.5-5x one of 1 (67 / 13 ms, Gemma 3 270M; SmolLM2 44 / 8 ms), and ranking all
#: together was no faster than one at a time (docs/decisions/rows-together.md: 6.8 s / 7.3 s
#: median, scorings
#: 5.0 / 5.3 s), while its candidates differ (Gemma's kernels: `LlamaContext.exact_batches`):
#: one at a time there.
ROWS_PAY = 0.5
#: Requests under way at once are written together (`LlamaStepGroup`) from the least number
#: of them whose rows, in whole 4-row groups, cost less than this share of as many passes of
#: one: members end at different times, and the rest go on beside fillers. On 2 CPU cores
#: under load a pass of 4 rows took 5.0x one (91 / 18 ms, Gemma 3 270M) and one of 8 rows 5.6x
#: (101 ms): from 8 requests at once; idle, rows cost less; on a GPU 4 rows cost about one.
GROUP_PAYS = 0.8
#: The text on which passes are compared with a pass per token (`LlamaContext.exact_batches`)
#: once the model is loaded: as many tokens as a pass checks.
PROBE_TEXT = "for size in range(1, 10):\n    print(size, area(size, size + 1))\n"


class DraftChecking(enum.Enum):
    """Which drafts a greedy step checks."""

    #: As much of a draft as promises the most tokens per second (`worth_checking`), in
    #: passes that give the logits of one token at a time: the answer is the same as without.
    WORTH_IT = "worth it"
    #: Every draft, as far as such passes go (tests: the answer is still the same).
    EXACT = "exact"
    #: Every draft in full, whatever the passes give (benchmarks: what drafts could give).
    EVERY = "every"


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


#: Held while a model's context is made with `_several_sequences`' parameters.
_CONTEXT_PARAMS = threading.Lock()


@contextlib.contextmanager
def _several_sequences(lib: Any, sequences: int) -> Iterator[None]:
    """While a `Llama` is made: its context with `sequences` sequences beside the live one,
    in one KV cache whose cells sequences share (a prompt's cells once for all its branches).
    llama-cpp-python asks for several sequences only for embeddings; it takes every other
    parameter from `llama_context_default_params`, which this wraps for the while (loads wait
    for one another: the wrapper is the module's)."""
    module = lib.llama_cpp
    with _CONTEXT_PARAMS:
        original = module.llama_context_default_params

        def params() -> Any:
            made = original()
            made.n_seq_max = 1 + sequences
            made.kv_unified = True
            return made

        module.llama_context_default_params = params
        try:
            yield
        finally:
            module.llama_context_default_params = original


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as e:
        raise BackendUnavailableError(
            "the llama.cpp backend needs llama-cpp-python: pip install 'infill-lsp[llama]'"
        ) from e
    return llama_cpp


class LlamaTokenizer:
    """A GGUF model's tokenizer over llama.cpp's vocabulary: what the llama.cpp backend
    tokenizes with, and, loaded alone (`vocab_only`), what the remote backend renders exact
    prompts with where our own engine server on this machine serves the same file
    (engine.backend.Tokenizer)."""

    def __init__(
        self,
        lib: Any,
        llama_vocab: Any,
        *,
        model_path: str,
        chat_template: str | None,
        owner: Any = None,
    ) -> None:
        """`owner`: what holds `llama_vocab` (a vocabulary-only model), kept as long as this."""
        self._lib = lib
        self._llama_vocab = llama_vocab
        self._owner = owner
        self.model_path = model_path
        self._pieces: dict[int, bytes] = {}
        self._special_ids: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self.vocab_size: int = lib.llama_vocab_n_tokens(llama_vocab)
        bos = lib.llama_vocab_bos(llama_vocab)
        eos = lib.llama_vocab_eos(llama_vocab)
        self.vocab = Vocabulary(
            bos_token=self._special_text(bos) if bos >= 0 else None,
            eos_token=self._special_text(eos) if eos >= 0 else None,
            adds_bos=bool(lib.llama_vocab_get_add_bos(llama_vocab)) and bos >= 0,
            chat_template=chat_template,
        )

    @classmethod
    def vocab_only(cls, path: Path) -> LlamaTokenizer:
        """The tokenizer of the GGUF file at `path`, without its weights. For the default
        Gemma 3 270M (a 262,144-token vocabulary) it loaded in 0.39 s and added 44 MB of
        resident memory (2 busy CPU cores, llama-cpp-python imported before). ModelLoadError
        if it cannot be loaded.
        The chat template is not read: the server renders chats."""
        path = path.expanduser()
        _check_readable(path)
        lib = _import_llama_cpp()
        from llama_cpp import _internals

        # Llama() initializes llama.cpp's backends once per process; a model alone needs it too.
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.vocab_only = True
        try:
            model = _internals.LlamaModel(path_model=str(path), params=params, verbose=False)
        except (ValueError, RuntimeError, OSError) as e:
            raise ModelLoadError(
                f"cannot load the vocabulary of {path}: {diagnose(path) or e}"
            ) from e
        return cls(lib, model.vocab, model_path=str(path), chat_template=None, owner=model)

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

    def eog_tokens(self) -> tuple[tuple[int, str], ...]:
        """(id, text) of each end-of-generation token."""
        lib, vocab = self._lib, self._llama_vocab
        return tuple(
            (i, self._special_text(i))
            for i in range(self.vocab_size)
            if lib.llama_vocab_is_eog(vocab, i)
        )

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
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"token id {token_id} is outside the vocabulary")
            piece = self._piece(token_id)
            self._pieces[token_id] = piece
        return piece

    def new_detokenizer(self) -> Detokenizer:
        return ByteDetokenizer(self.token_bytes)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        detokenizer = self.new_detokenizer()
        return "".join(detokenizer.step(t) for t in token_ids) + detokenizer.finish()


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
            with _several_sequences(lib, SEQUENCES):
                self._llm = lib.Llama(**llama_params(spec))
        except (ValueError, RuntimeError, OSError) as e:
            # llama.cpp says only that it failed: our own walk of the file may say why.
            raise ModelLoadError(f"cannot load model {path}: {diagnose(path) or e}") from e
        metadata: dict[str, str] = dict(self._llm.metadata)
        chat_template = metadata.get("tokenizer.chat_template") or None
        self._tokenizer = LlamaTokenizer(
            lib, self._llm._model.vocab, model_path=str(path), chat_template=chat_template
        )
        n_vocab = self._tokenizer.vocab_size
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
            eog_tokens=self._tokenizer.eog_tokens(),
            has_chat_template=chat_template is not None,
            load_seconds=time.perf_counter() - started,
        )
        vocab = self._tokenizer.vocab
        self._context = LlamaContext(self._llm, lib, vocab_size=n_vocab, threads=spec.threads)
        super().__init__(info=info, vocab=vocab, live=self._context, cache_bytes=spec.cache_bytes)
        self._counts = DraftCounts()
        self._pass_costs = PassCosts()
        #: The most tokens a pass evaluates with the logits a pass per token gives.
        self.exact_pass_tokens = self._probe()
        #: The most draft tokens a greedy step checks; 0: greedy requests decode a token per
        #: pass, through `generate()` like the others.
        self.draft_tokens = DRAFT_TOKENS
        self.draft_checking = DraftChecking.WORTH_IT
        #: The most branches or scored continuations a pass evaluates together (one sequence
        #: each); 1: one after another, as `Backend.branch` and `LocalBackend.score` do it.
        #: Together only where many rows cost much less than as many passes of one, measured
        #: once at load (`_row_costs`), or as $INFILL_ROWS says.
        costs = self._row_costs() if spec.rows == "auto" else {}
        together = spec.rows == "together" or (
            bool(costs) and costs[SEQUENCES] < ROWS_PAY * SEQUENCES * costs[1]
        )
        self.sequences = self._context.sequences if together else 1
        #: The least requests under way at once that are written together (0: never).
        self.group_from = 2 if spec.rows == "together" else _group_from(costs)
        for warning in info.warnings:
            log.warning("%s: %s", path.name, warning)

    def _probe(self) -> int:
        """The most tokens a pass may evaluate and still give the logits of a pass per token, on
        this machine (`LlamaContext.exact_batches`), measured on the empty cache once the model is
        loaded (0.15-0.25 s on a CPU): on a short cache the thread count changes no logit, so the
        machine's load changes no answer. The passes' times are `PassCosts`' first."""
        ids = self.tokenize(PROBE_TEXT, add_bos=False)[: DRAFT_TOKENS + 1]
        if len(ids) < 2 or len(ids) >= self.info.context_size:
            return 1
        started = time.perf_counter()
        exact, seconds = self._context.exact_batches(ids)
        for size, took in seconds.items():
            self._pass_costs.record(size, took)
        log.debug(
            "%s: passes of up to %d tokens give the logits of a pass per token (measured in "
            "%.0f ms)",
            self.info.name,
            exact,
            (time.perf_counter() - started) * 1000,
        )
        return exact

    def _row_costs(self) -> dict[int, float]:
        """The least seconds of a pass of 1, `ROW_GROUP` and `SEQUENCES` rows here
        (`LlamaContext.row_costs`, least of 3 each, on the empty cache after `_probe`);
        none where the context has too few sequences or cells."""
        ids = self.tokenize(PROBE_TEXT, add_bos=False)[:8]
        if self._context.sequences < SEQUENCES or len(ids) + 8 >= self.info.context_size:
            return {}
        one, group = self._context.row_costs(ids, ROW_GROUP)
        again, many = self._context.row_costs(ids, SEQUENCES)
        costs = {1: min(one, again), ROW_GROUP: group, SEQUENCES: many}
        log.debug(
            "%s: a pass of 1 / %d / %d rows takes %s ms",
            self.info.name,
            ROW_GROUP,
            SEQUENCES,
            " / ".join(f"{c * 1000:.1f}" for c in costs.values()),
        )
        return costs

    # --- tokenizer ---------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def special_token_id(self, text: str) -> int | None:
        return self._tokenizer.special_token_id(text)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` adds to the text (nothing for control tokens)."""
        return self._tokenizer.token_bytes(token_id)

    def new_detokenizer(self) -> Detokenizer:
        return self._tokenizer.new_detokenizer()

    # --- generation and scoring --------------------------------------------------------------

    def _sample(
        self, prompt: list[int], sampling: SamplingParams, cancelled: threading.Event, first: None
    ) -> Iterator[int]:
        if self.draft_tokens > 0 and sampling.most_likely_each:
            yield from self._greedy(prompt, sampling, cancelled)
            return
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
                self.last_logprob = self._context.last_log_prob(int(token_id))
                yield int(token_id)
                if cancelled.is_set():
                    return
                self._context.use_threads()
        finally:
            tokens.close()

    def _greedy(
        self, prompt: list[int], sampling: SamplingParams, cancelled: threading.Event
    ) -> Iterator[int]:
        """Greedy decoding that checks drafts from the document (engine/drafts.py).

        A step evaluates the history's last token and a draft in one pass, with every
        position's logits: the draft's tokens stand while each is the most likely after the
        one before it, and the most likely token after the last one that stands comes with
        them. So a pass gives from 1 to `len(draft) + 1` tokens. Checked by default
        (`DraftChecking.WORTH_IT`), they are the ones a pass per token gives: no pass is longer
        than `exact_pass_tokens`, the most whose logits are those of one token at a time, and of a
        draft only as much is checked as promises the most tokens per second, from what passes cost
        on this machine and how often this answer's drafts stood (`worth_checking`).

        Whenever the consumer stops (it may, between any two tokens, for good or to resume
        later from them), the cache holds the prompt and the tokens handed over, nothing after:
        rejected draft positions are cut before a step's tokens go out, and a stop among a
        step's accepted tokens cuts the ones not handed over.
        """
        context, costs = self._context, self._pass_costs
        lookup = PromptLookup(prompt)
        acceptance = Acceptance()
        drafting = True
        last = prompt[-1]
        held = len(prompt) - 1  # the cache holds the history but its last token
        keep = held  # what the cache keeps if the consumer stops now
        handed = 0
        try:
            while not cancelled.is_set():
                # A draft and the token after it never run past the answer's end, nor past
                # the context's.
                room = min(sampling.max_tokens - handed, self.info.context_size - held - 1) - 1
                proposal = lookup.draft(min(self.draft_tokens, room)) if drafting else []
                draft = proposal
                if self.draft_checking is not DraftChecking.EVERY:
                    draft = proposal = proposal[: self.exact_pass_tokens - 1]
                if self.draft_checking is DraftChecking.WORTH_IT:
                    draft = proposal[: worth_checking(len(proposal), acceptance.rate, costs)]
                if not draft:
                    acceptance.watch(proposal)
                started = time.perf_counter()
                best = context.most_likely([last, *draft])
                costs.record(1 + len(draft), time.perf_counter() - started)
                accepted = 0
                while accepted < len(draft) and draft[accepted] == best[accepted]:
                    accepted += 1
                logprobs = context.chosen_log_probs(best[: accepted + 1])  # before a decode
                if draft:
                    acceptance.observe(len(draft), accepted)
                self._counts = DraftCounts(
                    steps=self._counts.steps + 1,
                    drafted=self._counts.drafted + len(draft),
                    accepted=self._counts.accepted + accepted,
                )
                start = held + 1  # where this step's tokens begin in the history
                held = start + accepted  # `last` and the drafts that stood
                if context.cut(held) < held:
                    # The cache could not drop the tail and started over: bring it back once,
                    # and go on without drafts.
                    context.evaluate([*lookup.history, *draft[:accepted]])
                    drafting = False
                new = best[: accepted + 1]
                for i, token in enumerate(new):
                    # A draft token handed over stays in the cache; the step's last token (not
                    # evaluated yet) does not.
                    keep = start + min(i + 1, accepted)
                    lookup.append(token)
                    acceptance.written(token)
                    handed += 1
                    self.last_logprob = logprobs[i]
                    yield token
                    if cancelled.is_set():
                        return
                last = new[-1]
        finally:
            context.cut(keep)

    def branch(
        self,
        prompt_ids: Sequence[int],
        first_tokens: Sequence[int],
        max_tokens: int,
        ended: Callable[[int, int], bool],
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> list[list[int]] | None:
        """Every branch together, a sequence each beside the live cache, which holds the
        prompt (`LlamaContext.branches`): a pass evaluates a row of each branch still going.
        One after another (`Backend.branch`) where they are more than `sequences` or their
        tokens would not fit in the cache."""
        context = self._context
        firsts = list(first_tokens)
        rows = padded_rows(len(firsts))
        if len(firsts) < 2 or rows > min(self.sequences, context.sequences):
            return super().branch(
                prompt_ids, firsts, max_tokens, ended, cancelled, cache_key=cache_key
            )
        self._check_open()
        prompt = branch_prompt(prompt_ids, max_tokens, self.context_size)
        if cancelled.is_set():
            return None
        # The cache brought to the prompt and a first token holds the prompt, all of it.
        if self._bring_to([*prompt, firsts[0]], cache_key, cancelled) is None:
            return None
        try:
            if context.length != len(prompt) or context.room() < rows * max_tokens:
                return super().branch(
                    prompt, firsts, max_tokens, ended, cancelled, cache_key=cache_key
                )
            counts = [0] * len(firsts)

            def done(index: int, token: int) -> bool:
                counts[index] += 1
                return ended(index, token) or counts[index] >= max_tokens

            branched = context.branches(firsts, done, cancelled)
        finally:
            self._kept.set_live(cache_key, self._live.length)
        if branched is None:
            return None
        for index in branched.going:  # a pass was refused: these go on one at a time
            alone = self.branch_alone(
                prompt,
                firsts[index],
                branched.written[index],
                index,
                max_tokens,
                ended,
                cancelled,
                cache_key=cache_key,
            )
            if alone is None:
                return None
        return branched.written

    @property
    def group_size(self) -> int:
        """Requests written together (`LlamaStepGroup`), where `group_from` are under way."""
        return self._context.sequences if self.group_from else 1

    def step_group(self) -> LlamaStepGroup:
        self._check_open()
        return LlamaStepGroup(self._context, self._kept, self.group_size)

    def _score_continuations(
        self,
        prompt: list[int],
        continuations: Sequence[Sequence[int]],
        after: LogProbs,
        cancelled: threading.Event,
    ) -> list[tuple[float, ...]] | None:
        """Up to `sequences` continuations together, a sequence each beside the live cache
        (`LlamaContext.continuation_log_probs`); one after another where they would not fit."""
        context = self._context
        size = min(self.sequences, context.sequences)
        if size < 2 or context.length != len(prompt):
            return super()._score_continuations(prompt, continuations, after, cancelled)
        scored: list[tuple[float, ...]] = []
        for start in range(0, len(continuations), size):
            group = continuations[start : start + size]
            found: list[tuple[float, ...]] | None = None
            if sum(len(c) - 1 for c in group) <= context.room():
                try:
                    rest = context.continuation_log_probs(group, cancelled)
                except SequencesRefusedError:
                    rest = []  # one at a time, as where they would not fit
                if rest is None:
                    return None
                if rest:
                    found = [(float(after[c[0]]), *r) for c, r in zip(group, rest, strict=True)]
            if found is None:
                found = super()._score_continuations(prompt, group, after, cancelled)
                if found is None:
                    return None
            scored.extend(found)
        return scored

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
    def draft_counts(self) -> DraftCounts:
        """Greedy steps, draft tokens checked and accepted since the model was loaded."""
        return self._counts

    @property
    def pass_seconds(self) -> dict[int, float]:
        """What a pass of each size costs here: the least time seen (for benchmarks)."""
        return self._pass_costs.known()

    @property
    def threads(self) -> int:
        """The threads llama.cpp computes with now: as many as the machine's load leaves free,
        or the `threads` setting. For tests and benchmarks."""
        return self._context.threads


def _group_from(costs: dict[int, float]) -> int:
    """The least requests whose passes, in whole row groups, cost less than `GROUP_PAYS` of
    as many passes of one (`costs`: seconds by rows); 0 where no count up to `SEQUENCES` does."""
    if not costs:
        return 0
    for count in range(2, SEQUENCES + 1):
        if costs[padded_rows(count)] < GROUP_PAYS * count * costs[1]:
            return count
    return 0


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
