"""What the engine records of its jobs: each finished job's figures (`JobStats`), the jobs
under way and their phases (`JobEvent`), kept by one `JobRecord` per engine, and the one JSON
form of that record that both protocols report (`record_json`).

A local engine's worker thread writes the record, a remote engine its event loop; any thread
reads it (the language server's `infill/stats`, the HTTP API's `/stats`, benchmarks, tests
waiting on a phase).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from engine.types import FinishReason

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStats:
    """Timings of one finished job, for logs and benchmarks."""

    request_id: str
    prompt_tokens: int
    #: Prompt tokens the model evaluated; the rest came from its KV cache or a kept state
    #: (None for a backend that does not say).
    prompt_evaluated: int | None
    generated_tokens: int
    queued_seconds: float
    first_token_seconds: float | None
    total_seconds: float
    finish_reasons: tuple[FinishReason | None, ...]
    #: Tokens the model handed over after the job's cancel was requested: the documented "stops
    #: within one token" as a figure (0 or 1). None: the job was not cancelled while it ran.
    tokens_after_cancel: int | None = None
    #: The most other requests whose tokens went in the same passes as its own (requests
    #: written together, engine/worker.py `_serve_group`); 0: it was written alone.
    written_beside: int = 0
    #: The document the prompt came from (the request's `cache_key`), so that a reader can
    #: pick out the jobs of one document.
    cache_key: str | None = None
    #: Who asked (the request's `client`), so that a reader can pick out one client's jobs.
    client: str | None = None


class JobPhase(enum.StrEnum):
    """Where a job is: what a test or a tool waits for instead of sleeping."""

    #: Handed to the worker (announced on the submitting thread); queued, or its prompt being
    #: evaluated.
    SUBMITTED = "submitted"
    GENERATING = "generating"  # its first token is out (announced on the worker thread)
    ENDED = "ended"  # over, its figures recorded if it ran (announced on the worker thread)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """One step of one job, as `JobRecord.watch` listeners get it."""

    phase: JobPhase
    request_id: str
    cache_key: str | None
    client: str | None = None  # who asked (the request's `client`)
    #: The job's figures, for ENDED; None before, and for a job that ended without running
    #: (refused, cancelled while queued, or failed before its first step).
    stats: JobStats | None = None


JobListener = Callable[[JobEvent], None]

#: How many clients' counts of finished jobs a record keeps, the most recently finishing
#: ones: a count is for a client that compares it between two calls, and a record must not
#: grow with every name a caller makes up.
COUNTED_CLIENTS = 1024


class JobRecord:
    """The figures of the last `size` finished jobs, how many jobs finished in all, the jobs
    under way, and listeners told of each job's phases.

    The worker thread adds; any thread reads (the `infill/stats` request, benchmarks). A lock
    keeps a reader from iterating the deque while the worker appends to it. Listeners run on
    the thread that announces the phase, outside the lock: they must be quick, and hand work
    to their own thread or event loop (`loop.call_soon_threadsafe`).
    """

    def __init__(self, size: int = 256) -> None:
        self._jobs: collections.deque[JobStats] = collections.deque(maxlen=size)
        self._total = 0
        self._finished_by: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._running: dict[str, JobEvent] = {}
        self._listeners: list[JobListener] = []
        self._lock = threading.Lock()

    def add(self, stats: JobStats) -> None:
        """Record a finished job's figures (and announce its end)."""
        with self._lock:
            self._jobs.append(stats)
            self._total += 1
            if stats.client is not None:
                self._count_client(stats.client)
        self.note(
            JobEvent(
                phase=JobPhase.ENDED,
                request_id=stats.request_id,
                cache_key=stats.cache_key,
                client=stats.client,
                stats=stats,
            )
        )

    def enter(self, event: JobEvent) -> None:
        """List a job as under way in `event`'s phase without telling the listeners (yet):
        a submitted job is listed before the worker can see it, and announced after."""
        with self._lock:
            if event.phase is JobPhase.ENDED:
                self._running.pop(event.request_id, None)
            else:
                self._running[event.request_id] = event

    def note(self, event: JobEvent) -> None:
        """List `event` (`enter`) and tell the listeners."""
        self.enter(event)
        self.announce(event)

    def announce(self, event: JobEvent) -> None:
        """Tell the listeners of `event`; one that raises is logged and the others still run."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("a job listener failed on %s", event)

    def close_unrecorded(self, request_id: str) -> None:
        """A job is over: if it ended without figures (it never ran), announce its end."""
        with self._lock:
            event = self._running.get(request_id)
        if event is not None:
            self.note(replace(event, phase=JobPhase.ENDED, stats=None))

    def watch(self, listener: JobListener) -> Callable[[], None]:
        """Call `listener` with each job's phases from now on; returns what stops it."""
        with self._lock:
            self._listeners.append(listener)

        def unwatch() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unwatch

    def running(self) -> tuple[JobEvent, ...]:
        """The jobs submitted and not yet over, each in its latest phase, oldest first."""
        with self._lock:
            return tuple(self._running.values())

    def snapshot(self) -> tuple[int, tuple[JobStats, ...]]:
        """(jobs finished since the engine started, the most recent ones, oldest first)."""
        with self._lock:
            return self._total, tuple(self._jobs)

    def _count_client(self, client: str) -> None:
        """One more finished job of `client` (under the lock)."""
        self._finished_by[client] = self._finished_by.pop(client, 0) + 1
        if len(self._finished_by) > COUNTED_CLIENTS:
            self._finished_by.popitem(last=False)

    def client_snapshot(
        self, client: str
    ) -> tuple[int, tuple[JobStats, ...], tuple[JobEvent, ...]]:
        """`client`'s share of the record: (its jobs finished, of those its most recent ones
        still in the record, its jobs under way). Its count restarts from 0 once
        `COUNTED_CLIENTS` other clients have finished jobs since its last one."""
        with self._lock:
            return (
                self._finished_by.get(client, 0),
                tuple(j for j in self._jobs if j.client == client),
                tuple(e for e in self._running.values() if e.client == client),
            )


