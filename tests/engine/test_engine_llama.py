"""The engine on the real default models (llama.cpp): what a user of `generate` relies on."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from job_events import JobWatch

from engine.backends.llama_cpp import LlamaCppBackend
from engine.engine import Engine
from engine.errors import PromptTooLongError
from engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    ScoreRequest,
    StopConditions,
)

PROMPT = (
    'def is_palindrome(s: str) -> bool:\n    """Return True if s reads the same backwards."""\n'
)


def greedy(
    prompt: str = PROMPT, max_tokens: int = 24, stops: StopConditions | None = None
) -> GenerationRequest:
    return GenerationRequest(
        prompt=prompt,
        sampling=SamplingParams(max_tokens=max_tokens),
        stops=StopConditions() if stops is None else stops,
    )


@pytest.fixture(scope="module")
def raw_llama() -> Iterator[Any]:
    """The default completion model loaded by llama-cpp-python alone, with the arguments our
    backend loads it with (`llama_params`): what llama.cpp itself completes and decodes."""
    import llama_cpp

    from engine.backends.llama_cpp import llama_params
    from engine.models import model_spec
    from engine.specs import ModelOptions, ModelSpec

    spec = model_spec(Role.COMPLETION, ModelOptions(), environ={})
    assert isinstance(spec, ModelSpec)
    llm = llama_cpp.Llama(**llama_params(spec))
    yield llm
    llm.close()


async def test_greedy_output_is_deterministic_and_equals_raw_llama_cpp(
    completion_engine: Engine, raw_llama: Any
) -> None:
    (first,) = await completion_engine.collect(greedy())
    (second,) = await completion_engine.collect(greedy())
    assert first.text == second.text
    assert first.text.strip()
    raw = raw_llama.create_completion(PROMPT, max_tokens=24, temperature=0.0)
    assert first.text == raw["choices"][0]["text"]


async def test_streamed_deltas_join_to_the_full_decode(
    completion_engine: Engine, raw_llama: Any
) -> None:
    deltas = [d async for d in completion_engine.generate(greedy(max_tokens=32))]
    ids = [i for d in deltas for i in d.token_ids]
    text = "".join(d.text for d in deltas)
    (collected,) = await completion_engine.collect(greedy(max_tokens=32))
    assert text == collected.text
    assert text.strip()
    # The expected text comes from llama.cpp itself, not from our detokenizer: its decode of
    # the same ids, and its own completion of the prompt.
    assert text == raw_llama.detokenize(ids).decode("utf-8")
    raw = raw_llama.create_completion(PROMPT, max_tokens=32, temperature=0.0)
    assert text == raw["choices"][0]["text"]
    assert deltas[-1].finish_reason in (FinishReason.STOP, FinishReason.LENGTH)


async def test_a_hidden_stop_string_cut_mid_output_gives_the_text_before_it(
    completion_engine: Engine,
) -> None:
    (full,) = await completion_engine.collect(greedy(max_tokens=40))
    # A stop string that starts in the middle of the output and spans several characters.
    start = len(full.text) // 2
    stop = full.text[start : start + 4]
    assert len(stop) == 4
    expected = full.text[: full.text.find(stop)]
    (cut,) = await completion_engine.collect(
        greedy(max_tokens=40, stops=StopConditions(stop=(stop,)))
    )
    assert cut.text == expected
    assert (cut.finish_reason, cut.stop_reason) == (FinishReason.STOP, stop)

    (kept,) = await completion_engine.collect(
        greedy(max_tokens=40, stops=StopConditions(stop=(stop,), include_stop_str_in_output=True))
    )
    assert kept.text == expected + stop


async def test_no_stop_applies_before_min_tokens_on_the_real_model(
    completion_engine: Engine,
) -> None:
    """README "How generation ends": `min_tokens` holds every stop off until that many tokens
    are out. A stop string from the first tokens of the model's own answer cuts it short;
    with `min_tokens` the same request writes at least that many tokens, then stops."""
    (full,) = await completion_engine.collect(
        greedy(max_tokens=24, stops=StopConditions(ignore_eos=True))
    )
    stop = next(full.text[i : i + 2] for i in range(len(full.text)) if full.text[i : i + 2].strip())
    early = full.text.index(stop)
    (cut,) = await completion_engine.collect(
        greedy(max_tokens=24, stops=StopConditions(stop=(stop,)))
    )
    assert cut.text == full.text[:early]
    assert len(cut.token_ids) < 12  # the stop came within the first tokens
    held_off = GenerationRequest(
        prompt=PROMPT,
        sampling=SamplingParams(max_tokens=24, min_tokens=12),
        stops=StopConditions(stop=(stop,), ignore_eos=True),
    )
    (held,) = await completion_engine.collect(held_off)
    assert len(held.token_ids) >= 12, held
    assert held.text.startswith(cut.text + stop)  # on past the early match
    assert held.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    if held.finish_reason is FinishReason.STOP:
        assert held.stop_reason == stop


@pytest.mark.parametrize("how", ["closing the stream", "engine.cancel"])
async def test_cancel_stops_engine_within_one_token(completion_engine: Engine, how: str) -> None:
    """README: a cancelled job "stops its model work within one token". Counted by the engine
    itself: the tokens the model handed over after the cancel was requested (the one it was
    computing when the cancel came, at most). The next request is unaffected."""
    (reference,) = await completion_engine.collect(greedy(max_tokens=30))
    # No end-of-text stop: only the cancel can end this job before its 200 tokens.
    request = greedy(max_tokens=200, stops=StopConditions(ignore_eos=True))
    received = 0
    with JobWatch(completion_engine.job_record) as watch:
        async with contextlib.aclosing(completion_engine.generate(request)) as deltas:
            async for delta in deltas:
                received += len(delta.token_ids)
                if received >= 3:
                    if how == "engine.cancel":
                        assert completion_engine.cancel(request.request_id)
                        continue  # read on: the stream ends with the cancelled delta
                    break
        stats = await watch.ended(request.request_id)
    assert stats.finish_reasons == (FinishReason.CANCELLED,)
    assert stats.tokens_after_cancel is not None
    assert stats.tokens_after_cancel <= 1
    assert stats.generated_tokens < 200
    if how == "engine.cancel":
        assert delta.finish_reason is FinishReason.CANCELLED
    (after,) = await completion_engine.collect(greedy(max_tokens=30))
    assert after.text == reference.text  # the aborted job left the KV cache consistent


def test_the_backend_checks_cancel_before_every_token(completion_backend: LlamaCppBackend) -> None:
    cancelled = threading.Event()
    ids = completion_backend.tokenize(PROMPT, add_bos=True)
    produced = []
    for token_id in completion_backend.iter_token_ids(ids, SamplingParams(), cancelled):
        produced.append(token_id)
        if len(produced) == 3:
            cancelled.set()
    assert len(produced) == 3


async def test_two_choices_each_finish_and_sampling_is_seeded(completion_engine: Engine) -> None:
    sampling = SamplingParams(max_tokens=12, n=2, temperature=0.9, top_p=0.95, seed=1234)
    first = await completion_engine.collect(GenerationRequest(prompt=PROMPT, sampling=sampling))
    again = await completion_engine.collect(GenerationRequest(prompt=PROMPT, sampling=sampling))
    assert [r.index for r in first] == [0, 1]
    assert all(r.finish_reason in (FinishReason.STOP, FinishReason.LENGTH) for r in first)
    assert [r.text for r in first] == [r.text for r in again]  # same seed, same samples
    greedy_two = await completion_engine.collect(
        GenerationRequest(prompt=PROMPT, sampling=SamplingParams(max_tokens=12, n=2))
    )
    assert greedy_two[0].text == greedy_two[1].text


async def test_a_prompt_longer_than_the_context_is_a_clear_error(completion_engine: Engine) -> None:
    long_prompt = "x = 1\n" * 3000
    with pytest.raises(
        PromptTooLongError, match=r"the prompt has \d+ tokens but the model's context holds 4096"
    ):
        await completion_engine.collect(greedy(long_prompt))
    (ok,) = await completion_engine.collect(greedy(max_tokens=4))
    assert ok.finish_reason is not None


async def test_chat_uses_the_models_template_and_stops_at_its_end_token(
    chat_engine: Engine, chat_backend: LlamaCppBackend
) -> None:
    request = GenerationRequest(
        messages=(ChatMessage("user", "Say hello."),),
        role=Role.CHAT,
        sampling=SamplingParams(max_tokens=60),
    )
    (answer,) = await chat_engine.collect(request)
    assert answer.text.strip()
    assert "<|im_end|>" not in answer.text
    assert "<|im_start|>" not in answer.text
    if answer.finish_reason is FinishReason.STOP:
        assert answer.stop_reason is None  # the model's own end token, not a user stop
    assert {0, 2} <= chat_backend.eog_token_ids  # <|endoftext|>, <|im_end|> from the GGUF


def test_end_of_generation_tokens_come_from_the_model(completion_backend: LlamaCppBackend) -> None:
    assert {1, 106} <= completion_backend.eog_token_ids  # <eos>, <end_of_turn>
    assert completion_backend.vocab.adds_bos  # Gemma needs its BOS


# --- scoring (the log-probabilities a reranker asks for) ---------------------------------------


def reference_log_probs(
    backend: LlamaCppBackend, prompt_ids: list[int], continuation: list[int]
) -> list[float]:
    """Each continuation token's log-probability from llama.cpp's own Python API, its model
    loaded afresh with every position's logits kept."""
    import llama_cpp
    import numpy as np

    from engine.backends.llama_cpp import llama_params
    from engine.models import model_spec
    from engine.specs import ModelOptions, ModelSpec

    spec = model_spec(Role.COMPLETION, ModelOptions(), environ={})
    assert isinstance(spec, ModelSpec)
    llm = llama_cpp.Llama(**{**llama_params(spec), "logits_all": True})
    try:
        llm.eval([*prompt_ids, *continuation])
        out = []
        for i, token in enumerate(continuation):
            row = np.asarray(llm.scores[len(prompt_ids) + i - 1], dtype=np.float64)
            row -= row.max()
            out.append(float(row[token] - np.log(np.exp(row).sum())))
        return out
    finally:
        llm.close()


