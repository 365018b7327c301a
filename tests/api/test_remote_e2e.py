"""The remote backend end to end: the language server and the engine API over an
OpenAI-compatible server, with real models in real processes.

Two servers stand behind the backend: our own `infill-lsp engine` (which reports the matched
stop string, so it is sent our stop strings) and llama-cpp-python's own server, a peer no one
here wrote (which does not: our backend then cuts the stream itself). Both serve the default
models: Gemma 3 270M base for completions, SmolLM2-135M-Instruct for chat.

What the tests prove:
- an editor gets inline completions and explanations through a remote server, and sees the
  backend in `infill/status`;
- greedy text, stop strings, `stop_reason` and withheld partial matches are exactly those of
  the local model on the same prompts, whichever server answers;
- two language servers share one engine server, which loads each model once;
- a server killed mid-answer fails that request with an error naming the endpoint, the language
  server stays up, and uses the server again once it is back on the same port (also when the
  server was not there yet when the language server started).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from api_helpers import (
    ServerProcess,
    free_port,
    start_engine,
    start_llama_cpp_server,
    stop_engine,
    stop_process,
)
from lsp_helpers import (
    MERGE,
    MERGE_RANGE,
    STATS,
    Session,
    answer,
    client_feature,
    lsp_session,
    plain_json,
    request_json,
    server_env,
    wait_until,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient, client_capabilities

from engine.backends.openai import RemoteEngine
from engine.completion import CompletionModel
from engine.default_models import default_chat_model, default_completion_model
from engine.engine import BaseEngine, Engine
from engine.specs import RemoteSpec
from engine.types import (
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    StopConditions,
    TextDelta,
)
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.plan import ranks_lines
from lsp_server.inline.suggest import suggest
from lsp_server.settings import Settings

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

VSCODE = "visual_studio_code@v1.65.2"
EXECUTE = types.WORKSPACE_EXECUTE_COMMAND
EXPLAIN_CHUNK = "infill/explainChunk"
REQUEST_FAILED = types.LSPErrorCodes.RequestFailed
#: Short suggestions keep the completions quick on a loaded machine.
FAST = {"maxTokensSingleLine": 16, "maxTokensMultiLine": 48, "debounceMs": 10}

#: A single-line completion: the cursor after `return ` (line 1, character 11).
DOUBLE = "def double(x):\n    return \n"
DOUBLE_CURSOR = (1, 11)
#: A multi-line completion: the cursor on the empty first line of a function's body.
FIBONACCI = "def fibonacci(n):\n    \n"
FIBONACCI_CURSOR = (1, 4)


def remote_options(endpoint: str, **more: Any) -> dict[str, Any]:
    """initializationOptions of an editor whose models are on `endpoint`."""
    return {"infill": {**FAST, "backend": "openai", "endpoint": endpoint, **more}}


# --- the servers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_server() -> Iterator[ServerProcess]:
    """`infill-lsp engine` with the default models, shared by the module's tests."""
    started = start_engine()
    yield started
    stop_engine(started)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """llama-cpp-python's server with both default models, as `gemma` and `smollm2`.

    Flash attention as our backend computes on the CPU (the peer's default is off), so that
    both compute the same numbers; the peer keeps one model loaded at a time, and swaps."""
    models: list[dict[str, Any]] = [  # the peer's JSON configuration
        {"model": str(default_completion_model()), "model_alias": "gemma"},
        {"model": str(default_chat_model()), "model_alias": "smollm2"},
    ]
    for model in models:
        model.update(n_ctx=4096, flash_attn=True, verbose=False)
    started = start_llama_cpp_server(models, tmp_path_factory.mktemp("llama_cpp_server"))
    yield started
    stop_process(started)


# --- the editor ---------------------------------------------------------------------------------


