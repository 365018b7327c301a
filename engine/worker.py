"""The one thread that owns a local model (DESIGN §2).

Jobs queue up and run one at a time. Each job has a cancel event that the backend checks
before every token, and hands its results to the caller's event loop through a thread-safe
`emit` callback. Prompt preparation (chat rendering, tokenizing) happens here too, so nothing
touches the model from another thread.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.backend import Backend
from engine.errors import EngineError, PromptTooLongError
from engine.output import OutputProcessor
from engine.prompts import render_chat
from engine.types import FinishReason, GenerationRequest, TextDelta

log = logging.getLogger(__name__)

#: Put on a job's channel after its last delta (or its exception).
END = object()


@dataclass(slots=True)
class Job:
    """A request on its way through the worker. `emit` must be safe to call from any thread."""

    request: GenerationRequest
    emit: Callable[[object], None]
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStats:
    """Timings of one finished job, for logs and benchmarks."""

    request_id: str
    prompt_tokens: int
    generated_tokens: int
    queued_seconds: float
    first_token_seconds: float | None
    total_seconds: float
    finish_reasons: tuple[FinishReason | None, ...]


def prepare_prompt_ids(backend: Backend, request: GenerationRequest) -> list[int]:
    """The prompt's token ids: given ids as they are; text with the model's BOS rule; chat
    messages rendered with the model's own template (which writes its BOS itself)."""
    if request.prompt_token_ids is not None:
        return list(request.prompt_token_ids)
    if request.messages is not None:
        text = render_chat(backend, request.messages)
        starts_with_bos = bool(backend.bos_token) and text.startswith(backend.bos_token or "")
        return backend.tokenize(text, add_bos=backend.adds_bos and not starts_with_bos)
    assert request.prompt is not None
    return backend.tokenize(request.prompt, add_bos=backend.adds_bos)


class Worker:
    """Runs jobs for one backend on its own thread."""

    def __init__(self, backend: Backend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.recent_stats: collections.deque[JobStats] = collections.deque(maxlen=256)
        self._jobs: queue.SimpleQueue[tuple[Job, float] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"engine-{name}", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._jobs.put((job, time.perf_counter()))

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, submitted = item
            try:
                self._execute(job, submitted)
            except Exception as e:  # keep serving: a job's failure is reported to that job only
                log.exception("%s: job %s failed", self.name, job.request.request_id)
                job.emit(e)
            finally:
                job.emit(END)

    def _execute(self, job: Job, submitted: float) -> None:
        request = job.request
        started = time.perf_counter()
        if job.cancelled.is_set():
            for index in range(request.sampling.n):
                job.emit(TextDelta(index=index, text="", finish_reason=FinishReason.CANCELLED))
            return
        backend = self.backend

        # 1. Prompt ids; a prompt that leaves no room for one token is refused outright.
        try:
            prompt_ids = prepare_prompt_ids(backend, request)
        except EngineError as e:
            job.emit(e)
            return
        room = backend.context_size - len(prompt_ids)
        if room < 1:
            job.emit(PromptTooLongError(len(prompt_ids), backend.context_size))
            return

        # 2. Stops: the model's own end-of-generation ids join the request's.
        sampling = request.sampling
        stops = replace(
            request.stops,
            stop_token_ids_hidden=(*request.stops.stop_token_ids_hidden, *backend.eog_token_ids),
        )
        processor = OutputProcessor(
            n=sampling.n,
            stops=stops,
            max_tokens=min(sampling.max_tokens, room),
            min_tokens=sampling.min_tokens,
            new_detokenizer=backend.new_detokenizer,
        )

        # 3. Choices one after another, each with its own seed and stop state.
        first_token: float | None = None
        try:
            for index in range(sampling.n):
                tokens = backend.iter_token_ids(
                    prompt_ids, sampling.for_choice(index), job.cancelled
                )
                try:
                    for token_id in tokens:
                        if first_token is None:
                            first_token = time.perf_counter()
                        for delta in processor.on_tokens(index, (token_id,)):
                            job.emit(delta)
                        if processor.is_finished(index) or job.cancelled.is_set():
                            break
                finally:
                    close = getattr(tokens, "close", None)
                    if close is not None:
                        close()
                if job.cancelled.is_set():
                    break
                for delta in processor.end(index):
                    job.emit(delta)
        except Exception as e:
            log.exception("%s: generation failed for %s", self.name, request.request_id)
            for delta in processor.error(f"{type(e).__name__}: {e}"):
                job.emit(delta)
        if job.cancelled.is_set():
            for delta in processor.cancel():
                job.emit(delta)

        # 4. Timings.
        done = time.perf_counter()
        stats = JobStats(
            request_id=request.request_id,
            prompt_tokens=len(prompt_ids),
            generated_tokens=sum(processor.generated_tokens(i) for i in range(sampling.n)),
            queued_seconds=started - submitted,
            first_token_seconds=None if first_token is None else first_token - started,
            total_seconds=done - started,
            finish_reasons=tuple(processor.finish_reason(i) for i in range(sampling.n)),
        )
        self.recent_stats.append(stats)
        first = stats.first_token_seconds
        log.info(
            "%s %s: prompt %d tokens, generated %d, first token %s, total %.0f ms, finish %s",
            self.name,
            request.request_id,
            stats.prompt_tokens,
            stats.generated_tokens,
            "-" if first is None else f"{first * 1000:.0f} ms",
            stats.total_seconds * 1000,
            ",".join(str(r) for r in stats.finish_reasons),
        )
