"""Scoring, branching and exact token-id prompts through our own engine server, with the
default completion model (Gemma 3 270M) in a real `infill-lsp engine` process, against the
same model in this process: what the language server ranks and offers must not change when its
model moves to the shared server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_helpers import ServerProcess, start_engine, stop_engine
from local_models import load_llama

from engine.backends.openai import RemoteEngine
from engine.completion import CompletionModel
from engine.engine import Engine
from engine.specs import RemoteSpec
from engine.types import (
    BranchRequest,
    GenerationRequest,
    Role,
    SamplingParams,
    ScoreRequest,
    StopConditions,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    return "


@pytest.fixture(scope="module")
def engine_server() -> Iterator[ServerProcess]:
    started = start_engine()
    yield started
    stop_engine(started)


@pytest.fixture(scope="module")
def local() -> Iterator[Engine]:
    engine = Engine(load_llama(Role.COMPLETION))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def remote(engine_server: ServerProcess) -> Iterator[RemoteEngine]:
    engine = RemoteEngine.connect(
        RemoteSpec(role=Role.COMPLETION, endpoint=f"{engine_server.url}/v1")
    )
    yield engine
    engine.close()


async def test_our_server_renders_prompts_as_the_models_own_ids(
    local: Engine, remote: RemoteEngine
) -> None:
    remote_model = CompletionModel.of(remote, None)
    local_model = CompletionModel.of(local, None)
    assert remote.tokenizer is not None, "the served model's file is readable here"
    remote_prompt = remote_model.format.render(PREFIX, "")
    local_prompt = local_model.format.render(PREFIX, "")
    assert remote_prompt.token_ids is not None
    assert remote_prompt.token_ids == local_prompt.token_ids
    assert remote_model.format.count_tokens(PREFIX) == local_model.format.count_tokens(PREFIX)
    # Ranking and invoked alternatives are on, as in-process.
    assert remote_model.scorer is not None
    assert remote_model.features_off == ()
    # A generation sent as token ids answers what the local model answers.
    request = GenerationRequest(
        prompt_token_ids=local_prompt.token_ids, sampling=SamplingParams(max_tokens=12)
    )
    (remote_answer,) = await remote.collect(request)
    (local_answer,) = await local.collect(request)
    assert remote_answer.text == local_answer.text
    assert remote_answer.text


async def test_scores_and_branches_equal_the_models_in_process(
    local: Engine, remote: RemoteEngine
) -> None:
    model = CompletionModel.of(local, None)
    prompt = model.format.render(PREFIX, "").token_ids
    assert prompt is not None
    assert model.scorer is not None
    lines = ["fibonacci(n - 1) + fibonacci(n - 2)\n", "n * 2\n", "None\n"]
    continuations = tuple(tuple(model.scorer.tokenize(line)) for line in lines)
    request = ScoreRequest(prompt_token_ids=prompt, continuations=continuations, top=5)
    remote_scores = await remote.score(request)
    local_scores = await local.score(request)
    assert remote_scores is not None
    assert local_scores is not None
    for got, want in zip(remote_scores.continuations, local_scores.continuations, strict=True):
        assert got == pytest.approx(want, abs=1e-3)
    assert [t for t, _ in remote_scores.top] == [t for t, _ in local_scores.top]
    assert [p for _, p in remote_scores.top] == pytest.approx(
        [p for _, p in local_scores.top], abs=1e-3
    )
    firsts = tuple(t for t, _ in local_scores.top[:3])
    branching = BranchRequest(
        prompt_token_ids=prompt,
        first_tokens=firsts,
        sampling=SamplingParams(max_tokens=16),
        stops=StopConditions(stop=("\n",)),
    )
    remote_branches = await remote.branch(branching)
    local_branches = await local.branch(branching)
    assert remote_branches is not None
    assert local_branches is not None
    assert remote_branches.texts == local_branches.texts
    assert remote_branches.finish_reasons == local_branches.finish_reasons
