"""Requests written together (continuous batching) in the llama.cpp backend, on the real
default models computing on 1 thread, through the real worker: greedy completion requests
that are under way at once go a token each per pass, join between passes and leave as they
end. With SmolLM2-135M (the chat model), whose passes of up to 9 rows give the logits of one
row at a time, each answer is the one the request gets alone; with Gemma 3 270M (the
completion model) an answer does not depend on which requests share its passes; a cancel,
another kind of job and the cache's room change no other answer; kept documents and the live
cache are what they were (README "Many sequences per pass")."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from local_models import load_llama
from test_llama_batch import live_sequences, one_at_a_time, prompts, together
from test_llama_drafts import programs
from written_together import ROUNDING, most_likely_up_to_rounding

from engine.backend import StepGroup
from engine.backends.llama_cpp import LlamaCppBackend, _group_from
from engine.errors import ModelLoadError
from engine.models import model_spec
from engine.specs import ROWS_ENV, ModelOptions
from engine.types import (
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    ScoreRequest,
    TextDelta,
)
from engine.worker import END, Job, Worker

pytestmark = pytest.mark.slow

TOKENS = 20


@dataclass
class Answer:
    """What one job's channel got: its deltas, and whether END came."""

    deltas: list[TextDelta] = field(default_factory=list)
    other: list[object] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    #: Called with each delta as it comes, on the worker's thread.
    on_delta: Callable[[TextDelta], None] | None = None

    def emit(self, item: object) -> None:
        if item is END:
            self.ended.set()
        elif isinstance(item, TextDelta):
            self.deltas.append(item)
            if self.on_delta is not None:
                self.on_delta(item)
        else:
            self.other.append(item)

    def tokens(self) -> list[int]:
        assert self.ended.wait(300), "the job never ended"
        return [t for d in self.deltas for t in d.token_ids]

    @property
    def finish(self) -> FinishReason | None:
        return self.deltas[-1].finish_reason if self.deltas else None


def request(ids: Sequence[int], key: str, tokens: int = TOKENS) -> GenerationRequest:
    return GenerationRequest(
        prompt_token_ids=tuple(ids),
        sampling=SamplingParams(max_tokens=tokens),
        cache_key=key,
    )


@contextlib.contextmanager
def worker_of(backend: LlamaCppBackend) -> Iterator[Worker]:
    worker = Worker(backend, "together")
    try:
        yield worker
    finally:
        assert worker.close(60)


@contextlib.contextmanager
def held(worker: Worker) -> Iterator[None]:
    """The worker busy (inside a chat job's first delta) while the block runs: jobs submitted
    in it are all waiting when it lets go, so that they start together."""
    inside, release = threading.Event(), threading.Event()

    def emit(item: object) -> None:
        if isinstance(item, TextDelta) and not inside.is_set():
            inside.set()
            release.wait(60)

    blocker = GenerationRequest(
        prompt_token_ids=(1, 2), role=Role.CHAT, sampling=SamplingParams(max_tokens=1)
    )
    worker.submit(Job(request=blocker, emit=emit))
    assert inside.wait(60)
    try:
        yield
    finally:
        release.set()


