"""The engine facade: `async generate(request)` yields text deltas.

Usage:

    async with contextlib.aclosing(engine.generate(request)) as deltas:
        async for delta in deltas:
            ...

If the consumer stops early (it is cancelled, or it closes the generator), the job is aborted
and the worker stops within one token, then serves the next job as usual.

Closing is ordered so that the model is never freed under the thread that runs it: `stop`
refuses new jobs and aborts the running ones (they end with `EngineClosedError`, naming why);
`close` then waits for the worker thread, and only then frees the model.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.backend import Backend, ModelInfo
from engine.errors import EngineClosedError
from engine.fim import PromptFormat
from engine.jobs import JobRecord, JobStats
from engine.prefix_cache import CacheStatus
from engine.types import (
    Branches,
    BranchRequest,
    FinishReason,
    GenerationRequest,
    ScoreRequest,
    Scores,
    TextDelta,
)
from engine.worker import END, Job, Worker

log = logging.getLogger(__name__)

#: Seconds `close` waits for the worker thread; an aborted job stops within one token.
CLOSE_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceResult:
    """A whole choice, collected from its deltas."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None
    stop_reason: str | int | None
    error: str | None = None


class _Channel:
    """Items from the worker thread to one consumer on the event loop.

    The worker appends to a deque and wakes the loop only when the consumer may be waiting
    (at most one wake-up in flight): waking the loop costs far more than appending, and a busy
    loop then takes several deltas per wake-up.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[object] = collections.deque()
        self._ready = asyncio.Event()
        self._wake_pending = threading.Lock()  # held while a wake-up is scheduled

    def put(self, item: object) -> None:
        """Called on the worker thread."""
        self._items.append(item)
        if self._wake_pending.acquire(blocking=False):
            try:
                self._loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the consumer's loop is gone; nobody is waiting
                self._wake_pending.release()

    def _wake(self) -> None:
        self._wake_pending.release()
        self._ready.set()

    async def get(self) -> object:
        while not self._items:
            self._ready.clear()
            if self._items:  # appended between the check and the clear
                break
            await self._ready.wait()
        return self._items.popleft()


J = TypeVar("J")
#: What a job that runs to its end at once answers (`Engine._answer`).
_Answer = TypeVar("_Answer", Scores, Branches)


class JobTable(Generic[J]):
    """An engine's running requests by id, and whether it has stopped taking new ones. Any
    thread may use it (a shutdown stops the engine from another one)."""

    def __init__(self) -> None:
        self._jobs: dict[str, J] = {}
        self._lock = threading.Lock()
        self._stopped: EngineClosedError | None = None

    def add(self, request_id: str, job: J) -> None:
        """Record a starting request; EngineClosedError (naming why) once stopped."""
        with self._lock:
            if self._stopped is not None:
                raise EngineClosedError(str(self._stopped))
            self._jobs[request_id] = job

    def remove(self, request_id: str) -> None:
        with self._lock:
            self._jobs.pop(request_id, None)

    def get(self, request_id: str) -> J | None:
        with self._lock:
            return self._jobs.get(request_id)

    def stop(self, reason: str) -> tuple[EngineClosedError, list[J]]:
        """Take no more requests: the error they get (the first stop's reason), and the
        requests running now, which the engine aborts with it."""
        with self._lock:
            if self._stopped is None:
                self._stopped = EngineClosedError(reason)
            return self._stopped, list(self._jobs.values())


class BaseEngine(abc.ABC):
    """What the editor side uses of an engine, local (`Engine`: a model on a worker thread) or
    remote (`engine.backends.openai.RemoteEngine`: an OpenAI-compatible server)."""

    @property
    @abc.abstractmethod
    def info(self) -> ModelInfo:
        """The model: name, backend, device, context size."""

    @property
    @abc.abstractmethod
    def job_record(self) -> JobRecord:
        """The bounded record of finished jobs (what `infill/stats` reports)."""

    @property
    def recent_stats(self) -> tuple[JobStats, ...]:
        """The figures of the most recent finished jobs, oldest first."""
        return self.job_record.snapshot()[1]

    @abc.abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncGenerator[TextDelta, None]:
        """Stream the request's deltas; raises `EngineError` subclasses for bad requests, and
        `EngineClosedError` once the engine is stopped. Closing the stream early aborts the
        request within one token."""

    @abc.abstractmethod
    def cancel(self, request_id: str) -> bool:
        """Stop a running request; its stream ends with CANCELLED deltas. False if unknown."""

    @abc.abstractmethod
    def stop(self, reason: str) -> None:
        """Refuse new jobs and abort the running ones, which end with `EngineClosedError`
        (`reason`). Returns at once."""

    @abc.abstractmethod
    def close(self, reason: str = "the engine is closed", timeout: float | None = None) -> None:
        """`stop`, then free what the engine holds. Blocks: call it from a thread."""

    @abc.abstractmethod
    def prompt_format(self, fim_family: str | None) -> PromptFormat:
        """How a completion prompt is built for this engine's model: `fim_family` names the
        FIM family ("none" for none; None: the model's own). ModelLoadError when the model
        cannot use the family named."""

    def cache_status(self) -> CacheStatus | None:
        """What the engine keeps of earlier prompts; None if it keeps nothing (or cannot say)."""
        return None

    @property
    def can_score(self) -> bool:
        """Whether `score` and `branch` work here (only our own engine server scores text
        among remote servers)."""
        return False

    @property
    def cannot_score(self) -> str | None:
        """Why `score` does not work here, in words for the status; None where it does."""
        return None if self.can_score else f"{self.info.backend} models cannot score text"

    async def score(self, request: ScoreRequest) -> Scores | None:
        """Log-probabilities of the request's continuations (`ScoreRequest`); None if the
        request was cancelled. Cancelling the awaiting task stops the model's work."""
        raise NotImplementedError(f"{self.info.backend} models cannot score text")

    async def branch(self, request: BranchRequest) -> Branches | None:
        """The greedy branches of the request's prompt (`BranchRequest`); None if the request
        was cancelled. Where `score` works; cancelling the awaiting task stops the model."""
        raise NotImplementedError(f"{self.info.backend} models cannot branch")

    async def collect(
        self, request: GenerationRequest, *, each: Callable[[TextDelta], object] | None = None
    ) -> list[ChoiceResult]:
        """Run a request to the end and return each choice whole (`each` sees every delta as
        it comes: what a caller reads of them beside the text)."""
        n = request.sampling.n
        texts: list[list[str]] = [[] for _ in range(n)]
        ids: list[list[int]] = [[] for _ in range(n)]
        last: list[TextDelta | None] = [None] * n
        async with contextlib.aclosing(self.generate(request)) as deltas:
            async for delta in deltas:
                if each is not None:
                    each(delta)
                texts[delta.index].append(delta.text)
                ids[delta.index].extend(delta.token_ids)
                last[delta.index] = delta
        results = []
        for i in range(n):
            end = last[i]
            results.append(
                ChoiceResult(
                    index=i,
                    text="".join(texts[i]),
                    token_ids=tuple(ids[i]),
                    finish_reason=end.finish_reason if end else None,
                    stop_reason=end.stop_reason if end else None,
                    error=end.error if end else None,
                )
            )
        return results


class Engine(BaseEngine):
    """One loaded model and its worker thread."""

    def __init__(self, backend: Backend, *, name: str | None = None) -> None:
        self.backend = backend
        self._worker = Worker(backend, name or backend.info.name)
        self._jobs: JobTable[Job] = JobTable()
        self._closed = False

    @property
    def info(self) -> ModelInfo:
        return self.backend.info

    @property
    def job_record(self) -> JobRecord:
        """The bounded record of finished jobs (what `infill/stats` reports)."""
        return self._worker.record

    def prompt_format(self, fim_family: str | None) -> PromptFormat:
        return PromptFormat.local(self.backend, fim_family)

    def cache_status(self) -> CacheStatus | None:
        return self.backend.cache_status()

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[TextDelta, None]:
        """Stream the request's deltas; raises `EngineError` subclasses for bad requests, and
        `EngineClosedError` once the engine is stopped."""
        async with contextlib.aclosing(self._run(request)) as items:
            async for item in items:
                assert isinstance(item, TextDelta)
                yield item

    async def _run(
        self, request: GenerationRequest | ScoreRequest | BranchRequest
    ) -> AsyncGenerator[object, None]:
        """The items the worker emits for `request`, until its end (an exception it emits is
        raised here)."""
        channel = _Channel(asyncio.get_running_loop())
        job = Job(request=request, emit=channel.put)
        self._jobs.add(request.request_id, job)  # first: `stop` sees every job the worker has
        self._worker.submit(job)
        finished = False
        try:
            while True:
                item = await channel.get()
                if item is END:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            # Reached with the job still running when the consumer was cancelled or closed
            # the stream early: abort the job so the model stops within one token.
            if not finished:
                job.cancelled.set()
            self._jobs.remove(request.request_id)

    @property
    def can_score(self) -> bool:
        return self.backend.can_score

    async def score(self, request: ScoreRequest) -> Scores | None:
        if not self.backend.can_score:
            return await super().score(request)
        return await self._answer(request, Scores)

    async def branch(self, request: BranchRequest) -> Branches | None:
        if not self.backend.can_score:
            return await super().branch(request)
        return await self._answer(request, Branches)

    async def _answer(
        self, request: ScoreRequest | BranchRequest, kind: type[_Answer]
    ) -> _Answer | None:
        """The one answer of a job that runs to its end at once; None for a cancelled one
        (none comes)."""
        result: _Answer | None = None
        async with contextlib.aclosing(self._run(request)) as items:
            async for item in items:
                assert isinstance(item, kind)
                result = item
        return result

    def cancel(self, request_id: str) -> bool:
        """Stop a running request; its stream ends with CANCELLED deltas. False if unknown."""
        job = self._jobs.get(request_id)
        if job is None:
            return False
        job.cancelled.set()
        return True

    def stop(self, reason: str) -> None:
        """Refuse new jobs and abort the running ones, which end with `EngineClosedError`
        (`reason`). Returns at once: the worker stops within one token."""
        error, jobs = self._jobs.stop(reason)
        for job in jobs:
            job.abort(error)

    def close(self, reason: str = "the engine is closed", timeout: float | None = None) -> None:
        """1. `stop` (if not yet stopped); 2. wait for the worker thread; 3. free the model.
        Blocks: call it from a thread, not the event loop. A worker that does not end within
        `timeout` (default `CLOSE_TIMEOUT`; a backend that hangs) keeps its model: freeing it
        under the running thread would crash the process."""
        self.stop(reason)
        if self._closed:
            return
        timeout = CLOSE_TIMEOUT if timeout is None else timeout
        if not self._worker.close(timeout):
            log.error(
                "%s: the worker did not stop within %.0f s; its model is left loaded",
                self._worker.name,
                timeout,
            )
            return
        self._closed = True
        self.backend.close()
