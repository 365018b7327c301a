"""The engine facade and its worker, on the scripted backend: streaming, cancel, errors, queues."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol, Unpack

import pytest
from fake_backend import FakeBackend, FakeCall, FakeOptions, ScriptEntry, byte_ids
from job_events import JobWatch, TokenGate

import engine.worker as worker_module
from engine.engine import ChoiceResult, Engine
from engine.errors import EngineClosedError, PromptTooLongError
from engine.jobs import JobPhase
from engine.types import (
    BranchRequest,
    ChatMessage,
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    ScoreRequest,
    StopConditions,
    TextDelta,
)


class MakeEngine(Protocol):
    """The `make_engine` fixture: an engine over a new FakeBackend with these options."""

    def __call__(
        self, *, script: list[ScriptEntry] | None = None, **options: Unpack[FakeOptions]
    ) -> tuple[Engine, FakeBackend]: ...


@pytest.fixture
def make_engine() -> Iterator[MakeEngine]:
    engines: list[Engine] = []

    def make(
        *, script: list[ScriptEntry] | None = None, **options: Unpack[FakeOptions]
    ) -> tuple[Engine, FakeBackend]:
        backend = FakeBackend(script=[] if script is None else script, **options)
        engine = Engine(backend)
        engines.append(engine)
        return engine, backend

    yield make
    for engine in engines:
        engine.close()


def request(
    prompt: str = "x",
    *,
    sampling: SamplingParams | None = None,
    stops: StopConditions | None = None,
) -> GenerationRequest:
    return GenerationRequest(
        prompt=prompt,
        sampling=SamplingParams(max_tokens=100) if sampling is None else sampling,
        stops=StopConditions() if stops is None else stops,
    )


async def stream(engine: Engine, req: GenerationRequest) -> list[TextDelta]:
    return [d async for d in engine.generate(req)]


async def test_streamed_deltas_join_to_the_collected_text(make_engine: MakeEngine) -> None:
    engine, _ = make_engine(script=["héllo 😀 wörld"])
    deltas = await stream(engine, request())
    assert "".join(d.text for d in deltas) == "héllo 😀 wörld"
    assert [d.finish_reason for d in deltas][-1] is FinishReason.STOP
    assert all(d.finish_reason is None for d in deltas[:-1])
    (result,) = await engine.collect(request())
    assert result.text == "héllo 😀 wörld"


async def test_the_models_end_token_stops_and_is_not_shown(make_engine: MakeEngine) -> None:
    engine, _ = make_engine(script=[["ab", 1, "cd"]])
    (result,) = await engine.collect(request())
    assert (result.text, result.finish_reason, result.stop_reason) == (
        "ab",
        FinishReason.STOP,
        None,
    )


async def test_hidden_stop_string_is_cut_and_reported(make_engine: MakeEngine) -> None:
    engine, _ = make_engine(script=["x = 1\n\ny = 2"])
    (result,) = await engine.collect(request(stops=StopConditions(stop=("\n\n",))))
    assert (result.text, result.stop_reason) == ("x = 1", "\n\n")


async def test_max_tokens_ends_with_length(make_engine: MakeEngine) -> None:
    engine, _ = make_engine(script=["abcdefgh"])
    (result,) = await engine.collect(request(sampling=SamplingParams(max_tokens=3)))
    assert (result.text, result.finish_reason) == ("abc", FinishReason.LENGTH)


async def test_generation_is_capped_by_the_room_left_in_the_context(
    make_engine: MakeEngine,
) -> None:
    engine, _ = make_engine(script=["abcdefgh"], context=6)
    # "<bos>" + "xy" take 3 of 6 positions: 3 tokens are left.
    (result,) = await engine.collect(request("xy", sampling=SamplingParams(max_tokens=100)))
    assert (result.text, result.finish_reason) == ("abc", FinishReason.LENGTH)


async def test_a_prompt_longer_than_the_context_is_a_clear_error(make_engine: MakeEngine) -> None:
    engine, _ = make_engine(script=["a"], context=8)
    with pytest.raises(
        PromptTooLongError, match="the prompt has 21 tokens but the model's context holds 8"
    ):
        await stream(engine, request("x" * 20))
    # The engine serves the next request normally.
    (result,) = await engine.collect(request("x"))
    assert result.text == "a"


async def test_closing_the_stream_stops_the_model_within_one_token(make_engine: MakeEngine) -> None:
    """The consumer goes away while the model computes its 5th token: that token is the
    only one after the cancel, as the engine's own figures say, and the model stops there."""
    gate = TokenGate(at=5, hold=True)
    engine, backend = make_engine(script=["a" * 200, "ok"], repeat_last=False, on_step=gate)
    req = request()
    with JobWatch(engine.job_record) as watch:
        async with contextlib.aclosing(engine.generate(req)) as deltas:
            async for _ in deltas:
                await gate.wait()  # the model is at work on token 5...
                break  # ...when the consumer goes away after its first delta
        gate.release()
        stats = await watch.ended(req.request_id)
    assert stats.finish_reasons == (FinishReason.CANCELLED,)
    assert stats.tokens_after_cancel == 1
    assert backend.calls[0].yielded == stats.generated_tokens == 5  # none made and unseen
    # Next request is served normally.
    (result,) = await engine.collect(request())
    assert result.text == "ok"


