"""The raw llama.cpp baseline the benchmarks compare against: llama-cpp-python's public `Llama`,
loaded with the same settings as our backend, driven the way the backend drives it.

`LlamaCppBackend` (engine/backends/llama_cpp.py) builds its `Llama` from a `ModelSpec` with
`llama_params`; `RawLlama` builds its own from the same spec with the same function, so that
model file, context, batch and threads are identical, and calls `Llama.generate()` with the
arguments `LlamaCppBackend._sample` passes for greedy decoding. It shares nothing else
with our code: no worker thread, no detokenizer, no stop processor, no event loop.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.backends.llama_cpp import llama_params
from engine.specs import ModelSpec

#: What `LlamaCppBackend._sample` passes to `Llama.generate()` for greedy decoding
#: (`SamplingParams` defaults, temperature 0), so that both sides build the same sampler chain.
GREEDY: dict[str, float | int] = {
    "temp": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RawRun:
    """One raw generation: seconds from the call to the last token, and to the first."""

    seconds: float
    first_token_s: float
    token_ids: tuple[int, ...]


class RawLlama:
    """A `llama_cpp.Llama` loaded from `spec` exactly as our llama.cpp backend loads it."""

    def __init__(self, spec: ModelSpec) -> None:
        import llama_cpp  # the `llama` extra; every benchmark that compares needs it

        if spec.resolved_backend() != "llama.cpp":
            raise SystemExit(f"the raw baseline needs a GGUF model, got {spec.path}")
        self.spec = spec
        self.llm: Any = llama_cpp.Llama(**llama_params(spec))

    @property
    def threads(self) -> tuple[int, int]:
        """(decode threads, prompt threads)."""
        params = self.llm.context_params
        return int(params.n_threads), int(params.n_threads_batch)

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return [int(t) for t in self.llm.tokenize(text.encode("utf-8"), add_bos, True)]

    def detokenize(self, ids: Sequence[int]) -> str:
        return bytes(self.llm.detokenize(list(ids))).decode("utf-8", "replace")

    def reset(self) -> None:
        """Forget the KV cache: the next `generate` shares no prefix and evaluates the whole
        prompt (`reset()` sets the cached token count to 0; `eval` drops the cells)."""
        self.llm.reset()

    def generate(self, ids: Sequence[int], n: int, *, cold: bool = False) -> RawRun:
        """Greedy `Llama.generate()` on `ids` until `n` tokens came out. `cold`: `reset()`
        first. Otherwise llama.cpp keeps the longest shared prefix of its KV cache."""
        if cold:
            self.reset()
        started = time.perf_counter()
        self.llm.set_seed(0)
        tokens = self.llm.generate(list(ids), reset=True, **GREEDY)
        out: list[int] = []
        first: float | None = None
        try:
            for token_id in tokens:
                if first is None:
                    first = time.perf_counter()
                out.append(int(token_id))
                if len(out) >= n:
                    break
        finally:
            tokens.close()
        done = time.perf_counter()
        return RawRun(
            seconds=done - started, first_token_s=(first or done) - started, token_ids=tuple(out)
        )

    def decode_step_seconds(self, ids: Sequence[int], tokens: int, repeats: int = 3) -> float:
        """Median seconds per token of greedy generation after `ids`, prompt excluded (the
        time between the first and the last token), on a cold cache every time."""
        samples = []
        for _ in range(repeats):
            self.reset()  # the same prompt and context length every time
            stamps: list[float] = []
            generator = self.llm.generate(list(ids), reset=True, **GREEDY)
            try:
                for _token in generator:
                    stamps.append(time.perf_counter())
                    if len(stamps) >= tokens:
                        break
            finally:
                generator.close()
            samples.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
        return statistics.median(samples)

    def close(self) -> None:
        self.llm.close()
