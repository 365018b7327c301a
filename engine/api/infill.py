"""Our extension routes, beyond OpenAI's API: `POST /v1/infill/score` (how likely the model
finds each of some continuations of a prompt, and its most likely next tokens) and
`POST /v1/infill/branch` (the greedy answer after a prompt and each of some first tokens).
They carry `BaseEngine.score` and `BaseEngine.branch` over HTTP, so that a language server
whose model runs in this server ranks candidate lines and offers an invoked request's
alternatives as with a model in its own process (engine/backends/openai.py calls them).

The guards are those of the generation routes (app.py: key, body bounds, places, 503 while
loading); a client that goes away cancels the job (`job_result`, shared with completions).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.api.clients import for_client
from engine.api.generate import check_vocabulary, job_result
from engine.api.loader import Loaded
from engine.api.schema import ApiError, BranchParams, ScoreParams
from engine.types import Branches, BranchRequest, GenerationRequest, Role, ScoreRequest, Scores
from engine.worker import prepare_prompt_ids

#: The two routes, and what their answers' `object` says.
SCORE_PATH = "/v1/infill/score"
BRANCH_PATH = "/v1/infill/branch"
SCORE_OBJECT = "infill.score"
BRANCH_OBJECT = "infill.branch"
#: What /v1/models says a model of ours offers: scoring and branching through the routes
#: above, and prompts taken as the model's token ids (as /v1/completions always has).
CAPABILITIES = ("score", "branch", "token_ids")


async def prompt_ids(loaded: Loaded, prompt: str | tuple[int, ...]) -> tuple[int, ...]:
    """The prompt as the model's ids: text as /v1/completions tokenizes it (the model's BOS
    rule, special tokens parsed), off the event loop; ids checked against the vocabulary."""
    engine = loaded.engine
    if isinstance(prompt, str):
        request = GenerationRequest(prompt=prompt)
        ids = await asyncio.to_thread(prepare_prompt_ids, engine.backend, request)
        if not ids:
            raise ApiError(400, "the prompt has no tokens", param="prompt")
        return tuple(ids)
    check_vocabulary(prompt, "prompt", engine.info.vocab_size)
    return prompt


async def score(request: Request, model: str, loaded: Loaded, params: ScoreParams) -> Response:
    """POST /v1/infill/score, its body checked and its model picked."""
    ident = _answer_id(SCORE_OBJECT)
    vocab_size = loaded.engine.info.vocab_size
    for i, continuation in enumerate(params.continuations):
        check_vocabulary(continuation, f"continuations[{i}]", vocab_size)
    job = ScoreRequest(
        prompt_token_ids=await prompt_ids(loaded, params.prompt),
        continuations=params.continuations,
        top=params.top,
        role=Role.COMPLETION,
        request_id=ident,
        cache_key=params.cache_key,
    )
    # The client's: its turns, and its document's kept state (the key its completions use).
    job = for_client(request, job)
    scores = await job_result(request, loaded.engine.score(job), "prompt")
    if scores is None:
        raise ApiError(503, "the scoring was cancelled", code="cancelled")
    return JSONResponse(score_json(ident, model, scores, len(job.prompt_token_ids)))


async def branch(request: Request, model: str, loaded: Loaded, params: BranchParams) -> Response:
    """POST /v1/infill/branch, its body checked and its model picked. The family's
    fill-ending ids are hidden stops, as in /v1/completions."""
    ident = _answer_id(BRANCH_OBJECT)
    vocab_size = loaded.engine.info.vocab_size
    check_vocabulary(params.first_tokens, "first_tokens", vocab_size)
    check_vocabulary(params.stops.stop_token_ids, "stop_token_ids", vocab_size)
    stops = replace(params.stops, stop_token_ids_hidden=loaded.model.format.stop_token_ids)
    job = BranchRequest(
        prompt_token_ids=await prompt_ids(loaded, params.prompt),
        first_tokens=params.first_tokens,
        sampling=params.sampling,
        stops=stops,
        role=Role.COMPLETION,
        request_id=ident,
        cache_key=params.cache_key,
    )
    job = for_client(request, job)
    branches = await job_result(request, loaded.engine.branch(job), "prompt")
    if branches is None:
        raise ApiError(503, "the branching was cancelled", code="cancelled")
    return JSONResponse(branch_json(ident, model, branches))


def _answer_id(kind: str) -> str:
    return f"{kind.replace('.', '-')}-{uuid.uuid4().hex}"


def score_json(ident: str, model: str, scores: Scores, prompt_tokens: int) -> dict[str, Any]:
    """A scoring's answer: per continuation its tokens' log-probabilities (natural log), and
    the most likely next tokens, most likely first."""
    return {
        "id": ident,
        "object": SCORE_OBJECT,
        "model": model,
        "continuations": [{"logprobs": list(c)} for c in scores.continuations],
        "top": [{"token_id": t, "logprob": p} for t, p in scores.top],
        "usage": {"prompt_tokens": prompt_tokens},
    }


def branch_json(ident: str, model: str, branches: Branches) -> dict[str, Any]:
    """A branching's answer: per first token, in order, the text after it and how it ended."""
    return {
        "id": ident,
        "object": BRANCH_OBJECT,
        "model": model,
        "branches": [
            {"index": i, "text": text, "finish_reason": reason.value}
            for i, (text, reason) in enumerate(
                zip(branches.texts, branches.finish_reasons, strict=True)
            )
        ],
    }