async def test_scores_are_the_models_log_probabilities_and_the_prompt_stays_cached(
    completion_engine: Engine, completion_backend: LlamaCppBackend
) -> None:
    backend = completion_backend
    prompt = 'def add(a, b):\n    """Add two numbers."""\n    return'
    prompt_ids = backend.tokenize(prompt, add_bos=True, special=False)
    right = backend.tokenize(" a + b\n", add_bos=False, special=False)
    wrong = backend.tokenize(" a - b\n", add_bos=False, special=False)
    scores = await completion_engine.score(
        ScoreRequest(
            prompt_token_ids=tuple(prompt_ids), continuations=(tuple(right), tuple(wrong)), top=4
        )
    )
    assert scores is not None
    got_right, got_wrong = scores.continuations
    # Batched evaluation differs from llama.cpp's one-by-one numbers only in rounding.
    assert got_right == pytest.approx(reference_log_probs(backend, prompt_ids, right), abs=0.15)
    assert got_wrong == pytest.approx(reference_log_probs(backend, prompt_ids, wrong), abs=0.15)
    assert sum(got_right) > sum(got_wrong) + 5  # the model knows how to add
    (greedy_choice,) = await completion_engine.collect(
        GenerationRequest(prompt_token_ids=tuple(prompt_ids), sampling=SamplingParams(max_tokens=3))
    )
    assert backend.last_prefill_tokens == 1  # the scoring left the prompt in the cache
    assert scores.top[0][0] == greedy_choice.token_ids[0]
    assert [p for _, p in scores.top] == sorted((p for _, p in scores.top), reverse=True)


