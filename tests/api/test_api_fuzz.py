"""The engine server's API fuzzed in-process over scripted engines, since any client that can reach
the port may send anything: bodies built from the real fields with any JSON values (huge integers,
deep lists, wrong types, NaN), raw bytes, and valid requests; never a 5xx, every error in OpenAI's
shape, every answer the shape the OpenAPI document gives it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_backend import FakeBackend
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from scripted_servers import CHAT_TEMPLATE
from starlette.testclient import TestClient

from engine.api.app import build_app
from engine.api.loader import ModelLoader
from engine.api.openapi import ChatResponse, CompletionResponse, ErrorResponse
from engine.api.schema import ChatBody, CompletionBody
from engine.engine import Engine
from engine.types import Role

JSON_HEADERS = {"Content-Type": "application/json"}
COMPLETION_FIELDS = sorted(CompletionBody.model_fields)
CHAT_FIELDS = sorted(ChatBody.model_fields)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    engines = {
        Role.COMPLETION: Engine(FakeBackend(name="coder", script=["hello world"])),
        Role.CHAT: Engine(FakeBackend(name="talker", script=["hi"], template=CHAT_TEMPLATE)),
    }
    models = ModelLoader.from_engines(engines)
    models.load_all()
    # A small budget keeps the valid requests short; the bounds are what is fuzzed.
    app = build_app(models, token_budget=512)
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as tc:
        yield tc
    models.close()


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(1 << 80), max_value=1 << 80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
token_ids = st.lists(st.integers(min_value=-5, max_value=400), max_size=6)
#: Values near what each field takes, so that many bodies get past the first field.
plausible = {
    "prompt": st.text(max_size=30) | token_ids | st.lists(st.text(max_size=5), max_size=3),
    "messages": st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "robot"])},
            optional={
                "content": st.text(max_size=20)
                | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}))
                | json_values
            },
        ),
        max_size=3,
    ),
    "max_tokens": st.integers(min_value=-2, max_value=600),
    "max_completion_tokens": st.integers(min_value=-2, max_value=600),
    "n": st.integers(min_value=-1, max_value=130),
    "best_of": st.integers(min_value=0, max_value=4),
    "temperature": st.floats(min_value=-1, max_value=3),
    "top_p": st.floats(min_value=-0.5, max_value=1.5),
    "top_k": st.integers(min_value=-3, max_value=1 << 40),
    "seed": st.integers(min_value=-(1 << 70), max_value=1 << 70),
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=300), max_size=20),
    "stop_token_ids": token_ids,
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": json_values}),
    "suffix": st.text(max_size=10),
}


def bodies(fields: list[str], base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Any fields with any values; the real fields with values near theirs; and a valid
    `base` with one field changed (which gets past the others to that field's bound)."""
    names = st.sampled_from([*fields, "user", "extra"])
    one_change = st.sampled_from(fields).flatmap(
        lambda name: (plausible.get(name, json_values) | json_values).map(
            lambda value: {**base, name: value}
        )
    )
    return (
        st.dictionaries(names, json_values, max_size=6)
        | st.fixed_dictionaries(
            {}, optional={name: plausible.get(name, json_values) for name in fields}
        )
        | one_change
    )


def dumps(body: object) -> bytes:
    """As a client would send it: NaN and huge integers as Python's JSON writes them."""
    return json.dumps(body).encode()


def check_answer(path: str, response: Any, body: object) -> None:
    event(f"status {response.status_code}")  # --hypothesis-show-statistics: answers and refusals
    assert response.status_code < 500, (path, body, response.text)
    if response.status_code >= 400:
        ErrorResponse.model_validate(response.json())
        return
    assert response.status_code == 200
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        for data in events[:-1]:
            assert "error" not in json.loads(data), data
        return
    answer = ChatResponse if path.endswith("chat/completions") else CompletionResponse
    answer.model_validate(response.json())


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=bodies(COMPLETION_FIELDS, {"prompt": "x", "max_tokens": 4}))
def test_completions_never_answer_5xx(client: TestClient, body: dict[str, Any]) -> None:
    response = client.post("/v1/completions", content=dumps(body), headers=JSON_HEADERS)
    check_answer("/v1/completions", response, body)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=bodies(CHAT_FIELDS, {"messages": [{"role": "user", "content": "x"}]}))
def test_chat_never_answers_5xx(client: TestClient, body: dict[str, Any]) -> None:
    response = client.post("/v1/chat/completions", content=dumps(body), headers=JSON_HEADERS)
    check_answer("/v1/chat/completions", response, body)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]),
    raw=st.binary(max_size=200)
    | st.builds(
        lambda depth, opener: opener * depth,
        st.integers(1, 6000),
        st.sampled_from([b"[", b"{", b'{"a":[']),
    )
    | st.builds(
        lambda digits: b'{"prompt": "x", "seed": 1' + b"9" * digits + b"}", st.integers(1, 6000)
    ),
)
def test_raw_bytes_never_answer_5xx(client: TestClient, path: str, raw: bytes) -> None:
    response = client.post(path, content=raw, headers=JSON_HEADERS)
    assert response.status_code < 500, (raw[:80], response.text)
    if response.status_code != 200:
        ErrorResponse.model_validate(response.json())


def test_the_fuzz_reaches_answers_as_well_as_refusals(client: TestClient) -> None:
    """The strategies are not all refusals: a plausible body gets its answer."""
    body = {"prompt": "x", "max_tokens": 5, "n": 2, "seed": 1 << 62, "top_k": 1 << 30}
    response = client.post("/v1/completions", content=dumps(body), headers=JSON_HEADERS)
    assert response.status_code == 200, response.text
    assert [c["index"] for c in response.json()["choices"]] == [0, 1]
