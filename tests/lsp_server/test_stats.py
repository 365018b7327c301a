"""The engines' per-job figures: the bounded record the worker keeps, and the `infill/stats`
report built from it (on the scripted backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fake_backend import FakeBackend
from job_events import JobWatch, TokenGate

from engine.engine import Engine
from engine.jobs import COUNTED_CLIENTS, JobEvent, JobPhase, JobRecord, JobStats, job_json
from engine.types import FinishReason, GenerationRequest, Role, SamplingParams
from lsp_server.stats import WORDS, stats_report


def figures(number: int, *finishes: FinishReason | None) -> JobStats:
    return JobStats(
        request_id=f"req-{number}",
        prompt_tokens=10 + number,
        prompt_evaluated=None if number == 0 else 3,
        generated_tokens=number,
        queued_seconds=0.001,
        first_token_seconds=None if number == 0 else 0.0195,
        total_seconds=0.0744,
        finish_reasons=finishes or (FinishReason.STOP,),
    )


def test_the_record_keeps_the_last_jobs_oldest_first_and_counts_them_all() -> None:
    record = JobRecord(size=3)
    assert record.snapshot() == (0, ())
    for number in range(5):
        record.add(figures(number))
    total, jobs = record.snapshot()
    assert total == 5
    assert [job.request_id for job in jobs] == ["req-2", "req-3", "req-4"]


def test_each_clients_share_of_the_record_counts_its_own_jobs_within_a_bound() -> None:
    record = JobRecord(size=3)
    for number, client in enumerate(["w1", "w2", "w1", None, "w1"]):
        record.add(replace(figures(number), client=client))
    total, jobs, running = record.client_snapshot("w1")
    # Its count is of all its jobs; its recent ones are those still in the record.
    assert (total, [j.request_id for j in jobs], running) == (3, ["req-2", "req-4"], ())
    assert record.client_snapshot("w2")[:2] == (1, ())
    # A record does not grow with every name: a client whose count is the least recently
    # moved of more than COUNTED_CLIENTS starts again from 0.
    for number in range(COUNTED_CLIENTS):
        record.add(replace(figures(number), client=f"other-{number}"))
    assert record.client_snapshot("w1")[0] == 0
    assert record.client_snapshot(f"other-{COUNTED_CLIENTS - 1}")[0] == 1


def test_a_job_is_reported_with_its_tokens_times_in_ms_and_each_choices_finish() -> None:
    assert job_json(figures(0, FinishReason.CANCELLED, None), WORDS) == {
        "request_id": "req-0",
        "prompt_tokens": 10,
        "prompt_evaluated": None,
        "generated_tokens": 0,
        "queued_ms": 1.0,
        "first_token_ms": None,
        "total_ms": 74.4,
        "finish_reasons": ["cancelled", None],
        "tokens_after_cancel": None,
        "written_beside": 0,
        "document": None,
        "client": None,
    }
    assert job_json(figures(4), WORDS)["first_token_ms"] == 19.5


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = Engine(FakeBackend(script=["abc"]), name="completion")
    yield engine
    engine.close()


async def test_a_finished_job_shows_up_in_the_engines_report(engine: Engine) -> None:
    request = GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=100))
    with JobWatch(engine.job_record) as watch:
        await engine.collect(request)
        # The worker records the job after its last delta: wait for its end.
        await watch.ended(request.request_id)
    report = stats_report({Role.COMPLETION: engine})
    (entry,) = report["engines"]
    assert entry["roles"] == ["completion"]
    assert entry["total_jobs"] == 1
    (job,) = entry["jobs"]
    assert job["request_id"] == request.request_id
    assert job["prompt_tokens"] > 0
    assert job["generated_tokens"] == 3
    assert job["finish_reasons"] == ["stop"]
    assert job["tokens_after_cancel"] is None  # never cancelled
    assert entry["running"] == []
    assert engine.recent_stats[-1].request_id == request.request_id


async def test_a_job_under_way_is_listed_as_running_with_its_document_and_phase() -> None:
    gate = TokenGate(at=2, hold=True)  # the first token is out: the job is generating
    engine = Engine(FakeBackend(script=["abc"], on_step=gate), name="completion")
    request = GenerationRequest(prompt="x", cache_key="file:///a.py")
    with JobWatch(engine.job_record) as watch:
        job = asyncio.create_task(engine.collect(request))
        try:
            await watch.reached(JobPhase.GENERATING, request.request_id)
            (entry,) = stats_report({Role.COMPLETION: engine})["engines"]
            assert entry["running"] == [
                {
                    "request_id": request.request_id,
                    "document": "file:///a.py",
                    "client": None,
                    "phase": "generating",
                }
            ]
        finally:
            gate.release()
        await job
        await watch.ended(request.request_id)
    (entry,) = stats_report({Role.COMPLETION: engine})["engines"]
    assert entry["running"] == []
    assert entry["jobs"][-1]["document"] == "file:///a.py"
    await asyncio.to_thread(engine.close)


async def test_each_phase_is_announced_once_in_order_and_a_failing_listener_is_harmless(
    engine: Engine,
) -> None:
    def failing(event: JobEvent) -> None:
        raise RuntimeError("a broken listener")

    stop_failing = engine.job_record.watch(failing)
    request = GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=100))
    with JobWatch(engine.job_record) as watch:
        (result,) = await engine.collect(request)
        await watch.ended(request.request_id)
    stop_failing()
    assert result.text == "abc"
    rid = request.request_id
    assert [(e.phase, e.request_id) for e in watch.events] == [
        (JobPhase.SUBMITTED, rid),
        (JobPhase.GENERATING, rid),
        (JobPhase.ENDED, rid),
    ]


async def test_a_job_cancelled_while_queued_ends_without_figures() -> None:
    """A job cancelled before the worker took it up is announced as ended, without
    figures, and is no longer listed as running."""
    gate = TokenGate(at=1, hold=True)
    engine = Engine(FakeBackend(script=["abc"], on_step=gate), name="completion")
    first, queued = GenerationRequest(prompt="x"), GenerationRequest(prompt="y")
    with JobWatch(engine.job_record) as watch:
        running = asyncio.create_task(engine.collect(first))
        await gate.wait()  # the worker is busy with the first job...
        waiting = asyncio.create_task(engine.collect(queued))
        await watch.reached(JobPhase.SUBMITTED, queued.request_id)
        assert engine.cancel(queued.request_id)  # ...so the second is cancelled in the queue
        gate.release()
        await running
        (cancelled,) = await waiting
        end = await watch.reached(JobPhase.ENDED, queued.request_id)
    assert cancelled.finish_reason is FinishReason.CANCELLED
    assert end.stats is None
    assert engine.job_record.running() == ()
    assert [s.request_id for s in engine.recent_stats] == [first.request_id]
    await asyncio.to_thread(engine.close)