async def test_cancel_is_seen_before_the_next_token(make_engine: MakeEngine) -> None:
    seen: dict[str, int] = {}

    def cancel_at_five(call: FakeCall) -> None:
        if call.yielded == 5:
            seen["at"] = call.yielded
            engine.cancel(req.request_id)

    engine, backend = make_engine(script=["a" * 50], on_step=cancel_at_five)
    req = request()
    with JobWatch(engine.job_record) as watch:
        deltas = await stream(engine, req)
        stats = await watch.ended(req.request_id)
    assert backend.calls[0].yielded == seen["at"]  # not one token more
    assert deltas[-1].finish_reason is FinishReason.CANCELLED
    assert "".join(d.text for d in deltas) == "a" * 5
    # The 5th token was being computed when the cancel came: the one token after it.
    assert stats.tokens_after_cancel == 1


async def test_a_cancelled_consumer_task_aborts_the_job(make_engine: MakeEngine) -> None:
    gate = TokenGate(at=3, hold=True)
    engine, backend = make_engine(script=["a" * 500, "next"], repeat_last=False, on_step=gate)
    req = request()

    async def consume() -> None:
        async for _ in engine.generate(req):
            pass

    with JobWatch(engine.job_record) as watch:
        task = asyncio.create_task(consume())
        await gate.wait()  # the model is at work on token 3
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.release()
        stats = await watch.ended(req.request_id)
    (result,) = await engine.collect(request())
    assert result.text == "next"
    assert stats.finish_reasons == (FinishReason.CANCELLED,)
    assert stats.tokens_after_cancel == 1
    assert backend.calls[0].yielded == 3


async def test_n_choices_have_independent_stop_state(make_engine: MakeEngine) -> None:
    engine, backend = make_engine(script=["ab\n\ncd", "abc\nd"], repeat_last=False)
    req = request(
        sampling=SamplingParams(max_tokens=100, n=2, seed=7, temperature=0.5),
        stops=StopConditions(stop=("\n\n",)),
    )
    results = await engine.collect(req)
    assert [r.text for r in results] == ["ab", "abc\nd"]
    assert [r.stop_reason for r in results] == ["\n\n", None]
    assert [c.sampling.seed for c in backend.calls] == [7, 8]  # each choice its own seed


async def test_a_backend_failure_ends_with_error_and_no_stop(make_engine: MakeEngine) -> None:
    engine, backend = make_engine(script=["abcdef"], fail_after=3)
    deltas = await stream(engine, request(stops=StopConditions(stop=("cdX",))))
    assert deltas[-1].finish_reason is FinishReason.ERROR
    assert "simulated backend failure" in (deltas[-1].error or "")
    assert not [d for d in deltas if d.finish_reason is FinishReason.STOP]
    assert "".join(d.text for d in deltas) == "ab"  # the withheld "c" is not flushed
    backend.fail_after = None
    (result,) = await engine.collect(request())
    assert result.text == "abcdef"


