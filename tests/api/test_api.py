"""The engine server (`infill-lsp engine`) on the scripted backend, spoken to over real HTTP by
the official OpenAI client (and httpx for what the client hides): exact answers, streaming,
errors in OpenAI's shape, the key, loading, disconnects and the completion-first queue."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from fake_backend import FakeBackend, byte_ids
from scripted_servers import CHAT_TEMPLATE, KEY, Server, wait_until

from engine.api.loader import ModelLoader
from engine.api.serve import open_to_others, run_server
from engine.api.streaming import ClientGone, until_disconnect
from engine.engine import Engine
from engine.specs import ModelOptions
from engine.types import Role


def sse_events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an event stream, JSON decoded except `[DONE]`."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


# --- completions ------------------------------------------------------------------------------


def test_completion_answer_and_usage(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["hello world"]})
    answer = server.client().completions.create(
        model="fake-coder", prompt="say", max_tokens=50, temperature=0
    )
    (choice,) = answer.choices
    assert (choice.index, choice.text, choice.finish_reason) == (0, "hello world", "stop")
    assert answer.object == "text_completion"
    assert answer.model == "fake-coder"
    assert answer.usage is not None
    # "say" is 3 byte tokens after <bos>; the script is 11 tokens.
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (4, 11)
    assert answer.usage.total_tokens == 15
    assert (choice.model_extra or {})["stop_reason"] is None


def test_streamed_completion_joins_to_the_non_streamed_one(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["héllo 😀 wörld"]})
    client = server.client()
    whole = client.completions.create(model="completion", prompt="x", max_tokens=50, temperature=0)
    chunks = list(
        client.completions.create(
            model="completion",
            prompt="x",
            max_tokens=50,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole.choices[0].text == "héllo 😀 wörld"
    assert all(texts[:-1]), "every chunk but the last carries new text"
    assert len(texts) > 3, "the text arrives in pieces, not at the end"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes == [None] * (len(finishes) - 1) + ["stop"]
    # include_usage: a last chunk without choices carries the usage, as OpenAI sends it.
    assert chunks[-1].choices == []
    assert chunks[-1].usage == whole.usage
    assert len({c.id for c in chunks}) == 1


def test_stream_ends_with_done_and_the_final_chunk_has_usage(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["abc"]})
    body = {"prompt": "x", "max_tokens": 10, "stream": True}
    with server.http() as http, http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["choices"][0]["stop_reason"] is None
    assert final["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


def test_max_tokens_defaults_to_16_and_ends_with_length(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["abcdefghijklmnopqrstuvwxyz"]})
    (choice,) = server.client().completions.create(model="completion", prompt="x").choices
    assert (choice.text, choice.finish_reason) == ("abcdefghijklmnop", "length")


def test_sampling_defaults_and_vllms_extensions_reach_the_model(
    make_server: Callable[..., Server],
) -> None:
    """README "engine": `temperature` defaults to 1.0 (OpenAI's default); vLLM's `top_k`,
    `min_tokens` and `repetition_penalty` (and `seed`, `top_p`) are what the model samples with."""
    server = make_server({"script": ["abc"]})
    server.client().completions.create(model="completion", prompt="x", max_tokens=5)
    default = server.completion.calls[-1].sampling
    assert (default.temperature, default.top_p, default.top_k) == (1.0, 1.0, 0)
    assert (default.min_tokens, default.repetition_penalty, default.seed) == (0, 1.0, None)
    server.client().completions.create(
        model="completion",
        prompt="x",
        max_tokens=5,
        temperature=0.3,
        top_p=0.9,
        seed=7,
        extra_body={"top_k": 12, "min_tokens": 2, "repetition_penalty": 1.25},
    )
    given = server.completion.calls[-1].sampling
    assert (given.temperature, given.top_p, given.top_k) == (0.3, 0.9, 12)
    assert (given.min_tokens, given.repetition_penalty, given.seed) == (2, 1.25, 7)
    assert given.max_tokens == 5


def test_suffix_renders_the_models_fim_prompt(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["a, b"]})
    answer = server.client().completions.create(
        model="completion", prompt="def f(", suffix="):\n<fim_middle>", max_tokens=20, temperature=0
    )
    assert answer.choices[0].text == "a, b"
    # PSM order, the family's tokens by id, and the user's text never read as special tokens.
    assert server.completion.calls[-1].prompt_ids == (
        0,
        2,
        *byte_ids("def f("),
        3,
        *byte_ids("):\n<fim_middle>"),
        4,
    )


def test_an_empty_suffix_is_no_suffix(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["a"]}, no_fim=True)
    answer = server.client().completions.create(
        model="completion", prompt="ab", suffix="", max_tokens=5
    )
    assert answer.choices[0].text == "a"
    assert server.completion.calls[-1].prompt_ids == (0, *byte_ids("ab"))


def test_the_fim_familys_end_tokens_stop_a_prompt_the_client_rendered(
    make_server: Callable[..., Server],
) -> None:
    # <|endoftext|> (5) is not the fake model's end-of-generation token; it ends a starcoder fill.
    server = make_server({"script": [["abc", 5, "def"]]})
    answer = server.client().completions.create(
        model="completion", prompt="<fim_prefix>x<fim_suffix>y<fim_middle>", max_tokens=20
    )
    (choice,) = answer.choices
    assert (choice.text, choice.finish_reason) == ("abc", "stop")
    assert (choice.model_extra or {})["stop_reason"] is None, "a system stop has no stop_reason"
    # A rendered prompt's special tokens are parsed, as llama.cpp's server does.
    assert server.completion.calls[-1].prompt_ids[:3] == (0, 2, *byte_ids("x"))


def test_token_id_prompt_is_used_as_is(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["ok"]})
    ids = [0, *byte_ids("hi")]
    answer = server.client().completions.create(model="completion", prompt=ids, max_tokens=5)
    assert answer.choices[0].text == "ok"
    assert server.completion.calls[-1].prompt_ids == tuple(ids)


def test_cache_key_reaches_the_backend(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["ok"]})
    server.client().completions.create(
        model="completion", prompt="x", max_tokens=5, extra_body={"cache_key": "file:///a.py"}
    )
    assert server.completion.calls[-1].cache_key == "file:///a.py"


@pytest.mark.parametrize(
    ("extra", "text", "stop_reason"),
    [
        ({"stop": ["\n\n"]}, "x = 1", "\n\n"),
        ({"stop": "\n\n", "include_stop_str_in_output": True}, "x = 1\n\n", "\n\n"),
        ({"stop_token_ids": byte_ids("=")}, "x ", byte_ids("=")[0]),
    ],
    ids=["hidden", "visible", "token-id"],
)
def test_stops_cut_the_text_and_report_stop_reason(
    make_server: Callable[..., Server], extra: dict[str, Any], text: str, stop_reason: object
) -> None:
    server = make_server({"script": ["x = 1\n\ny = 2"]})
    body = {"prompt": "p", "max_tokens": 50, **extra}
    with server.http() as http:
        whole = http.post("/v1/completions", json=body).json()
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
            events = sse_events(response)
    (choice,) = whole["choices"]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == (
        text,
        "stop",
        stop_reason,
    )
    chunks = [e for e in events if e != "[DONE]"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == text
    assert chunks[-1]["choices"][0]["stop_reason"] == stop_reason


def test_logprobs_give_each_token_the_text_it_added_and_its_log_probability(
    make_server: Callable[..., Server],
) -> None:
    """docs/engine-server.md "Routes": with `logprobs` (0 to 5) each choice's tokens come
    with the text the choice gained with each (they join to its text: a character's first
    bytes and the withheld start of a stop string come with the token that completes them,
    the stop string never) and the model's log-probability of each; whole and streamed
    alike, each chunk's tokens joining to its text."""
    server = make_server({"script": ["é = 1\n\ny = 2"], "token_logprob": -0.25})
    body = {"prompt": "p", "max_tokens": 50, "stop": ["\n\n"]}
    with server.http() as http:
        whole = http.post("/v1/completions", json={**body, "logprobs": 5}).json()
        stream = {**body, "logprobs": 0, "stream": True}
        with http.stream("POST", "/v1/completions", json=stream) as response:
            events = sse_events(response)
    (choice,) = whole["choices"]
    logprobs = choice["logprobs"]
    assert choice["text"] == "é = 1"
    # é is two byte tokens; the first `\n` is withheld, the second completes the stop.
    assert logprobs["tokens"] == ["", "é", " ", "=", " ", "1", "", ""]
    assert logprobs["token_logprobs"] == [-0.25] * 8
    assert whole["usage"]["completion_tokens"] == 8
    assert logprobs["text_offset"] == [0, 0, 1, 2, 3, 4, 5, 5]
    assert logprobs["top_logprobs"] is None
    chunks = [e["choices"][0] for e in events if e != "[DONE]" and e["choices"]]
    streamed: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "text_offset": []}
    for chunk in chunks:
        if chunk["logprobs"] is None:
            assert chunk["text"] == ""
            continue
        assert "".join(chunk["logprobs"]["tokens"]) == chunk["text"]
        for key, values in streamed.items():
            values.extend(chunk["logprobs"][key])
    assert streamed == {k: logprobs[k] for k in streamed}
    # Without `logprobs` there are none, and no chunk without text is sent.
    with server.http() as http:
        plain = http.post("/v1/completions", json=body).json()
    assert plain["choices"][0]["logprobs"] is None


