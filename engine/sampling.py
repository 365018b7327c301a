"""Logits to a token id: the sampling stage of a torch backend; decoding ids to
text and deciding where text ends are other modules' (`detokenizer.py`, `stops.py`), as in vLLM.

The order is the one vLLM and transformers use: repetition penalty, then temperature, top-k
and top-p, then a draw from what is left. Temperature 0 is greedy decoding; the repetition
penalty applies to it too, as it does in llama.cpp's sampler chain, so both local backends
pick the same token for the same logits.

Only the torch backends import this module (it needs torch).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from engine.types import SamplingParams


class Sampler:
    """Picks one choice's tokens. Per token the work is a few passes over the logits; the
    tokens seen so far (for the repetition penalty) are a mask, updated one id at a time."""

    def __init__(
        self,
        sampling: SamplingParams,
        *,
        vocab_size: int,
        prompt_ids: Sequence[int],
        device: torch.device,
    ) -> None:
        self.sampling = sampling
        self._seen: torch.Tensor | None = None
        if sampling.repetition_penalty != 1.0:
            self._seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
            ids = [i for i in prompt_ids if 0 <= i < vocab_size]
            if ids:
                self._seen[torch.tensor(ids, dtype=torch.long, device=device)] = True
        self._generator: torch.Generator | None = None
        if not sampling.greedy:
            seed = sampling.seed if sampling.seed is not None else random.getrandbits(63)
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(seed)

    def __call__(self, logits: torch.Tensor) -> int:
        """The next token for `logits` (one row, the vocabulary's width); it counts as seen."""
        if self._seen is not None:
            logits = apply_repetition_penalty(logits, self._seen, self.sampling.repetition_penalty)
        if self._generator is None:
            token = int(torch.argmax(logits).item())
        else:
            probs = torch.softmax(
                filter_top_k_top_p(
                    logits / self.sampling.temperature, self.sampling.top_k, self.sampling.top_p
                ),
                dim=-1,
            )
            token = int(torch.multinomial(probs, 1, generator=self._generator).item())
        if self._seen is not None:
            self._seen[token] = True
        return token


def apply_repetition_penalty(
    logits: torch.Tensor, seen: torch.Tensor, penalty: float
) -> torch.Tensor:
    """CTRL's penalty (arXiv:1909.05858): a seen token's positive logit is divided by
    `penalty`, a negative one multiplied, so it always becomes less likely for penalty > 1."""
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`logits` with every token outside the top `top_k` (0: no limit) and outside the
    smallest set whose probability reaches `top_p` set to -inf. The best token always stays."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # A token is dropped when the ones before it already reach top_p.
        drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits
