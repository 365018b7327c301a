"""The remote backend (engine/backends/openai.py) against real HTTP servers in this process:
our engine server over the scripted backend, where every answer is known, and a scripted
"foreign" server that answers as other OpenAI-compatible servers do (no `stop_reason`,
errors, broken streams). What is asserted is what a user would see: the same text, finish
and stop reason as the local engine gives, clear errors naming the endpoint, and service
again once the server answers."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import shutil
import ssl
import subprocess
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_backend import SPECIAL_TOKENS, FakeBackend
from scripted_servers import KEY, Server, serve_in_thread, wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.api.app import build_app
from engine.api.loader import ModelLoader
from engine.api.serve import bind, url_of
from engine.backends.openai import RemoteEngine, estimate_tokens
from engine.backends.openai_discovery import Discovery
from engine.completion import CompletionModel
from engine.engine import BaseEngine, Engine
from engine.errors import EngineClosedError, EngineError, ModelLoadError
from engine.models import model_spec
from engine.next_edit import ZETA1, NextEditInput, render_next_edit_text
from engine.next_edit_model import NextEditModel, RewriteOutcome
from engine.specs import ModelOptions, RemoteSpec, remote_base_url
from engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    LoadState,
    Role,
    SamplingParams,
    StopConditions,
    TextDelta,
)
from lsp_server.documents import DocumentSnapshot
from lsp_server.host import ModelHost
from lsp_server.inline.plan import ranks_lines
from lsp_server.inline.prompt import build_prompt
from lsp_server.inline.suggest import suggest
from lsp_server.settings import Settings

TEXT = "def area(r):\n    return 3.14 * r * r\n\nprint(area(2))\n"


def remote(url: str, role: Role = Role.COMPLETION, **spec: Any) -> RemoteEngine:
    return RemoteEngine.connect(RemoteSpec(role=role, endpoint=f"{url}/v1", **spec))


async def deltas_of(engine: BaseEngine, request: GenerationRequest) -> list[TextDelta]:
    async with contextlib.aclosing(engine.generate(request)) as stream:
        return [delta async for delta in stream]


def outcome(deltas: list[TextDelta]) -> tuple[str, FinishReason | None, str | int | None]:
    return "".join(d.text for d in deltas), deltas[-1].finish_reason, deltas[-1].stop_reason


# --- the address and the budget ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "base"),
    [
        ("http://127.0.0.1:8012", "http://127.0.0.1:8012/v1"),
        ("http://127.0.0.1:8012/", "http://127.0.0.1:8012/v1"),
        ("http://127.0.0.1:8012/v1", "http://127.0.0.1:8012/v1"),
        (" https://gpu.example/openai/v1/ ", "https://gpu.example/openai/v1"),
    ],
)
def test_the_endpoint_is_the_apis_base_url_however_it_is_written(written: str, base: str) -> None:
    assert remote_base_url(written) == base


@pytest.mark.parametrize("written", ["127.0.0.1:8012", "ftp://host/v1", "http://", ""])
def test_an_endpoint_that_is_no_url_is_a_clear_error(written: str) -> None:
    with pytest.raises(ModelLoadError, match="http:// or https:// URL"):
        remote_base_url(written)


def test_the_remote_backend_needs_an_endpoint_and_takes_the_key_from_the_environment() -> None:
    with pytest.raises(ModelLoadError, match="--endpoint URL"):
        model_spec(Role.COMPLETION, ModelOptions(backend="openai"), environ={})
    options = ModelOptions(backend="openai", endpoint="http://h:1", remote_model="coder")
    spec = model_spec(Role.CHAT, options, environ={"INFILL_API_KEY": "sk-env"})
    assert spec == RemoteSpec(
        role=Role.CHAT, endpoint="http://h:1/v1", api_key="sk-env", model="coder"
    )
    assert "sk-env" not in repr(spec)


def test_token_estimates_stay_above_what_code_tokenizers_take() -> None:
    # Three UTF-8 bytes a token, rounded up: code averages 3.5-4 characters a token.
    assert [estimate_tokens(t) for t in ("", "a", "abc", "abcd", "é", "😀😀")] == [0, 1, 1, 2, 1, 3]


# --- our engine server ---------------------------------------------------------------------------


def test_our_server_names_each_roles_model_its_context_fim_family_and_device(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    completion = remote(server.url)
    chat = remote(server.url, Role.CHAT)
    assert completion.discovery.model == "fake-coder"
    assert completion.discovery.fim_family == "starcoder"  # the scripted tokenizer's tokens
    assert completion.discovery.ours
    assert completion.info.context_size == FakeBackend().context_size
    assert (completion.info.backend, completion.info.path) == ("openai", f"{server.url}/v1")
    assert completion.info.device == "cpu"  # where the served model computes, as it says
    assert chat.discovery.model == "fake-chat"
    # A family named in the settings wins; "none" is none.
    assert remote(server.url, fim_family="qwen").discovery.fim_family == "qwen"
    assert remote(server.url, fim_family="none").discovery.fim_family is None


SCRIPT = "alpha beta(gamma)\ndelta epsilon\n"

#: Stop settings, each run through the local engine and the remote one on the same script.
STOP_CASES = [
    pytest.param(StopConditions(stop=("\n",)), 64, id="hidden newline"),
    pytest.param(StopConditions(stop=("(", "beta")), 64, id="earliest match wins"),
    pytest.param(StopConditions(stop=("beta(x",)), 64, id="partial match released"),
    pytest.param(StopConditions(stop=("a(",)), 64, id="stop inside a token run"),
    pytest.param(
        StopConditions(stop=("(",), include_stop_str_in_output=True), 64, id="visible stop"
    ),
    pytest.param(StopConditions(stop=("zeta",)), 7, id="max tokens"),
    pytest.param(StopConditions(), 64, id="end of text"),
]


@pytest.mark.parametrize(("stops", "max_tokens"), STOP_CASES)
async def test_the_remote_answer_is_the_local_engines(
    make_server: Callable[..., Server], stops: StopConditions, max_tokens: int
) -> None:
    server = make_server({"script": [SCRIPT]})
    local = Engine(FakeBackend(script=[SCRIPT]))
    engine = remote(server.url)
    request = GenerationRequest(
        prompt="x", sampling=SamplingParams(max_tokens=max_tokens), stops=stops
    )
    try:
        expected = await deltas_of(local, request)
        got = await deltas_of(engine, request)
    finally:
        local.close()
    assert outcome(got) == outcome(expected)
    # Withholding: no piece shown ends in the start of a hidden stop string that matched later.
    matched = got[-1].stop_reason
    if isinstance(matched, str) and not stops.include_stop_str_in_output:
        shown = ""
        for delta in got[:-1]:
            shown += delta.text
            assert not any(shown.endswith(matched[:k]) for k in range(1, len(matched))), shown


def logprobs_of(deltas: list[TextDelta]) -> list[float] | None:
    """A choice's log-probabilities as the language server gathers them (inline/answer.py):
    None where no delta brought any."""
    known = [p for d in deltas for p in (d.logprobs or ())]
    return known or None


@pytest.mark.parametrize(("stops", "max_tokens"), STOP_CASES)
async def test_the_remote_log_probabilities_are_the_local_engines(
    make_server: Callable[..., Server], stops: StopConditions, max_tokens: int
) -> None:
    """Our server is asked for `logprobs` and answers each token's: the remote backend gets
    as many as the local engine, the same, whatever the stop held back or cut (tokens whose
    text is withheld, the one that completes a stop string, the limit)."""
    server = make_server({"script": [SCRIPT], "token_logprob": -0.5})
    local = Engine(FakeBackend(script=[SCRIPT], token_logprob=-0.5))
    engine = remote(server.url)
    request = GenerationRequest(
        prompt="x", sampling=SamplingParams(max_tokens=max_tokens), stops=stops
    )
    try:
        expected = await deltas_of(local, request)
        got = await deltas_of(engine, request)
    finally:
        local.close()
    assert outcome(got) == outcome(expected)
    assert logprobs_of(expected) is not None
    assert logprobs_of(got) == logprobs_of(expected)


async def test_the_document_is_sent_as_the_cache_key_to_our_server(
    make_server: Callable[..., Server],
) -> None:
    server = make_server()
    request = GenerationRequest(prompt="x", cache_key="file:///home/me/a%20b.py")
    await deltas_of(remote(server.url), request)
    assert server.completion.calls[-1].cache_key == "file:///home/me/a%20b.py"


async def test_each_choice_has_its_own_seed(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["one", "two"], "repeat_last": False})
    request = GenerationRequest(prompt="x", sampling=SamplingParams(n=2, seed=7, temperature=1))
    deltas = await deltas_of(remote(server.url), request)
    texts = {i: "".join(d.text for d in deltas if d.index == i) for i in (0, 1)}
    assert texts == {0: "one", 1: "two"}
    assert [c.sampling.seed for c in server.completion.calls] == [7, 8]


async def test_chat_messages_are_rendered_by_the_server(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(chat={"script": ["It adds."]})
    request = GenerationRequest(messages=(ChatMessage("user", "What does + do?"),), role=Role.CHAT)
    deltas = await deltas_of(remote(server.url, Role.CHAT), request)
    assert outcome(deltas) == ("It adds.", FinishReason.STOP, None)
    prompt = server.chat.detokenize(server.chat.calls[-1].prompt_ids)
    assert "<|user|>What does + do?" in prompt


async def test_a_prompt_of_token_ids_is_refused(make_server: Callable[..., Server]) -> None:
    engine = remote(make_server().url)
    with pytest.raises(EngineError, match="as text"):
        await deltas_of(engine, GenerationRequest(prompt_token_ids=(1, 2, 3)))


async def test_closing_the_stream_cancels_the_job_on_the_server(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    engine = remote(server.url)
    request = GenerationRequest(prompt="p", sampling=SamplingParams(max_tokens=2000))
    received = 0
    async with contextlib.aclosing(engine.generate(request)) as stream:
        async for delta in stream:
            received += len(delta.text)
            if received >= 5:
                break
    jobs = wait_until(
        lambda: [j for m in server.stats()["models"] for j in m["recent"]], "the server's job"
    )
    assert jobs[-1]["finish_reasons"] == ["cancelled"]
    assert jobs[-1]["generated_tokens"] <= received + 3  # what was in flight when we closed


async def test_cancel_ends_the_stream_with_cancelled(make_server: Callable[..., Server]) -> None:
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    engine = remote(server.url)
    request = GenerationRequest(prompt="p", sampling=SamplingParams(max_tokens=2000))
    deltas = []
    async with contextlib.aclosing(engine.generate(request)) as stream:
        async for delta in stream:
            deltas.append(delta)
            if len(deltas) == 3:
                assert engine.cancel(request.request_id)
    assert deltas[-1].finish_reason is FinishReason.CANCELLED
    assert len("".join(d.text for d in deltas)) < 2000
    assert not engine.cancel(request.request_id)  # over: unknown now


async def test_stop_aborts_the_running_request_and_refuses_new_ones(
    make_server: Callable[..., Server],
) -> None:
    server = make_server({"script": ["x" * 2000], "step_seconds": 0.01})
    engine = remote(server.url)
    request = GenerationRequest(prompt="p", sampling=SamplingParams(max_tokens=2000))

    async def run_until_stopped() -> None:
        async with contextlib.aclosing(engine.generate(request)) as stream:
            async for _ in stream:
                engine.stop("reloading")

    with pytest.raises(EngineClosedError, match="reloading"):
        await run_until_stopped()
    with pytest.raises(EngineClosedError):
        await deltas_of(engine, GenerationRequest(prompt="q"))


async def test_the_key_is_sent_and_never_logged(
    make_server: Callable[..., Server], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = make_server({"script": ["ok"]}, api_key=KEY)
    with pytest.raises(ModelLoadError, match="401"):
        remote(server.url)
    engine = remote(server.url, api_key=KEY)
    assert outcome(await deltas_of(engine, GenerationRequest(prompt="x")))[0] == "ok"
    assert KEY not in caplog.text
    assert KEY not in repr(engine.spec)


# --- other servers: what they do differently, and what goes wrong ------------------------------


@dataclass
class Foreign:
    """A scripted OpenAI-compatible server: each request gets the next answer."""

    url: str = ""
    answers: list[Callable[[dict[str, Any]], Response]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    models: list[dict[str, Any]] = field(
        default_factory=lambda: [{"id": "their-model", "object": "model", "owned_by": "me"}]
    )
    #: The model list's answer, when it is not `models` as JSON.
    models_answer: Callable[[], Response] | None = None


def events(*payloads: object, broken: bool = False) -> Callable[[dict[str, Any]], Response]:
    """An answer streaming `payloads` as server-sent events (strings as they are); `broken`:
    the connection drops after them, without the end of the stream."""

    async def lines() -> AsyncIterator[bytes]:
        for payload in payloads:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            yield f"data: {data}\n\n".encode()
            await asyncio.sleep(0)
        if broken:
            raise ConnectionResetError("the server went away")

    return lambda body: StreamingResponse(lines(), media_type="text/event-stream")


def piece(text: str, finish: str | None = None, **extra: object) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, **extra}
    return {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}


@pytest.fixture
def foreign() -> Iterator[Foreign]:
    state = Foreign()

    async def models(request: Request) -> Response:
        if state.models_answer is not None:
            return state.models_answer()
        return JSONResponse({"object": "list", "data": state.models})

    async def complete(request: Request) -> Response:
        body = await request.json()
        state.bodies.append(body)
        return state.answers.pop(0)(body)

    app = Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/completions", complete, methods=["POST"]),
            Route("/v1/chat/completions", complete, methods=["POST"]),
        ]
    )
    sock = bind("127.0.0.1", 0)
    stop = serve_in_thread(app, sock)
    state.url = url_of(sock)
    yield state
    stop()


async def test_a_server_that_does_not_say_which_stop_matched_gets_no_stops(
    foreign: Foreign,
) -> None:
    # It would cut the stop string and answer "stop": a stop string or the end of the text,
    # we could not tell. Without it, the text streams on and our own processor stops it.
    foreign.answers.append(events(piece("a"), piece("b("), piece("c"), piece("", "length")))
    engine = remote(foreign.url)
    request = GenerationRequest(prompt="x", stops=StopConditions(stop=("(",)))
    assert outcome(await deltas_of(engine, request)) == ("ab", FinishReason.STOP, "(")
    assert "stop" not in foreign.bodies[-1]
    assert foreign.bodies[-1]["model"] == "their-model"  # the first one it lists
    assert foreign.bodies[-1]["repeat_penalty"] == 1.0  # not llama.cpp's server's 1.1
    assert foreign.bodies[-1]["min_p"] == 0.0  # nor its 0.05


async def test_a_server_that_reports_stop_reason_gets_the_stops_from_then_on(
    foreign: Foreign,
) -> None:
    foreign.answers += [
        events(piece("done", "stop", stop_reason=None)),  # vLLM always has the field
        events(piece("a"), piece("", "stop", stop_reason="(")),  # it cut the stop itself
    ]
    engine = remote(foreign.url)
    request = GenerationRequest(prompt="x", stops=StopConditions(stop=("(",)))
    assert outcome(await deltas_of(engine, request)) == ("done", FinishReason.STOP, None)
    assert "stop" not in foreign.bodies[-1]
    assert outcome(await deltas_of(engine, request)) == ("a", FinishReason.STOP, "(")
    assert foreign.bodies[-1]["stop"] == ["("]


async def test_openais_own_api_gets_only_openais_fields(foreign: Foreign) -> None:
    foreign.models = [{"id": "gpt-x", "object": "model", "owned_by": "openai"}]
    foreign.answers.append(events(piece("hi", "stop")))
    await deltas_of(remote(foreign.url), GenerationRequest(prompt="x"))
    body = foreign.bodies[-1]
    assert not {"repeat_penalty", "repetition_penalty", "min_p", "top_k", "cache_key"} & set(body)


async def test_a_server_without_log_probabilities_leaves_them_unknown(foreign: Foreign) -> None:
    """They are asked for; a server that answers none (`logprobs: null`) leaves them unknown,
    and the confidence gate judges without them, as before."""
    foreign.answers.append(events(piece("a"), piece("b", "stop")))
    deltas = await deltas_of(remote(foreign.url), GenerationRequest(prompt="x"))
    assert outcome(deltas) == ("ab", FinishReason.STOP, None)
    assert foreign.bodies[-1]["logprobs"] == 1
    assert logprobs_of(deltas) is None


def with_logprobs(text: str, logprobs: object, finish: str | None = None) -> dict[str, Any]:
    event = piece(text, finish)
    event["choices"][0]["logprobs"] = logprobs
    return event


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param(  # vLLM, llama-cpp-python's server: OpenAI's legacy object
            [
                with_logprobs("a", {"tokens": ["a"], "token_logprobs": [-0.1]}),
                with_logprobs("", {"tokens": [""], "token_logprobs": [-0.2]}),
                with_logprobs("bc", {"tokens": ["b", "c"], "token_logprobs": [-0.3, 0.0]}),
                with_logprobs("", {"tokens": [""], "token_logprobs": [-0.4]}, "stop"),
            ],
            [-0.1, -0.2, -0.3, 0.0, -0.4],
            id="token_logprobs",
        ),
        pytest.param(  # llama.cpp's server: the chat form on /v1/completions
            [
                with_logprobs("a", {"content": [{"token": "a", "logprob": -0.1}]}),
                with_logprobs("b", {"content": [{"token": "b", "logprob": -0.2}]}, "stop"),
            ],
            [-0.1, -0.2],
            id="content",
        ),
        pytest.param(  # text without a token of its own (ours), rounding above 0
            [
                with_logprobs("a", {"token_logprobs": [1e-7]}),
                with_logprobs("b", {"token_logprobs": [None]}, "stop"),
            ],
            [0.0],
            id="null and rounding",
        ),
        pytest.param(  # what is no log-probability is left out, the text stays
            [
                with_logprobs("a", {"token_logprobs": ["-0.1"]}),
                with_logprobs("b", {"token_logprobs": [True]}),
                with_logprobs("c", {"token_logprobs": -0.1}),
                with_logprobs("d", [-0.1]),
                with_logprobs("e", {"token_logprobs": [-0.5]}, "stop"),
            ],
            [-0.5],
            id="not numbers",
        ),
    ],
)
async def test_each_chunks_log_probabilities_reach_the_deltas(
    foreign: Foreign, chunks: list[dict[str, Any]], expected: list[float]
) -> None:
    foreign.answers.append(events(*chunks))
    deltas = await deltas_of(remote(foreign.url), GenerationRequest(prompt="x"))
    assert outcome(deltas)[1:] == (FinishReason.STOP, None)
    assert "".join(d.text for d in deltas) == "".join(c["choices"][0]["text"] for c in chunks)
    assert logprobs_of(deltas) == expected


async def test_absurd_log_probability_arrays_cost_no_memory_past_the_tokens_asked_for(
    foreign: Foreign,
) -> None:
    """openai_stream.py's bounds: a choice keeps at most one log-probability a token asked
    for; a chunk that would go past loses its own and the choice keeps none more (the text
    goes on)."""
    # 420 KB a line: within MAX_LINE_BYTES, and three within the answer's bytes.
    huge = {"token_logprobs": [-0.25] * 60_000}
    foreign.answers.append(
        events(
            with_logprobs("a", {"token_logprobs": [-0.1]}),
            *(with_logprobs("b", huge) for _ in range(3)),
            with_logprobs("c", {"token_logprobs": [-0.2]}, "stop"),
        )
    )
    request = GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=256))
    tracemalloc.start()
    try:
        deltas = await deltas_of(remote(foreign.url), request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome(deltas) == ("abbbc", FinishReason.STOP, None)
    assert logprobs_of(deltas) == [-0.1]
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB"


async def test_a_server_that_refuses_logprobs_is_asked_again_without_and_never_again(
    foreign: Foreign, caplog: pytest.LogCaptureFixture
) -> None:
    """A 400 that names `logprobs` is tried once more without the field; once that works,
    the server is not asked for them again (said once in the log). A 400 for another reason
    is not tried again (test_a_failure_is_an_error_naming_the_endpoint_...)."""
    refusal = {
        "error": {
            "message": "Unrecognized request argument supplied: logprobs",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    foreign.answers += [
        lambda body: JSONResponse(refusal, status_code=400),
        events(piece("fine", "stop")),
        events(piece("again", "stop")),
    ]
    engine = remote(foreign.url)
    caplog.set_level(logging.INFO)
    first = await deltas_of(engine, GenerationRequest(prompt="x"))
    assert outcome(first) == ("fine", FinishReason.STOP, None)
    second = await deltas_of(engine, GenerationRequest(prompt="x"))
    assert outcome(second) == ("again", FinishReason.STOP, None)
    assert ["logprobs" in body for body in foreign.bodies] == [True, False, False]
    assert caplog.text.count("refused a completion asking for log-probabilities") == 1
    assert f"{foreign.url}/v1" in caplog.text


async def test_fastapis_422_for_logprobs_is_also_a_refusal_of_the_field(
    foreign: Foreign,
) -> None:
    detail = {"detail": [{"loc": ["body", "logprobs"], "msg": "Extra inputs are not permitted"}]}
    foreign.answers += [
        lambda body: JSONResponse(detail, status_code=422),
        events(piece("fine", "stop")),
    ]
    deltas = await deltas_of(remote(foreign.url), GenerationRequest(prompt="x"))
    assert outcome(deltas) == ("fine", FinishReason.STOP, None)
    assert "logprobs" not in foreign.bodies[-1]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            lambda body: JSONResponse(
                {"error": {"message": "prompt is too long", "type": "invalid_request_error"}},
                status_code=400,
            ),
            "answered 400 Bad Request: prompt is too long",
        ),
        (lambda body: Response("upstream down", status_code=502), "502 Bad Gateway: upstream"),
        (events(piece("a"), {"error": {"message": "out of memory"}}), "failed: out of memory"),
        (events(piece("a"), broken=True), "broke mid-answer"),
        (events(piece("a"), "not json"), "not JSON"),
    ],
)
async def test_a_failure_is_an_error_naming_the_endpoint_and_the_next_request_works(
    foreign: Foreign, answer: Callable[[dict[str, Any]], Response], message: str
) -> None:
    foreign.answers += [answer, events(piece("fine", "stop"))]
    engine = remote(foreign.url)
    failed = await deltas_of(engine, GenerationRequest(prompt="x"))
    assert failed[-1].finish_reason is FinishReason.ERROR
    assert failed[-1].error is not None
    assert f"{foreign.url}/v1" in failed[-1].error
    assert message in failed[-1].error
    assert outcome(await deltas_of(engine, GenerationRequest(prompt="x")))[0] == "fine"


async def test_a_server_that_is_gone_is_an_error_saying_so(foreign: Foreign) -> None:
    engine = remote(foreign.url)
    sock = bind("127.0.0.1", 0)  # a port where nothing answers
    url = url_of(sock)
    sock.close()
    gone = RemoteEngine(RemoteSpec(role=Role.COMPLETION, endpoint=f"{url}/v1"), engine.discovery)
    deltas = await deltas_of(gone, GenerationRequest(prompt="x"))
    assert deltas[-1].finish_reason is FinishReason.ERROR
    assert f"{url}/v1: cannot connect" in (deltas[-1].error or "")
    with pytest.raises(ModelLoadError, match=f"cannot reach {url}/v1"):
        remote(url)


async def test_a_server_that_goes_silent_mid_answer_is_an_error_saying_how_long(
    foreign: Foreign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README "Remote": nothing for the read timeout (120 s; 0.3 s here) ends the request with
    an error naming the endpoint and the silence, and the next request is served."""
    from engine.backends import openai_stream

    monkeypatch.setattr(openai_stream, "READ_TIMEOUT", 0.3)

    async def silent() -> AsyncIterator[bytes]:
        yield f"data: {json.dumps(piece('a'))}\n\n".encode()
        await asyncio.sleep(5)  # the client gives up long before; its disconnect ends this

    foreign.answers += [
        lambda body: StreamingResponse(silent(), media_type="text/event-stream"),
        events(piece("fine", "stop")),
    ]
    engine = remote(foreign.url)
    failed = await deltas_of(engine, GenerationRequest(prompt="x"))
    assert failed[-1].finish_reason is FinishReason.ERROR
    assert f"{foreign.url}/v1" in (failed[-1].error or "")
    assert "nothing came for 0.3 s" in (failed[-1].error or "")
    assert outcome(await deltas_of(engine, GenerationRequest(prompt="x")))[0] == "fine"


# --- a hostile server: every answer within bounds ------------------------------------------------
#
# README "A remote model": whatever a server sends, an answer is read in bounded memory and time and
# ends with an error naming the endpoint and the bound; the next request is served. Each test guards
# its wait with a timeout far above the bound it exercises, so a regression fails instead of
# hanging.


def stream_of(chunks: Callable[[], AsyncIterator[bytes]]) -> Callable[[dict[str, Any]], Response]:
    return lambda body: StreamingResponse(chunks(), media_type="text/event-stream")


def sse(payload: object) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def keep_alives(pause: float = 0.02) -> AsyncIterator[bytes]:
    while True:  # ends when the client goes away
        yield b": keep-alive\n\n"
        await asyncio.sleep(pause)


async def empty_pieces() -> AsyncIterator[bytes]:
    batch = sse(piece("")) * 100
    while True:
        yield batch
        await asyncio.sleep(0)


async def a_line_without_end() -> AsyncIterator[bytes]:
    yield b"data: "
    block = b"x" * 65_536
    for _ in range(16_384):  # 1 GiB, unless the client leaves first
        yield block
        await asyncio.sleep(0)


async def a_slow_line_without_end() -> AsyncIterator[bytes]:
    yield b"data: "
    while True:
        yield b"x"
        await asyncio.sleep(0.02)


