"""The one thread that owns a local model.

Jobs queue up and run one at a time, completion jobs first; a chat job yields to a waiting
completion job between two tokens and resumes afterwards, and among jobs of one priority the
client that has held the model least lately goes first, and within a client the job that has
held it least (see `Worker`; a client's seconds fade, engine/turns.py). Where the backend
writes several requests per pass (`Backend.group_size`), greedy completion jobs under way at
once are written together instead, a token of each per pass, joining and leaving between
passes (`Worker._serve_group`: continuous batching). Each job has a cancel event that the
backend checks before every token, and hands its results to the caller's event loop through
a thread-safe `emit` callback. Prompt preparation (chat rendering, tokenizing) happens here
too, so nothing touches the model from another thread. What it records of each
job (its phases, its figures) is `engine.jobs`.
"""

from __future__ import annotations

import collections
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.backend import Backend, Joined, StepGroup, StepRefusedError
from engine.chat_template import render_chat
from engine.errors import EngineClosedError, EngineError, PromptTooLongError
from engine.jobs import JobEvent, JobPhase, JobRecord, JobStats
from engine.output import OutputProcessor
from engine.prefix_cache import kept_key
from engine.turns import HeldSeconds
from engine.types import (
    Branches,
    BranchRequest,
    FinishReason,
    GenerationRequest,
    Role,
    ScoreRequest,
    TextDelta,
)

log = logging.getLogger(__name__)

#: Put on a job's channel after its last delta (or its exception).
END = object()

#: A job steps aside for a waiting job of its own priority once it has held the model this
#: many seconds longer than that one. A small completion arriving while a long job runs then
#: waits one token (the long one has held the model for longer than this), while two long
#: jobs take turns of about twice this. A switch costs the KV state set aside and brought
#: back (engine/prefix_cache.py): Gemma 3 270M after 1,500 tokens, 28 MB saved in 1 ms (250 ms
#: the first time, when its buffer is made) and restored in 3 ms, the resumed job evaluating
#: one token again (measured on 2 busy CPU cores, a token 54 ms; bench/load.py).
TURN_SECONDS = 0.25