async def test_chat_messages_are_rendered_with_the_models_template(make_engine: MakeEngine) -> None:
    template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    engine, backend = make_engine(script=["hi"], template=template)
    req = GenerationRequest(messages=(ChatMessage("user", "hello"),))
    (result,) = await engine.collect(req)
    assert result.text == "hi"
    assert backend.calls[0].prompt_ids == (0, *byte_ids("<user>hello<assistant>"))


async def test_requests_to_one_model_queue_in_order(make_engine: MakeEngine) -> None:
    engine, _ = make_engine(script=["first", "second"], repeat_last=False, step_seconds=0.001)
    a, b = await asyncio.gather(engine.collect(request()), engine.collect(request()))
    assert (a[0].text, b[0].text) == ("first", "second")


async def test_a_long_job_on_one_model_never_delays_another_model(make_engine: MakeEngine) -> None:
    gate = TokenGate(at=10, hold=True)  # the other model is held mid-job
    slow, _ = make_engine(script=["x" * 2000], on_step=gate, name="chat")
    fast, _ = make_engine(script=["quick"], name="completion")
    long_job = asyncio.create_task(slow.collect(request(sampling=SamplingParams(max_tokens=5000))))
    try:
        await gate.wait()
        (result,) = await fast.collect(request())
        assert result.text == "quick"
        assert not long_job.done()  # answered while the other model was still busy
    finally:
        gate.release()
    slow_results = await long_job
    assert slow_results[0].text == "x" * 2000


async def test_one_model_serving_both_roles_lets_a_completion_pass_a_running_chat(
    make_engine: MakeEngine,
) -> None:
    answer = "".join(f"word{i} " for i in range(150))
    gate = TokenGate(at=10, hold=True)  # the chat is held at its 10th token...
    engine, backend = make_engine(script=[answer, "quick"], repeat_last=False, on_step=gate)
    chat_request = GenerationRequest(
        prompt="explain", role=Role.CHAT, sampling=SamplingParams(max_tokens=5000)
    )
    completion_request = request("x = ")
    with JobWatch(engine.job_record) as watch:
        chat = asyncio.create_task(engine.collect(chat_request))
        await gate.wait()
        completion_job = asyncio.create_task(engine.collect(completion_request))
        # ...until the completion is queued: the chat sees it right after that token.
        await watch.reached(JobPhase.SUBMITTED, completion_request.request_id)
        gate.release()
        (completion,) = await completion_job
    assert completion.text == "quick"
    # The completion did not wait for the chat to end: the chat stopped after 10 of its
    # tokens, the completion ran, then the chat went on...
    assert backend.calls[1].prompt_ids == (0, *byte_ids("x = "))
    assert backend.calls[0].yielded == 10
    (explained,) = await chat
    assert explained.text == answer  # ...and was not cancelled: it resumed whole
    assert explained.finish_reason is FinishReason.STOP
    # It resumed from its prompt plus the tokens it had, not from scratch.
    resumed = backend.calls[2]
    assert len(resumed.prompt_ids) > len(backend.calls[0].prompt_ids)
    assert resumed.prompt_ids[: len(backend.calls[0].prompt_ids)] == backend.calls[0].prompt_ids


class RecordingBackend(FakeBackend):
    """A scripted backend that records, when it is freed, whether a worker thread still ran."""

    def __post_init__(self) -> None:
        FakeBackend.__post_init__(self)
        self.freed_while: list[bool] = []

    def close(self) -> None:
        alive = [t for t in threading.enumerate() if t.name == f"engine-{self.name}"]
        self.freed_while.append(any(t.is_alive() for t in alive))


async def test_closing_aborts_running_and_queued_jobs_refuses_new_ones_then_frees_the_model() -> (
    None
):
    backend = RecordingBackend(script=["x" * 5000], step_seconds=0.001, name="closing")
    engine = Engine(backend)
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    backend.on_step = lambda call: loop.call_soon_threadsafe(started.set)
    running = asyncio.create_task(stream(engine, request(sampling=SamplingParams(max_tokens=6000))))
    queued = asyncio.create_task(stream(engine, request("y")))
    await started.wait()

    await asyncio.to_thread(engine.close, "the model is being replaced")

    for task in (running, queued):
        with pytest.raises(EngineClosedError, match="the model is being replaced"):
            await task
    assert backend.calls[0].yielded < 5000  # aborted within a token, not run to its end
    assert len(backend.calls) == 1  # the queued job never reached the model
    with pytest.raises(EngineClosedError, match="the model is being replaced"):
        await stream(engine, request())
    assert backend.freed_while == [False]  # freed once, after its worker thread ended
    (stats,) = engine.recent_stats
    assert stats.finish_reasons == (FinishReason.CANCELLED,)
    assert stats.tokens_after_cancel is not None
    assert stats.tokens_after_cancel <= 1


async def test_a_worker_that_does_not_stop_keeps_its_model() -> None:
    """A backend that hangs (a token that does not come until the test lets it) is never
    freed under its thread."""
    gate = TokenGate(at=1, hold=True)
    backend = RecordingBackend(script=["xyz"], on_step=gate, name="hanging")
    engine = Engine(backend)
    job = asyncio.create_task(stream(engine, request()))
    await gate.wait()
    try:
        await asyncio.to_thread(engine.close, "shutting down", 0.05)
        assert backend.freed_while == []
    finally:
        gate.release()
    with pytest.raises(EngineClosedError, match="shutting down"):
        await job  # the token in progress ends, and the job with the reason
    await asyncio.to_thread(engine.close)
    assert backend.freed_while == [False]


async def test_a_scoring_job_answers_through_the_worker_and_is_recorded(
    make_engine: MakeEngine,
) -> None:
    def log_prob(context: Sequence[int], token: int) -> float:
        return -0.5 if token == byte_ids("b")[0] else -3.0

    engine, _backend = make_engine(log_prob=log_prob)
    assert engine.can_score
    prompt = tuple(byte_ids("a"))
    scores = await engine.score(
        ScoreRequest(prompt_token_ids=prompt, continuations=(tuple(byte_ids("bc")),), top=1)
    )
    assert scores is not None
    assert scores.continuations == ((-0.5, -3.0),)
    assert scores.top == ((byte_ids("b")[0], -0.5),)
    total, recent = engine.job_record.snapshot()
    assert total == 1
    assert recent[-1].generated_tokens == 0


async def test_an_engine_whose_model_cannot_score_says_so(make_engine: MakeEngine) -> None:
    engine, _ = make_engine()
    assert not engine.can_score
    with pytest.raises(NotImplementedError):
        await engine.score(ScoreRequest(prompt_token_ids=(1, 2)))


# --- turns among jobs of one priority ------------------------------------------------------


class TokenClock:
    """The worker's clock, moved on by the scripted "model" one tick per token: how long a job
    has held the model is then counted in tokens, the same on any machine."""

    TICK = 1 / 64  # a power of two: sums of ticks are exact

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def step(self, call: FakeCall) -> None:
        self.now += self.TICK


@pytest.fixture
def token_clock(monkeypatch: pytest.MonkeyPatch) -> TokenClock:
    clock = TokenClock()
    monkeypatch.setattr(worker_module, "time", clock)
    return clock


def turn_tokens() -> int:
    """The tokens after which a job has held the model `TURN_SECONDS` longer than a new one."""
    return round(worker_module.TURN_SECONDS / TokenClock.TICK)


async def test_a_small_completion_goes_before_a_long_one_that_has_had_its_turn(
    make_engine: MakeEngine, token_clock: TokenClock
) -> None:
    long_answer = "".join(f"word{i} " for i in range(150))
    held_at = turn_tokens() + 4  # the long job has held the model longer than a turn
    gate = TokenGate(at=held_at, hold=True, also=token_clock.step)
    engine, backend = make_engine(script=[long_answer, "quick"], repeat_last=False, on_step=gate)
    greedy = request("tell me a story", sampling=SamplingParams(max_tokens=5000))
    small = request("x = ")
    with JobWatch(engine.job_record) as watch:
        long_job = asyncio.create_task(engine.collect(greedy))
        await gate.wait()
        small_job = asyncio.create_task(engine.collect(small))
        await watch.reached(JobPhase.SUBMITTED, small.request_id)
        gate.release()
        (completion,) = await small_job
    assert completion.text == "quick"
    # The long job stepped aside right after the token it was at, the small one ran whole...
    assert backend.calls[0].yielded == held_at
    assert backend.calls[1].prompt_ids == (0, *byte_ids("x = "))
    # ...and the long one went on from its prompt and its tokens so far, to its whole answer.
    (story,) = await long_job
    assert (story.text, story.finish_reason) == (long_answer, FinishReason.STOP)
    resumed = backend.calls[2]
    assert resumed.prompt_ids[: len(backend.calls[0].prompt_ids)] == backend.calls[0].prompt_ids
    assert len(resumed.prompt_ids) == len(backend.calls[0].prompt_ids) + held_at