async def fails_within(seconds: float, engine: RemoteEngine) -> TextDelta:
    async with asyncio.timeout(seconds):
        deltas = await deltas_of(
            engine, GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=16))
        )
    assert deltas[-1].finish_reason is FinishReason.ERROR
    return deltas[-1]


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        pytest.param(
            keep_alives,
            "did not end an answer of at most 16 tokens within 0.46 s",
            id="endless keep-alives",
        ),
        pytest.param(a_slow_line_without_end, "within 0.46 s", id="a line trickled without end"),
        pytest.param(
            empty_pieces, "sent over 1,114,112 bytes for one answer", id="endless empty pieces"
        ),
        pytest.param(a_line_without_end, "sent a line of over 1,048,576 bytes", id="a 1 GiB line"),
    ],
)
async def test_an_answer_without_end_is_an_error_naming_the_endpoint_and_the_bound(
    foreign: Foreign,
    monkeypatch: pytest.MonkeyPatch,
    chunks: Callable[[], AsyncIterator[bytes]],
    message: str,
) -> None:
    """An answer takes at most READ_TIMEOUT + 0.5 s a token asked for (here 0.3 + 0.01 x 16 =
    0.46 s) and 1 MiB + 4 KiB a token (1,114,112 bytes for 16), a line at most 1 MiB; the
    reader holds one line at most, never the answer (a 1 GiB line takes under 16 MB)."""
    from engine.backends import openai_stream

    monkeypatch.setattr(openai_stream, "READ_TIMEOUT", 0.3)
    monkeypatch.setattr(openai_stream, "ANSWER_SECONDS_PER_TOKEN", 0.01)
    foreign.answers += [stream_of(chunks), events(piece("fine", "stop"))]
    engine = remote(foreign.url)
    tracemalloc.start()
    try:
        failed = await fails_within(30, engine)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{foreign.url}/v1" in (failed.error or "")
    assert message in (failed.error or "")
    assert peak < 16 << 20, f"{peak:,} bytes"
    assert outcome(await deltas_of(engine, GenerationRequest(prompt="x")))[0] == "fine"