# --- the record as JSON -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportWords:
    """The names a report gives the three fields its protocol names its own way (clients and
    tests read them); every other field is named the same in both reports."""

    #: How many jobs finished since the engine started.
    finished: str
    #: The most recent finished jobs' figures, oldest first.
    recent: str
    #: The document a job's prompt came from (the request's `cache_key`).
    document: str


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def job_json(stats: JobStats, words: ReportWords) -> dict[str, Any]:
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
        # "Stops within one token" (docs/language-server.md), measured: tokens after the cancel
        # was requested.
        "tokens_after_cancel": stats.tokens_after_cancel,
        "written_beside": stats.written_beside,
        words.document: stats.cache_key,
        "client": stats.client,
    }


def running_json(event: JobEvent, words: ReportWords) -> dict[str, Any]:
    """A job under way: its id, its document, who asked, and whether it is queued or
    generating."""
    return {
        "request_id": event.request_id,
        words.document: event.cache_key,
        "client": event.client,
        "phase": str(event.phase),
    }


def record_json(
    record: JobRecord, words: ReportWords, *, client: str | None = None
) -> dict[str, Any]:
    """How many jobs finished, the most recent ones (oldest first), and the jobs under way: a
    client counts new jobs by comparing the first between calls, and waits for a job to be
    generating by reading `running`. With `client`, that client's jobs only (its own count)."""
    if client is None:
        total, jobs = record.snapshot()
        running = record.running()
    else:
        total, jobs, running = record.client_snapshot(client)
    return {
        words.finished: total,
        words.recent: [job_json(job, words) for job in jobs],
        "running": [running_json(event, words) for event in running],
    }