def test_logprobs_of_a_backend_that_does_not_know_them_and_of_text_without_a_token(
    make_server: Callable[..., Server],
) -> None:
    """A token whose log-probability the backend does not say gets null; text withheld when
    the tokens ran out (no stop came) is an entry of its own, without a log-probability."""
    server = make_server({"script": ["a\n"]})
    answer = server.client().completions.create(
        model="completion", prompt="p", max_tokens=10, stop=["\n\n"], logprobs=1
    )
    (choice,) = answer.choices
    assert choice.text == "a\n"
    assert choice.logprobs is not None
    assert choice.logprobs.tokens == ["a", "", "\n"]
    assert choice.model_dump()["logprobs"]["token_logprobs"] == [None, None, None]
    assert choice.logprobs.text_offset == [0, 1, 1]


def test_n_gives_each_choice_its_index(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["one", "two", "three", "four"]})
    client = server.client()
    answer = client.completions.create(model="completion", prompt="x", n=2, max_tokens=10, seed=1)
    assert [(c.index, c.text) for c in answer.choices] == [(0, "one"), (1, "two")]
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 6
    joined = {0: "", 1: ""}
    finished = set()
    for chunk in client.completions.create(
        model="completion", prompt="x", n=2, max_tokens=10, seed=1, stream=True
    ):
        for c in chunk.choices:
            joined[c.index] += c.text
            if c.finish_reason:
                finished.add(c.index)
    assert joined == {0: "three", 1: "four"}
    assert finished == {0, 1}


# --- chat -------------------------------------------------------------------------------------


def test_chat_is_rendered_with_the_models_template(make_server: Callable[..., Server]) -> None:
    server = make_server(chat={"script": ["Hi there!"]})
    client = server.client()
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}],
        },
    ]
    answer = client.chat.completions.create(model="chat", messages=messages, temperature=0)
    (choice,) = answer.choices
    assert (choice.message.role, choice.message.content) == ("assistant", "Hi there!")
    assert (answer.object, choice.finish_reason) == ("chat.completion", "stop")
    rendered = "<|system|>Be brief.\n<|user|>Hello!\n<|assistant|>"
    assert server.chat.calls[-1].prompt_ids == (0, *byte_ids(rendered))
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 1 + len(rendered)

    chunks = list(
        client.chat.completions.create(
            model="fake-chat", messages=messages, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hi there!"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].delta.content is None
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_chat_max_completion_tokens(make_server: Callable[..., Server]) -> None:
    server = make_server(chat={"script": ["abcdefgh"]})
    answer = server.client().chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "x"}], max_completion_tokens=3
    )
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == (
        "abc",
        "length",
    )


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"max_tokens": 5}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -1}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p"),
        ("/v1/completions", {"prompt": "x", "n": "2"}, "n"),
        ("/v1/completions", {"prompt": "x", "stop": [1]}, "stop"),
        ("/v1/completions", {"prompt": "x", "logprobs": 6}, "logprobs"),
        ("/v1/completions", {"prompt": "x", "logprobs": -1}, "logprobs"),
        ("/v1/completions", {"prompt": "x", "logprobs": True}, "logprobs"),
        ("/v1/completions", {"prompt": "x", "top_logprobs": 2}, "top_logprobs"),
        ("/v1/completions", {"prompt": "x", "echo": True}, "echo"),
        ("/v1/completions", {"prompt": "x", "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
        ("/v1/completions", {"prompt": [1, 99999]}, "prompt"),
        ("/v1/completions", {"prompt": "x", "suffix": 3}, "suffix"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "logprobs": True},
            "logprobs",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]},
            "messages[1].role",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0]",
        ),
    ],
)
def test_bad_requests_get_400_naming_the_field(
    make_server: Callable[..., Server], path: str, body: dict[str, Any], param: str
) -> None:
    server = make_server()
    with server.http() as http:
        response = http.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param
        assert error["type"] == "invalid_request_error"
        assert param.split("[")[0] in error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        # The server keeps serving.
        ok = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 5})
        assert ok.status_code == 200