NESTED = "[" * 100_000


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(events(piece("a"), NESTED), "not JSON (it nests too deeply)", id="an event"),
        pytest.param(
            lambda body: Response(
                '{"error": ' + NESTED, status_code=400, media_type="application/json"
            ),
            'answered 400 Bad Request: {"error": [[[',
            id="an error answer",
        ),
    ],
)
async def test_json_nested_past_the_parser_is_an_error_not_a_dead_reader(
    foreign: Foreign, answer: Callable[[dict[str, Any]], Response], message: str
) -> None:
    foreign.answers += [answer, events(piece("fine", "stop"))]
    engine = remote(foreign.url)
    failed = await fails_within(30, engine)
    assert f"{foreign.url}/v1" in (failed.error or "")
    assert message in (failed.error or "")
    assert len(failed.error or "") < 500  # the text shortened
    assert outcome(await deltas_of(engine, GenerationRequest(prompt="x")))[0] == "fine"


async def test_a_compressed_answer_is_refused_unread(foreign: Foreign) -> None:
    """Bodies are asked for uncompressed: 10 KB of gzip can hold 10 MB of text (here), or
    gigabytes, inflated in one call."""
    bomb = gzip.compress(sse(piece("x" * 10_000_000)))
    assert len(bomb) < 50_000
    foreign.answers.append(
        lambda body: Response(
            bomb, media_type="text/event-stream", headers={"Content-Encoding": "gzip"}
        )
    )
    failed = await fails_within(30, remote(foreign.url))
    assert failed.error == f"{foreign.url}/v1 compressed its answer (gzip) though asked not to"
    assert foreign.bodies  # the request went out