async def test_a_scoring_over_the_context_is_a_clear_error(completion_engine: Engine) -> None:
    size = completion_engine.info.context_size
    with pytest.raises(PromptTooLongError):
        await completion_engine.score(
            ScoreRequest(prompt_token_ids=(2,) * (size - 2), continuations=((3, 4, 5),))
        )


def test_a_cancelled_scoring_returns_nothing(completion_backend: LlamaCppBackend) -> None:
    cancelled = threading.Event()
    cancelled.set()
    assert completion_backend.score([2, 3, 4], [[5]], 3, cancelled) is None


def _choice_logprobs(deltas: list[Any]) -> tuple[list[int], list[float]]:
    ids: list[int] = []
    logprobs: list[float] = []
    for delta in deltas:
        ids.extend(delta.token_ids)
        assert delta.logprobs is not None, "every token of a llama.cpp answer has one"
        assert len(delta.logprobs) == len(delta.token_ids)
        logprobs.extend(delta.logprobs)
    return ids, logprobs


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(max_tokens=12),  # greedy: drafts checked in passes of several tokens
        SamplingParams(max_tokens=12, temperature=0.9, top_k=20, seed=7),  # llama.cpp's sampler
    ],
    ids=["greedy", "sampled"],
)
async def test_each_generated_token_carries_its_log_probability_under_the_model(
    completion_engine: Engine, completion_backend: LlamaCppBackend, sampling: SamplingParams
) -> None:
    backend = completion_backend
    prompt = 'def add(a, b):\n    """Add two numbers."""\n    return a + b\n\n\ndef sub(a, b):\n'
    prompt_ids = backend.tokenize(prompt, add_bos=True, special=False)
    request = GenerationRequest(prompt_token_ids=tuple(prompt_ids), sampling=sampling)
    async with contextlib.aclosing(completion_engine.generate(request)) as stream:
        deltas = [delta async for delta in stream]
    ids, logprobs = _choice_logprobs(deltas)
    assert len(ids) == 12
    assert all(p <= 0 for p in logprobs)
    # The same tokens scored by llama.cpp alone: equal but for the rounding of batched passes
    # (and, for sampling, before its top-k and temperature: the model's own distribution).
    assert logprobs == pytest.approx(reference_log_probs(backend, prompt_ids, ids), abs=0.15)
