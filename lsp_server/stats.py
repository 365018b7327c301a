"""The `infill/stats` request: the engines' figures for their most recent jobs.

Each loaded engine keeps a bounded record of its finished jobs (`engine.worker.JobRecord`);
this request reports it as JSON, so that benchmarks and tools read the figures through the
protocol instead of parsing log lines. One engine that serves both roles is reported once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.engine import BaseEngine
from engine.types import Role
from engine.worker import JobEvent, JobStats

STATS_REQUEST = "infill/stats"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def job_json(stats: JobStats) -> dict[str, Any]:
    """One job's figures: token counts, times in milliseconds, each choice's finish reason."""
    return {
        "request_id": stats.request_id,
        "prompt_tokens": stats.prompt_tokens,
        "prompt_evaluated": stats.prompt_evaluated,
        "generated_tokens": stats.generated_tokens,
        "queued_ms": _ms(stats.queued_seconds),
        "first_token_ms": _ms(stats.first_token_seconds),
        "total_ms": _ms(stats.total_seconds),
        "finish_reasons": [None if r is None else str(r) for r in stats.finish_reasons],
        # "Stops within one token" (README), measured: tokens after the cancel was requested.
        "tokens_after_cancel": stats.tokens_after_cancel,
        "document": stats.cache_key,
    }


def running_json(event: JobEvent) -> dict[str, Any]:
    """A job under way: its id, its document, and whether it is queued or generating."""
    return {"request_id": event.request_id, "document": event.cache_key, "phase": str(event.phase)}


def stats_report(engines: Mapping[Role, BaseEngine]) -> dict[str, Any]:
    """Per loaded engine: its roles, its model, how many jobs it finished and the most recent
    ones (oldest first), and the jobs under way. A client counts new jobs by comparing
    `total_jobs` between calls, and waits for a job to be generating by reading `running`."""
    report: list[dict[str, Any]] = []
    by_engine: dict[int, dict[str, Any]] = {}
    for role, engine in engines.items():
        entry = by_engine.get(id(engine))
        if entry is not None:
            entry["roles"].append(role.value)
            continue
        total, jobs = engine.job_record.snapshot()
        entry = {
            "roles": [role.value],
            "model": engine.info.name,
            "total_jobs": total,
            "jobs": [job_json(job) for job in jobs],
            "running": [running_json(event) for event in engine.job_record.running()],
        }
        by_engine[id(engine)] = entry
        report.append(entry)
    return {"engines": report}
