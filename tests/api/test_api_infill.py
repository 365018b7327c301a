"""Our extension routes, /v1/infill/score and /v1/infill/branch, over a scripted model: the
answers, the guards every generation route has, and the remote backend calling them."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest
from fake_backend import SPECIAL_TOKENS, byte_ids
from scripted_servers import KEY, Server, wait_until

from engine.api.schema import MAX_CONTINUATIONS, MAX_TOP
from engine.backends.openai import RemoteEngine
from engine.backends.openai_discovery import discover
from engine.completion import CompletionModel
from engine.errors import EngineError
from engine.specs import RemoteSpec
from engine.types import (
    BranchRequest,
    FinishReason,
    Role,
    SamplingParams,
    ScoreRequest,
    StopConditions,
)

BOS = SPECIAL_TOKENS["<bos>"]


def log_prob(ids: Sequence[int], token: int) -> float:
    """A made-up model: a token is likelier the closer it is to the last id plus one."""
    return -abs(token - (ids[-1] + 1)) / 10


def scoring_server(make_server: Callable[..., Server], **kw: Any) -> Server:
    return make_server(
        {"script": ["abc\ndef\n"], "log_prob": log_prob, **kw.pop("model", {})}, **kw
    )


def test_a_scoring_answers_each_continuation_and_the_likeliest_next_tokens(
    make_server: Callable[..., Server],
) -> None:
    server = scoring_server(make_server)
    prompt = [BOS, *byte_ids("ab")]
    with server.http() as http:
        response = http.post(
            "/v1/infill/score",
            json={"prompt": prompt, "continuations": [byte_ids("c"), byte_ids("cd")], "top": 3},
        )
        text = http.post("/v1/infill/score", json={"prompt": "ab", "top": 1}).json()
    assert response.status_code == 200, response.text
    answer = response.json()
    c, d = byte_ids("cd")
    assert answer["object"] == "infill.score"
    assert answer["model"] == "fake-coder"
    assert answer["continuations"] == [
        {"logprobs": [pytest.approx(0.0)]},
        {"logprobs": [pytest.approx(0.0), pytest.approx(0.0)]},
    ]
    # Most likely first; the two as likely as each other in the vocabulary's order.
    assert [t["token_id"] for t in answer["top"]] == [c, c - 1, c + 1]
    assert answer["top"][0] == {"token_id": c, "logprob": pytest.approx(0.0)}
    assert answer["top"][1] == {"token_id": c - 1, "logprob": pytest.approx(-0.1)}
    assert answer["usage"] == {"prompt_tokens": 3}
    # A text prompt is tokenized as /v1/completions does: with the model's BOS.
    assert server.completion.scored[-1][0] == (BOS, *byte_ids("ab"))
    assert text["top"][0]["token_id"] == c
    assert d == c + 1


def test_a_branching_answers_each_branchs_text_and_end(make_server: Callable[..., Server]) -> None:
    server = scoring_server(make_server)
    with server.http() as http:
        response = http.post(
            "/v1/infill/branch",
            json={
                "prompt": [BOS, *byte_ids("x = ")],
                "first_tokens": byte_ids("12"),
                "max_tokens": 20,
                "stop": ["\n"],
            },
        )
        short = http.post(
            "/v1/infill/branch",
            json={"prompt": "x = ", "first_tokens": byte_ids("1"), "max_tokens": 2},
        ).json()
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["object"] == "infill.branch"
    assert answer["branches"] == [
        {"index": 0, "text": "abc", "finish_reason": "stop"},
        {"index": 1, "text": "abc", "finish_reason": "stop"},
    ]
    assert short["branches"] == [{"index": 0, "text": "ab", "finish_reason": "length"}]


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("score", {"continuations": [[]]}, "continuations[0]"),
        ("score", {"continuations": [[1]] * (MAX_CONTINUATIONS + 1)}, "continuations"),
        ("score", {"top": MAX_TOP + 1}, "top"),
        ("score", {"continuations": [[10**9]]}, "continuations[0]"),
        ("score", {"prompt": [10**9]}, "prompt"),
        ("score", {"prompt": None}, "prompt"),
        ("score", {"continuations": [[20] * 9000, [20] * 9000]}, "continuations"),
        ("branch", {"first_tokens": []}, "first_tokens"),
        ("branch", {"first_tokens": [10**9]}, "first_tokens"),
        ("branch", {"first_tokens": [20] * 65}, "first_tokens"),
        ("branch", {"first_tokens": [20] * 64, "max_tokens": 1000}, "max_tokens"),
        ("branch", {"first_tokens": [20], "stop": [""]}, "stop"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(
    make_server: Callable[..., Server], route: str, body: dict[str, Any], param: str
) -> None:
    server = scoring_server(make_server)
    base: dict[str, Any] = {"prompt": [BOS, 20]}
    if route == "branch":
        base["first_tokens"] = [20]
    with server.http() as http:
        response = http.post(f"/v1/infill/{route}", json={**base, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error")


def test_a_model_that_cannot_score_is_a_clear_400(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["x"]})  # no log-probabilities
    with server.http() as http:
        response = http.post("/v1/infill/score", json={"prompt": [BOS], "top": 1})
        models = http.get("/v1/models").json()["data"]
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "score_not_supported"
    coder = next(m for m in models if m["id"] == "fake-coder")
    assert coder["capabilities"] == ["token_ids"]


def test_the_model_list_offers_the_routes_and_the_file_to_a_trusted_caller(
    make_server: Callable[..., Server],
) -> None:
    server = scoring_server(make_server, api_key=KEY)
    with server.http() as http:
        listed = http.get("/v1/models").json()["data"]
        refused = http.post(
            "/v1/infill/score", json={"prompt": [BOS]}, headers={"Authorization": "Bearer no"}
        )
    coder = next(m for m in listed if m["id"] == "fake-coder")
    assert coder["capabilities"] == ["score", "branch", "token_ids"]
    assert coder["model_path"] == "<fake>"
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"


def test_the_routes_take_the_generation_places(make_server: Callable[..., Server]) -> None:
    server = scoring_server(
        make_server, model={"script": ["x" * 400], "step_seconds": 0.02}, max_jobs=1
    )
    results: list[httpx.Response] = []

    def long_branch() -> None:
        with server.http() as http:
            results.append(
                http.post(
                    "/v1/infill/branch",
                    json={"prompt": [BOS], "first_tokens": [20], "max_tokens": 200},
                )
            )

    thread = threading.Thread(target=long_branch)
    thread.start()
    try:
        wait_until(lambda: server.completion.calls, "the branch at work")
        with server.http() as http:
            busy = http.post("/v1/infill/score", json={"prompt": [BOS], "top": 1})
        assert busy.status_code == 503
        assert busy.json()["error"]["code"] == "too_many_requests"
        assert busy.headers["retry-after"].isdigit()
    finally:
        thread.join(30)
    assert results[0].status_code == 200


def test_a_dropped_branching_cancels_its_job(make_server: Callable[..., Server]) -> None:
    server = scoring_server(make_server, model={"script": ["x" * 2000], "step_seconds": 0.01})
    with httpx.Client(base_url=server.url, timeout=0.5) as http, pytest.raises(httpx.ReadTimeout):
        http.post(
            "/v1/infill/branch",
            json={"prompt": [BOS], "first_tokens": [20], "max_tokens": 2000},
        )
    call = wait_until(lambda: server.completion.calls, "the branch's call")[0]
    wait_until(call.cancelled.is_set, "the branch cancelled")
    assert call.yielded < 2000


# --- the remote backend ------------------------------------------------------------------------


def remote(server: Server) -> RemoteEngine:
    return RemoteEngine.connect(RemoteSpec(role=Role.COMPLETION, endpoint=f"{server.url}/v1"))


async def test_the_remote_backend_scores_and_branches_through_our_server(
    make_server: Callable[..., Server],
) -> None:
    server = scoring_server(make_server)
    engine = remote(server)
    assert engine.can_score
    assert engine.discovery.capabilities == {"score", "branch", "token_ids"}
    prompt = (BOS, *byte_ids("ab"))
    scores = await engine.score(
        ScoreRequest(prompt_token_ids=prompt, continuations=(tuple(byte_ids("c")),), top=2)
    )
    assert scores is not None
    assert scores.continuations == ((0.0,),)  # the made-up model's figures, exact in JSON
    assert scores.top[0] == (byte_ids("c")[0], 0.0)
    branches = await engine.branch(
        BranchRequest(
            prompt_token_ids=prompt,
            first_tokens=tuple(byte_ids("12")),
            sampling=SamplingParams(max_tokens=20),
            stops=StopConditions(stop=("\n",)),
            cache_key="file:///a.py",
        )
    )
    assert branches is not None
    assert branches.texts == ("abc", "abc")
    assert branches.finish_reasons == (FinishReason.STOP, FinishReason.STOP)
    # The fake model's file is not a GGUF file here: prompts go as text, so the language
    # server cannot rank (it tokenizes candidate lines itself), and says why.
    model = CompletionModel.of(engine, None)
    assert model.scorer is None
    assert model.features_off == (
        "ranking and invoked alternatives: off, the model's tokenizer is not loaded here "
        "(prompts go as text)",
    )
    engine.close()


async def test_a_remote_scoring_that_fails_names_the_endpoint(
    make_server: Callable[..., Server],
) -> None:
    server = scoring_server(make_server)
    engine = remote(server)
    with pytest.raises(
        EngineError, match=r"/v1/infill/score answered 400 Bad Request: .*vocabulary"
    ):
        await engine.score(ScoreRequest(prompt_token_ids=(10**6,), top=1))
    engine.close()


async def test_cancelling_a_remote_branching_cancels_the_servers_job(
    make_server: Callable[..., Server],
) -> None:
    server = scoring_server(make_server, model={"script": ["x" * 2000], "step_seconds": 0.01})
    engine = remote(server)
    task = asyncio.ensure_future(
        engine.branch(
            BranchRequest(
                prompt_token_ids=(BOS,),
                first_tokens=(20,),
                sampling=SamplingParams(max_tokens=2000),
            )
        )
    )
    await asyncio.to_thread(wait_until, lambda: server.completion.calls, "the branch at work")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cancelled = server.completion.calls[0].cancelled
    assert cancelled is not None
    await asyncio.to_thread(wait_until, cancelled.is_set, "the server's job cancelled")
    assert server.completion.calls[0].yielded < 2000
    engine.close()


def vllm_like(request: httpx.Request) -> httpx.Response:
    listed = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}
    return httpx.Response(200, stream=httpx.ByteStream(json.dumps(listed).encode()))


async def test_a_server_without_the_routes_cannot_score_and_the_status_says_so() -> None:
    spec = RemoteSpec(role=Role.COMPLETION, endpoint="http://127.0.0.1:9/v1")
    with httpx.Client(transport=httpx.MockTransport(vllm_like)) as client:
        discovery = discover(spec, client=client)
    assert discovery.capabilities == frozenset()
    assert discovery.model_path is None
    engine = RemoteEngine(spec, discovery)
    assert not engine.can_score
    model = CompletionModel.of(engine, None)
    assert model.scorer is None
    assert model.features_off == (
        "ranking and invoked alternatives: off, the server does not score text",
    )
    with pytest.raises(NotImplementedError):
        await engine.score(ScoreRequest(prompt_token_ids=(1,), top=1))
