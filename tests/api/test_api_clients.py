"""Clients (editor windows) sharing one engine server, on the scripted backend: the
`X-Infill-Client` header names the client, a bad one is a 400 that names the header, each
job is tagged with its client, /stats?client=NAME answers one client's jobs, and the remote
backend names its client on every request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from scripted_servers import Server, wait_until

from engine.backends.openai import RemoteEngine
from engine.errors import ModelLoadError
from engine.specs import RemoteSpec
from engine.types import CLIENT_HEADER, GenerationRequest, Role, SamplingParams


def completion(server: Server, client: str | None, **body: Any) -> dict[str, Any]:
    headers = {} if client is None else {CLIENT_HEADER: client}
    with server.http() as http:
        response = http.post(
            "/v1/completions", json={"prompt": "x", "max_tokens": 3, **body}, headers=headers
        )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def completion_stats(server: Server, client: str | None = None) -> dict[str, Any]:
    """/stats's completion model, for every client or for `client`'s jobs."""
    params = {} if client is None else {"client": client}
    with server.http() as http:
        response = http.get("/stats", params=params)
    assert response.status_code == 200, response.text
    (model,) = [m for m in response.json()["models"] if "completion" in m["roles"]]
    return dict(model)


def test_a_named_clients_jobs_are_tagged_with_its_name(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["abc"]})
    named = completion(server, "vscode-4711:window.2")
    anonymous = completion(server, None)
    job = wait_until(lambda: server.job(named["id"]), "the named job's record")
    assert job["client"] == "vscode-4711:window.2"
    other = wait_until(lambda: server.job(anonymous["id"]), "the anonymous job's record")
    assert other["client"] is None
    # A chat request is tagged as well.
    with server.http() as http:
        response = http.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            headers={CLIENT_HEADER: "nvim-1"},
        )
    assert response.status_code == 200, response.text
    chat = wait_until(lambda: server.job(response.json()["id"]), "the chat job's record")
    assert chat["client"] == "nvim-1"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/infill/score", {"prompt": [1, 2, 3], "continuations": [[4]], "top": 2}),
        ("/v1/infill/branch", {"prompt": [1, 2, 3], "first_tokens": [4, 5], "max_tokens": 2}),
        ("/generate", {"prompt": "x", "max_tokens": 2}),
    ],
)
def test_scorings_branchings_and_rest_generations_are_the_clients_too(
    path: str, body: dict[str, Any], make_server: Callable[..., Server]
) -> None:
    """Every route that runs the model takes the client's turns and counts as its job."""
    server = make_server({"script": ["abc"], "log_prob": lambda ids, token: -1.0})
    with server.http() as http:
        response = http.post(path, json=body, headers={CLIENT_HEADER: "window-7"})
    assert response.status_code == 200, response.text
    jobs = wait_until(lambda: completion_stats(server, "window-7")["recent"], "the job's record")
    assert [job["client"] for job in jobs] == ["window-7"]
    assert completion_stats(server, "another")["recent"] == []


@pytest.mark.parametrize(
    "name",
    ["", "two words", "w" * 65, "ünicode", "a/b", "a|b"],
    ids=["empty", "space", "too-long", "non-ascii", "slash", "bar"],
)
def test_a_bad_client_name_is_a_400_naming_the_header_and_the_server_goes_on(
    make_server: Callable[..., Server], name: str
) -> None:
    server = make_server({"script": ["abc"]})
    with server.http() as http:
        for path in ("/v1/completions", "/v1/chat/completions"):
            response = http.post(
                path,
                json={"prompt": "x", "messages": [{"role": "user", "content": "x"}]},
                headers={CLIENT_HEADER.encode(): name.encode()},
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == CLIENT_HEADER
            assert CLIENT_HEADER in error["message"]
            assert error["code"] == "invalid_client"
    assert server.completion.calls == []  # nothing reached the model
    assert completion(server, "w" * 64)["choices"][0]["text"] == "abc"


def test_stats_for_one_client_lists_only_its_jobs_finished_and_under_way(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    mine = [completion(server, "win-1")["id"] for _ in range(2)]
    theirs = completion(server, "win-2")["id"]
    completion(server, None)
    wait_until(lambda: server.job(theirs), "the other window's record")
    # A streaming job of the other window, under way while /stats is read.
    with server.http() as http:
        body = {"prompt": "p", "max_tokens": 2000, "stream": True}
        with http.stream(
            "POST", "/v1/completions", json=body, headers={CLIENT_HEADER: "win-2"}
        ) as stream:
            assert stream.status_code == 200
            wait_until(
                lambda: completion_stats(server, "win-2")["running"],
                "the other window's stream to be listed",
            )
            one = completion_stats(server, "win-1")
            two = completion_stats(server, "win-2")
            everyone = completion_stats(server)
    assert [j["request_id"] for j in one["recent"]] == mine
    assert {j["client"] for j in one["recent"]} == {"win-1"}
    assert one["jobs_finished"] == 2
    assert one["running"] == []
    assert [j["request_id"] for j in two["recent"]] == [theirs]
    assert two["jobs_finished"] == 1
    (running,) = two["running"]
    assert running["client"] == "win-2"
    # Without a client, every job as before: both windows' and the anonymous one.
    assert everyone["jobs_finished"] == 4
    assert len(everyone["recent"]) == 4
    assert [j["client"] for j in everyone["running"]] == ["win-2"]
    # A client that asked for nothing has no jobs.
    nobody = completion_stats(server, "win-3")
    assert (nobody["jobs_finished"], nobody["recent"], nobody["running"]) == (0, [], [])


def test_stats_for_a_bad_client_name_is_a_400_naming_the_parameter(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    with server.http() as http:
        response = http.get("/stats", params={"client": "no good"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "client"


async def test_the_remote_backend_names_its_client_on_every_request(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["abc"]})
    spec = RemoteSpec(role=Role.COMPLETION, endpoint=f"{server.url}/v1", client="window-7")
    engine = RemoteEngine.connect(spec)
    try:
        request = GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=3))
        (result,) = await engine.collect(request)
        assert result.text == "abc"
        # The engine server counted the job as that client's; so does the backend's own record.
        jobs = wait_until(lambda: completion_stats(server, "window-7")["recent"], "the job")
        assert [j["client"] for j in jobs] == ["window-7"]
        (own,) = engine.recent_stats
        assert own.client == "window-7"
    finally:
        engine.close()


def test_a_remote_spec_refuses_a_client_name_the_server_would_refuse() -> None:
    with pytest.raises(ModelLoadError, match="client's name"):
        RemoteSpec(role=Role.COMPLETION, endpoint="http://127.0.0.1:1/v1", client="a b")
