"""What the engine server shows, to whom, and what it refuses to start as, so that a server on the
network leaks no code, prompt or error text to whoever reaches it: a host others can reach needs a
key unless `--allow-no-key`, `*` CORS needs a key, `/health` tells the untrusted only the status,
`/stats` and `/model-info` need trust, the key may come from a file, hostile bodies are 400s, and a
500 never carries an exception's text."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from scripted_servers import KEY, Server

from engine.api.openapi import ChatResponse, CompletionResponse, ErrorResponse, Health, ModelList
from engine.api.schema import MAX_JSON_VALUES, ApiError, CompletionBody, parse_body
from engine.api.serve import exposure_problem, read_key_file, run_server
from engine.specs import ModelOptions

# --- starting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "key", "allow_no_key", "cors", "refused"),
    [
        ("127.0.0.1", None, False, (), False),
        ("[::1]", None, False, (), False),
        ("0.0.0.0", None, False, (), True),
        ("192.168.1.20", None, False, (), True),
        ("0.0.0.0", None, True, (), False),
        ("0.0.0.0", KEY, False, (), False),
        ("127.0.0.1", None, False, ("*",), True),
        ("127.0.0.1", KEY, False, ("*",), False),
        ("127.0.0.1", None, False, ("http://localhost:3000",), False),
    ],
)
def test_what_the_server_refuses_to_start_as(
    host: str, key: str | None, allow_no_key: bool, cors: tuple[str, ...], refused: bool
) -> None:
    problem = exposure_problem(host, key, allow_no_key=allow_no_key, cors_origins=cors)
    assert (problem is not None) is refused
    if problem is not None:
        assert "--api-key" in problem


def test_a_non_loopback_host_without_a_key_exits_before_loading(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The model named does not exist: the refusal comes first, so nothing is loaded.
    options = ModelOptions(model="/nowhere/model.gguf")
    assert run_server(options, host="0.0.0.0", port=0) == 2
    err = capsys.readouterr().err
    assert "--allow-no-key" in err
    assert run_server(options, port=0, cors_origins=["*"]) == 2
    assert "--cors-origin '*'" in capsys.readouterr().err


def test_the_key_comes_from_a_file_not_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lsp_server import cli

    seen: dict[str, Any] = {}

    def fake_run_server(options: ModelOptions, **kw: Any) -> int:
        seen.update(kw)
        return 0

    monkeypatch.setattr("engine.api.serve.run_server", fake_run_server)
    monkeypatch.delenv("INFILL_API_KEY", raising=False)
    key_file = tmp_path / "key"
    key_file.write_text(f"  {KEY}\n")
    argv = ["engine", "--port", "0", "--api-key-file", str(key_file), "--host", "0.0.0.0"]
    assert cli.main(argv) == 0
    assert (seen["api_key"], seen["host"], seen["allow_no_key"]) == (KEY, "0.0.0.0", False)
    assert cli.main(["engine", "--max-request-tokens", "512", "--allow-no-key"]) == 0
    assert (seen["token_budget"], seen["allow_no_key"]) == (512, True)

    key_file.write_text("\n")
    with pytest.raises(SystemExit):
        cli.main(["engine", "--api-key-file", str(key_file)])
    with pytest.raises(ValueError, match="cannot read"):
        read_key_file(tmp_path / "missing")


# --- who sees what ----------------------------------------------------------------------------


def test_health_tells_the_untrusted_only_the_status(make_server: Callable[..., Server]) -> None:
    server = make_server(api_key=KEY)
    with httpx.Client(base_url=server.url) as anonymous:
        health = anonymous.get("/health").json()
    assert health == {"status": "ready", "model_loaded": True}
    with server.http() as trusted:
        full = trusted.get("/health").json()
    assert {m["path"] for m in full["models"]} == {"<fake>"}
    Health.model_validate(health)
    Health.model_validate(full)


def test_without_a_key_off_loopback_private_routes_are_refused(
    make_server: Callable[..., Server],
) -> None:
    """`--allow-no-key` on a host others reach: anyone may generate, nobody may read what
    others do (document URIs in /stats, model paths) or the details of /health."""
    server = make_server(loopback=False)
    with server.http() as http:
        for path in ("/stats", "/model-info"):
            response = http.get(path)
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "key_required"
        assert http.get("/health").json() == {"status": "ready", "model_loaded": True}
        answer = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert answer.status_code == 200
        assert http.get("/openapi.json").status_code == 200


def test_the_host_check_takes_ipv6_loopback_and_refuses_others(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    port = server.url.rsplit(":", 1)[1]
    with server.http() as http:
        for host in (f"[::1]:{port}", "[::1]", f"localhost:{port}", f"127.0.0.1:{port}"):
            assert http.get("/health", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", f"evil.example:{port}", "[::1].evil.example", "[2001:db8::1]"):
            assert http.get("/health", headers={"Host": host}).status_code == 400, host


def test_a_500_never_carries_the_exceptions_text(
    make_server: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: object) -> list[Any]:
        raise RuntimeError("secret detail at /home/user/models/private.gguf")

    monkeypatch.setattr("engine.api.loader.ModelLoader.describe", broken)
    server = make_server()
    with server.http() as http:
        response = http.get("/v1/models")
    assert response.status_code == 500
    assert "private.gguf" not in response.text
    assert "secret" not in response.text
    ErrorResponse.model_validate(response.json())


# --- bodies -----------------------------------------------------------------------------------

HOSTILE = [
    ("nested arrays", b"[" * 5000),
    ("nested in a field", b'{"prompt": "x", "user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("a huge seed", b'{"prompt": "x", "seed": 1' + b"0" * 5000 + b"}"),
    ("a seed past int64", b'{"prompt": "x", "seed": 18446744073709551616}'),
    ("a huge top_k", b'{"prompt": "x", "top_k": 99999999999999999999}'),
    ("NaN", b'{"prompt": "x", "temperature": NaN}'),
    ("a long stop", json.dumps({"prompt": "x", "stop": "a" * 100_000, "n": 2}).encode()),
    ("300 stops", json.dumps({"prompt": "x", "stop": ["ab" * 1000] * 300}).encode()),
    ("200,000 stop ids", json.dumps({"prompt": "x", "stop_token_ids": [7] * 200_000}).encode()),
    ("a stop id outside", json.dumps({"prompt": "x", "stop_token_ids": [1 << 40]}).encode()),
    ("n x max_tokens", json.dumps({"prompt": "x", "n": 128, "max_tokens": 4000}).encode()),
    ("many values", b'{"prompt": "x", "user": [' + b"0," * MAX_JSON_VALUES + b"0]}"),
    ("many objects", b'{"prompt": "x", "user": [' + b"{}," * (MAX_JSON_VALUES // 2) + b"{}]}"),
    ("a list for a string", b'{"prompt": "x", "model": [1, 2]}'),
    ("an array body", b"[1, 2]"),
    ("not UTF-8", b'{"prompt": "\xff\xfe"}'),
]


@pytest.mark.parametrize(("name", "raw"), HOSTILE, ids=[name for name, _ in HOSTILE])
def test_hostile_bodies_are_400s_in_bounded_memory(
    make_server: Callable[..., Server], name: str, raw: bytes
) -> None:
    server = make_server()
    with server.http() as http:
        response = http.post(
            "/v1/completions", content=raw, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text
        ErrorResponse.model_validate(response.json())
        assert len(response.content) < 1000, "an error does not echo the body"
        ok = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert ok.status_code == 200, "the server keeps serving"
    # Parsing is where memory could grow: the same body through the parser alone (a stop id
    # outside the vocabulary passes it: the route knows the model).
    tracemalloc.start()
    try:
        with contextlib.suppress(ApiError):
            parse_body(raw, CompletionBody)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{name}: {peak / 2**20:.0f} MiB to refuse it"


# --- the OpenAPI document ---------------------------------------------------------------------


def test_the_openapi_document_describes_the_bounds_and_the_answers(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(api_key=KEY)
    with httpx.Client(base_url=server.url) as anonymous:
        document = anonymous.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    body = document["components"]["schemas"]["CompletionBody"]["properties"]
    assert body["n"]["anyOf"][0]["maximum"] == 128
    stop_list = body["stop"]["anyOf"][1]
    assert (stop_list["maxItems"], stop_list["items"]["maxLength"]) == (16, 256)
    assert body["stop_token_ids"]["anyOf"][0]["maxItems"] == 64
    assert set(document["paths"]) >= {"/v1/completions", "/v1/chat/completions", "/health"}
    # The documented answers are what the server writes.
    client = server.client()
    for logprobs in (None, 1):
        CompletionResponse.model_validate(
            client.completions.create(
                model="completion", prompt="x", max_tokens=3, logprobs=logprobs
            ).model_dump()
        )
    ChatResponse.model_validate(
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}]
        ).model_dump()
    )
    with server.http() as http:
        ModelList.model_validate(http.get("/v1/models").json())