async def test_two_long_jobs_of_one_priority_take_turns(
    make_engine: MakeEngine, token_clock: TokenClock
) -> None:
    first = "a" * 300
    second = "b" * 300
    gate = TokenGate(at=2, hold=True, also=token_clock.step)
    engine, backend = make_engine(script=[first, second], repeat_last=False, on_step=gate)
    a = request("first story", sampling=SamplingParams(max_tokens=5000))
    b = request("second story", sampling=SamplingParams(max_tokens=5000))
    with JobWatch(engine.job_record) as watch:
        a_job = asyncio.create_task(engine.collect(a))
        await gate.wait()
        b_job = asyncio.create_task(engine.collect(b))
        await watch.reached(JobPhase.SUBMITTED, b.request_id)
        gate.release()
        ((a_text,), (b_text,)) = await asyncio.gather(a_job, b_job)
    assert (a_text.text, b_text.text) == (first, second)
    # Whose each turn was, in order: they alternated, each answer in several turns.
    turns = [
        "a" if call.prompt_ids[1 : 1 + len("first")] == tuple(byte_ids("first")) else "b"
        for call in backend.calls
    ]
    assert turns[:4] == ["a", "b", "a", "b"]
    assert all(x != y for x, y in itertools.pairwise(turns))
    # The first waited until the second's turn was due; the second took one turn more.
    assert backend.calls[0].yielded == turn_tokens() + 1
    assert backend.calls[1].yielded == 2 * turn_tokens() + 2


async def test_a_job_cancelled_while_it_waits_ends_without_waiting_for_its_turn(
    make_engine: MakeEngine, token_clock: TokenClock
) -> None:
    let_go = threading.Event()
    steps = {"n": 0}

    def step(call: FakeCall) -> None:
        token_clock.step(call)
        steps["n"] += 1
        if steps["n"] == 8:  # the long job is held again, after the cancelled one has gone
            let_go.wait(60)

    gate = TokenGate(at=3, hold=True, also=step)
    engine, backend = make_engine(script=["c" * 200, "never"], repeat_last=False, on_step=gate)
    running = request("long", sampling=SamplingParams(max_tokens=5000))
    waiting = request("short")
    with JobWatch(engine.job_record) as watch:
        running_job = asyncio.create_task(engine.collect(running))
        await gate.wait()
        waiting_job = asyncio.create_task(engine.collect(waiting))
        await watch.reached(JobPhase.SUBMITTED, waiting.request_id)
        assert engine.cancel(waiting.request_id)
        gate.release()
        try:
            (cancelled,) = await waiting_job
            assert cancelled.finish_reason is FinishReason.CANCELLED
            assert not running_job.done()  # it ended while the long job still ran
        finally:
            let_go.set()
        (answer,) = await running_job
    assert answer.text == "c" * 200
    assert len(backend.calls) == 2  # the cancelled job never reached the model


async def test_branches_each_stop_on_their_own_as_generations_would(
    make_engine: MakeEngine,
) -> None:
    """A branch request: each first token after the prompt, continued until its own stop
    string, end-of-generation token or the token limit, its text without the first token."""
    engine, backend = make_engine(
        script=["ab\ncd", ["x", 1, "y"], "long text"], log_prob=lambda _prompt, _token: 0.0
    )
    firsts = tuple(byte_ids("pqr"))
    answer = await engine.branch(
        BranchRequest(
            prompt_token_ids=tuple(byte_ids("def")),
            first_tokens=firsts,
            sampling=SamplingParams(max_tokens=5),
            stops=StopConditions(stop=("\n",)),
        )
    )
    assert answer is not None
    assert answer.texts == ("ab", "x", "long ")
    assert answer.finish_reasons == (FinishReason.STOP, FinishReason.STOP, FinishReason.LENGTH)
    assert [call.prompt_ids for call in backend.calls] == [
        (*byte_ids("def"), first) for first in firsts
    ]