async def test_a_fault_in_the_reader_is_delivered_to_the_request(
    foreign: Foreign, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever ends the reader, the request hears of it: it never waits on its queue for an
    end that will not come."""
    from engine.backends.openai_stream import ChoiceReader

    def broken(*args: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ChoiceReader, "_event", broken)
    foreign.answers.append(events(piece("a", "stop")))
    failed = await fails_within(30, remote(foreign.url))
    assert failed.error == f"{foreign.url}/v1: its answer could not be read (RuntimeError)"
    assert "a bug" in caplog.text  # the traceback is logged


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda: keep_alives(0.02), id="slow keep-alives"),
        pytest.param(lambda: keep_alives(0), id="a flood"),
    ],
)
async def test_what_follows_the_end_is_read_within_bounds_then_the_connection_closes(
    foreign: Foreign, monkeypatch: pytest.MonkeyPatch, after: Callable[[], AsyncIterator[bytes]]
) -> None:
    """After a choice's end, the rest of the answer is read to keep the connection (64 KiB and
    5 s at most; 0.2 s here), then the connection is closed: the server sees it go."""
    from engine.backends import openai_stream

    monkeypatch.setattr(openai_stream, "DRAIN_SECONDS", 0.2)
    closed = threading.Event()

    async def answer() -> AsyncIterator[bytes]:
        try:
            yield sse(piece("done", "stop"))
            async for chunk in after():
                yield chunk
        finally:
            closed.set()

    foreign.answers.append(stream_of(answer))
    engine = remote(foreign.url)
    async with asyncio.timeout(30):
        got = await deltas_of(engine, GenerationRequest(prompt="x"))
        assert outcome(got) == ("done", FinishReason.STOP, None)
        assert await asyncio.to_thread(closed.wait, 30)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(
            lambda: StreamingResponse(empty_pieces(), media_type="application/json"),
            "sent a model list of over 4,194,304 bytes",
            id="endless",
        ),
        pytest.param(
            lambda: StreamingResponse(keep_alives(0.05), media_type="application/json"),
            "sent a model list too slowly",
            id="trickled",
        ),
        pytest.param(
            lambda: Response(NESTED, media_type="application/json"),
            "it nests too deeply",
            id="nested",
        ),
    ],
)
def test_a_hostile_model_list_is_a_load_error_naming_the_endpoint(
    foreign: Foreign,
    monkeypatch: pytest.MonkeyPatch,
    answer: Callable[[], Response],
    message: str,
) -> None:
    from engine.backends import openai_discovery

    monkeypatch.setattr(openai_discovery, "DISCOVERY_TIMEOUT", 0.5)
    foreign.models_answer = answer
    with pytest.raises(ModelLoadError) as caught:
        remote(foreign.url)
    assert f"{foreign.url}/v1" in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("endpoint", "verifies"),
    [
        ("http://127.0.0.1:8012/v1", False),
        ("HTTP://127.0.0.1:8012/v1", False),
        ("https://gpu.example/v1", True),
        ("HTTPS://gpu.example/v1", True),
        ("Https://gpu.example/v1", True),
    ],
)
def test_certificates_are_verified_for_https_however_it_is_written(
    endpoint: str, verifies: bool
) -> None:
    from engine.backends.openai_stream import verifies_tls

    assert verifies_tls(endpoint) is verifies


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no authority signed, and its key."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed: no certificate to test with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_a_self_signed_certificate_behind_upper_case_https_is_refused(
    self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`HTTPS://` is https: the server's certificate is verified, and one no authority signed
    is refused (it was read as plain http's "no verification" before). Trusted, the same
    server answers: the refusal is the verification's."""
    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    answer = sse(piece("x = 1", "stop")) + b"data: [DONE]\n\n"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                + answer
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    discovery = Discovery(
        model="m", context_size=4096, fim_family=None, ours=False, extensions=False
    )
    spec = RemoteSpec(role=Role.COMPLETION, endpoint=f"HTTPS://127.0.0.1:{port}/v1")
    try:
        refused = await fails_within(30, RemoteEngine(spec, discovery))
        assert f"HTTPS://127.0.0.1:{port}/v1: cannot connect" in (refused.error or "")
        assert "CERTIFICATE_VERIFY_FAILED" in (refused.error or "")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted from here on
        served = await deltas_of(RemoteEngine(spec, discovery), GenerationRequest(prompt="x"))
        assert outcome(served) == ("x = 1", FinishReason.STOP, None)
    finally:
        server.close()
        await server.wait_closed()