@dataclass
class Editor:
    """A language server and what its client received besides responses."""

    session: Session
    chunks: list[dict[str, Any]] = field(default_factory=list)  # infill/explainChunk params

    async def suggestion(self, text: str, line: int, character: int) -> str:
        """The one inline suggestion for a new document holding `text`, at the cursor."""
        session = self.session
        uri = session.open(text)
        items = await answer(session.inline(uri, session.position(text, line, character)))
        assert len(items) == 1, items
        suggestion = items[0].insert_text
        assert isinstance(suggestion, str)
        return suggestion

    def explain(self, uri: str, rng: dict[str, Any]) -> asyncio.Future[Any]:
        """Start Explain on `rng` of `uri` (sent now); the future is its answer."""
        params = {"command": "infill.explain", "arguments": [{"uri": uri, "range": rng}]}
        return self.session.send_raw(EXECUTE, params)

    async def explained(self, uri: str, rng: dict[str, Any]) -> tuple[str, list[str]]:
        """Explain's answer, and the text of the chunks streamed for it."""
        since = len(self.chunks)
        result = plain_json(await answer(self.explain(uri, rng)))
        chunks = self.chunks[since:]
        assert chunks[-1]["done"] is True
        return result, [c["text"] for c in chunks[:-1]]


@contextlib.asynccontextmanager
async def remote_editor(options: dict[str, Any], *, ready: bool = True) -> AsyncIterator[Editor]:
    """A language server started as VS Code starts it, with `options`; once its completion
    model is ready (or, unless `ready`, has been tried)."""
    async with lsp_session(client_capabilities(VSCODE), options) as session:
        editor = Editor(session)

        @client_feature(session.client, EXPLAIN_CHUNK)
        def explain_chunk(_: LanguageClient, params: Any) -> None:
            editor.chunks.append(plain_json(params))

        status = await session.until_loaded()
        if ready:
            assert status["status"] == "ready", status
        yield editor


async def request_failure(awaitable: Any) -> str:
    """The message of the RequestFailed error that `awaitable` answers with."""
    with pytest.raises(JsonRpcException) as caught:
        await answer(awaitable)
    assert caught.value.code == REQUEST_FAILED, caught.value
    return str(caught.value)


# --- 1. an editor over our engine server ----------------------------------------------------------


async def test_an_editor_completes_and_explains_through_the_engine_server(
    engine_server: ServerProcess,
) -> None:
    async with remote_editor(remote_options(engine_server.api)) as editor:
        status = await editor.session.status()
        assert status["backend"] == "openai"
        assert status["model_path"] == engine_server.api
        assert status["model"] == Path(default_completion_model()).stem

        suggestion = await editor.suggestion(DOUBLE, *DOUBLE_CURSOR)
        assert suggestion.strip(), "the model continues the line"
        assert "\n" not in suggestion, "a single-line completion"
        body = await editor.suggestion(FIBONACCI, *FIBONACCI_CURSOR)
        assert body.count("\n") >= 1, f"a multi-line completion: {body!r}"

        uri = editor.session.open(MERGE)
        result, streamed = await editor.explained(uri, MERGE_RANGE)
        assert len(streamed) >= 2, "the answer streams"
        assert result == "".join(streamed)
        assert result.strip()


async def test_a_model_the_engine_server_lacks_is_a_request_failure_naming_it(
    engine_server: ServerProcess,
) -> None:
    """A misspelt `remoteModel`: not listed, asked for all the same (gateways list nothing),
    and the server's 404 reaches the editor with its own words."""
    options = remote_options(engine_server.api, remoteModel="gemma-3-270m-q4_k_n")
    async with remote_editor(options) as editor:
        uri = editor.session.open(DOUBLE)
        position = editor.session.position(DOUBLE, *DOUBLE_CURSOR)
        message = await request_failure(editor.session.inline(uri, position))
        assert f"{engine_server.api} answered 404" in message
        assert "'gemma-3-270m-q4_k_n' does not exist here" in message


async def test_an_editor_with_the_servers_key_is_served_and_a_wrong_key_is_told_so() -> None:
    """README "Settings": `apiKey` is sent as `Authorization: Bearer`: an engine server that
    needs a key serves the editor that has it; with a wrong key the load fails with the
    server's 401, named in `infill/status`, and the key is in no message the editor gets."""
    key = "sk-e2e-" + "7" * 16
    keyed = start_engine("--api-key", key)
    try:
        async with remote_editor(remote_options(keyed.api, apiKey=key)) as editor:
            assert (await editor.suggestion(DOUBLE, *DOUBLE_CURSOR)).strip()
        wrong = "sk-wrong-" + "3" * 16
        options = remote_options(keyed.api, apiKey=wrong)
        async with remote_editor(options, ready=False) as editor:
            status = await editor.session.status()
            assert status["status"] == "error", status
            assert keyed.api in status["last_error"], status
            assert "401" in status["last_error"], status
            client = editor.session.client
            said = [m.message for m in client.log_messages]
            said += [m.message for m in client.messages]
            said.append(json.dumps(status))
            assert not [m for m in said if wrong in m or key in m]
    finally:
        stop_engine(keyed)
    assert not [line for line in keyed.log if key in line]