def test_suffix_on_a_model_without_fim_tokens_is_a_clear_400(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(no_fim=True)
    with pytest.raises(openai.BadRequestError) as raised:
        server.client().completions.create(
            model="completion", prompt="def f(", suffix="):\n", max_tokens=5
        )
    assert raised.value.status_code == 400
    assert raised.value.param == "suffix"
    assert "fill-in-the-middle" in raised.value.message
    models = server.client().models.list().data
    (coder,) = [m for m in models if m.id == "fake-coder"]
    assert coder.model_extra is not None  # the fields OpenAI's Model does not name
    assert coder.model_extra["fim_family"] is None


def test_invalid_json_wrong_type_and_big_bodies(make_server: Callable[..., Server]) -> None:
    server = make_server(max_body_bytes=1000)
    with server.http() as http:
        bad = http.post(
            "/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "body"
        form = http.post(
            "/v1/completions", content=b"prompt=x", headers={"Content-Type": "text/plain"}
        )
        assert form.status_code == 415
        assert "application/json" in form.json()["error"]["message"]
        big = http.post("/v1/completions", json={"prompt": "x" * 2000})
        assert big.status_code == 413
        assert (
            http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200
        )


def test_a_prompt_longer_than_the_context_is_context_length_exceeded(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["a"], "context": 16})
    # Streamed too: the first delta is awaited before the headers, so the status is 400.
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as raised:
            server.client().completions.create(
                model="completion", prompt="x" * 40, max_tokens=5, stream=stream
            )
        assert raised.value.code == "context_length_exceeded"
        assert raised.value.param == "prompt"


def test_unknown_model_and_route_are_404(make_server: Callable[..., Server]) -> None:
    server = make_server()
    with pytest.raises(openai.NotFoundError) as raised:
        server.client().completions.create(model="gpt-5", prompt="x")
    assert raised.value.code == "model_not_found"
    with server.http() as http:
        response = http.get("/v1/nothing")
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found_error"


def test_a_failure_mid_stream_is_an_error_event(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["abcdefgh"], "fail_after": 3})
    client = server.client()
    received: list[str] = []

    def read_stream() -> None:
        stream = client.completions.create(
            model="completion", prompt="x", max_tokens=20, stream=True
        )
        received.extend(chunk.choices[0].text for chunk in stream)

    with pytest.raises(openai.APIError) as raised:
        read_stream()
    assert "simulated backend failure" in str(raised.value)
    assert "".join(received) == "abc"
    with pytest.raises(openai.InternalServerError):
        client.completions.create(model="completion", prompt="y", max_tokens=20)


# --- the key, hosts, CORS ---------------------------------------------------------------------


def test_the_key_guards_every_route_but_health(make_server: Callable[..., Server]) -> None:
    server = make_server(api_key=KEY)
    with httpx.Client(base_url=server.url) as anonymous:
        assert anonymous.get("/health").status_code == 200
        for path in ("/v1/models", "/stats"):
            response = anonymous.get(path)
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="wrong").completions.create(
            model="completion", prompt="x", max_tokens=2
        )
    answer = server.client(api_key=KEY).completions.create(
        model="completion", prompt="x", max_tokens=2
    )
    assert answer.choices[0].text == "he"


