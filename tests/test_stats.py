"""The engines' per-job figures: the bounded record the worker keeps, and the `infill/stats`
report built from it (on the scripted backend)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from engine.backends.fake import FakeBackend
from engine.engine import Engine
from engine.types import FinishReason, GenerationRequest, Role, SamplingParams
from engine.worker import JobRecord, JobStats
from lsp_server.stats import job_json, stats_report


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


def test_a_job_is_reported_with_its_tokens_times_in_ms_and_each_choices_finish() -> None:
    assert job_json(figures(0, FinishReason.CANCELLED, None)) == {
        "request_id": "req-0",
        "prompt_tokens": 10,
        "prompt_evaluated": None,
        "generated_tokens": 0,
        "queued_ms": 1.0,
        "first_token_ms": None,
        "total_ms": 74.4,
        "finish_reasons": ["cancelled", None],
    }
    assert job_json(figures(4))["first_token_ms"] == 19.5


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = Engine(FakeBackend(script=["abc"]), name="completion")
    yield engine
    engine.close()


async def test_a_finished_job_shows_up_in_the_engines_report(engine: Engine) -> None:
    request = GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=100))
    await engine.collect(request)
    # The worker records the job after its last delta: wait for it the way a client does.
    deadline = time.perf_counter() + 5
    while not engine.job_record.snapshot()[0]:
        assert time.perf_counter() < deadline, "the job was never recorded"
        await asyncio.sleep(0.01)
    report = stats_report({Role.COMPLETION: engine})
    (entry,) = report["engines"]
    assert entry["roles"] == ["completion"]
    assert entry["total_jobs"] == 1
    (job,) = entry["jobs"]
    assert job["request_id"] == request.request_id
    assert job["prompt_tokens"] > 0
    assert job["generated_tokens"] == 3
    assert job["finish_reasons"] == ["stop"]
    assert engine.recent_stats[-1].request_id == request.request_id


def test_one_engine_serving_both_roles_is_reported_once(engine: Engine) -> None:
    report = stats_report({Role.COMPLETION: engine, Role.CHAT: engine})
    (entry,) = report["engines"]
    assert entry["roles"] == ["completion", "chat"]
    assert entry["total_jobs"] == 0
    assert entry["jobs"] == []


def test_no_loaded_engine_is_an_empty_report() -> None:
    assert stats_report({}) == {"engines": []}