def test_cancelled_branches_give_nothing(make_engine: MakeEngine) -> None:
    _, backend = make_engine(script=["ab"])
    cancelled = threading.Event()
    cancelled.set()
    assert backend.branch(byte_ids("x"), byte_ids("ab"), 4, lambda *_: False, cancelled) is None


# --- turns among clients (editor windows sharing one engine) --------------------------------


def named(call: FakeCall) -> str:
    """Which job a call served: the first two characters of its prompt, after the BOS."""
    return bytes(t - 16 for t in call.prompt_ids[1:3]).decode()


async def window_jobs(
    make_engine: MakeEngine, token_clock: TokenClock, *, clients: tuple[str | None, str | None]
) -> tuple[FakeBackend, dict[str, ChoiceResult], dict[str, float]]:
    """One window's (`clients[0]`) stream of four completions of 40 tokens each, the first one
    running when the other three and another window's (`clients[1]`) single completion come,
    all of one document. Each job's answer and the seconds it waited (the worker's clock)."""
    answer = "y" * 40
    gate = TokenGate(at=2, hold=True, also=token_clock.step)
    engine, backend = make_engine(script=[answer], on_step=gate)
    mine, theirs = clients

    def job(name: str, client: str | None) -> GenerationRequest:
        return GenerationRequest(
            prompt=f"{name} story",
            sampling=SamplingParams(max_tokens=100),
            cache_key="file:///same.py",
            client=client,
        )

    names = ["a1", "a2", "a3", "a4", "b1"]
    requests = {n: job(n, theirs if n == "b1" else mine) for n in names}
    with JobWatch(engine.job_record) as watch:
        tasks = {"a1": asyncio.create_task(engine.collect(requests["a1"]))}
        await gate.wait()
        for n in names[1:]:
            tasks[n] = asyncio.create_task(engine.collect(requests[n]))
            await watch.reached(JobPhase.SUBMITTED, requests[n].request_id)
        gate.release()
        answers = {n: (await tasks[n])[0] for n in names}
        waits = {n: (await watch.ended(requests[n].request_id)).queued_seconds for n in names}
    return backend, answers, waits


async def test_another_windows_single_job_waits_at_most_one_turn_behind_a_stream_of_jobs(
    make_engine: MakeEngine, token_clock: TokenClock
) -> None:
    backend, answers, waits = await window_jobs(make_engine, token_clock, clients=("w1", "w2"))
    # Every job of both windows was answered whole: one window's jobs never cancel the
    # other's, though they are of one document.
    assert all((a.text, a.finish_reason) == ("y" * 40, FinishReason.STOP) for a in answers.values())
    order = [named(call) for call in backend.calls]
    # The other window went right after the first job's turn, before the rest of the stream...
    assert order[:2] == ["a1", "b1"]
    assert backend.calls[0].yielded == turn_tokens() + 1
    # ...having waited one turn and no more (it came at the first job's second token).
    assert waits["b1"] <= worker_module.TURN_SECONDS
    # The two windows' states of the document are kept apart (engine/prefix_cache.py).
    keys = {named(call): call.cache_key for call in backend.calls}
    assert keys["a1"] == "w1|file:///same.py"
    assert keys["b1"] == "w2|file:///same.py"


async def test_anonymous_jobs_keep_their_turns_by_job(
    make_engine: MakeEngine, token_clock: TokenClock
) -> None:
    backend, answers, waits = await window_jobs(make_engine, token_clock, clients=(None, None))
    assert all(a.finish_reason is FinishReason.STOP for a in answers.values())
    # Without names each job is a client of its own: the new jobs go in the order they came,
    # the last one after the three before it, and the document's key is the request's.
    first_calls = list(dict.fromkeys(named(call) for call in backend.calls))
    assert first_calls == ["a1", "a2", "a3", "a4", "b1"]
    assert waits["b1"] > 3 * worker_module.TURN_SECONDS
    assert {call.cache_key for call in backend.calls} == {"file:///same.py"}