def test_the_key_comes_from_infill_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from lsp_server import cli

    seen: dict[str, Any] = {}

    def fake_run_server(options: ModelOptions, **kw: Any) -> int:
        seen.update(kw, options=options)
        return 0

    monkeypatch.setenv("INFILL_API_KEY", "from-env")
    monkeypatch.setattr("engine.api.serve.run_server", fake_run_server)
    assert cli.main(["engine", "--port", "0", "--model", "/m/a.gguf"]) == 0
    assert (seen["api_key"], seen["port"], seen["host"]) == ("from-env", 0, "127.0.0.1")
    assert seen["options"].model == "/m/a.gguf"
    assert cli.main(["engine", "--api-key", "flag"]) == 0
    assert seen["api_key"] == "flag"


def test_a_remote_backend_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_server(ModelOptions(backend="openai")) == 2
    assert "serves local models" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "api_key", "warned"),
    [
        ("127.0.0.1", None, False),
        ("LOCALHOST", None, False),  # a host name in any case, as `serve --tcp` reads it
        ("[::1]", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("192.168.1.20", None, True),
        ("0.0.0.0", KEY, False),
    ],
)
def test_a_server_others_can_reach_without_a_key_is_warned_about(
    host: str, api_key: str | None, warned: bool
) -> None:
    warning = open_to_others(host, api_key)
    assert (warning is not None) is warned
    if warning is not None:
        assert host in warning
        assert "--api-key" in warning


def test_a_foreign_host_header_is_refused_and_cors_is_off_by_default(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    with server.http() as http:
        assert http.get("/health", headers={"Host": "evil.example"}).status_code == 400
        response = http.get("/health", headers={"Origin": "http://evil.example"})
        assert response.status_code == 200
        assert "access-control-allow-origin" not in response.headers


def test_cors_origins_are_allowed_when_given(make_server: Callable[..., Server]) -> None:
    server = make_server(cors_origins=["http://localhost:3000"])
    with server.http() as http:
        response = http.get("/v1/models", headers={"Origin": "http://localhost:3000"})
        assert response.headers["access-control-allow-origin"] == "http://localhost:3000"


# --- models, health, loading ------------------------------------------------------------------


def test_models_and_health_describe_both_roles(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["a"], "context": 2048})
    models = server.client().models.list().data
    by_id = {m.id: m for m in models}
    assert set(by_id) == {"fake-coder", "fake-chat"}
    coder = by_id["fake-coder"]
    assert (coder.object, coder.owned_by) == ("model", "infill-lsp")
    extra = coder.model_extra or {}
    assert (extra["roles"], extra["context_size"], extra["max_model_len"]) == (
        ["completion"],
        2048,
        2048,
    )
    assert extra["fim_family"] == "starcoder"
    assert (by_id["fake-chat"].model_extra or {})["roles"] == ["chat"]
    with server.http() as http:
        health = http.get("/health").json()
    assert (health["status"], health["backend"], health["device"]) == ("ready", "fake", "cpu")
    coder_health = next(m for m in health["models"] if m["id"] == "fake-coder")
    assert coder_health == {
        "id": "fake-coder",
        "roles": ["completion"],
        "status": "ready",
        "error": None,
        "path": "<fake>",
        "backend": "fake",
        "device": "cpu",
        "context_size": 2048,
        "fim_family": "starcoder",
        "loads": 1,
    }
    assert health["model_loaded"] is True
    with server.http() as http:
        info = http.get("/model-info").json()
    assert info["completion"] == {
        "id": "fake-coder",
        "model_path": "<fake>",
        "backend": "fake",
        "device": "cpu",
        "context_size": 2048,
    }
    assert info["chat"]["id"] == "fake-chat"


def test_one_model_for_both_roles_is_listed_once(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["a"], "template": CHAT_TEMPLATE}, shared=True)
    (model,) = server.client().models.list().data
    assert (model.model_extra or {})["roles"] == ["completion", "chat"]
    for _ in range(2):  # two clients, one loaded model
        server.client().completions.create(model="completion", prompt="x", max_tokens=1)
        server.client().chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}]
        )
    with server.http() as http:
        (entry,) = http.get("/health").json()["models"]
    assert entry["loads"] == 1


