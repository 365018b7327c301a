"""The engine server with the real default models, started through the real command
(`infill-lsp engine --port 0`) and spoken to by the official OpenAI client: properties any
answer must hold (greedy streams equal whole answers, stops cut, choices are indexed), the
model list, the key, and a dropped stream freeing the engine."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from api_helpers import EngineProcess, start_engine, stop_engine
from local_models import load_llama
from written_together import ROUNDING, parts_at_a_near_tie

from engine.default_models import GEMMA_FILE, SMOLLM2_FILE, default_chat_model
from engine.markdown import code_or_text
from engine.specs import ModelOptions
from engine.types import CLIENT_HEADER, Role

pytestmark = pytest.mark.slow

PROMPT = "def fibonacci(n):\n"
KEY = "sk-e2e-key"


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    started = start_engine()
    yield started
    stop_engine(started)


def complete(engine: EngineProcess, **kw: Any) -> Any:
    args = {"model": "completion", "prompt": PROMPT, "max_tokens": 24, "temperature": 0, **kw}
    return engine.client().completions.create(**args)


def test_streamed_completion_equals_the_whole_one(engine: EngineProcess) -> None:
    whole = complete(engine)
    chunks = list(complete(engine, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert text.strip(), "the model continues the code"
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert whole.usage.completion_tokens <= 24
    assert whole.usage.prompt_tokens > 1


def test_a_stop_string_cuts_the_text(engine: EngineProcess) -> None:
    free = complete(engine).choices[0].text
    assert "\n" in free.lstrip("\n"), f"the model wrote more than one line: {free!r}"
    start = len(free) - len(free.lstrip("\n"))
    # A stop string after the first non-empty line: the greedy answer is cut right there.
    (stopped,) = complete(engine, prompt=PROMPT + free[:start], stop=["\n"]).choices
    rest = free[start:]
    assert stopped.text == rest[: rest.index("\n")]
    assert stopped.finish_reason == "stop"
    assert (stopped.model_extra or {})["stop_reason"] == "\n"


def test_n_with_a_seed_gives_indexed_repeatable_choices(engine: EngineProcess) -> None:
    first = complete(engine, n=2, seed=7, temperature=0.9, max_tokens=12)
    assert [c.index for c in first.choices] == [0, 1]
    assert all(c.finish_reason in ("stop", "length") for c in first.choices)
    again = complete(engine, n=2, seed=7, temperature=0.9, max_tokens=12)
    assert [c.text for c in again.choices] == [c.text for c in first.choices]


def test_a_suffix_on_gemma_is_a_clear_400(engine: EngineProcess) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        complete(engine, suffix="    return a\n")
    assert raised.value.param == "suffix"
    assert "fill-in-the-middle" in raised.value.message
    assert complete(engine, max_tokens=2).choices[0].finish_reason in ("stop", "length")


def test_chat_streamed_equals_the_whole_answer(engine: EngineProcess) -> None:
    args: dict[str, Any] = {
        "model": "chat",
        "messages": [{"role": "user", "content": "What does a Python list comprehension do?"}],
        "max_tokens": 24,
        "temperature": 0,
    }
    whole = engine.client().chat.completions.create(**args)
    content = whole.choices[0].message.content
    assert content
    chunks = list(engine.client().chat.completions.create(**args, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
    assert whole.model == SMOLLM2_FILE.removesuffix(".gguf")


def rest(engine: EngineProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A plain REST route's answer (200 asserted)."""
    response = httpx.post(f"{engine.url}{path}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_generate_greedy_is_the_greedy_completion_and_its_code(engine: EngineProcess) -> None:
    """/generate and /v1/completions are one path to the model: a greedy answer without a
    repetition penalty is the same text and token count either way."""
    greedy = {"prompt": PROMPT, "max_tokens": 24, "do_sample": False, "repetition_penalty": 1.0}
    whole = complete(engine)
    raw = rest(engine, "/generate/raw", greedy)
    assert raw["generated_text"] == whole.choices[0].text
    assert raw["num_tokens"] == whole.usage.completion_tokens
    assert raw["finish_reason"] == whole.choices[0].finish_reason
    assert (raw["prompt"], raw["model"]) == (PROMPT, whole.model)
    extracted = rest(engine, "/generate", greedy)
    assert extracted["generated_text"] == code_or_text(raw["generated_text"])
    sampled = rest(
        engine, "/generate", {"prompt": PROMPT, "max_tokens": 8, "num_return_sequences": 2}
    )
    assert len(sampled["sequences"]) == 2
    assert all(s["num_tokens"] <= 8 for s in sampled["sequences"])


def test_chat_route_is_the_greedy_chat_completion(engine: EngineProcess) -> None:
    messages: list[Any] = [{"role": "user", "content": "What does a Python list comprehension do?"}]
    whole = engine.client().chat.completions.create(
        model="chat",
        messages=messages,
        max_tokens=24,
        temperature=0,
    )
    answer = rest(
        engine,
        "/chat",
        {"messages": messages, "max_tokens": 24, "do_sample": False, "repetition_penalty": 1.0},
    )
    assert answer["message"] == whole.choices[0].message.content
    assert answer["message"].strip(), "the model answers"
    assert answer["model"] == whole.model == SMOLLM2_FILE.removesuffix(".gguf")
    assert whole.usage is not None
    assert answer["num_tokens"] == whole.usage.completion_tokens


def test_models_lists_both_default_models(engine: EngineProcess) -> None:
    models = {m.id: m for m in engine.client().models.list().data}
    gemma = models[GEMMA_FILE.removesuffix(".gguf")]
    smol = models[SMOLLM2_FILE.removesuffix(".gguf")]
    assert (gemma.owned_by, smol.owned_by) == ("infill-lsp", "infill-lsp")
    assert (gemma.model_extra or {})["roles"] == ["completion"]
    assert (smol.model_extra or {})["roles"] == ["chat"]
    for model in (gemma, smol):
        extra = model.model_extra or {}
        assert extra["context_size"] == extra["max_model_len"] > 0
        assert extra["fim_family"] is None
    health = engine.get("/health")
    assert health["backend"] == "llama.cpp"
    assert [m["loads"] for m in health["models"]] == [1, 1]


def test_a_dropped_stream_frees_the_engine(engine: EngineProcess) -> None:
    stream = engine.client().completions.create(
        model="completion",
        prompt=PROMPT,
        max_tokens=2000,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    request_id = None
    for received, chunk in enumerate(stream, start=1):
        request_id = chunk.id
        if received == 3:
            break
    stream.close()
    # The next request is served at once: the dropped job no longer holds the model.
    assert complete(engine, max_tokens=4).usage.completion_tokens <= 4

    def dropped_job() -> dict[str, Any] | None:
        for model in engine.get("/stats")["models"]:
            recent: list[dict[str, Any]] = model["recent"]  # JSON
            for job in recent:
                if job["request_id"] == request_id:
                    return job
        return None

    job = dropped_job()
    assert job is not None, "the dropped job finished before the next one"
    assert job["finish_reasons"] == ["cancelled"]
    assert job["generated_tokens"] < 100
    # README: a client that disconnects cancels its generation within one token, counted by
    # the engine from the moment the server saw the disconnect.
    assert job["tokens_after_cancel"] in (0, 1), job


def test_a_foreign_host_is_refused_and_cors_is_only_for_the_origins_given(
    engine: EngineProcess,
) -> None:
    """README "engine": on loopback a request must name a loopback Host (a page that rebinds
    its name to 127.0.0.1 is refused); no CORS header unless `--cors-origin` names the page's
    origin, and then only for that origin."""
    foreign = httpx.get(f"{engine.url}/v1/models", headers={"Host": "evil.example"}, timeout=30)
    assert foreign.status_code == 400
    page = {"Origin": "http://localhost:3000"}
    plain = httpx.get(f"{engine.url}/v1/models", headers=page, timeout=30)
    assert plain.status_code == 200
    assert "access-control-allow-origin" not in plain.headers
    allowing = start_engine("--cors-origin", "http://localhost:3000")
    try:
        allowed = httpx.get(f"{allowing.url}/v1/models", headers=page, timeout=30)
        assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.get(
            f"{allowing.url}/v1/models", headers={"Origin": "http://evil.example"}, timeout=30
        )
        assert "access-control-allow-origin" not in other.headers
    finally:
        stop_engine(allowing)


def test_the_key_one_model_for_both_roles_and_shutdown() -> None:
    """A second server: SmolLM2 for both roles (loaded once), the key from INFILL_API_KEY;
    SIGTERM ends a running stream with an error event and the process with status 0."""
    smol = str(default_chat_model())
    shared = start_engine("--model", smol, "--chat-model", smol, env={"INFILL_API_KEY": KEY})
    try:
        with pytest.raises(openai.AuthenticationError):
            shared.client().models.list()
        with pytest.raises(openai.AuthenticationError):
            shared.client("wrong").models.list()
        (model,) = shared.client(KEY).models.list().data
        assert (model.model_extra or {})["roles"] == ["completion", "chat"]
        clients = [shared.client(KEY), shared.client(KEY)]  # two editors, one model
        clients[0].completions.create(model="completion", prompt="x = ", max_tokens=3)
        clients[1].chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        # /health needs no key, and says only whether the models are ready without it.
        assert shared.get("/health") == {"status": "ready", "model_loaded": True}
        (entry,) = shared.get("/health", api_key=KEY)["models"]
        assert entry["loads"] == 1
        assert entry["roles"] == ["completion", "chat"]

        stream = clients[0].completions.create(
            model="completion",
            prompt="x",
            max_tokens=2000,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        chunks = iter(stream)
        next(chunks)
        shared.process.terminate()
        with pytest.raises(openai.APIError, match="shutting down"):
            for _ in chunks:
                pass
        assert shared.process.wait(60) == 0
    finally:
        stop_engine(shared)


#: Four prompts whose greedy answers are short lists and code, sent at once.
AT_ONCE = (
    "1, 2, 3, 4, 5, 6, 7,",
    "Monday, Tuesday, Wednesday,",
    "a b c d e f g h",
    "def one():\n    return 1\n\n\ndef two():\n    return 2\n\n\ndef three():\n",
)


def test_clients_at_once_are_written_together_and_answered_as_alone_up_to_near_ties() -> None:
    """Four clients at once on a server whose rows go together ($INFILL_ROWS=together, the
    chat model SmolLM2 completing, whose passes of many rows give the logits of one): each
    gets the answer it gets alone, or parts from it only at a near tie, and /stats says which
    were written beside others."""
    smol = str(default_chat_model())
    server = start_engine("--model", smol, "--chat-model", smol, env={"INFILL_ROWS": "together"})
    try:
        client = server.client()

        def ask(prompt: str) -> str:
            answer = client.completions.create(
                model="completion", prompt=prompt, max_tokens=24, temperature=0
            )
            return str(answer.choices[0].text)

        alone = [ask(p) for p in AT_ONCE]
        with concurrent.futures.ThreadPoolExecutor(len(AT_ONCE)) as pool:
            at_once = list(pool.map(ask, AT_ONCE))
        # Requests that start together get exactly the answers alone; one that arrives when
        # the others are under way joins their group, and its cells then lie among theirs:
        # where its answer parts from the one alone, it does at a near tie.
        if at_once != alone:
            scorer = load_llama(Role.CHAT, ModelOptions(threads=1))
            try:
                gaps = [
                    parts_at_a_near_tie(scorer, *texts)
                    for texts in zip(AT_ONCE, alone, at_once, strict=True)
                ]
            finally:
                scorer.close()
            assert max(gaps) <= ROUNDING, (gaps, alone, at_once)
        (model,) = server.get("/stats")["models"]
        jobs = model["recent"][-len(AT_ONCE) :]
        assert all(job["written_beside"] == 0 for job in model["recent"][: len(AT_ONCE)])
        assert max(job["written_beside"] for job in jobs) >= 1, jobs
    finally:
        stop_engine(server)


def test_two_windows_asking_at_once_are_both_served_and_counted_apart(
    engine: EngineProcess,
) -> None:
    """docs/engine-server.md "Clients": two language servers (`X-Infill-Client`) asking for
    completions of one document at once, their requests interleaved, are each answered
    whole; /stats?client=NAME lists each one's jobs, tagged with its name."""
    windows = ("e2e-window-1", "e2e-window-2")
    document = "file:///w/shared.py"  # one file open in both windows, at two versions
    versions = {windows[0]: PROMPT, windows[1]: PROMPT + "    # the nth number\n"}

    def ask(window: str) -> Any:
        return complete(
            engine,
            prompt=versions[window],
            max_tokens=12,
            extra_headers={CLIENT_HEADER: window},
            extra_body={"cache_key": document},
        )

    asked = [windows[i % 2] for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(len(asked)) as pool:
        answers = list(pool.map(ask, asked))
    for answer in answers:
        (choice,) = answer.choices
        assert choice.finish_reason in ("stop", "length")
        assert answer.usage.completion_tokens >= 1
    for window in windows:
        (model,) = [
            m for m in engine.get(f"/stats?client={window}")["models"] if "completion" in m["roles"]
        ]
        mine = {a.id for a, w in zip(answers, asked, strict=True) if w == window}
        assert {job["request_id"] for job in model["recent"]} == mine
        assert {(job["client"], job["cache_key"]) for job in model["recent"]} == {
            (window, document)
        }
        assert model["jobs_finished"] == len(mine)