# --- the language server's side ------------------------------------------------------------------


def snapshot(text: str, offset: int) -> DocumentSnapshot:
    return DocumentSnapshot.at(text, offset, uri="file:///w/a%20b.py")


def test_a_remote_fim_prompt_is_text_in_the_familys_format_without_bos(
    make_server: Callable[..., Server],
) -> None:
    model = CompletionModel.of(remote(make_server().url), None)
    assert model.format.fim is not None
    assert model.format.fim.family == "starcoder"
    cursor = TEXT.index("3.14")
    prompt = build_prompt(model, snapshot(TEXT, cursor), Settings())
    assert prompt.token_ids is None
    assert prompt.text == f"<fim_prefix>{TEXT[:cursor]}<fim_suffix>{TEXT[cursor:]}<fim_middle>"
    assert prompt.tokens >= estimate_tokens(TEXT)  # counted line by line: never fewer


async def test_code_that_spells_a_fim_token_reaches_a_remote_server_as_that_token(
    make_server: Callable[..., Server],
) -> None:
    """README "Remote": a remote prompt is text, and the server parses the special tokens in
    it: code that spells out `<fim_middle>` reaches it as that token, beside the format's own
    (a local model never parses the code: tests/lsp_server/test_inline_claims_e2e.py)."""
    server = make_server({"script": ["1"]})
    model = CompletionModel.of(remote(server.url), None)
    text = 'MARK = "<fim_middle>"\nvalue = '
    result = await suggest(model, snapshot(text, len(text)), Settings(), invoked=False)
    assert result.suggestions
    ids = server.completion.calls[-1].prompt_ids
    fim_middle = SPECIAL_TOKENS["<fim_middle>"]
    assert ids.count(fim_middle) == 2  # the code's, and the format's own at the end
    assert ids[-1] == fim_middle


