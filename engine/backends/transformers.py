"""The transformers backend: a Hugging Face model folder, or a GGUF file that transformers
dequantizes, on CUDA (bf16) or the CPU (float32).

We run our own decode loop instead of `model.generate()`: it yields one token at a time, checks
the cancel event before every step, and keeps the KV cache between requests. A new request
crops the cache to the longest token prefix it shares with the previous one and feeds only the
rest, so while the user types each request costs a few new tokens instead of the whole prompt.
The caches of recently used documents are kept too, within a memory budget
(engine/prefix_cache.py): going back to a file costs what a keystroke costs. The prompt is fed
in chunks, so that a cancel stops a long one within a chunk, keeping what was computed
(engine/local_backend.py).

Where each part lives:
- engine/backends/transformers_load.py: the model's source, device, dtype and placement
  (accelerate over several GPUs), and what its tokenizer and configs say.
- engine/backends/transformers_decode.py: the three decode loops (dynamic, static, compiled)
  and the KV cache they compute in.
- here: the tokenizer, and sampling and scoring on top of the cache; branches and scorings
  written together, as rows of one batch beside the live cache (`TransformersBackend.sequences`).

Not handled: caches for models whose attention is not plain key/value (linear
attention, state-space layers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import transformers

from engine.accelerators import torch_model_gpu
from engine.backend import ModelInfo, Vocabulary, branch_prompt
from engine.backends.transformers_decode import DecodeLoop
from engine.backends.transformers_decode import DecodePath as DecodePath
from engine.backends.transformers_decode import wanted_decode_path as wanted_decode_path
from engine.backends.transformers_load import (
    check_source,
    eog_ids,
    first_line,
    load_model,
    model_name,
    quiet_progress,
    resolve_device,
    special_tokens,
    spread_over_gpus,
)
from engine.backends.transformers_load import should_spread as should_spread
from engine.backends.transformers_load import weights_bytes as weights_bytes
from engine.detokenizer import DecodeStreamDetokenizer, Detokenizer
from engine.errors import ModelLoadError
from engine.local_backend import SEQUENCES, LocalBackend
from engine.sampling import Sampler
from engine.specs import ModelSpec
from engine.types import SamplingParams

log = logging.getLogger(__name__)


class TransformersBackend(LocalBackend[Any, torch.Tensor, torch.Tensor]):
    """A Hugging Face model folder (config.json, weights, tokenizer.json) loaded with torch."""

    evaluate_last = True

    def __init__(self, spec: ModelSpec) -> None:
        path = spec.path.expanduser()
        started = time.perf_counter()
        source = check_source(path)
        try:
            target = resolve_device(spec.device)
            with quiet_progress():
                tokenizer: Any = transformers.AutoTokenizer.from_pretrained(
                    source.folder, local_files_only=True, **source.kwargs
                )
            # Our detokenizer is the `tokenizers` library's DecodeStream: a fast tokenizer only.
            backend_tokenizer = getattr(tokenizer, "backend_tokenizer", None)
            if backend_tokenizer is None:
                raise ModelLoadError(f"cannot load model {path}: it has no fast tokenizer.json")
            model, placed_on = load_model(
                source, target, spread=spread_over_gpus(spec.device, source)
            )
        except ModelLoadError:
            raise
        except Exception as e:  # transformers raises OSError, ValueError, KeyError, ImportError...
            raise ModelLoadError(f"cannot load model {path}: {first_line(e)}") from e
        self._tokenizer: Any = tokenizer
        self._backend_tokenizer: Any = backend_tokenizer
        # Calls into the tokenizer flip a flag on the shared Rust tokenizer (special tokens
        # split or not), so tokenize() may not run on two threads at once.
        self._tokenizer_lock = threading.Lock()

        config = model.config.get_text_config()
        max_positions = getattr(config, "max_position_embeddings", None) or getattr(
            config, "n_positions", None
        )
        context_size = min(spec.context_size, max_positions or spec.context_size)
        model_vocab = getattr(config, "vocab_size", None) or len(tokenizer)
        # Logits past the tokenizer's vocabulary (embedding rows padded for speed) are never
        # sampled: no detokenizer could show them.
        self._vocab_size = min(len(tokenizer), model_vocab)
        self._bos_id: int | None = tokenizer.bos_token_id
        self._decoder = DecodeLoop(
            model,
            vocab_size=self._vocab_size,
            context_size=context_size,
            decode=spec.decode,
            warmup_token=self._bos_id if self._bos_id is not None and self._bos_id >= 0 else 0,
        )
        self._special_ids = special_tokens(tokenizer)
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

        eog = eog_ids(tokenizer.eos_token_id, getattr(model, "generation_config", None))
        fallbacks = self._decoder.fallbacks
        info = ModelInfo(
            name=model_name(getattr(model.config, "_name_or_path", ""), path),
            path=str(path),
            backend="transformers",
            device=placed_on,
            gpu=torch_model_gpu(model),
            context_size=context_size,
            vocab_size=self._vocab_size,
            eog_tokens=tuple(
                (i, str(tokenizer.convert_ids_to_tokens(i)))
                for i in eog
                if 0 <= i < self._vocab_size
            ),
            has_chat_template=vocab.chat_template is not None,
            load_seconds=time.perf_counter() - started,
            warnings=tuple(fallbacks),
        )
        super().__init__(info=info, vocab=vocab, live=self._decoder, cache_bytes=spec.cache_bytes)
        #: The most branches or scored continuations one forward writes together, as rows of
        #: a batch beside the live cache; 1: one after another (`Backend.branch`,
        #: `LocalBackend.score`). Together on a GPU, where a forward of 8 rows costs about
        #: what one does. One after another on the CPU, as the llama.cpp backend there, though
        #: not for speed alone: on 2 CPU cores a step of 8 rows took 0.16-0.23x as long as 8
        #: steps of one, and ranking's branches together 0.58x (SmolLM2-135M in float32; 1.9x
        #: in one run under a heavier load; docs/decisions/rows-together.md). Each row holds
        #: its own copy of the prompt's keys and values (8 copies of a 4,096-token prompt: 1.5
        #: GB for SmolLM2 in float32), in the RAM that also holds the kept documents.
        self.sequences = SEQUENCES if self._decoder.on_cuda else 1
        for line in fallbacks:
            log.warning("%s", line)
        log.info(
            "loaded %s on %s (%s, %s decode) in %.1f s",
            path,
            placed_on,
            str(model.dtype).removeprefix("torch."),
            self._decoder.path.value,
            info.load_seconds,
        )

    @property
    def decode_path(self) -> DecodePath:
        """The decode loop in use, after any fallback. For doctor, tests and benchmarks."""
        return self._decoder.path

    # --- tokenizer ---------------------------------------------------------------------------

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

    # --- generation and scoring --------------------------------------------------------------

    def _sample(
        self,
        prompt: list[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        first: torch.Tensor | None,
    ) -> Iterator[int]:
        logits = _evaluated(first)
        sampler = Sampler(
            sampling, vocab_size=self._vocab_size, prompt_ids=prompt, device=logits.device
        )
        while not cancelled.is_set():
            token = sampler(logits)
            # The model's own distribution (the sampler's filters make new tensors).
            self.last_logprob = float(logits[token] - torch.logsumexp(logits, dim=-1))
            # The consumer may stop here for good: the cache then holds everything but
            # `token`, which the decode loop's ids say, so the next request stays exact.
            yield token
            if cancelled.is_set() or self._decoder.length >= self.context_size:
                return
            logits = self._decoder.feed([token])

    def _after_prompt(self, prompt: list[int], first: torch.Tensor | None) -> torch.Tensor:
        return torch.log_softmax(_evaluated(first), dim=-1)

    def _log_probs(
        self, prompt: list[int], continuation: Sequence[int], after: torch.Tensor
    ) -> list[float]:
        decoder = self._decoder
        rows = after[None, :]
        if len(continuation) > 1:
            # On the prompt alone (a cache that cannot be cut starts over: the prompt again),
            # every position's logits.
            if decoder.cut(len(prompt)) < len(prompt):
                decoder.feed(prompt)
            fed = decoder.feed(list(continuation[:-1]), keep=len(continuation) - 1)
            # One row comes back as a vector (`feed` with `keep` 1).
            rows = torch.cat([rows, torch.log_softmax(fed.reshape(-1, fed.shape[-1]), dim=-1)])
        picked = rows.gather(1, torch.tensor(continuation, device=rows.device)[:, None])
        return [float(x) for x in picked[:, 0].tolist()]

    def _score_continuations(
        self,
        prompt: list[int],
        continuations: Sequence[Sequence[int]],
        after: torch.Tensor,
        cancelled: threading.Event,
    ) -> list[tuple[float, ...]] | None:
        """Up to `sequences` continuations a forward, as rows beside the live cache, which holds
        the prompt; one after another where `sequences` is 1 or the cache cannot be copied."""
        size = self.sequences
        if size < 2 or len(continuations) < 2:
            return super()._score_continuations(prompt, continuations, after, cancelled)
        scored: list[tuple[float, ...]] = []
        for start in range(0, len(continuations), size):
            if cancelled.is_set():
                return None
            group = continuations[start : start + size]
            found = self._score_rows(prompt, group, after)
            if found is None:
                found = super()._score_continuations(prompt, group, after, cancelled)
                if found is None:
                    return None
            scored.extend(found)
        return scored

    def _score_rows(
        self, prompt: list[int], continuations: Sequence[Sequence[int]], after: torch.Tensor
    ) -> list[tuple[float, ...]] | None:
        """Each continuation's log-probabilities, its tokens after the first in a row each of
        one forward (right-padded to the longest); None where the cache cannot be copied."""
        long = [i for i, c in enumerate(continuations) if len(c) > 1]
        rest: dict[int, list[float]] = {}
        if long:
            cache = self._decoder.rows(len(prompt), len(long))
            if cache is None:
                return None
            width = max(len(continuations[i]) - 1 for i in long)
            ids, targets = [], []
            for i in long:
                c = continuations[i]
                # Padding: any token; it comes after every real one, which it cannot change.
                ids.append([*c[:-1], *[c[0]] * (width - len(c) + 1)])
                targets.append([*c[1:], *[0] * (width - len(c) + 1)])
            logits = self._decoder.run_rows(cache, ids)
            # The picked logits less each position's log-normalizer: no second tensor of the
            # vocabulary's width per position, as a log-softmax of them all would make.
            index = torch.tensor(targets, device=logits.device)[:, :, None]
            picked = logits.gather(2, index)[:, :, 0] - torch.logsumexp(logits, dim=-1)
            for i, row in zip(long, picked.tolist(), strict=True):
                rest[i] = row[: len(continuations[i]) - 1]
        return [
            (float(after[c[0]]), *rest.get(i, ())) if c else () for i, c in enumerate(continuations)
        ]

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
        """Up to `sequences` branches a forward, as rows beside the live cache, which holds the
        prompt (and holds it still afterwards): each step feeds every branch still going its
        last token, and a branch that ends leaves the batch. One after another
        (`Backend.branch`) where `sequences` is 1 or the cache cannot be copied."""
        firsts = list(first_tokens)
        if len(firsts) < 2 or self.sequences < 2:
            return super().branch(
                prompt_ids, firsts, max_tokens, ended, cancelled, cache_key=cache_key
            )
        self._check_open()
        prompt = branch_prompt(prompt_ids, max_tokens, self.context_size)
        if cancelled.is_set():
            return None
        if self._bring_to(prompt, cache_key, cancelled) is None:
            return None
        branches: list[list[int]] = []
        try:
            for start in range(0, len(firsts), self.sequences):
                group = firsts[start : start + self.sequences]
                written = self._branch_rows(prompt, group, start, max_tokens, ended, cancelled)
                if written is None:
                    return None
                if isinstance(written, _Refused):
                    break
                branches.extend(written)
        finally:
            self._kept.set_live(cache_key, self._live.length)
        for index in range(len(branches), len(firsts)):  # the cache could not be copied
            alone = self.branch_alone(
                prompt, firsts[index], [], index, max_tokens, ended, cancelled, cache_key=cache_key
            )
            if alone is None:
                return None
            branches.append(alone)
        return branches

    def _branch_rows(
        self,
        prompt: list[int],
        firsts: list[int],
        offset: int,
        max_tokens: int,
        ended: Callable[[int, int], bool],
        cancelled: threading.Event,
    ) -> list[list[int]] | _Refused | None:
        """Branches `offset`... of `branch`, after the prompt (which the live cache holds) and
        each of `firsts`, greedy, a row each; None if `cancelled`."""
        written: list[list[int]] = [[] for _ in firsts]
        cache = self._decoder.rows(len(prompt), len(firsts))
        if cache is None:
            return _Refused()
        going = list(range(len(firsts)))
        last = list(firsts)
        while going:
            if cancelled.is_set():
                return None
            logits = self._decoder.run_rows(cache, [[last[i]] for i in going])
            tokens = [int(t) for t in torch.argmax(logits[:, -1], dim=-1).tolist()]
            kept: list[int] = []
            for row, (index, token) in enumerate(zip(going, tokens, strict=True)):
                written[index].append(token)
                last[index] = token
                # As one branch alone ends: at its end, its limit, or the context's.
                if not (
                    ended(offset + index, token)
                    or len(written[index]) >= max_tokens
                    or len(prompt) + len(written[index]) >= self.context_size
                ):
                    kept.append(row)
            if len(kept) < len(going):
                if kept:
                    # On the CPU: each layer indexes its own device's keys with it (the
                    # layers of a model spread over GPUs are on several).
                    cache.batch_select_indices(torch.tensor(kept))
                going = [going[row] for row in kept]
        return None if cancelled.is_set() else written

    def _most_likely(self, after: torch.Tensor, top: int) -> tuple[tuple[int, float], ...]:
        values, ids = torch.topk(after, min(top, after.shape[-1]))
        return tuple(zip((int(i) for i in ids.tolist()), values.tolist(), strict=True))


class _Refused:
    """The live cache could not be copied into rows: one branch after another."""


def _evaluated(logits: torch.Tensor | None) -> torch.Tensor:
    """The logits after the prompt: bringing the cache to it evaluates its last token here."""
    if logits is None:
        raise RuntimeError("the prompt's last token was not evaluated")
    return logits