def test_requests_get_503_while_their_model_loads(serve: Callable[..., str]) -> None:
    gate = threading.Event()
    engines = {
        Role.COMPLETION: Engine(FakeBackend(name="coder", script=["ready"])),
        Role.CHAT: Engine(FakeBackend(name="talker", script=["hi"], template=CHAT_TEMPLATE)),
    }

    def load(role: Role) -> Engine:
        if role is Role.CHAT:
            gate.wait(30)
        return engines[role]

    models = ModelLoader(load, {r: (e.info.name, e.info.path) for r, e in engines.items()})
    models.start()
    url = serve(models)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    try:
        with httpx.Client(base_url=url) as http:
            # Completion loads first: it serves while chat still loads.
            wait_until(
                lambda: http.get("/health").json()["models"][0]["status"] == "ready",
                "the completion model",
            )
            health = http.get("/health").json()
            assert (health["status"], health["model_loaded"]) == ("loading", False)
            assert [m["status"] for m in health["models"]] == ["ready", "loading"]
            assert (
                client.completions.create(model="completion", prompt="x", max_tokens=5)
                .choices[0]
                .text
                == "ready"
            )
            response = http.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
            )
            assert response.status_code == 503
            assert response.headers["retry-after"].isdigit()
            assert "loading" in response.json()["error"]["message"]
            gate.set()
            assert models.wait(30)
            assert http.get("/health").json()["status"] == "ready"
            answer = client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}]
            )
            assert answer.choices[0].message.content == "hi"
    finally:
        gate.set()


def test_a_model_that_fails_to_load_is_a_500_pointing_to_health(
    serve: Callable[..., str],
) -> None:
    """Why it failed is in /health for a trusted caller, never in the 500's body (an
    exception's text may name paths)."""
    engine = Engine(FakeBackend(name="coder", script=["a"]))

    def load(role: Role) -> Engine:
        if role is Role.CHAT:
            raise RuntimeError("no such file: chat.gguf")
        return engine

    models = ModelLoader(load, {Role.COMPLETION: ("coder", "c"), Role.CHAT: ("chat", "chat.gguf")})
    models.load_all()
    url = serve(models)
    with httpx.Client(base_url=url) as http:
        health = http.get("/health").json()
        assert health["status"] == "error"
        assert "no such file" in health["models"][1]["error"]
        response = http.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert response.status_code == 500
        message = response.json()["error"]["message"]
        assert "failed to load" in message
        assert "/health" in message
        assert "chat.gguf" not in message
        assert http.post("/v1/completions", json={"prompt": "x"}).status_code == 200


# --- disconnects and priority -----------------------------------------------------------------