async def test_an_inline_suggestion_through_the_remote_backend(
    make_server: Callable[..., Server],
) -> None:
    # 1 is the scripted tokenizer's <eos>: the server stops there.
    server = make_server({"script": [["3.14 * r * r", 1, "ignored"]]}, no_fim=True)
    model = CompletionModel.of(remote(server.url), None)
    assert model.format.fim is None  # the prefix alone is continued
    text = "def area(r):\n    return \n"
    result = await suggest(model, snapshot(text, text.index("\n", 13)), Settings(), invoked=False)
    assert [s.text for s in result.suggestions] == ["3.14 * r * r"]
    call = server.completion.calls[-1]
    assert server.completion.detokenize(call.prompt_ids) == "def area(r):\n    return "
    assert call.cache_key == "file:///w/a%20b.py"


async def test_the_confidence_gate_judges_a_remote_suggestion_by_its_log_probabilities(
    make_server: Callable[..., Server],
) -> None:
    """An automatic suggestion through the remote backend is judged as a local one: by the
    log-probabilities of its tokens, which the server sent."""
    server = make_server(
        {"script": [["3.14 * r * r", 1, "ignored"]], "token_logprob": -0.125}, no_fim=True
    )
    model = CompletionModel.of(remote(server.url), None)
    text = "def area(r):\n    return \n"
    result = await suggest(model, snapshot(text, text.index("\n", 13)), Settings(), invoked=False)
    assert result.gate is not None
    assert result.gate.features is not None
    assert result.gate.confidence is not None
    # 12 tokens of text and the <eos>: the local engine's count.
    assert result.gate.features.tokens == 13
    assert result.gate.features.mean_logprob == pytest.approx(-0.125)


@pytest.mark.parametrize("setting", ["auto", "on"])
async def test_a_remote_model_is_never_ranked_by_the_code_after_the_cursor(
    make_server: Callable[..., Server], setting: str
) -> None:
    """README "Settings": `suffixRanking` needs log-probabilities, which a remote server does
    not give: even `on`, one plain request goes out and its answer is the suggestion."""
    server = make_server({"script": [["3.14 * r * r", 1, "ignored"]]}, no_fim=True)
    model = CompletionModel.of(remote(server.url), None)
    assert model.scorer is None
    text = "def area(r):\n    r = \n    return r * r\n"
    settings = Settings(suffix_ranking=setting)
    assert not ranks_lines(model, settings)
    result = await suggest(model, snapshot(text, text.index("\n", 13)), settings, invoked=False)
    assert [s.text for s in result.suggestions] == ["3.14 * r * r"]
    assert len(server.completion.calls) == 1


