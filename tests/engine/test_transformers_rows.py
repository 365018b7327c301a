"""Branches and scorings written together in the transformers backend, as rows of one batch
beside the live cache (README "Many sequences per pass"), with rows together forced on (on the
CPU they go one after another by default): on a tiny random Llama built here, whose answers are
checked against a plain loop without any cache too, and on the real default chat model
(SmolLM2-135M, its GGUF file dequantized) on the CPU.

What together must give: every branch token for token what one after another gives, the
scores the same up to float rounding (1e-4 in a log-probability, float32: a forward of several
rows multiplies in other kernels than one of a row; measured up to 3e-5 on SmolLM2), `ended`
asked once per new token in order, `max_tokens` and cancel honoured, and the live cache left
holding the prompt, so that the next generation feeds one token and answers as before.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_llama_drafts import programs, suggestion_prompt  # noqa: E402
from test_transformers_backend import (  # noqa: E402
    CORPUS,
    DECODES,
    build_model_folder,
    reference_greedy,
    reference_log_probs,
)

from engine.backends import transformers_decode  # noqa: E402
from engine.backends.transformers import TransformersBackend  # noqa: E402
from engine.local_backend import SEQUENCES  # noqa: E402
from engine.models import load_backend  # noqa: E402
from engine.specs import ModelSpec  # noqa: E402
from engine.types import SamplingParams  # noqa: E402

#: Log-probabilities together and one after another agree within this (module docstring).
TOLERANCE = 1e-4
PROMPTS = [text[:cut] for text in CORPUS[:4] for cut in (12, 30)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("tiny-llama-rows"))


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)


@pytest.fixture(scope="module", params=DECODES)
def backend(model_dir: Path, request: pytest.FixtureRequest) -> Iterator[TransformersBackend]:
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode=request.param))
    yield backend
    backend.close()


@contextlib.contextmanager
def rows(backend: TransformersBackend, sequences: int) -> Iterator[None]:
    before = backend.sequences
    backend.sequences = sequences
    try:
        yield
    finally:
        backend.sequences = before


def first_tokens(backend: TransformersBackend, ids: list[int], count: int = 8) -> list[int]:
    scores = backend.score(ids, [], count, threading.Event())
    assert scores is not None
    return [token for token, _ in scores.top]


class Ends:
    """`ended` for `branch`: a branch ends at a token that writes a line end or ends the
    generation; every call is recorded, in order, per branch."""

    def __init__(self, backend: TransformersBackend, *, never: bool = False) -> None:
        self.backend = backend
        self.never = never
        self.calls: dict[int, list[int]] = {}

    def __call__(self, index: int, token: int) -> bool:
        self.calls.setdefault(index, []).append(token)
        if self.never:
            return False
        return token in self.backend.eog_token_ids or "\n" in self.backend.detokenize([token])


def branch(
    backend: TransformersBackend,
    ids: list[int],
    firsts: list[int],
    sequences: int,
    max_tokens: int = 12,
    ended: Callable[[int, int], bool] | None = None,
) -> list[list[int]]:
    with rows(backend, sequences):
        written = backend.branch(ids, firsts, max_tokens, ended or Ends(backend), threading.Event())
    assert written is not None
    return written


def generation(backend: TransformersBackend, ids: list[int], count: int = 6) -> list[int]:
    tokens = backend.iter_token_ids(ids, SamplingParams(max_tokens=count), threading.Event())
    with contextlib.closing(tokens):
        return [next(tokens) for _ in range(count)]


# --- a tiny random model -----------------------------------------------------------------------


def test_on_the_cpu_rows_go_one_after_another_by_default(backend: TransformersBackend) -> None:
    assert backend.sequences == 1


def test_branches_together_are_the_branches_one_after_another_and_the_greedy_answers(
    backend: TransformersBackend, reference: Any
) -> None:
    lengths = set()
    for text in PROMPTS:
        ids = backend.tokenize(text, add_bos=True)
        firsts = first_tokens(backend, ids)
        ends = Ends(backend)
        together = branch(backend, ids, firsts, SEQUENCES, ended=ends)
        assert together == branch(backend, ids, firsts, 1)
        for index, (first, written) in enumerate(zip(firsts, together, strict=True)):
            if index < 2:  # the slow reference for the two most likely first tokens
                assert written == reference_greedy(reference, [*ids, first], len(written))
            # `ended` saw every new token of the branch once, in order, and no other.
            assert ends.calls[index] == written
            lengths.add(len(written))
    # Some branches ended early (their rows left the batch), others ran to the limit.
    assert 12 in lengths
    assert min(lengths) < 12


def test_more_branches_than_rows_go_in_groups_with_their_own_indices(
    backend: TransformersBackend,
) -> None:
    ids = backend.tokenize(PROMPTS[3], add_bos=True)
    firsts = first_tokens(backend, ids)
    ends = Ends(backend)
    together = branch(backend, ids, firsts, 3, ended=ends)
    assert together == branch(backend, ids, firsts, 1)
    assert [ends.calls[i] for i in range(len(firsts))] == together


@pytest.mark.parametrize("max_tokens", [1, 5])
def test_every_branch_stops_at_max_tokens(backend: TransformersBackend, max_tokens: int) -> None:
    ids = backend.tokenize(PROMPTS[0], add_bos=True)
    firsts = first_tokens(backend, ids, 4)
    never = Ends(backend, never=True)
    together = branch(backend, ids, firsts, SEQUENCES, max_tokens, ended=never)
    assert [len(b) for b in together] == [max_tokens] * 4
    assert together == branch(backend, ids, firsts, 1, max_tokens, ended=Ends(backend, never=True))


def test_a_token_limit_below_one_is_refused_together_as_one_after_another(
    backend: TransformersBackend,
) -> None:
    ids = backend.tokenize(PROMPTS[1], add_bos=True)
    firsts = first_tokens(backend, ids, 4)
    for sequences in (SEQUENCES, 1):
        with pytest.raises(ValueError, match="max_tokens must be at least 1, got 0"):
            branch(backend, ids, firsts, sequences, max_tokens=0)


def test_after_branches_together_the_live_cache_holds_the_prompt_and_answers_as_before(
    backend: TransformersBackend, reference: Any
) -> None:
    ids = backend.tokenize(PROMPTS[5], add_bos=True)
    firsts = first_tokens(backend, ids)
    branch(backend, ids, firsts, SEQUENCES)
    assert backend._decoder.tokens() == ids
    assert generation(backend, ids) == reference_greedy(reference, ids, 6)
    assert backend.last_prefill_tokens == 1


def test_a_cancel_stops_branches_together_and_the_cache_answers_as_before(
    backend: TransformersBackend, reference: Any
) -> None:
    ids = backend.tokenize(PROMPTS[2], add_bos=True)
    firsts = first_tokens(backend, ids)
    cancelled = threading.Event()
    seen: list[int] = []

    def cancel_at_the_tenth(_index: int, token: int) -> bool:
        seen.append(token)
        if len(seen) == 10:
            cancelled.set()
        return False

    with rows(backend, SEQUENCES):
        assert backend.branch(ids, firsts, 12, cancel_at_the_tenth, cancelled) is None
        # The step under way ends (8 rows a step), no other starts.
        assert len(seen) == 16
        # Cancelled before it starts: nothing is asked.
        assert backend.branch(ids, firsts, 12, cancel_at_the_tenth, cancelled) is None
        assert len(seen) == 16
    assert generation(backend, ids) == reference_greedy(reference, ids, 6)
    assert backend.last_prefill_tokens == 1


def test_scores_together_equal_scores_one_after_another_and_a_forward_over_the_text(
    backend: TransformersBackend, reference: Any
) -> None:
    ids = backend.tokenize(PROMPTS[1], add_bos=True)
    text = backend.tokenize(" for i in range(10):\n    print(i * i)\n", add_bos=False)
    other = backend.tokenize(" x = 1\n", add_bos=False)
    # Of many lengths, one and two tokens among them, the longest padding the others.
    continuations = [tuple(text[:n]) for n in (1, 2, 3, 5, len(text))] + [
        tuple(other),
        tuple(other[:1]),
        tuple(text[2:6]),
    ]
    scored = {}
    for sequences in (SEQUENCES, 3, 1):
        with rows(backend, sequences):
            scores = backend.score(ids, continuations, 3, threading.Event())
        assert scores is not None
        scored[sequences] = scores
    for together in (scored[SEQUENCES], scored[3]):
        # The top tokens come from the prompt's evaluation, not the rows; yet the first scoring
        # evaluated the whole prompt, the others its last token only: rounding apart.
        assert [t for t, _ in together.top] == [t for t, _ in scored[1].top]
        assert [p for _, p in together.top] == pytest.approx(
            [p for _, p in scored[1].top], abs=TOLERANCE
        )
        for got, alone, continuation in zip(
            together.continuations, scored[1].continuations, continuations, strict=True
        ):
            assert len(got) == len(continuation)
            assert got == pytest.approx(alone, abs=TOLERANCE)
            assert got == pytest.approx(
                reference_log_probs(reference, ids, continuation), abs=TOLERANCE
            )
    # The scoring left the prompt in the live cache: a generation after it feeds one token.
    assert generation(backend, ids) == reference_greedy(reference, ids, 6)
    assert backend.last_prefill_tokens == 1


def test_a_cancelled_scoring_together_returns_none(backend: TransformersBackend) -> None:
    ids = backend.tokenize(PROMPTS[1], add_bos=True)
    cancelled = threading.Event()
    cancelled.set()
    with rows(backend, SEQUENCES):
        assert backend.score(ids, [(5, 6), (7, 8, 9)], 3, cancelled) is None


def test_a_cache_that_cannot_be_copied_goes_one_after_another_saying_so_once(
    backend: TransformersBackend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(transformers_decode, "_layer_tensors", lambda cache: [])
    monkeypatch.setattr(backend._decoder, "_rows_refused", False)
    ids = backend.tokenize(PROMPTS[4], add_bos=True)
    firsts = first_tokens(backend, ids)
    alone = branch(backend, ids, firsts, 1)
    continuations = [(f, *b) for f, b in zip(firsts, alone, strict=True)]
    with rows(backend, 1):
        scores_alone = backend.score(ids, continuations, 3, threading.Event())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engine.backends.transformers_decode"):
        for _ in range(2):
            assert branch(backend, ids, firsts, SEQUENCES) == alone
            with rows(backend, SEQUENCES):
                assert backend.score(ids, continuations, 3, threading.Event()) == scores_alone
    said = [r.getMessage() for r in caplog.records if "rows together not used" in r.getMessage()]
    assert len(said) == 1
    assert "keeps its keys where this loop cannot see" in said[0]


# --- the real default chat model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> Iterator[TransformersBackend]:
    from engine.default_models import default_chat_model

    path = default_chat_model()
    if not path.is_file():
        pytest.skip(f"the default chat model is not installed ({path}): make install")
    backend = load_backend(ModelSpec(path=path, backend="transformers", device="cpu"))
    assert isinstance(backend, TransformersBackend)
    yield backend
    backend.close()


@pytest.mark.slow
def test_smollm2_branches_and_scores_together_equal_one_after_another(
    smollm2: TransformersBackend, third_party_data: Path
) -> None:
    """3 HumanEval prompts (to the docstring's end), their 8 most likely first tokens each
    continued to its line's end: together token for token what one after another writes (0
    of 32 parted, docs/decisions/rows-together.md), scores within the tolerance, and the live
    cache answering the next generation as before, feeding one token."""
    backend = smollm2
    assert backend.sequences == 1
    for text in [suggestion_prompt(p) for p in programs(third_party_data)[:3]]:
        ids = backend.tokenize(text, add_bos=backend.vocab.adds_bos)
        before = generation(backend, ids, 4)
        firsts = first_tokens(backend, ids)
        together = branch(backend, ids, firsts, SEQUENCES, 16)
        assert together == branch(backend, ids, firsts, 1, 16)
        continuations: Sequence[tuple[int, ...]] = [
            (f, *b) for f, b in zip(firsts, together, strict=True)
        ]
        scored = []
        for sequences in (SEQUENCES, 1):
            with rows(backend, sequences):
                scores = backend.score(ids, continuations, 3, threading.Event())
            assert scores is not None
            scored.append(scores)
        for got, alone in zip(scored[0].continuations, scored[1].continuations, strict=True):
            assert got == pytest.approx(alone, abs=TOLERANCE)
        with rows(backend, SEQUENCES):
            backend.branch(ids, firsts, 16, Ends(backend), threading.Event())
        assert generation(backend, ids, 4) == before
        assert backend.last_prefill_tokens == 1


@pytest.mark.parametrize("decode", DECODES)
def test_a_sliding_window_model_writes_rows_together_where_its_cache_can_be_copied(
    tmp_path: Path, decode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The dynamic loop keeps every layer in full: its rows go together. A static cache's
    sliding-window layers cannot be copied into rows: one after another, said once. Either
    way the branches are the greedy answers."""
    folder = build_model_folder(
        tmp_path,
        config_class=transformers.MistralConfig,
        model_class=transformers.MistralForCausalLM,
        sliding_window=512,
    )
    backend = TransformersBackend(
        ModelSpec(path=folder, device="cpu", decode=decode, context_size=256)
    )
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    try:
        ids = backend.tokenize(PROMPTS[7], add_bos=True)
        firsts = first_tokens(backend, ids, 4)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="engine.backends.transformers_decode"):
            for _ in range(2):
                together = branch(backend, ids, firsts, SEQUENCES, 6)
        said = [r.getMessage() for r in caplog.records if "rows together" in r.getMessage()]
        if decode == "dynamic":
            assert said == []
        else:
            assert len(said) == 1
            assert "sliding-window layers" in said[0]
        for first, written in zip(firsts, together, strict=True):
            assert written == reference_greedy(reference, [*ids, first], len(written))
    finally:
        backend.close()