def test_a_dropped_stream_cancels_its_job_within_a_token(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    client = server.client()
    stream = client.completions.create(model="completion", prompt="p", max_tokens=2000, stream=True)
    received = 0
    request_id = None
    for chunk in stream:
        request_id = chunk.id
        received += len(chunk.choices[0].text)
        if received >= 5:
            break
    stream.close()
    assert request_id is not None
    job = wait_until(lambda: server.job(request_id), "the dropped job's record")
    assert job["finish_reasons"] == ["cancelled"]
    assert job["generated_tokens"] <= received + 2
    # The engine serves the next request.
    answer = client.completions.create(model="completion", prompt="q", max_tokens=3)
    assert answer.choices[0].text == "xxx"


def test_stats_lists_a_job_under_way_with_its_document_until_it_ends(
    make_server: Callable[..., Server],
) -> None:
    """README "engine": `/stats` has, besides the recent jobs, those under way: a streaming
    job is listed as generating with its `cache_key` while it writes, and not once it ended."""
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    stream = server.client().completions.create(
        model="completion",
        prompt="p",
        max_tokens=2000,
        stream=True,
        extra_body={"cache_key": "file:///w/a%20b.py"},
    )
    chunk = next(iter(stream))
    with server.http() as http:

        def running() -> list[dict[str, Any]]:
            (model,) = [
                m for m in http.get("/stats").json()["models"] if "completion" in m["roles"]
            ]
            return list(model["running"])

        (job,) = wait_until(running, "the job to be listed as under way")
        assert job == {
            "request_id": chunk.id,
            "cache_key": "file:///w/a%20b.py",
            "client": None,
            "phase": "generating",
        }
        stream.close()
        wait_until(lambda: server.job(chunk.id), "the job's record")
        assert running() == []


def test_stats_gives_each_finished_job_the_figures_of_infill_stats(
    make_server: Callable[..., Server],
) -> None:
    """`/stats` and the language server's `infill/stats` write a job in one form
    (`engine.jobs.record_json`): the same figures, times in milliseconds; only the document's
    name (`cache_key`, the field this API's clients send) and the two list names differ."""
    server = make_server({"script": ["ok"]})
    answer = server.client().completions.create(
        model="completion", prompt="x", max_tokens=5, extra_body={"cache_key": "file:///a.py"}
    )
    job = wait_until(lambda: server.job(answer.id), "the job's record")
    assert set(job) == {
        "request_id",
        "prompt_tokens",
        "prompt_evaluated",
        "generated_tokens",
        "queued_ms",
        "first_token_ms",
        "total_ms",
        "finish_reasons",
        "tokens_after_cancel",
        "written_beside",
        "cache_key",
        "client",
    }
    assert (job["cache_key"], job["generated_tokens"], job["finish_reasons"]) == (
        "file:///a.py",
        2,
        ["stop"],
    )
    assert job["total_ms"] >= job["first_token_ms"] > 0
    (model,) = [m for m in server.stats()["models"] if "completion" in m["roles"]]
    assert model["jobs_finished"] >= len(model["recent"]) >= 1


@pytest.mark.parametrize("path", ["/v1/completions", "/generate"])
def test_a_dropped_request_cancels_its_job(path: str, make_server: Callable[..., Server]) -> None:
    """On OpenAI's route and the plain REST one: the job ends cancelled, and the next request
    is served."""
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    with httpx.Client(base_url=server.url, timeout=0.5) as http, pytest.raises(httpx.ReadTimeout):
        http.post(path, json={"prompt": "p", "max_tokens": 2000})

    def cancelled_job() -> dict[str, Any] | None:
        jobs = server.stats()["models"][0]["recent"]
        return jobs[-1] if jobs else None

    job = wait_until(cancelled_job, "the dropped job's record")
    assert job["finish_reasons"] == ["cancelled"]
    assert job["generated_tokens"] < 2000
    answer = server.client().completions.create(model="completion", prompt="q", max_tokens=2)
    assert answer.choices[0].text == "xx"


async def test_a_client_that_goes_stops_the_work_and_a_cancelled_caller_stays_cancelled() -> None:
    """`until_disconnect`: the work is cancelled either way; a disconnect is `ClientGone`, and
    the caller's own cancellation goes on as a cancellation (never swallowed)."""
    started, stopped = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    async def gone() -> dict[str, Any]:
        await started.wait()
        return {"type": "http.disconnect"}

    with pytest.raises(ClientGone):
        await until_disconnect(gone, work())
    assert stopped.is_set()

    started.clear()
    stopped.clear()

    async def stays() -> dict[str, Any]:
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    caller = asyncio.create_task(until_disconnect(stays, work()))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert stopped.is_set()


def test_a_completion_goes_ahead_of_a_running_chat(make_server: Callable[..., Server]) -> None:
    server = make_server(
        {"script": ["c" * 1000, "done"], "template": CHAT_TEMPLATE, "step_seconds": 0.005},
        shared=True,
    )
    chat_started = threading.Event()
    completion_done = threading.Event()
    chat_ids: list[str] = []

    def chat() -> None:
        stream = server.client().chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "explain"}], stream=True
        )
        with stream:
            for chunk in stream:
                chat_ids.append(chunk.id)
                if chunk.choices and chunk.choices[0].delta.content:
                    chat_started.set()
                    completion_done.wait(30)
                    break  # dropped: the rest of the chat does not matter here

    thread = threading.Thread(target=chat)
    thread.start()
    assert chat_started.wait(30)
    try:
        answer = server.client().completions.create(model="completion", prompt="x", max_tokens=10)
        assert answer.choices[0].text == "done"
        # The completion finished while the chat was still running.
        assert server.job(chat_ids[0]) is None
    finally:
        completion_done.set()
        thread.join(30)
    completion_job = server.job(answer.id)
    assert completion_job is not None
    assert completion_job["finish_reasons"] == ["stop"]
    chat_job = wait_until(lambda: server.job(chat_ids[0]), "the chat job's record")
    jobs = [j["request_id"] for j in server.stats()["models"][0]["recent"]]
    assert jobs.index(answer.id) < jobs.index(chat_ids[0])
    assert chat_job["generated_tokens"] < 1000