async def test_an_unreachable_server_is_asked_again_at_most_every_2_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README "Remote": after a failed start, a request tries the server again only once
    REMOTE_RETRY_SECONDS (2 s) have passed since the last try; requests before that fail at
    once with the same error, without a connection attempt."""
    from types import SimpleNamespace

    import lsp_server.host as host_module

    now = [1000.0]
    # The host's clock only (asyncio's own must keep running): a test decides when 2 s passed.
    monkeypatch.setattr(host_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    tries: list[float] = []
    start = ModelHost.start

    def counted(self: ModelHost, settings: Settings) -> asyncio.Future[CompletionModel]:
        tries.append(now[0])
        return start(self, settings)

    monkeypatch.setattr(ModelHost, "start", counted)
    sock = bind("127.0.0.1", 0)  # a port where nothing answers
    url = url_of(sock)
    sock.close()
    host = ModelHost()
    host.start(Settings(backend="openai", endpoint=url))
    try:
        for at in (1000.0, 1001.0, 1001.99, 1002.0, 1003.0, 1004.5):
            now[0] = at
            with pytest.raises(Exception, match=f"cannot reach {url}/v1"):
                await host.completion()
        assert tries == [1000.0, 1002.0, 1004.5]
    finally:
        await host.aclose()


async def test_the_language_server_recovers_when_the_endpoint_comes_up_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    import lsp_server.host as host_module

    monkeypatch.setattr(host_module, "REMOTE_RETRY_SECONDS", 0.0)
    # A port that is ours but not listening yet: connecting to it is refused.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = url_of(sock)
    host = ModelHost()
    host.start(Settings(backend="openai", endpoint=url))
    with pytest.raises(Exception, match=f"cannot reach {url}/v1"):
        await host.completion()
    failed = host.state  # read once: the next request changes it
    assert failed is LoadState.ERROR
    # The server comes up at that address; the next request tries again, and is served.
    sock.listen(16)
    engines = {role: Engine(FakeBackend(script=["ok"], template="{{ messages }}")) for role in Role}
    models = ModelLoader.from_engines(engines)
    models.load_all()
    stop = serve_in_thread(build_app(models), sock)
    try:
        model = await host.completion()
        assert host.state is LoadState.READY
        assert (model.engine.info.backend, model.engine.info.path) == ("openai", f"{url}/v1")
        deltas = await deltas_of(model.engine, GenerationRequest(prompt="x"))
        assert outcome(deltas) == ("ok", FinishReason.STOP, None)
    finally:
        await host.aclose()
        models.stop()
        stop()
        models.close()


def test_doctor_describes_a_remote_server_for_both_roles(
    foreign: Foreign, capsys: pytest.CaptureFixture[str]
) -> None:
    """README "Remote": `doctor --backend openai --endpoint URL` reports each role's remote
    model (backend openai, the API's URL, the model the server lists) and exits 0; a server
    that cannot be reached fails it, naming the URL."""
    from lsp_server import cli

    status = cli.main(["doctor", "--json", "--backend", "openai", "--endpoint", foreign.url])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    for role in ("completion", "chat"):
        entry = report[role]
        assert entry["ok"] is True, entry
        assert (entry["backend"], entry["model_path"]) == ("openai", f"{foreign.url}/v1")
        assert entry["model_name"] == "their-model"
    sock = bind("127.0.0.1", 0)  # a port where nothing answers
    gone = url_of(sock)
    sock.close()
    status = cli.main(["doctor", "--json", "--backend", "openai", "--endpoint", gone])
    report = json.loads(capsys.readouterr().out)
    assert status == 1
    assert report["completion"]["ok"] is False
    assert f"cannot reach {gone}/v1" in report["completion"]["error"]


async def test_a_next_edit_rewrite_through_a_server_that_cuts_the_end_marker(
    foreign: Foreign,
) -> None:
    """A remote next-edit model gets the format's prompt as text, its end marker as a stop
    string; a server that says it stopped there but keeps no stop string in its output (not
    every server takes include_stop_str_in_output) still gives the rewrite."""
    text = "a = 1\nb = 1\n"
    given = NextEditInput(
        path="m.py", text=text, region_start=0, region_end=len(text) - 1, cursor=1
    )
    end = "<|editable_region_end|>"
    foreign.answers += [
        events(piece("done", "stop", stop_reason=None)),  # says it reports stop reasons
        events(
            piece("<|editable_region_start|>\na = 2\n"),
            piece("b = 2\n", "stop", stop_reason=end),
        ),
    ]
    engine = remote(foreign.url)
    assert outcome(await deltas_of(engine, GenerationRequest(prompt="x"))) == (
        "done",
        FinishReason.STOP,
        None,
    )
    model = NextEditModel.of(engine, "zeta1")
    assert model is not None
    assert NextEditModel.of(engine, None) is None  # a remote server's tokens are not known
    rewrite = await model.rewrite(given)
    body = foreign.bodies[-1]
    assert body["prompt"] == render_next_edit_text(ZETA1, given).text
    assert body["stop"] == [end]
    assert rewrite.outcome is RewriteOutcome.EDITED
    assert rewrite.region == "a = 2\nb = 2"
    assert [(e.start, e.end, e.text) for e in rewrite.edits] == [(4, 5, "2"), (10, 11, "2")]