class GroupSpy:
    """The groups the backend made, and their passes."""

    def __init__(self, backend: LlamaCppBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.groups: list[StepGroup] = []
        make = backend.step_group

        def spied() -> StepGroup:
            group = make()
            self.groups.append(group)
            return group

        monkeypatch.setattr(backend, "step_group", spied)

    @property
    def passes(self) -> list[int]:
        return [getattr(g, "passes", -1) for g in self.groups]


def run_together(
    worker: Worker, requests: Sequence[GenerationRequest], answers: Sequence[Answer] | None = None
) -> list[Answer]:
    answers = list(answers) if answers is not None else [Answer() for _ in requests]
    with held(worker):
        for r, a in zip(requests, answers, strict=True):
            worker.submit(Job(request=r, emit=a.emit))
    for a in answers:
        a.tokens()
    return answers


def run_alone(backend: LlamaCppBackend, requests: Sequence[GenerationRequest]) -> list[list[int]]:
    """Each request's answer with rows one at a time (no groups), one after another."""
    with one_at_a_time(backend), worker_of(backend) as worker:
        found = []
        for r in requests:
            answer = Answer()
            worker.submit(Job(request=r, emit=answer.emit))
            found.append(answer.tokens())
        return found


def id_prompts(backend: LlamaCppBackend, third_party_data: Path, count: int) -> list[list[int]]:
    return [
        backend.tokenize(t, add_bos=backend.vocab.adds_bos)
        for t in prompts(third_party_data, count)
    ]


@pytest.fixture(scope="module")
def chat_backend() -> Iterator[LlamaCppBackend]:
    """The default chat model (SmolLM2-135M) on 1 thread, rows together."""
    backend = load_llama(Role.CHAT, ModelOptions(threads=1))
    together(backend)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def gemma() -> Iterator[LlamaCppBackend]:
    """The default completion model (Gemma 3 270M) on 1 thread, rows together."""
    backend = load_llama(Role.COMPLETION, ModelOptions(threads=1))
    together(backend)
    yield backend
    backend.close()


def exact_rows(backend: LlamaCppBackend) -> None:
    if backend.exact_pass_tokens < 9:
        pytest.skip(
            f"{backend.info.name}: here passes of {backend.exact_pass_tokens + 1} tokens "
            "already give other logits than a pass per token"
        )


def test_requests_under_way_at_once_are_written_together_and_answered_as_alone(
    chat_backend: LlamaCppBackend, third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six requests on six documents at once: one group writes them, a pass per token of the
    longest, and each answer is token for token the one it gets alone."""
    backend = chat_backend
    exact_rows(backend)
    requests = [
        request(ids, f"doc-{i}") for i, ids in enumerate(id_prompts(backend, third_party_data, 6))
    ]
    alone = run_alone(backend, requests)
    spy = GroupSpy(backend, monkeypatch)
    with worker_of(backend) as worker:
        answers = run_together(worker, requests)
        figures = worker.record.snapshot()[1][-len(requests) :]
    assert [a.tokens() for a in answers] == alone
    assert len(spy.groups) == 1
    assert spy.passes == [max(len(t) for t in alone)]
    assert sorted(f.written_beside for f in figures) == [len(requests) - 1] * len(requests)
    assert live_sequences(backend) == []


def test_a_request_joins_the_group_between_passes(
    chat_backend: LlamaCppBackend, third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests under way, a third submitted when the first has 5 tokens: it joins the
    group that is writing (no second group), and every answer is the one alone."""
    backend = chat_backend
    exact_rows(backend)
    ids = id_prompts(backend, third_party_data, 9)[6:9]
    requests = [request(p, f"join-{i}") for i, p in enumerate(ids)]
    alone = run_alone(backend, requests)
    spy = GroupSpy(backend, monkeypatch)
    late = Answer()
    with worker_of(backend) as worker:

        def submit_late(delta: TextDelta) -> None:
            if sum(len(d.token_ids) for d in answers[0].deltas) == 5:
                worker.submit(Job(request=requests[2], emit=late.emit))

        answers = [Answer(on_delta=submit_late), Answer()]
        run_together(worker, requests[:2], answers)
        late.tokens()
    assert [a.tokens() for a in answers] + [late.tokens()] == alone
    assert len(spy.groups) == 1


def test_more_requests_than_the_group_takes_wait_and_join(
    chat_backend: LlamaCppBackend, third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten requests at once, eight sequences, answers of different lengths: the last two join
    the group as the first end. The eight that start together get the answers they get alone;
    the cells of those that joined lie among the others', and every token written after a
    join is the most likely one up to that rounding (here 2 of the 10 parted from the answer
    alone, each at a near tie)."""
    backend = chat_backend
    exact_rows(backend)
    ids = id_prompts(backend, third_party_data, 10)
    requests = [request(p, f"many-{i}", tokens=8 + 3 * i) for i, p in enumerate(ids)]
    alone = run_alone(backend, requests)
    spy = GroupSpy(backend, monkeypatch)
    with worker_of(backend) as worker:
        answers = [a.tokens() for a in run_together(worker, requests)]
    assert len(spy.groups) == 1
    assert backend.group_size == 8
    assert spy.passes[0] < sum(map(len, alone))
    assert answers[:1] == alone[:1]  # it ended before anyone joined
    for prompt, answer, expected in zip(ids, answers, alone, strict=True):
        assert len(answer) == len(expected)
        for _position, gap in most_likely_up_to_rounding(backend, prompt, answer):
            assert gap <= ROUNDING
    assert live_sequences(backend) == []


def test_another_completion_job_sets_the_group_aside(
    chat_backend: LlamaCppBackend, third_party_data: Path
) -> None:
    """A scoring comes while three requests are written together: it is answered at once
    (before they end), and they go on to the answers they get alone."""
    backend = chat_backend
    exact_rows(backend)
    ids = id_prompts(backend, third_party_data, 13)[10:13]
    requests = [request(p, f"aside-{i}", tokens=32) for i, p in enumerate(ids)]
    alone = run_alone(backend, requests)
    scored = Answer()
    order: list[str] = []
    with worker_of(backend) as worker:

        def submit_scoring(delta: TextDelta) -> None:
            if sum(len(d.token_ids) for d in answers[0].deltas) == 4:
                score = ScoreRequest(prompt_token_ids=tuple(ids[0]), continuations=(), top=3)

                def emit(item: object) -> None:
                    if item is END:
                        order.append("scored")
                    scored.emit(item)

                worker.submit(Job(request=score, emit=emit))

        def note_end(index: int) -> Callable[[TextDelta], None]:
            def on_delta(delta: TextDelta) -> None:
                if delta.finish_reason is not None:
                    order.append(f"request-{index}")

            return on_delta

        answers = [Answer(on_delta=submit_scoring), Answer(on_delta=note_end(1)), Answer()]
        run_together(worker, requests, answers)
        assert scored.ended.wait(60)
    assert [a.tokens() for a in answers] == alone
    assert scored.other
    assert not isinstance(scored.other[0], Exception)
    assert order.index("scored") < order.index("request-1")


def test_an_answer_does_not_depend_on_the_requests_beside_it(
    gemma: LlamaCppBackend, third_party_data: Path
) -> None:
    """Gemma's passes of 4 rows and more give other logits than passes of 1-3, so a group's
    passes are whole groups of 4 rows: a request written beside two others, or beside one
    other, or beside one cancelled after 3 tokens, gets the same answer."""
    backend = gemma
    ids = id_prompts(backend, third_party_data, 18)[14:18]
    requests = [request(p, f"beside-{i}", tokens=24) for i, p in enumerate(ids)]
    with worker_of(backend) as worker:
        three = run_together(worker, requests[:3])
        two = run_together(worker, [requests[0], requests[3]])
        cancelled = Answer()
        jobs: list[Job] = []

        def cancel_after_three(_delta: TextDelta) -> None:
            if sum(len(d.token_ids) for d in cancelled.deltas) >= 3:
                jobs[0].cancelled.set()

        cancelled.on_delta = cancel_after_three
        first = Answer()
        with held(worker):
            jobs.append(Job(request=requests[1], emit=cancelled.emit))
            worker.submit(Job(request=requests[0], emit=first.emit))
            worker.submit(jobs[0])
        first.tokens()
        cancelled.tokens()
    assert three[0].tokens() == two[0].tokens() == first.tokens()
    assert cancelled.finish is FinishReason.CANCELLED
    assert len(cancelled.tokens()) < 24
    assert live_sequences(backend) == []


def test_kept_documents_come_back_exactly_after_a_group(
    gemma: LlamaCppBackend, third_party_data: Path
) -> None:
    """Three documents asked alone (their states kept), then together, then alone again: the
    last answers are the first ones, each from its kept state (a few tokens evaluated)."""
    backend = gemma
    ids = id_prompts(backend, third_party_data, 21)[18:21]
    requests = [request(p, f"kept-{i}") for i, p in enumerate(ids)]
    first = run_alone(backend, requests)
    with worker_of(backend) as worker:
        run_together(worker, requests)
    with one_at_a_time(backend), worker_of(backend) as worker:
        for r, expected in zip(requests, first, strict=True):
            answer = Answer()
            worker.submit(Job(request=r, emit=answer.emit))
            assert answer.tokens() == expected
            stats = worker.record.snapshot()[1][-1]
            assert stats.prompt_evaluated is not None
            assert stats.prompt_evaluated <= 2
    assert live_sequences(backend) == []


def test_requests_that_do_not_fit_beside_each_other_go_on_after(
    third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A context of 1,024 cells. Four prompts of 400 tokens: those that find no room in the
    group wait for a member to leave, and every answer is whole and greedy up to rounding.
    Two prompts of 600 tokens: only the one whose document the live cache holds fits (it
    shares its cells); the other goes alone after it, each answer the one alone, and no
    group is tried again for it."""
    backend = load_llama(Role.CHAT, ModelOptions(threads=1, context_size=1024))
    try:
        together(backend)
        exact_rows(backend)
        found = programs(third_party_data)
        texts = ["\n".join(found[i * 3 : i * 3 + 3]) for i in range(4)]
        ids = [backend.tokenize(t, add_bos=backend.vocab.adds_bos)[:400] for t in texts]
        assert sum(map(len, ids)) > 1024
        requests = [request(p, f"room-{i}") for i, p in enumerate(ids)]
        alone = run_alone(backend, requests)
        with worker_of(backend) as worker:
            answers = [a.tokens() for a in run_together(worker, requests)]
        for prompt, answer, expected in zip(ids, answers, alone, strict=True):
            assert len(answer) == len(expected)
            for _position, gap in most_likely_up_to_rounding(backend, prompt, answer):
                assert gap <= ROUNDING
        assert live_sequences(backend) == []

        pairs = ["\n".join(found[i * 10 : i * 10 + 10]) for i in range(2)]
        long = [backend.tokenize(t, add_bos=backend.vocab.adds_bos)[:600] for t in pairs]
        assert all(len(p) == 600 for p in long)
        requests = [request(p, f"long-{i}", tokens=40) for i, p in enumerate(long)]
        alone = run_alone(backend, requests)
        spy = GroupSpy(backend, monkeypatch)
        with worker_of(backend) as worker:
            assert [a.tokens() for a in run_together(worker, requests)] == alone
        assert len(spy.groups) <= len(requests)
    finally:
        backend.close()


def test_one_request_at_a_time_when_rows_do_not_pay(
    chat_backend: LlamaCppBackend, third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the load-time probe found that rows do not pay, no group is made: requests
    under way at once take turns, one generation at a time."""
    backend = chat_backend
    ids = id_prompts(backend, third_party_data, 2)
    spy = GroupSpy(backend, monkeypatch)
    with one_at_a_time(backend), worker_of(backend) as worker:
        answers = run_together(worker, [request(p, f"turns-{i}") for i, p in enumerate(ids)])
    assert all(a.tokens() for a in answers)
    assert spy.groups == []


def test_sampled_requests_are_not_written_together(
    chat_backend: LlamaCppBackend, third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sampled request's tokens are not the most likely ones: it never joins a group."""
    backend = chat_backend
    ids = id_prompts(backend, third_party_data, 2)
    spy = GroupSpy(backend, monkeypatch)
    sampled = [
        GenerationRequest(
            prompt_token_ids=tuple(p),
            sampling=SamplingParams(max_tokens=8, temperature=0.8, seed=1),
        )
        for p in ids
    ]
    with worker_of(backend) as worker:
        answers = run_together(worker, sampled)
    assert all(a.tokens() for a in answers)
    assert spy.groups == []


@pytest.mark.parametrize(("value", "size"), [("together", 8), ("one", 1)])
def test_the_rows_environment_setting_overrides_the_probe(value: str, size: int) -> None:
    backend = load_llama(Role.CHAT, ModelOptions(threads=1), environ={ROWS_ENV: value})
    try:
        assert backend.group_size == size
        assert backend.group_from == (2 if value == "together" else 0)
    finally:
        backend.close()


def test_a_rows_setting_it_does_not_know_is_refused_saying_which() -> None:
    with pytest.raises(ModelLoadError, match=f"{ROWS_ENV}.*auto, together, one.*'many'"):
        model_spec(Role.CHAT, ModelOptions(), environ={ROWS_ENV: "many"})


def test_requests_are_written_together_from_the_count_where_it_pays(
    chat_backend: LlamaCppBackend, third_party_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With groups from 3 requests on (what the load-time probe found, forced here): two at
    once take turns, three at once are one group."""
    backend = chat_backend
    ids = id_prompts(backend, third_party_data, 3)
    spy = GroupSpy(backend, monkeypatch)
    monkeypatch.setattr(backend, "group_from", 3)
    with worker_of(backend) as worker:
        two = run_together(worker, [request(p, f"two-{i}") for i, p in enumerate(ids[:2])])
        assert spy.groups == []
        three = run_together(worker, [request(p, f"three-{i}") for i, p in enumerate(ids)])
    assert len(spy.groups) == 1
    assert [a.tokens() for a in three[:2]] == [a.tokens() for a in two]


@pytest.mark.parametrize(
    ("costs", "count"),
    [
        ({1: 0.018, 4: 0.091, 8: 0.101}, 8),  # loaded CPU: 4 rows cost more than 4 passes, 8 less
        ({1: 0.010, 4: 0.011, 8: 0.012}, 2),  # a GPU: two already pay
        ({1: 0.013, 4: 0.030, 8: 0.067}, 3),  # 4 rows cost 2.3x one: from 3 requests
        ({1: 0.010, 4: 0.050, 8: 0.100}, 0),  # rows cost what passes of one do: never
        ({}, 0),  # not measured (too few sequences or cells)
    ],
)
def test_the_count_from_which_requests_go_together(costs: dict[int, float], count: int) -> None:
    assert _group_from(costs) == count