@dataclass(slots=True)
class Job:
    """A request on its way through the worker. `emit` must be safe to call from any thread.

    A generation emits its deltas; a scoring emits one `Scores`, a branching one `Branches`
    (none if it was cancelled).
    """

    request: GenerationRequest | ScoreRequest | BranchRequest
    emit: Callable[[object], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Set (before `cancelled`) when the engine stops: the job ends with this error instead
    #: of CANCELLED deltas, so that its caller can say why.
    aborted: EngineError | None = None

    def abort(self, error: EngineError) -> None:
        """Stop the job within one token; it ends with `error`."""
        self.aborted = error
        self.cancelled.set()


def prepare_prompt_ids(backend: Backend, request: GenerationRequest) -> list[int]:
    """The prompt's token ids: given ids as they are; text with the model's BOS rule; chat
    messages rendered with the model's own template (which writes its BOS itself)."""
    if request.prompt_token_ids is not None:
        return list(request.prompt_token_ids)
    if request.messages is not None:
        text = render_chat(backend, request.messages)
        bos = backend.vocab.bos_token
        starts_with_bos = bool(bos) and text.startswith(bos or "")
        return backend.tokenize(text, add_bos=backend.vocab.adds_bos and not starts_with_bos)
    assert request.prompt is not None
    return backend.tokenize(request.prompt, add_bos=backend.vocab.adds_bos)


class _Run:
    """A started job: its prompt, its output state, and how far it has got."""

    __slots__ = (
        "after_cancel",
        "alone",
        "beside",
        "evaluated",
        "first_token",
        "generated",
        "held",
        "index",
        "job",
        "processor",
        "prompt_ids",
        "request",
        "started",
        "submitted",
        "turn_started",
    )

    def __init__(
        self,
        job: Job,
        *,
        submitted: float,
        started: float,
        prompt_ids: list[int],
        processor: OutputProcessor,
    ) -> None:
        assert isinstance(job.request, GenerationRequest)
        self.job = job
        self.request = job.request
        self.submitted = submitted
        self.started = started
        self.prompt_ids = prompt_ids
        self.processor = processor
        self.index = 0  # the choice being generated
        self.generated: list[int] = []  # its tokens so far
        self.first_token: float | None = None
        self.evaluated: int | None = None  # prompt tokens the model evaluated for choice 0
        #: Tokens that came after the cancel was requested; None while none was.
        self.after_cancel: int | None = None
        #: Seconds it held the model in its earlier turns, and when its turn began.
        self.held = 0.0
        self.turn_started = started
        #: A group had no room for it (the cache's cells): it goes alone, in turns.
        self.alone = False
        #: The most other jobs written in the same passes as its tokens.
        self.beside = 0


def _job_of(item: tuple[Job, float] | _Run) -> Job:
    """The job of a waiting item: a job not started yet (with when it came) or a run."""
    return item.job if isinstance(item, _Run) else item[0]


def _alone(item: tuple[Job, float] | _Run) -> bool:
    """Whether a job is one a group had no room for (it goes alone, in turns)."""
    return isinstance(item, _Run) and item.alone


def _own_held(item: tuple[Job, float] | _Run) -> float:
    """The seconds a waiting job has held the model in its earlier turns (a new job none)."""
    return item.held if isinstance(item, _Run) else 0.0


def _kv_key(request: GenerationRequest | ScoreRequest | BranchRequest) -> str | None:
    """The key the backend keeps the request's KV state under: its document's, per client."""
    return kept_key(request.client, request.cache_key)


class Worker:
    """Runs jobs for one backend on its own thread.

    Completion jobs come first. When one model serves both roles, a chat job yields to a
    waiting completion job between two tokens: it is set aside with the tokens it has, the
    completion runs, and the chat job resumes where it stopped (the backend re-reads its
    prompt and the tokens so far; llama.cpp reuses whatever of it is still in the KV cache).
    So a long explanation never makes a suggestion wait, and a suggestion never cancels it.

    Among jobs of one priority, the client that has held the model least lately goes next
    (`HeldSeconds`: its jobs' seconds, fading), and within one client the job that has held
    it least: a job steps aside in the same way for a waiting one whose client has held it
    `TURN_SECONDS` less (for one of its own client's jobs: that has held it `TURN_SECONDS`
    less; a new job has held it for none). So a window asking for thousands of tokens, or for
    one completion after another, shares the model in turns with another window, and one
    asking for a few gets them after at most one turn. A job without a client is a client of
    its own, ranked by its own seconds (which do not fade): the turns among anonymous jobs
    are those among jobs. No job is ever cancelled for another: a window's newer request
    replaces its older one only where that window cancels it. A job cancelled while it waits
    ends at once, without its turn.
    """

    def __init__(self, backend: Backend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.record = JobRecord()
        self._inbox: queue.SimpleQueue[tuple[Job, float] | None] = queue.SimpleQueue()
        self._urgent: collections.deque[tuple[Job, float] | _Run] = collections.deque()
        self._background: collections.deque[tuple[Job, float] | _Run] = collections.deque()
        self._closing = False
        #: The seconds each named client has held the model lately (this thread's only).
        self._held = HeldSeconds()
        self._failed_before = False  # a generation has failed (its traceback was logged)
        self._thread = threading.Thread(target=self._loop, name=f"engine-{name}", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue `job`. It is listed as under way before the worker can start it (a reader
        never sees it generate before it was submitted), and announced once it is queued (a
        listener that lets something go on knows the worker will find it)."""
        request = job.request
        event = JobEvent(
            phase=JobPhase.SUBMITTED,
            request_id=request.request_id,
            cache_key=request.cache_key,
            client=request.client,
        )
        self.record.enter(event)
        self._inbox.put((job, time.perf_counter()))
        self.record.announce(event)

    def close(self, timeout: float | None = None) -> bool:
        """Finish the running job (abort it first to make that quick), fail the queued ones,
        and end the thread. True once the thread has ended; False if it is still running
        after `timeout` seconds (a backend that hangs): its model must not be freed then."""
        self._inbox.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # --- scheduling ---------------------------------------------------------------------------

    def _drain(self, *, block: bool) -> None:
        """Move submitted jobs into the queues (waiting for one if `block`)."""
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                return
            block = False
            if item is None:
                self._closing = True
            else:
                self._queue_of(item[0]).append(item)

    def _queue_of(self, job: Job) -> collections.deque[tuple[Job, float] | _Run]:
        return self._urgent if job.request.role is Role.COMPLETION else self._background

    def _loop(self) -> None:
        while True:
            self._drain(block=not (self._urgent or self._background or self._closing))
            if self._closing:
                for pending in (*self._urgent, *self._background):
                    job = _job_of(pending)
                    job.emit(job.aborted or EngineClosedError("the engine is shutting down"))
                    self._close(job)
                return
            item = self._next()
            if self._groupable(item) and self._group_waits(others=1):
                self._serve_group(item)
            else:
                self._serve_one(item)

    def _serve_one(self, item: tuple[Job, float] | _Run) -> None:
        """Serve a job alone until it ends (END) or steps aside for another."""
        job = _job_of(item)
        try:
            if self._serve(item):
                return  # set aside for another job; END comes later
        except Exception as e:  # keep serving: a job's failure is reported to that job only
            log.exception("%s: job %s failed", self.name, job.request.request_id)
            job.emit(e)
        self._close(job)

    def _close(self, job: Job) -> None:
        """A job's channel closed (END), and the record of its events with it."""
        job.emit(END)
        self.record.close_unrecorded(job.request.request_id)

    def _next(self) -> tuple[Job, float] | _Run:
        """The next job: a completion job before the others; within a queue, a cancelled one
        (it ends at once), then the one whose client has held the model least lately, of its
        jobs the one that has held it least, the earliest first."""
        pending = self._urgent or self._background
        now = time.perf_counter()
        index = min(range(len(pending)), key=lambda i: self._rank(pending[i], now))
        item = pending[index]
        del pending[index]
        if isinstance(item, _Run):
            item.turn_started = now
        return item

    def _rank(self, item: tuple[Job, float] | _Run, now: float) -> tuple[float, float]:
        """A waiting job's rank for the next turn, lowest first: a cancelled job at once (it
        only ends), then by (its client's held seconds at `now`, its own); a job without a
        client is its own client."""
        job = _job_of(item)
        if job.cancelled.is_set():
            return (-math.inf, -math.inf)
        own = _own_held(item)
        client = job.request.client
        return (own if client is None else self._held.at(client, now), own)

    def _waits_before(self, run: _Run, held: float, now: float) -> bool:
        """Whether a job of `run`'s priority waits that goes before it (`run` has held the
        model `held` seconds, this turn included): one cancelled, one of `run`'s own named
        client that has held the model `TURN_SECONDS` less, or any other whose client (an
        anonymous job being a client of its own) has held it `TURN_SECONDS` less than
        `run`'s."""
        client = run.job.request.client
        mine = held if client is None else self._held.at(client, now) + now - run.turn_started
        for item in self._queue_of(run.job):
            job = _job_of(item)
            if job.cancelled.is_set():
                return True
            if client is not None and job.request.client == client:
                if _own_held(item) < held - TURN_SECONDS:
                    return True
            elif self._rank(item, now)[0] < mine - TURN_SECONDS:
                return True
        return False

    def _charge(
        self, request: GenerationRequest | ScoreRequest | BranchRequest, since: float, now: float
    ) -> None:
        """A turn of `request`'s job ended at `now`: its client held the model since `since`."""
        if request.client is not None:
            self._held.charge(request.client, max(0.0, now - since), now)

    def _should_yield(self, run: _Run) -> bool:
        """Whether `run` steps aside now (between two tokens): for a completion job when it is
        not one, for a job of its own priority that has held the model `TURN_SECONDS` less,
        or for a job cancelled while it waits (it ends, and `run` goes on first)."""
        self._drain(block=False)
        now = time.perf_counter()
        held = run.held + now - run.turn_started
        if run.job.request.role is not Role.COMPLETION and self._urgent:
            step_aside = True
        elif self._groupable(run) and self._group_waits(others=1):
            step_aside = True  # to be written together with them (`_serve_group`)
        else:
            step_aside = self._waits_before(run, held, now)
        if step_aside:
            run.held = held  # this turn counts when it comes back
            self._charge(run.request, run.turn_started, now)
        return step_aside

    # --- one job ------------------------------------------------------------------------------

    def _serve(self, item: tuple[Job, float] | _Run) -> bool:
        """Run a job until it ends (False) or steps aside for another (True)."""
        if not isinstance(item, _Run) and isinstance(item[0].request, ScoreRequest):
            self._score(*item)
            return False
        if not isinstance(item, _Run) and isinstance(item[0].request, BranchRequest):
            self._branch(*item)
            return False
        run = item if isinstance(item, _Run) else self._start(*item)
        if run is None:
            return False
        try:
            if self._advance(run):
                self._queue_of(run.job).append(run)
                return True
        except Exception as e:
            self._failed([run], run.job.request.request_id, e)
        self._finish(run)
        return False

    def _failed(self, runs: list[_Run], what: str, e: Exception) -> None:
        """Generation failed for `runs` (`what` names them in the log): each of their
        choices ends with the error. The traceback once: a model that fails, fails on every
        keystroke."""
        log.error(
            "%s: generation failed for %s: %s: %s",
            self.name,
            what,
            type(e).__name__,
            e,
            exc_info=not self._failed_before,
        )
        self._failed_before = True
        for run in runs:
            for delta in run.processor.error(f"{type(e).__name__}: {e}"):
                run.job.emit(delta)

    def _score(self, job: Job, submitted: float) -> None:
        """A scoring runs to its end at once: it is as short as a prompt evaluation."""
        request = job.request
        assert isinstance(request, ScoreRequest)
        started = time.perf_counter()
        if job.aborted is not None:
            job.emit(job.aborted)
            return
        try:
            scores = self.backend.score(
                request.prompt_token_ids,
                request.continuations,
                request.top,
                job.cancelled,
                cache_key=_kv_key(request),
            )
        except EngineError as e:
            job.emit(e)
            return
        if job.aborted is not None:
            job.emit(job.aborted)
            return
        if scores is not None:
            job.emit(scores)
        stats = self._record_whole(
            request,
            prompt_tokens=len(request.prompt_token_ids) + sum(map(len, request.continuations)),
            generated_tokens=0,
            submitted=submitted,
            started=started,
        )
        log.info(
            "%s %s: scored %d continuations after %d prompt tokens (%s evaluated) in %.0f ms%s",
            self.name,
            request.request_id,
            len(request.continuations),
            len(request.prompt_token_ids),
            "?" if stats.prompt_evaluated is None else stats.prompt_evaluated,
            stats.total_seconds * 1000,
            "" if scores is not None else ", cancelled",
        )

    def _branch(self, job: Job, submitted: float) -> None:
        """Branches run to their end at once, as a scoring: a few short lines. Each branch's
        tokens go through its own stop state (`OutputProcessor`, as a generation's choices),
        which says where the branch ends."""
        request = job.request
        assert isinstance(request, BranchRequest)
        started = time.perf_counter()
        if job.aborted is not None:
            job.emit(job.aborted)
            return
        backend = self.backend
        prompt = list(request.prompt_token_ids)
        room = backend.context_size - len(prompt) - 1  # after the prompt and a first token
        if room < 1:
            job.emit(PromptTooLongError(len(prompt) + 1, backend.context_size))
            return
        stops = replace(
            request.stops,
            stop_token_ids_hidden=(*request.stops.stop_token_ids_hidden, *backend.eog_token_ids),
        )
        n = len(request.first_tokens)
        max_tokens = min(request.sampling.max_tokens, room)
        processor = OutputProcessor(
            n=max(1, n),
            stops=stops,
            max_tokens=max_tokens,
            min_tokens=request.sampling.min_tokens,
            new_detokenizer=backend.new_detokenizer,
        )
        texts: list[list[str]] = [[] for _ in range(n)]

        def ended(index: int, token: int) -> bool:
            grown = [d.text for d in processor.on_tokens(index, (token,))]
            texts[index].extend(grown)
            if (
                request.ends is not None
                and any(grown)
                and not processor.is_finished(index)
                and request.ends(index, "".join(texts[index]))
            ):
                texts[index].extend(d.text for d in processor.finish(index, FinishReason.STOP))
            return processor.is_finished(index)

        try:
            written = backend.branch(
                prompt,
                request.first_tokens,
                max_tokens,
                ended,
                job.cancelled,
                cache_key=_kv_key(request),
            )
        except EngineError as e:
            job.emit(e)
            return
        if job.aborted is not None:
            job.emit(job.aborted)
            return
        if written is not None:
            for index in range(n):
                if not processor.is_finished(index):  # the backend stopped it: the context
                    texts[index].extend(d.text for d in processor.end(index))
            reasons = tuple(processor.finish_reason(i) or FinishReason.LENGTH for i in range(n))
            job.emit(Branches(texts=tuple("".join(t) for t in texts), finish_reasons=reasons))
        stats = self._record_whole(
            request,
            prompt_tokens=len(prompt),
            generated_tokens=sum(processor.generated_tokens(i) for i in range(n)),
            submitted=submitted,
            started=started,
        )
        log.info(
            "%s %s: %d branches after %d prompt tokens (%s evaluated), %d tokens in %.0f ms%s",
            self.name,
            request.request_id,
            n,
            len(prompt),
            "?" if stats.prompt_evaluated is None else stats.prompt_evaluated,
            stats.generated_tokens,
            stats.total_seconds * 1000,
            "" if written is not None else ", cancelled",
        )

    def _record_whole(
        self,
        request: ScoreRequest | BranchRequest,
        *,
        prompt_tokens: int,
        generated_tokens: int,
        submitted: float,
        started: float,
    ) -> JobStats:
        """Record the figures of a job that ran to its end at once (a scoring, a branching):
        no first token, no finish reasons of its own. Its client is charged its time."""
        done = time.perf_counter()
        self._charge(request, started, done)
        stats = JobStats(
            request_id=request.request_id,
            prompt_tokens=prompt_tokens,
            prompt_evaluated=self.backend.last_prefill_tokens,
            generated_tokens=generated_tokens,
            queued_seconds=started - submitted,
            first_token_seconds=None,
            total_seconds=done - started,
            finish_reasons=(),
            cache_key=request.cache_key,
            client=request.client,
        )
        self.record.add(stats)
        return stats

    def _start(self, job: Job, submitted: float) -> _Run | None:
        request = job.request
        assert isinstance(request, GenerationRequest)
        started = time.perf_counter()
        if job.aborted is not None:
            job.emit(job.aborted)
            return None
        if job.cancelled.is_set():
            for index in range(request.sampling.n):
                job.emit(TextDelta(index=index, text="", finish_reason=FinishReason.CANCELLED))
            return None
        backend = self.backend

        # 1. Prompt ids; a prompt that leaves no room for one token is refused outright.
        try:
            prompt_ids = prepare_prompt_ids(backend, request)
        except EngineError as e:
            job.emit(e)
            return None
        room = backend.context_size - len(prompt_ids)
        if room < 1:
            job.emit(PromptTooLongError(len(prompt_ids), backend.context_size))
            return None

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
        return _Run(
            job, submitted=submitted, started=started, prompt_ids=prompt_ids, processor=processor
        )

    def _advance(self, run: _Run) -> bool:
        """Generate the choices one after another, each with its own seed and stop state.
        True when the run steps aside for another job before it is done."""
        job, processor, sampling = run.job, run.processor, run.request.sampling
        while run.index < sampling.n:
            index = run.index
            choice = sampling.for_choice(index)
            if run.generated and choice.seed is not None:
                choice = replace(choice, seed=choice.seed + len(run.generated))
            tokens = self.backend.iter_token_ids(
                [*run.prompt_ids, *run.generated],
                choice,
                job.cancelled,
                cache_key=_kv_key(job.request),
            )
            try:
                for token_id in tokens:
                    self._on_token(
                        run,
                        token_id,
                        self.backend.last_logprob,
                        evaluated=self.backend.last_prefill_tokens,
                    )
                    if processor.is_finished(index) or job.cancelled.is_set():
                        break
                    if self._should_yield(run):
                        return True
            finally:
                tokens.close()
            if job.cancelled.is_set():
                return False
            for delta in processor.end(index):  # the tokens ran out without a stop
                job.emit(delta)
            run.index += 1
            run.generated = []
        return False

    def _on_token(
        self, run: _Run, token_id: int, logprob: float | None, *, evaluated: int | None
    ) -> None:
        """A token of the run's current choice: its deltas emitted, its figures noted
        (`evaluated`: the prompt tokens the model evaluated for it, for a first token)."""
        job = run.job
        if job.cancelled.is_set():  # computed while the cancel came, or after it
            run.after_cancel = (run.after_cancel or 0) + 1
        if run.first_token is None:
            run.first_token = time.perf_counter()
            if evaluated is not None:
                run.evaluated = evaluated
            self.record.note(
                JobEvent(
                    phase=JobPhase.GENERATING,
                    request_id=job.request.request_id,
                    cache_key=job.request.cache_key,
                    client=job.request.client,
                )
            )
        run.generated.append(token_id)
        known = None if logprob is None else (logprob,)
        for delta in run.processor.on_tokens(run.index, (token_id,), known):
            job.emit(delta)

    # --- jobs written together ----------------------------------------------------------------

    def _groupable(self, item: tuple[Job, float] | _Run) -> bool:
        """Whether a job may be written together with others (`StepGroup`): a completion
        job's one greedy, unpenalized choice, where the backend writes requests together."""
        job = _job_of(item)
        request = job.request
        return (
            isinstance(request, GenerationRequest)
            and request.role is Role.COMPLETION
            and request.sampling.n == 1
            and request.sampling.most_likely_each
            and job.aborted is None
            and not job.cancelled.is_set()
            and not _alone(item)
            and self.backend.group_from > 1
        )

    def _group_waits(self, *, others: int) -> bool:
        """Whether enough groupable jobs wait for a group, with `others` under way beside them
        (`Backend.group_from`)."""
        waiting = sum(map(self._groupable, self._urgent))
        return waiting > 0 and waiting + others >= self.backend.group_from

    def _serve_group(self, first: tuple[Job, float] | _Run) -> None:
        """Write `first` and the other groupable completion jobs together, a token of each
        per pass, until every one has ended. Jobs join between passes as they come and leave
        as they end. A job the group has no room for (the cache's cells) is never asked again:
        no one else joins while it waits, so the group ends and it goes next, alone. Any other
        completion job that comes sets the group's jobs aside, as `_should_yield` does one
        job: they go on in turns afterwards."""
        group = self.backend.step_group()
        members: dict[int, _Run] = {}
        try:
            if self._admit(group, first, members) is Joined.NO_ROOM:
                group.close()
                self._serve_one(self._urgent.popleft())  # where `_admit` put it back
                return
            while members:
                self._drain(block=False)
                if self._closing:
                    break
                for item in self._urgent:
                    cancelled = _job_of(item).cancelled.is_set()
                    if not (self._groupable(item) or cancelled or _alone(item)):
                        return  # another completion job comes first: set the group aside
                if not any(map(_alone, self._urgent)):
                    for item in [w for w in self._urgent if self._groupable(w)]:
                        if len(members) >= group.capacity:
                            break
                        self._urgent.remove(item)
                        if self._admit(group, item, members) is Joined.NO_ROOM:
                            break
                for key, run in list(members.items()):
                    if run.job.cancelled.is_set():
                        del members[key]
                        group.leave(key)
                        self._end_run(run)
                if not members:
                    break
                try:
                    stepped = group.step()
                except StepRefusedError as e:
                    log.warning("%s: %s; the jobs go on one at a time", self.name, e)
                    return
                for key, run in list(members.items()):
                    run.beside = max(run.beside, len(members) - 1)
                    token, logprob = stepped[key]
                    self._on_token(run, token, logprob, evaluated=None)
                    if run.processor.is_finished(0) or run.job.cancelled.is_set():
                        del members[key]
                        group.leave(key)
                        self._end_run(run)
        except Exception as e:
            self._failed(list(members.values()), f"{len(members)} jobs written together", e)
            for run in members.values():
                self._end_run(run)
            members.clear()
        finally:
            now = time.perf_counter()
            for run in members.values():  # set aside: they go on in turns
                run.held += now - run.turn_started
                self._charge(run.request, run.turn_started, now)
                self._urgent.append(run)
            try:
                group.close()
            except Exception:  # the members go on alone from their own tokens
                log.exception("%s: could not close a group of jobs", self.name)

    def _admit(
        self, group: StepGroup, item: tuple[Job, float] | _Run, members: dict[int, _Run]
    ) -> Joined:
        """Start `item` (if it is not a started run) and make it a member. A job that ends
        before it joins (cancelled, refused, failed) counts as CANCELLED: it has its END. One
        the group has no room for waits at the head of the queue again (NO_ROOM)."""
        run = item if isinstance(item, _Run) else self._start(*item)
        if run is None:  # it ended before it started (its deltas or error are out)
            self._close(_job_of(item))
            return Joined.CANCELLED
        history = [*run.prompt_ids, *run.generated]
        ahead = max(1, run.request.sampling.max_tokens - len(run.generated))
        key = id(run)
        try:
            joined, evaluated = group.join(
                key, history, ahead, run.job.cancelled, cache_key=_kv_key(run.request)
            )
        except Exception as e:
            self._failed([run], run.request.request_id, e)
            self._end_run(run)
            return Joined.CANCELLED
        if joined is Joined.NO_ROOM:
            run.alone = True
            self._urgent.appendleft(run)
        elif joined is Joined.CANCELLED:
            self._end_run(run)
        else:
            if run.first_token is None:
                run.evaluated = evaluated
            run.turn_started = time.perf_counter()
            members[key] = run
        return joined

    def _end_run(self, run: _Run) -> None:
        """A run's end: its figures recorded, its channel closed."""
        self._finish(run)
        self._close(run.job)

    def _finish(self, run: _Run) -> None:
        job, processor, request = run.job, run.processor, run.request
        if job.aborted is not None and not processor.all_finished:
            processor.cancel()  # recorded as cancelled; the caller gets the reason instead
            job.emit(job.aborted)
        elif job.cancelled.is_set():
            for delta in processor.cancel():
                job.emit(delta)
        n = request.sampling.n
        done = time.perf_counter()
        self._charge(request, run.turn_started, done)
        stats = JobStats(
            request_id=request.request_id,
            prompt_tokens=len(run.prompt_ids),
            prompt_evaluated=run.evaluated,
            generated_tokens=sum(processor.generated_tokens(i) for i in range(n)),
            queued_seconds=run.started - run.submitted,
            first_token_seconds=None if run.first_token is None else run.first_token - run.started,
            total_seconds=done - run.started,
            finish_reasons=tuple(processor.finish_reason(i) for i in range(n)),
            tokens_after_cancel=(
                (run.after_cancel or 0) if job.cancelled.is_set() else run.after_cancel
            ),
            written_beside=run.beside,
            cache_key=request.cache_key,
            client=request.client,
        )
        self.record.add(stats)
        first = stats.first_token_seconds
        log.info(
            "%s %s: prompt %d tokens (%s evaluated), generated %d, first token %s, total %.0f ms, "
            "%sfinish %s",
            self.name,
            request.request_id,
            stats.prompt_tokens,
            "?" if stats.prompt_evaluated is None else stats.prompt_evaluated,
            stats.generated_tokens,
            "-" if first is None else f"{first * 1000:.0f} ms",
            stats.total_seconds * 1000,
            ""
            if stats.tokens_after_cancel is None
            else f"{stats.tokens_after_cancel} token(s) after the cancel, ",
            ",".join(str(r) for r in stats.finish_reasons),
        )
