"""The `infill/stats` request: the engines' figures for their most recent jobs.

Each loaded engine keeps a bounded record of its finished jobs (`engine.jobs.JobRecord`); this
request reports it as JSON (`engine.jobs.record_json`, the form the HTTP API's `/stats` shares),
so that benchmarks and tools read the figures through the protocol instead of parsing log
lines. One engine that serves both roles is reported once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.engine import BaseEngine
from engine.jobs import ReportWords, record_json
from engine.types import Role

STATS_REQUEST = "infill/stats"

#: This request's names for the fields the two reports name their own way (docs/protocol.md
#: documents them; benchmarks and tests read them).
WORDS = ReportWords(finished="total_jobs", recent="jobs", document="document")


def stats_report(engines: Mapping[Role, BaseEngine]) -> dict[str, Any]:
    """Per loaded engine: its roles, its model, how many jobs it finished (`total_jobs`) and
    the most recent ones (`jobs`, oldest first), and the jobs under way (`running`)."""
    report: list[dict[str, Any]] = []
    by_engine: dict[int, dict[str, Any]] = {}
    for role, engine in engines.items():
        entry = by_engine.get(id(engine))
        if entry is not None:
            entry["roles"].append(role.value)
            continue
        entry = {
            "roles": [role.value],
            "model": engine.info.name,
            **record_json(engine.job_record, WORDS),
        }
        by_engine[id(engine)] = entry
        report.append(entry)
    return {"engines": report}
