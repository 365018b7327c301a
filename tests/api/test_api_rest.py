"""The engine server's plain REST routes (/generate, /generate/raw, /chat, /extract-code) on
the scripted backend over real HTTP: their answers, the sampling they ask for, the code taken
out of markdown, and the guards they share with the OpenAI routes (bounds, key, loading,
the generation places, disconnects)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fake_backend import FakeBackend, byte_ids
from scripted_servers import CHAT_TEMPLATE, KEY, Server, wait_until

from engine.api.loader import ModelLoader
from engine.api.openapi import ExtractCodeResponse, GenerateResponse, RestChatResponse
from engine.engine import Engine
from engine.types import Role

ANSWER = "Here it is:\n```python\ndef f():\n    return 1\n```\nCall it once."
GENERATE_KEYS = {"generated_text", "prompt", "model", "num_tokens", "finish_reason", "sequences"}
SEQUENCE_KEYS = {"generated_text", "num_tokens", "finish_reason"}
CHAT_KEYS = {"message", "model", "num_tokens", "finish_reason", "sequences"}
USER = [{"role": "user", "content": "Hello"}]


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    with server.http() as http:
        return http.post(path, json=body)


# --- /generate and /generate/raw --------------------------------------------------------------


def test_generate_answers_the_code_of_the_models_markdown_block(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": [ANSWER]})
    response = post(server, "/generate", {"prompt": "# f returns 1\n"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == GENERATE_KEYS
    assert answer["generated_text"] == "def f():\n    return 1"
    assert answer["prompt"] == "# f returns 1\n"
    assert answer["model"] == "fake-coder"
    assert answer["num_tokens"] == len(byte_ids(ANSWER))
    assert answer["finish_reason"] == "stop"
    (sequence,) = answer["sequences"]
    assert sequence == {key: answer[key] for key in SEQUENCE_KEYS}
    GenerateResponse.model_validate(answer)
    # The prompt is plain text continued: no FIM tokens around it.
    assert server.completion.calls[-1].prompt_ids == (0, *byte_ids("# f returns 1\n"))


def test_generate_raw_answers_the_text_untouched(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": [ANSWER]})
    answer = post(server, "/generate/raw", {"prompt": "x"}).json()
    assert set(answer) == GENERATE_KEYS
    assert answer["generated_text"] == ANSWER
    assert answer["sequences"][0]["generated_text"] == ANSWER


def test_generate_without_a_markdown_block_answers_the_text_untouched(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["  x = 1\n"]})
    assert post(server, "/generate", {"prompt": "x"}).json()["generated_text"] == "  x = 1\n"


def test_the_code_servers_defaults_reach_the_model(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["abc"]})
    post(server, "/generate", {"prompt": "x"})
    sampling = server.completion.calls[-1].sampling
    assert (sampling.max_tokens, sampling.temperature, sampling.top_p) == (512, 0.2, 0.95)
    assert (sampling.repetition_penalty, sampling.n) == (1.1, 1)
    post(
        server,
        "/generate",
        {
            "prompt": "x",
            "max_tokens": 7,
            "temperature": 0.6,
            "top_p": 0.5,
            "repetition_penalty": 1.3,
        },
    )
    given = server.completion.calls[-1].sampling
    assert (given.max_tokens, given.temperature, given.top_p) == (7, 0.6, 0.5)
    assert given.repetition_penalty == 1.3


@pytest.mark.parametrize("path", ["/generate", "/chat"])
def test_do_sample_false_is_greedy_whatever_the_temperature(
    make_server: Callable[..., Server], path: str
) -> None:
    server = make_server()
    body: dict[str, Any] = {"prompt": "x"} if path == "/generate" else {"messages": USER}
    backend = server.completion if path == "/generate" else server.chat
    assert post(server, path, {**body, "do_sample": False, "temperature": 1.5}).status_code == 200
    assert backend.calls[-1].sampling.greedy
    assert post(server, path, {**body, "do_sample": True, "temperature": 1.5}).status_code == 200
    assert backend.calls[-1].sampling.temperature == 1.5


def test_max_tokens_cuts_a_sequence_with_length(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["abcdefgh"]})
    answer = post(server, "/generate/raw", {"prompt": "x", "max_tokens": 3}).json()
    assert (answer["generated_text"], answer["num_tokens"], answer["finish_reason"]) == (
        "abc",
        3,
        "length",
    )


def test_num_return_sequences_lists_every_sequence_the_first_at_the_top(
    make_server: Callable[..., Server],
) -> None:
    script = ["```\none\n```", "two", "```js\nthree\n```"]
    server = make_server({"script": list(script)})  # the backend plays (pops) its own
    answer = post(server, "/generate", {"prompt": "x", "num_return_sequences": 3}).json()
    assert server.completion.calls[-1].sampling.n == 3
    assert [s["generated_text"] for s in answer["sequences"]] == ["one", "two", "three"]
    assert [s["num_tokens"] for s in answer["sequences"]] == [len(byte_ids(t)) for t in script]
    assert all(s["finish_reason"] == "stop" for s in answer["sequences"])
    assert (answer["generated_text"], answer["num_tokens"]) == ("one", len(byte_ids(script[0])))


# --- /chat ------------------------------------------------------------------------------------


def test_chat_answers_the_assistants_text_rendered_with_the_template(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(chat={"script": ["Hi there!"]})
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    response = post(server, "/chat", {"messages": messages, "max_tokens": 20})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == CHAT_KEYS
    assert (answer["message"], answer["model"]) == ("Hi there!", "fake-chat")
    assert (answer["num_tokens"], answer["finish_reason"]) == (9, "stop")
    assert answer["sequences"] == [
        {"message": "Hi there!", "num_tokens": 9, "finish_reason": "stop"}
    ]
    RestChatResponse.model_validate(answer)
    rendered = "<|system|>Be brief.\n<|user|>Hello\n<|assistant|>"
    assert server.chat.calls[-1].prompt_ids == (0, *byte_ids(rendered))
    assert server.chat.calls[-1].sampling.max_tokens == 20


def test_chat_num_return_sequences(make_server: Callable[..., Server]) -> None:
    server = make_server(chat={"script": ["a", "bb"]})
    answer = post(server, "/chat", {"messages": USER, "num_return_sequences": 2}).json()
    assert [s["message"] for s in answer["sequences"]] == ["a", "bb"]
    assert answer["message"] == "a"


@pytest.mark.parametrize("last", ["assistant", "system"])
def test_a_last_message_not_from_the_user_is_a_400(
    make_server: Callable[..., Server], last: str
) -> None:
    server = make_server()
    messages = [*USER, {"role": last, "content": "Hi"}]
    response = post(server, "/chat", {"messages": messages})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == "Last message must be from user"
    assert (error["param"], error["type"]) == ("messages", "invalid_request_error")
    assert server.chat.calls == [], "nothing reached the model"


# --- bounds and errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/generate", {}, "prompt"),
        ("/generate", {"prompt": 5}, "prompt"),
        ("/generate", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/generate", {"prompt": "x", "max_tokens": 4097}, "max_tokens"),
        ("/generate", {"prompt": "x", "temperature": -0.1}, "temperature"),
        ("/generate", {"prompt": "x", "temperature": 2.5}, "temperature"),
        ("/generate", {"prompt": "x", "top_p": 0}, "top_p"),
        ("/generate", {"prompt": "x", "top_p": 1.5}, "top_p"),
        ("/generate", {"prompt": "x", "do_sample": "no"}, "do_sample"),
        ("/generate", {"prompt": "x", "repetition_penalty": 0.9}, "repetition_penalty"),
        ("/generate", {"prompt": "x", "repetition_penalty": 2.1}, "repetition_penalty"),
        ("/generate", {"prompt": "x", "num_return_sequences": 0}, "num_return_sequences"),
        ("/generate", {"prompt": "x", "num_return_sequences": 11}, "num_return_sequences"),
        # 10 x 4,096 tokens is past the server's budget of 16,384 for one request.
        (
            "/generate",
            {"prompt": "x", "num_return_sequences": 10, "max_tokens": 4096},
            "max_tokens",
        ),
        ("/generate/raw", {"prompt": "x", "max_tokens": "9"}, "max_tokens"),
        ("/chat", {}, "messages"),
        ("/chat", {"messages": []}, "messages"),
        ("/chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ("/chat", {"messages": USER, "num_return_sequences": 11}, "num_return_sequences"),
        ("/extract-code", {}, "prompt"),
        ("/extract-code", {"prompt": ["x"]}, "prompt"),
    ],
)
def test_bounds_are_refused_with_a_400_naming_the_field(
    make_server: Callable[..., Server], path: str, body: dict[str, Any], param: str
) -> None:
    server = make_server()
    with server.http() as http:
        response = http.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["param"], error["type"]) == (param, "invalid_request_error")
        assert param.split("[")[0] in error["message"]
        assert http.post("/generate", json={"prompt": "x"}).status_code == 200


def test_a_body_that_is_not_json_is_refused_as_on_the_openai_routes(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    with server.http() as http:
        assert http.post("/generate", content=b"{").status_code == 415
        broken = http.post("/generate", content=b"{", headers={"Content-Type": "application/json"})
        assert (broken.status_code, broken.json()["error"]["code"]) == (400, "invalid_json")
        big = http.post("/extract-code", json={"prompt": "x" * (5 << 20)})
        assert big.status_code == 413


def test_every_route_needs_the_key(make_server: Callable[..., Server]) -> None:
    server = make_server(api_key=KEY)
    bodies = {
        "/generate": {"prompt": "x"},
        "/generate/raw": {"prompt": "x"},
        "/chat": {"messages": USER},
        "/extract-code": {"prompt": "x"},
    }
    with httpx.Client(base_url=server.url) as anonymous, server.http() as trusted:
        for path, body in bodies.items():
            refused = anonymous.post(path, json=body)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["code"] == "invalid_api_key"
            wrong = anonymous.post(path, json=body, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, path
            assert trusted.post(path, json=body).status_code == 200, path


def test_generation_gets_503_while_its_model_loads_and_extract_code_needs_none(
    serve: Callable[..., str],
) -> None:
    gate = threading.Event()
    engines = {
        Role.COMPLETION: Engine(FakeBackend(name="coder", script=["ready"])),
        Role.CHAT: Engine(FakeBackend(name="talker", script=["hi"], template=CHAT_TEMPLATE)),
    }

    def load(role: Role) -> Engine:
        gate.wait(30)
        return engines[role]

    models = ModelLoader(load, {r: (e.info.name, e.info.path) for r, e in engines.items()})
    models.start()
    url = serve(models)
    try:
        with httpx.Client(base_url=url) as http:
            for path, body in (("/generate", {"prompt": "x"}), ("/chat", {"messages": USER})):
                response = http.post(path, json=body)
                assert response.status_code == 503, path
                assert response.headers["retry-after"].isdigit()
                error = response.json()["error"]
                assert (error["code"], error["type"]) == ("model_loading", "service_unavailable")
            extracted = http.post("/extract-code", json={"prompt": "```\nok\n```"})
            assert extracted.json() == {"code": "ok"}
            gate.set()
            assert models.wait(30)
            assert http.post("/generate", json={"prompt": "x"}).json()["generated_text"] == "ready"
            assert http.post("/chat", json={"messages": USER}).json()["message"] == "hi"
    finally:
        gate.set()


def test_rest_generations_take_the_same_places_as_the_openai_ones(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["x" * 200], "step_seconds": 0.05}, max_jobs=1)
    stream = server.client().completions.create(
        model="completion", prompt="p", max_tokens=200, stream=True
    )
    next(iter(stream))  # the one place is taken
    with server.http() as http:
        for path, body in (("/generate", {"prompt": "x"}), ("/chat", {"messages": USER})):
            response = http.post(path, json=body)
            assert response.status_code == 503, path
            assert response.json()["error"]["code"] == "too_many_requests"
        assert http.post("/extract-code", json={"prompt": "x"}).status_code == 200
        stream.close()
        wait_until(
            lambda: (
                http.post("/generate/raw", json={"prompt": "x", "max_tokens": 2}).status_code == 200
            ),
            "a place once the stream ended",
        )


# --- /extract-code ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```python\nx = 1\n```", "x = 1"),
        ("```\nx = 1\ny = 2\n```", "x = 1\ny = 2"),
        ("Prose first.\n~~~rust\nfn main() {}\n~~~\nProse after.", "fn main() {}"),
        ("no fence at all\n", "no fence at all\n"),
        ("  indented text, kept as is  ", "  indented text, kept as is  "),
        ("", ""),
        ("Start:\n```js\nlet a = 1;\nlet b = 2;\n", "let a = 1;\nlet b = 2;"),
        ("```py\nfirst()\n```\ntext\n```py\nsecond()\n```", "first()"),
        ("```\n```", ""),
        ("````md\n```\ninner\n```\n````", "```\ninner\n```"),
        ("s = '```' + x\nprint(s)", "s = '```' + x\nprint(s)"),
        ("```python\r\nx = 1\r\n```\r\n", "x = 1"),
    ],
    ids=[
        "with-language",
        "without-language",
        "tildes-among-prose",
        "no-fence",
        "no-fence-whitespace",
        "empty",
        "unterminated",
        "several-blocks-first",
        "empty-block",
        "longer-fence-holds-a-shorter-one",
        "fence-inside-a-string",
        "crlf",
    ],
)
def test_extract_code_takes_the_first_fenced_block(
    make_server: Callable[..., Server], text: str, code: str
) -> None:
    server = make_server()
    response = post(server, "/extract-code", {"prompt": text})
    assert response.status_code == 200, response.text
    assert response.json() == {"code": code}
    ExtractCodeResponse.model_validate(response.json())
    assert (server.completion.calls, server.chat.calls) == ([], []), "no model involved"


# --- the OpenAPI document ---------------------------------------------------------------------


def test_the_openapi_document_lists_the_rest_routes_with_bodies_and_answers(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    with server.http() as http:
        document = http.get("/openapi.json").json()
    routes = {
        "/generate": ("GenerateBody", "GenerateResponse"),
        "/generate/raw": ("GenerateBody", "GenerateResponse"),
        "/chat": ("RestChatBody", "RestChatResponse"),
        "/extract-code": ("ExtractCodeBody", "ExtractCodeResponse"),
    }
    schemas = document["components"]["schemas"]
    for path, (body, answer) in routes.items():
        post_op = document["paths"][path]["post"]
        content = post_op["requestBody"]["content"]["application/json"]
        assert content["schema"]["$ref"] == f"#/components/schemas/{body}"
        ok = post_op["responses"]["200"]["content"]["application/json"]
        assert ok["schema"]["$ref"] == f"#/components/schemas/{answer}"
        assert "400" in post_op["responses"]
        assert {body, answer} <= set(schemas)
    bounds = schemas["GenerateBody"]["properties"]
    assert (bounds["max_tokens"]["minimum"], bounds["max_tokens"]["maximum"]) == (1, 4096)
    assert bounds["max_tokens"]["default"] == 512
    assert bounds["num_return_sequences"]["maximum"] == 10
    assert bounds["repetition_penalty"]["maximum"] == 2.0
    assert schemas["GenerateBody"]["required"] == ["prompt"]
    assert schemas["RestChatBody"]["required"] == ["messages"]
    assert "503" in document["paths"]["/chat"]["post"]["responses"]