async def test_doctor_describes_the_engine_servers_model_for_each_role(
    engine_server: ServerProcess,
) -> None:
    """README "Remote": `doctor --backend openai --endpoint URL` names, per role, the model
    the engine server serves it with (Gemma for completion, SmolLM2 for chat) and its context
    size, and exits 0."""
    result = await asyncio.to_thread(
        subprocess.run,
        [
            *(sys.executable, "-m", "lsp_server.cli", "doctor", "--json"),
            *("--backend", "openai", "--endpoint", engine_server.api),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=server_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    completion, chat = report["completion"], report["chat"]
    assert (completion["backend"], completion["model_path"]) == ("openai", engine_server.api)
    assert completion["model_name"] == Path(default_completion_model()).stem
    assert chat["model_name"] == Path(default_chat_model()).stem
    assert completion["context_size"] == chat["context_size"] == 4096


# --- 2. stops: remote equals local ----------------------------------------------------------------


@dataclass(frozen=True)
class StopCase:
    prompt: str
    stop: tuple[str, ...]
    max_tokens: int = 48
    include: bool = False
    # What the local model answers, written down so that a reader sees what each case tests
    # (and a changed model shows up here first).
    text: str = ""
    finish: FinishReason = FinishReason.STOP
    stop_reason: str | None = None


ADD = "def add(a, b):\n    return"
FIB = "def fibonacci(n):\n"
FILES = "import os\n\ndef list_files(path):\n"
FIB_HEAD = "    if n == 0:\n        return 0\n    elif n == 1:\n        "
FILES_BODY = "    with open(path) as f:\n        return [line.strip() for line in f.readlines()]"

# Prompts on which llama.cpp's server and our local engine agree greedily token for token. On a
# few others they part at a near tie (`class Stack:` gets `item` from one, `val` from the
# other) although both get the same greedy request (temperature 0, no repeat penalty): the
# peer computes with its own thread count and batch sizes, and a near tie can tip either way.
# That is the peer's arithmetic, not our stops, so those prompts are not used here.
STOP_CASES = {
    "hidden newline": StopCase(ADD, ("\n",), text=" a + b", stop_reason="\n"),
    "hidden parenthesis": StopCase(FILES, ("(",), text="    with open", stop_reason="("),
    # `==` comes first in the text though listed last.
    "earliest match wins": StopCase(
        FIB, ("elif", "return", "=="), text="    if n ", stop_reason="=="
    ),
    # `return ` is withheld as the start of `return 1`, released with `0`; it matches later.
    "match after a partial match": StopCase(
        FIB, ("return 1",), text=FIB_HEAD, stop_reason="return 1"
    ),
    # Several tokens long; its start (`\n`, `\n\n`) comes and goes before it matches.
    "multi-token stop string": StopCase(
        FILES, ("\n\ndef",), text=FILES_BODY, stop_reason="\n\ndef"
    ),
    "visible stop string": StopCase(
        FIB, (":\n",), include=True, text="    if n == 0:\n", stop_reason=":\n"
    ),
    # The limit comes while `return` is withheld as the start of `return 5`: it is released.
    "max_tokens with a partial match": StopCase(
        FIB,
        ("return 5",),
        max_tokens=10,
        text="    if n == 0:\n        return",
        finish=FinishReason.LENGTH,
    ),
}


def stop_request(case: StopCase) -> GenerationRequest:
    return GenerationRequest(
        prompt=case.prompt,
        sampling=SamplingParams(max_tokens=case.max_tokens, temperature=0),
        stops=StopConditions(stop=case.stop, include_stop_str_in_output=case.include),
    )


@dataclass(frozen=True)
class Outcome:
    text: str
    finish: FinishReason | None
    stop_reason: str | int | None
    streamed: tuple[str, ...]  # the text of each delta, in order


def outcome(deltas: list[TextDelta]) -> Outcome:
    assert deltas, "no deltas"
    *_, last = deltas
    assert last.error is None, last.error
    return Outcome(
        text="".join(d.text for d in deltas),
        finish=last.finish_reason,
        stop_reason=last.stop_reason,
        streamed=tuple(d.text for d in deltas),
    )


async def generated(engine: BaseEngine, case: StopCase) -> Outcome:
    return outcome([d async for d in engine.generate(stop_request(case))])


def generated_by_cli(server: ServerProcess, model: str | None, case: StopCase) -> Outcome:
    """`infill-lsp generate --backend openai` on `case`: its JSON lines."""
    command = [
        *(sys.executable, "-m", "lsp_server.cli", "generate", "--backend", "openai"),
        *("--endpoint", server.url, "--prompt", case.prompt),
        *("--max-tokens", str(case.max_tokens), "--temperature", "0"),
        *("--stop-json", json.dumps(list(case.stop))),
        *(("--remote-model", model) if model else ()),
        *(("--include-stop-str",) if case.include else ()),
    ]
    done = subprocess.run(
        command, env=server_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    deltas = [
        TextDelta(
            index=line["index"],
            text=line["text"],
            finish_reason=None
            if line["finish_reason"] is None
            else FinishReason(line["finish_reason"]),
            stop_reason=line["stop_reason"],
            error=line.get("error"),
        )
        for line in lines
    ]
    return outcome(deltas)


def assert_nothing_shown_of_a_stop_before_it_matched(result: Outcome, case: StopCase) -> None:
    """While streaming, the text shown so far never ends with the start of a hidden stop
    string: an editor never shows what is then taken back."""
    if case.include:
        return
    shown = ""
    for piece in result.streamed[:-1]:  # the last delta may release what the limit left
        shown += piece
        for stop in case.stop:
            starts = [stop[:k] for k in range(1, len(stop))]
            assert not any(shown.endswith(s) for s in starts), (shown, stop)


@pytest.fixture(scope="module")
def remote_engines(
    engine_server: ServerProcess, llama_server: ServerProcess
) -> Iterator[dict[str, RemoteEngine]]:
    """The completion model on each server, as the remote backend connects to it."""
    engines = {
        "engine server": RemoteEngine.connect(
            RemoteSpec(role=Role.COMPLETION, endpoint=engine_server.api)
        ),
        "llama.cpp server": RemoteEngine.connect(
            RemoteSpec(role=Role.COMPLETION, endpoint=llama_server.api, model="gemma")
        ),
    }
    yield engines
    for engine in engines.values():
        engine.close()


@pytest.mark.parametrize("setting", ["auto", "on", "off"])
async def test_candidate_lines_are_ranked_through_the_engine_server_as_here(
    engine_server: ServerProcess, completion_engine: Engine, setting: str
) -> None:
    """docs/engine-server.md: our engine server says where its model computes, and the
    language server decides by it whether to rank candidate lines, as with the model in its own
    process (off on a CPU by default: the scorings and branches made a cold request 4x)."""
    engine = RemoteEngine.connect(RemoteSpec(role=Role.COMPLETION, endpoint=engine_server.api))
    try:
        model = CompletionModel.of(engine, None)
        assert model.scorer is not None  # it can rank: the device alone decides
        assert engine.info.device == completion_engine.info.device
        settings = Settings(suffix_ranking=setting)
        here = CompletionModel.of(completion_engine, None)
        assert ranks_lines(model, settings) == ranks_lines(here, settings)
    finally:
        engine.close()


@pytest.mark.parametrize("case", STOP_CASES.values(), ids=STOP_CASES.keys())
async def test_stops_on_a_remote_server_equal_the_local_model(
    case: StopCase,
    completion_engine: Engine,
    remote_engines: dict[str, RemoteEngine],
) -> None:
    local = await generated(completion_engine, case)
    assert (local.text, local.finish, local.stop_reason) == (
        case.text,
        case.finish,
        case.stop_reason,
    )
    assert_nothing_shown_of_a_stop_before_it_matched(local, case)
    for name, remote in remote_engines.items():
        result = await generated(remote, case)
        assert (result.text, result.finish, result.stop_reason) == (
            local.text,
            local.finish,
            local.stop_reason,
        ), name
        assert_nothing_shown_of_a_stop_before_it_matched(result, case)


@pytest.mark.parametrize("case", STOP_CASES.values(), ids=STOP_CASES.keys())
async def test_generate_on_the_llama_cpp_server_stops_as_the_local_model(
    case: StopCase, llama_server: ServerProcess
) -> None:
    """The same through `infill-lsp generate --backend openai` against the peer, where our own
    stop processor does all the cutting (the peer is sent no stop strings)."""
    result = await asyncio.to_thread(generated_by_cli, llama_server, "gemma", case)
    assert (result.text, result.finish, result.stop_reason) == (
        case.text,
        case.finish,
        case.stop_reason,
    )
    assert_nothing_shown_of_a_stop_before_it_matched(result, case)


# --- log-probabilities: the confidence gate judges a remote suggestion as a local one ----------


def logprobs_of(deltas: list[TextDelta]) -> list[float]:
    """A choice's log-probabilities as the language server gathers them (inline/answer.py)."""
    return [p for d in deltas for p in (d.logprobs or ())]


#: A greedy single-line completion, cut at the line's end by our own stop processor.
LOGPROBS_CASE = StopCase(ADD, ("\n",), max_tokens=16)


async def test_log_probabilities_through_the_engine_server_are_the_local_models(
    completion_engine: Engine, remote_engines: dict[str, RemoteEngine]
) -> None:
    """The remote backend asks our engine server for `logprobs`: each token's is the local
    model's on the same greedy prompt, to 1e-3."""
    request = stop_request(LOGPROBS_CASE)
    local = [d async for d in completion_engine.generate(request)]
    remote = [d async for d in remote_engines["engine server"].generate(request)]
    assert outcome(remote).text == outcome(local).text == " a + b"
    expected = logprobs_of(local)
    assert len(expected) == sum(len(d.token_ids) for d in local)
    assert logprobs_of(remote) == pytest.approx(expected, abs=1e-3)


async def test_llama_cpp_servers_log_probabilities_reach_the_confidence_gate(
    completion_engine: Engine, remote_engines: dict[str, RemoteEngine]
) -> None:
    """llama-cpp-python's own server answers `logprobs` (its `token_logprobs`): the remote
    backend gets one a token, the local model's, and an automatic suggestion through it is
    judged by them."""
    peer = remote_engines["llama.cpp server"]
    request = stop_request(LOGPROBS_CASE)
    local = [d async for d in completion_engine.generate(request)]
    remote = [d async for d in peer.generate(request)]
    assert outcome(remote).text == outcome(local).text
    expected = logprobs_of(local)
    got = logprobs_of(remote)
    # The same on this prompt to the last digit (measured); a margin for its thread count.
    assert got == pytest.approx(expected, abs=1e-2), (got, expected)

    model = CompletionModel.of(peer, None)
    text = "def add(a, b):\n    return \n"
    snap = DocumentSnapshot.at(text, text.index("return ") + 7, uri="file:///w/add.py")
    result = await suggest(model, snap, Settings(), invoked=False)
    assert result.gate is not None
    features = result.gate.features
    assert features is not None, "judged by the server's log-probabilities"
    assert result.gate.confidence is not None
    assert features.tokens >= 2
    assert features.mean_logprob < 0


# --- 3. two editors, one engine server ------------------------------------------------------------


def new_jobs(stats: dict[str, Any], before: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The jobs of `role`'s model in the engine server's /stats that finished after `before`."""
    (now,) = [m for m in stats["models"] if role in m["roles"]]
    (then,) = [m for m in before["models"] if role in m["roles"]]
    count = now["jobs_finished"] - then["jobs_finished"]
    return list(now["recent"][-count:]) if count else []


async def test_two_editors_share_one_engine_server_that_loads_each_model_once(
    engine_server: ServerProcess,
) -> None:
    before = engine_server.get("/stats")
    # The bare host and port also name the API.
    options = remote_options(engine_server.url)
    short = DOUBLE
    long = "\n".join(f"# step {i}: keep the numbers sorted" for i in range(30)) + "\n" + DOUBLE
    async with remote_editor(options) as first, remote_editor(options) as second:
        suggestions = await asyncio.gather(
            first.suggestion(short, *DOUBLE_CURSOR),
            second.suggestion(long, 31, DOUBLE_CURSOR[1]),
        )
        assert all(s.strip() for s in suggestions), suggestions
        # Each editor's job, as its own language server counts it (the prompt's tokens are
        # the engine server's own count, from the answer's usage).
        mine = []
        for editor in (first, second):
            report = await request_json(editor.session, STATS, None)
            (completion,) = [e for e in report["engines"] if "completion" in e["roles"]]
            (job,) = completion["jobs"]
            mine.append(job["prompt_tokens"])

    assert mine[0] != mine[1], "the documents differ in length"
    jobs = new_jobs(engine_server.get("/stats"), before, "completion")
    assert sorted(j["prompt_tokens"] for j in jobs) == sorted(mine)
    assert all(j["finish_reasons"] in (["stop"], ["length"]) for j in jobs), jobs
    health = engine_server.get("/health")
    assert {m["id"]: m["loads"] for m in health["models"]} == {
        Path(default_completion_model()).stem: 1,
        Path(default_chat_model()).stem: 1,
    }


async def test_the_engine_server_keeps_each_documents_kv_state(
    engine_server: ServerProcess,
) -> None:
    """README "Remote": our engine server gets the document's name (`cache_key`) and keeps its
    KV state: the next keystroke evaluates a few prompt tokens, not the whole prompt."""
    options = remote_options(engine_server.url)
    long = "\n".join(f"# step {i}: keep the numbers sorted" for i in range(40)) + "\n"
    text = long + DOUBLE
    async with remote_editor(options) as editor:
        session = editor.session
        before = engine_server.get("/stats")
        uri = session.open(text)
        line = text.count("\n") - 1
        await answer(session.inline(uri, session.position(text, line, DOUBLE_CURSOR[1])))
        at = {"line": line, "character": DOUBLE_CURSOR[1]}
        session.change(uri, 2, [{"range": {"start": at, "end": at}, "text": "x"}])
        typed = text.replace("return \n", "return x\n")
        await answer(session.inline(uri, session.position(typed, line, DOUBLE_CURSOR[1] + 1)))
        first, second = new_jobs(engine_server.get("/stats"), before, "completion")
        assert first["cache_key"] == second["cache_key"] == uri
        assert first["prompt_evaluated"] > 100
        assert second["prompt_evaluated"] <= 8, second  # the kept state: only the new tokens


#: A function the model writes a long body for: room for a keystroke to come mid-answer.
LONG_BODY = "def print_the_multiplication_table_up_to_twelve():\n    \n"


def engine_job(
    engine_server: ServerProcess, pick: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """The first job of the completion model in the engine server's /stats, under way or
    finished, that `pick` accepts; None if there is none."""
    (model,) = [m for m in engine_server.get("/stats")["models"] if "completion" in m["roles"]]
    jobs: list[dict[str, Any]] = [*model["running"], *model["recent"]]  # JSON
    return next((job for job in jobs if pick(job)), None)


async def supersede_once(editor: Editor, engine_server: ServerProcess) -> dict[str, Any] | None:
    """Ask for a suggestion, type a key once the engine server writes it, and ask again: the
    record of the first request's engine job, or None if that request was answered (the
    model finished before the key came)."""
    session = editor.session
    uri = session.open(LONG_BODY)
    _, first = session.send(
        types.TEXT_DOCUMENT_INLINE_COMPLETION,
        session.inline_params(uri, session.position(LONG_BODY, 1, 4)),
    )
    job = await wait_until(
        lambda: engine_job(
            engine_server, lambda j: j["cache_key"] == uri and j.get("phase") == "generating"
        ),
        "the engine server to be writing the suggestion",
    )
    at = {"line": 1, "character": 4}
    session.change(uri, 2, [{"range": {"start": at, "end": at}, "text": "f"}])
    typed = LONG_BODY.replace("    \n", "    f\n")
    _, second = session.send(
        types.TEXT_DOCUMENT_INLINE_COMPLETION,
        session.inline_params(uri, session.position(typed, 1, 5)),
    )
    old = await answer(first)
    await answer(second)
    if old:
        return None
    wanted = job["request_id"]
    return await wait_until(
        lambda: engine_job(
            engine_server, lambda j: j["request_id"] == wanted and "finish_reasons" in j
        ),
        "the superseded job's record",
    )


async def test_a_superseded_suggestion_stops_the_engine_servers_job_within_a_token(
    engine_server: ServerProcess,
) -> None:
    """README "Remote": a keystroke while a suggestion is being written supersedes it: the
    language server answers the old request with nothing and closes its connection, and the
    engine server's job for it ends cancelled, within one token of the close."""
    options = remote_options(
        engine_server.url, maxTokensMultiLine=400, debounceMs=0, contextTokens=0
    )
    async with remote_editor(options) as editor:
        tries = 4  # the model may finish a suggestion before the key reaches the server
        record = None
        while record is None and tries:
            record = await supersede_once(editor, engine_server)
            tries -= 1
    assert record is not None, "the model finished each suggestion before the keystroke"
    assert record["finish_reasons"] == ["cancelled"], record
    assert record["tokens_after_cancel"] in (0, 1), record


# --- 4. the server goes away and comes back -------------------------------------------------------


async def until_suggested(editor: Editor, text: str, line: int, character: int) -> str:
    """The suggestion once a request gets one: requests fail while the server cannot be
    reached (or the language server waits before it tries it again)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return await editor.suggestion(text, line, character)
        except JsonRpcException as e:
            if e.code != REQUEST_FAILED or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def test_a_server_killed_mid_answer_fails_that_request_and_is_used_again_when_back() -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/v1"
    # 1. Nothing listens yet: the language server's model load fails, naming the endpoint.
    async with remote_editor(remote_options(endpoint), ready=False) as editor:
        status = await editor.session.status()
        assert status["status"] == "error"
        assert endpoint in status["last_error"]
        assert "cannot reach" in status["last_error"]

        # 2. The server starts: a later request tries again, and is answered.
        server = await asyncio.to_thread(start_engine, port=port)
        try:
            assert (await until_suggested(editor, DOUBLE, *DOUBLE_CURSOR)).strip()
            status = await editor.session.status()
            assert (status["status"], status["last_error"]) == ("ready", None)

            # 3. Killed while it writes an explanation: that request fails, naming the
            # endpoint and the broken connection.
            uri = editor.session.open(MERGE)
            since = len(editor.chunks)
            pending = editor.explain(uri, MERGE_RANGE)
            await wait_until(lambda: len(editor.chunks) > since, "the first explain chunk")
            server.process.kill()
            # SmolLM2 writes a good hundred tokens about MERGE: it was still writing.
            assert not pending.done(), "the answer was complete before the server was killed"
            await asyncio.to_thread(server.process.wait, 60)
            message = await request_failure(pending)
            assert endpoint in message
            assert editor.chunks[-1]["done"] is True

            # The language server stays up, and says why a completion cannot be had now.
            status = await editor.session.status()
            assert (status["status"], status["backend"]) == ("ready", "openai")
            uri = editor.session.open(DOUBLE)
            position = editor.session.position(DOUBLE, *DOUBLE_CURSOR)
            message = await request_failure(editor.session.inline(uri, position))
            assert endpoint in message
            assert "cannot connect" in message
        finally:
            if server.process.poll() is None:
                server.process.kill()

        # 4. A new server on the same port: once it is ready, completions work again.
        server = await asyncio.to_thread(start_engine, port=port)
        try:
            assert (await editor.suggestion(DOUBLE, *DOUBLE_CURSOR)).strip()
        finally:
            await asyncio.to_thread(stop_engine, server)


# --- 5. the real peer: llama-cpp-python's server -------------------------------------------------


async def test_an_editor_completes_and_explains_through_the_llama_cpp_server(
    llama_server: ServerProcess,
) -> None:
    options = remote_options(llama_server.api, remoteModel="gemma", remoteChatModel="smollm2")
    async with remote_editor(options) as editor:
        status = await editor.session.status()
        assert (status["backend"], status["model"]) == ("openai", "gemma")
        assert status["model_path"] == llama_server.api

        suggestion = await editor.suggestion(DOUBLE, *DOUBLE_CURSOR)
        assert suggestion.strip(), "the model continues the line"
        assert "\n" not in suggestion, "a single-line completion"

        uri = editor.session.open(MERGE)
        result, streamed = await editor.explained(uri, MERGE_RANGE)
        assert len(streamed) >= 2, "the answer streams"
        assert result == "".join(streamed)
        assert result.strip()
