"""The inline pipeline above the engine, on the scripted backend: prompt, stops, choices,
type-ahead cache and latest-wins."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Protocol, Unpack

import pytest
from fake_backend import SPECIAL_TOKENS, FakeBackend, FakeOptions, ScriptEntry, byte_ids
from job_events import JobWatch, TokenGate
from lsp_helpers import wait_until

from engine.completion import CompletionModel
from engine.engine import Engine
from engine.jobs import JobPhase
from engine.types import FinishReason
from lsp_server import rerank
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.completer import InlineCompleter
from lsp_server.inline.result import InlineResult
from lsp_server.inline.speculator import Speculator
from lsp_server.inline.suggest import suggest
from lsp_server.inline.type_ahead import TypeAheadCache
from lsp_server.postprocess import CompletionMode, Fitted
from lsp_server.settings import Settings

SETTINGS = Settings(debounce_ms=0)


def snap_at(text: str, marker: str = "|", uri: str = "file:///t.py") -> DocumentSnapshot:
    offset = text.index(marker)
    return DocumentSnapshot.at(text.replace(marker, "", 1), offset, uri=uri)


def completer_of(model: CompletionModel, *, speculator: Speculator | None) -> InlineCompleter:
    """The server's inline completer over `model`, already loaded."""

    async def get_model() -> CompletionModel:
        return model

    return InlineCompleter(get_model, speculator=speculator)


class MakeModel(Protocol):
    """The `make_model` fixture: a FIM model over a new FakeBackend playing `script`."""

    def __call__(
        self, script: list[ScriptEntry], **options: Unpack[FakeOptions]
    ) -> tuple[CompletionModel, FakeBackend]: ...


@pytest.fixture
def make_model() -> Iterator[MakeModel]:
    engines: list[Engine] = []

    def make(
        script: list[ScriptEntry], **options: Unpack[FakeOptions]
    ) -> tuple[CompletionModel, FakeBackend]:
        backend = FakeBackend(script=script, **options)
        engine = Engine(backend)
        engines.append(engine)
        return CompletionModel.of(engine, None), backend

    yield make
    for engine in engines:
        engine.close()


async def test_single_line_suggestion_uses_the_fim_prompt_and_stops_at_the_line_end(
    make_model: MakeModel,
) -> None:
    model, backend = make_model(["a + b\nprint(1)"])
    result = await suggest(
        model, snap_at("def add(a, b):\n    return |\n"), SETTINGS, invoked=False
    )
    assert result.mode is CompletionMode.SINGLE_LINE
    assert result.suggestions == (Fitted(text="a + b", replace_chars=0),)
    (call,) = backend.calls
    fim = SPECIAL_TOKENS
    expected = [
        fim["<bos>"],
        fim["<fim_prefix>"],
        *byte_ids("def add(a, b):\n    return "),
        fim["<fim_suffix>"],
        *byte_ids("\n"),
        fim["<fim_middle>"],
    ]
    assert list(call.prompt_ids) == expected
    assert call.sampling.temperature == 0


async def test_the_families_fill_end_token_ends_the_suggestion(make_model: MakeModel) -> None:
    model, _ = make_model([["x", SPECIAL_TOKENS["<|endoftext|>"], "junk"]])
    result = await suggest(model, snap_at("y = |"), SETTINGS, invoked=False)
    assert [s.text for s in result.suggestions] == ["x"]


async def test_an_indentation_only_line_is_left_out_of_the_prompt_and_taken_back(
    make_model: MakeModel,
) -> None:
    model, backend = make_model(["    return 1\n"])
    result = await suggest(model, snap_at("def f():\n    |"), SETTINGS, invoked=False)
    assert [s.text for s in result.suggestions] == ["return 1"]
    prompt_text = bytes(i - 16 for i in backend.calls[0].prompt_ids if i >= 16).decode()
    assert prompt_text.endswith("def f():\n")


async def test_multi_line_stops_the_model_once_the_block_is_left(make_model: MakeModel) -> None:
    left = "    if n < 2:\n        return n\n    return n * 2\n\ndef other():\n"
    body = left + "    pass\n" + "x" * 300
    # The model is held at the token after the line that leaves the block, until the
    # consumer's cancel comes: it cannot run on, however slow the event loop is.
    gate = TokenGate(at=len(left) + 1, until_cancelled=True)
    model, backend = make_model([body], on_step=gate)
    with JobWatch(model.engine.job_record) as watch:
        result = await suggest(model, snap_at("def f(n):\n|"), SETTINGS, invoked=False)
        stats = await watch.ended((await watch.reached(JobPhase.SUBMITTED)).request_id)
    assert result.mode is CompletionMode.MULTI_LINE
    assert [s.text for s in result.suggestions] == [
        "    if n < 2:\n        return n\n    return n * 2"
    ]
    assert backend.calls[0].yielded == gate.at  # stopped early, not at max tokens
    assert stats.tokens_after_cancel == 1


async def test_invoked_completion_gives_distinct_items(make_model: MakeModel) -> None:
    model, backend = make_model(["one", "two", "one", "three"], repeat_last=False)
    settings = Settings(debounce_ms=0, invoked_suggestions=3)
    result = await suggest(model, snap_at("x = |"), settings, invoked=True)
    assert [s.text for s in result.suggestions] == ["one", "two", "three"]
    assert backend.calls[0].sampling.temperature == 0  # the first is the greedy one
    assert backend.calls[1].sampling.temperature > 0


def first_tokens_model(
    make_model: MakeModel,
    script: list[ScriptEntry],
    first: dict[int, float],
    pieces: dict[int, bytes] | None = None,
) -> tuple[CompletionModel, FakeBackend]:
    """A FIM model that can score: after any prompt its most likely next tokens are `first`'s
    (most likely first); each greedy continuation plays the script's next entry."""

    def log_prob(context: Sequence[int], token: int) -> float:
        return first.get(token, -9.0)

    return make_model(
        script, log_prob=log_prob, repeat_last=False, pieces={} if pieces is None else pieces
    )


async def test_invoked_items_are_the_greedy_answer_then_those_after_the_next_first_tokens(
    make_model: MakeModel,
) -> None:
    (b, a, c) = byte_ids("bac")
    model, backend = first_tokens_model(
        make_model, ["b1", "2", "3", "4"], {b: -0.1, a: -0.5, c: -1.0}
    )
    settings = Settings(debounce_ms=0, invoked_suggestions=3)
    result = await suggest(model, snap_at("x = |"), settings, invoked=True)
    # The first item is the automatic suggestion, by plain decoding; the others are the
    # greedy answers after the next likeliest first tokens, "a" and "c", in one job.
    assert [s.text for s in result.suggestions] == ["b1", "a2", "c3"]
    assert all(call.sampling.temperature == 0 for call in backend.calls)
    assert [call.prompt_ids[-1] for call in backend.calls[1:]] == [a, c]
    record = model.engine.job_record
    # The worker records a job just after its answer went out.
    await wait_until(lambda: record.snapshot()[0] >= 3, "three jobs recorded")
    jobs = record.snapshot()[1]
    assert [len(job.finish_reasons) for job in jobs] == [1, 0, 0]  # a generation, then...
    assert [job.generated_tokens for job in jobs[1:]] == [0, 2]  # a scoring and a branching


async def test_invoked_multi_line_items_end_where_their_block_does(make_model: MakeModel) -> None:
    # After the prompt the "model" writes an indentation (one token), then "i" or "r"; each
    # answer runs on past its block, as a small model's do.
    indent, middle = 1000, SPECIAL_TOKENS["<fim_middle>"]
    (i, r) = byte_ids("ir")
    greedy = "    if n < 2:\n        return n\n    return n * 2\n\ndef other():\n"
    after_r = "eturn n\n\nprint(f(3))\n"

    def log_prob(context: Sequence[int], token: int) -> float:
        likely = {indent: -0.1} if context[-1] == middle else {i: -0.1, r: -0.5}
        return likely.get(token, -9.0)

    model, backend = make_model(
        [greedy + "    pass\n" + "x" * 300, after_r + "y" * 300],
        log_prob=log_prob,
        repeat_last=False,
        pieces={indent: b"    "},
    )
    settings = Settings(debounce_ms=0, invoked_suggestions=2)
    result = await suggest(model, snap_at("def f(n):\n|"), settings, invoked=True)
    assert result.mode is CompletionMode.MULTI_LINE
    assert [s.text for s in result.suggestions] == [
        "    if n < 2:\n        return n\n    return n * 2",
        "    return n",
    ]
    # The branch after "r" stopped at the line break that showed its code had left the block.
    assert backend.calls[1].prompt_ids[-2:] == (indent, r)
    assert backend.calls[1].yielded == len(after_r)


async def test_an_invoked_items_token_limit_counts_its_first_token(make_model: MakeModel) -> None:
    (b, a) = byte_ids("ba")
    model, _ = first_tokens_model(make_model, ["123456", "789"], {b: -0.1, a: -0.5})
    settings = Settings(debounce_ms=0, invoked_suggestions=2, max_tokens_single_line=3)
    result = await suggest(model, snap_at("x = |"), settings, invoked=True)
    # Three tokens each, as the streamed answer has: the branch's first and two more.
    assert [s.text for s in result.suggestions] == ["123", "a78"]


async def test_a_user_temperature_keeps_invoked_items_sampled(make_model: MakeModel) -> None:
    (b, a) = byte_ids("ba")
    model, backend = first_tokens_model(make_model, ["one", "two", "three"], {b: -0.1, a: -0.5})
    settings = Settings(debounce_ms=0, invoked_suggestions=3, temperature=0.2)
    result = await suggest(model, snap_at("x = |"), settings, invoked=True)
    assert [s.text for s in result.suggestions] == ["one", "two", "three"]
    assert backend.scored == []  # no first tokens were asked for
    assert backend.calls[1].sampling.temperature > 0


async def test_a_first_token_that_holds_the_stop_is_a_whole_item(make_model: MakeModel) -> None:
    # A multi-byte piece "q\n": the single-line answer it starts ends in it, nothing to write.
    piece = 1000
    z = byte_ids("z")[0]
    eos = SPECIAL_TOKENS["<eos>"]
    model, backend = first_tokens_model(
        make_model,
        ["z9"],
        {z: -0.1, piece: -0.2, eos: -0.3},
        pieces={piece: b"q\n"},
    )
    settings = Settings(debounce_ms=0, invoked_suggestions=3)
    result = await suggest(model, snap_at("x = |\ny = 2\n"), settings, invoked=True)
    # The end token is no item, and nothing was left to branch on.
    assert [s.text for s in result.suggestions] == ["z9", "q"]
    assert len(backend.calls) == 1  # the greedy answer's generation alone


async def test_nothing_to_suggest_inside_a_word_makes_no_model_call(make_model: MakeModel) -> None:
    model, backend = make_model(["never"])
    result = await suggest(model, snap_at("pri|nt(1)"), SETTINGS, invoked=False)
    assert result.suggestions == ()
    assert backend.calls == []


async def test_typing_along_a_suggestion_is_answered_from_the_cache(make_model: MakeModel) -> None:
    model, backend = make_model(["a + b"])

    completer = completer_of(model, speculator=None)

    first = await completer.complete(snap_at("return |\n"), SETTINGS, invoked=False)
    assert first is not None
    assert [s.text for s in first.suggestions] == ["a + b"]
    typed = await completer.complete(snap_at("return a +|\n"), SETTINGS, invoked=False)
    assert typed is not None
    assert typed.cached
    assert [s.text for s in typed.suggestions] == [" b"]
    assert len(backend.calls) == 1  # no second model call
    # Typing something else goes back to the model.
    other = await completer.complete(snap_at("return x|\n"), SETTINGS, invoked=False)
    assert other is not None
    assert not other.cached
    assert len(backend.calls) == 2


async def test_a_newer_request_for_the_document_supersedes_the_older(make_model: MakeModel) -> None:
    """The newer request comes while the model computes the older one's 5th token: the older
    is answered None at once, and its job stops with that one token after the cancel."""
    gate = TokenGate(at=5, until_cancelled=True)
    model, backend = make_model(["x" * 500, "new"], repeat_last=False, on_step=gate)
    settings = Settings(debounce_ms=0, max_tokens_single_line=1000)

    completer = completer_of(model, speculator=None)

    with JobWatch(model.engine.job_record) as watch:
        older = asyncio.create_task(completer.complete(snap_at("a = |"), settings, invoked=False))
        await gate.wait()
        newer = await completer.complete(snap_at("a = 1 + |"), settings, invoked=False)
        assert await older is None  # answered at once, as superseded
        first = (await watch.reached(JobPhase.SUBMITTED)).request_id
        stats = await watch.ended(first)
    assert newer is not None
    assert [s.text for s in newer.suggestions] == ["new"]
    assert stats.finish_reasons == (FinishReason.CANCELLED,)
    assert stats.tokens_after_cancel == 1  # the older job stopped within one token
    assert backend.calls[0].yielded == 5


async def test_the_debounce_lets_a_quick_second_keystroke_skip_the_first_request(
    make_model: MakeModel,
) -> None:
    """The first request waits out its debounce (a minute: longer than any test machine can
    stall); the second keystroke comes within it, and only the second reaches the model."""
    model, backend = make_model(["first", "second"], repeat_last=False)

    completer = completer_of(model, speculator=None)

    older = asyncio.create_task(
        completer.complete(snap_at("a = |"), Settings(debounce_ms=60_000), invoked=False)
    )
    await wait_until(
        lambda: completer.live_requests == 1, "the first request waiting out its debounce"
    )
    newer = await completer.complete(snap_at("b = |"), Settings(debounce_ms=0), invoked=False)
    assert await older is None
    assert newer is not None
    assert [s.text for s in newer.suggestions] == ["first"]  # the model's first answer
    assert len(backend.calls) == 1  # the first request never reached the model


async def test_a_multi_line_suggestion_cut_by_the_token_limit_drops_its_unfinished_line(
    make_model: MakeModel,
) -> None:
    model, _ = make_model(["    a = 1\n    b = fib(n - 1) + fib(n - 2"])
    settings = Settings(debounce_ms=0, max_tokens_multi_line=30)
    result = await suggest(model, snap_at("def f(n):\n|"), settings, invoked=False)
    assert result.mode is CompletionMode.MULTI_LINE
    assert [s.text for s in result.suggestions] == ["    a = 1"]


async def test_closing_a_document_supersedes_its_live_request(make_model: MakeModel) -> None:
    gate = TokenGate(at=3, until_cancelled=True)
    model, backend = make_model(["x" * 500], repeat_last=False, on_step=gate)
    settings = Settings(debounce_ms=0, max_tokens_single_line=1000)

    completer = completer_of(model, speculator=None)

    with JobWatch(model.engine.job_record) as watch:
        live = asyncio.create_task(completer.complete(snap_at("a = |"), settings, invoked=False))
        await gate.wait()  # the model at work
        completer.forget("file:///t.py")
        assert await live is None  # answered at once, as superseded
        stats = await watch.ended((await watch.reached(JobPhase.SUBMITTED)).request_id)
    assert completer.live_requests == 0
    assert stats.tokens_after_cancel == 1  # its job was stopped within one token
    assert backend.calls[0].yielded == 3


def test_the_type_ahead_cache_keeps_the_last_answers_of_at_most_n_documents() -> None:
    cache = TypeAheadCache()
    answer = InlineResult(
        suggestions=(Fitted(text="1 + 2", replace_chars=0),), mode=CompletionMode.SINGLE_LINE
    )
    for i in range(5):
        cache.remember(snap_at("a = |", uri=f"file:///{i}.py"), False, answer, documents=3)
    assert len(cache) == 3
    assert cache.lookup(snap_at("a = 1|", uri="file:///1.py"), False) is None  # the oldest went
    kept = cache.lookup(snap_at("a = 1|", uri="file:///2.py"), False)
    assert kept is not None
    assert [s.text for s in kept.suggestions] == [" + 2"]
    # Answering a document again makes it the newest: the next to go is another.
    cache.remember(snap_at("a = |", uri="file:///2.py"), False, answer, documents=3)
    cache.remember(snap_at("a = |", uri="file:///5.py"), False, answer, documents=3)
    assert cache.lookup(snap_at("a = 1|", uri="file:///2.py"), False) is not None
    assert cache.lookup(snap_at("a = 1|", uri="file:///3.py"), False) is None
    cache.forget("file:///2.py")  # closed
    assert len(cache) == 2
    assert cache.lookup(snap_at("a = 1|", uri="file:///2.py"), False) is None


async def test_accepting_a_suggestion_and_going_on_is_answered_with_what_was_written_ahead(
    make_model: MakeModel,
) -> None:
    # The shown line; then, ahead: the rest of its line once accepted (nothing), and the
    # next line once the line ending is typed after it.
    model, backend = make_model(["2", "", "c = 3"], repeat_last=False)
    settings = Settings(debounce_ms=0, speculative_suggestions=2)
    speculator = Speculator()

    completer = completer_of(model, speculator=speculator)

    shown = await completer.complete(snap_at("a = 1\nb = |\n"), settings, invoked=False)
    assert shown is not None
    assert [s.text for s in shown.suggestions] == ["2"]
    await speculator.idle()
    assert len(backend.calls) == 3  # the shown one, then the two ahead
    going_on = await completer.complete(snap_at("a = 1\nb = 2\n|\n"), settings, invoked=False)
    assert going_on is not None
    assert going_on.written_ahead
    assert [s.text for s in going_on.suggestions] == ["c = 3"]
    assert len(backend.calls) == 3  # no model call for it


async def test_one_suggestion_ahead_writes_only_the_accepted_document(
    make_model: MakeModel,
) -> None:
    """`speculativeSuggestions` 1: the document as it is once the shown suggestion is
    accepted is written ahead, and only it: the next line after it needs the model."""
    model, backend = make_model(["2", " + 1", " * 2", "c = 3"], repeat_last=False)
    settings = Settings(debounce_ms=0, speculative_suggestions=1)
    speculator = Speculator()

    completer = completer_of(model, speculator=speculator)

    async def at(doc: str) -> InlineResult | None:
        return await completer.complete(snap_at(doc), settings, invoked=False)

    shown = await at("a = 1\nb = |\n")
    assert shown is not None
    assert [s.text for s in shown.suggestions] == ["2"]
    await speculator.idle()
    assert len(backend.calls) == 2  # the shown one, and the accepted document's
    accepted = await at("a = 1\nb = 2|\n")
    assert accepted is not None
    assert accepted.written_ahead
    assert [s.text for s in accepted.suggestions] == [" + 1"]
    await speculator.idle()  # that answer, shown, is written ahead in its turn: " * 2"
    assert len(backend.calls) == 3
    going_on = await at("a = 1\nb = 2\n|\n")
    assert going_on is not None
    assert not going_on.written_ahead
    assert [s.text for s in going_on.suggestions] == ["c = 3"]
    assert len(backend.calls) == 4


async def test_work_ahead_answers_only_its_own_prompt(make_model: MakeModel) -> None:
    """What was written ahead for the accepted document is not offered for another one: the
    user typed something else than the suggestion, and the model is asked."""
    model, backend = make_model(["2", " + 1", "0"], repeat_last=False)
    settings = Settings(debounce_ms=0, speculative_suggestions=1)
    speculator = Speculator()

    completer = completer_of(model, speculator=speculator)

    await completer.complete(snap_at("a = 1\nb = |\n"), settings, invoked=False)
    await speculator.idle()
    assert len(backend.calls) == 2
    other = await completer.complete(snap_at("a = 1\nb = 3|\n"), settings, invoked=False)
    assert other is not None
    assert not other.written_ahead
    assert [s.text for s in other.suggestions] == ["0"]
    assert len(backend.calls) == 3


async def test_work_ahead_is_dropped_the_moment_the_model_is_needed(make_model: MakeModel) -> None:
    # The work ahead (the second call: the first has one token) is held at its 3rd token
    # until it is cancelled.
    gate = TokenGate(at=3, until_cancelled=True)
    model, backend = make_model(["2", "y" * 400, "z"], repeat_last=False, on_step=gate)
    settings = Settings(debounce_ms=0, speculative_suggestions=1)
    speculator = Speculator()

    completer = completer_of(model, speculator=speculator)

    await completer.complete(snap_at("a = 1\nb = |\n"), settings, invoked=False)
    await gate.wait()
    other = await completer.complete(snap_at("q = |\n"), settings, invoked=False)
    assert other is not None
    assert not other.written_ahead
    assert [s.text for s in other.suggestions] == ["z"]
    assert backend.calls[1].yielded == 3  # the work ahead stopped at the token it was on


async def test_nothing_is_written_ahead_when_the_setting_is_off(make_model: MakeModel) -> None:
    model, backend = make_model(["2"])
    speculator = Speculator()
    settings = Settings(debounce_ms=0, speculative_suggestions=0)

    completer = completer_of(model, speculator=speculator)

    await completer.complete(snap_at("a = 1\nb = |\n"), settings, invoked=False)
    await speculator.idle()
    assert len(backend.calls) == 1


# --- lines ranked by the code after the cursor (a model without FIM tokens) ---------------------

RANKED_DOC = "x = 1\ny = |\nprint(y + 6)\n"


def ranking_model(
    make_model: MakeModel, monkeypatch: pytest.MonkeyPatch, device: str = "cpu"
) -> tuple[CompletionModel, FakeBackend]:
    """A "model" without FIM tokens whose first tokens are b, a, c (in that order), whose
    branches play 1, 2, 3 after the plain prompt and 4, 5, 6 after the second one, and which
    finds "c" and "6" the most likely text to score."""
    monkeypatch.setattr(rerank, "CANDIDATES", 3)
    first = {byte_ids("b")[0]: -0.1, byte_ids("a")[0]: -0.5, byte_ids("c")[0]: -1.0}
    (c, six) = byte_ids("c6")

    def log_prob(context: Sequence[int], token: int) -> float:
        if token == six and context[-1] == c:
            return -0.01
        return first.get(token, -5.0)

    model, backend = make_model(["1", "2", "3", "4", "5", "6"], log_prob=log_prob, device=device)
    engine = model.engine
    return CompletionModel.of(engine, "none"), backend


async def test_ranking_picks_the_line_the_code_after_it_makes_most_likely(
    make_model: MakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, backend = ranking_model(make_model, monkeypatch)
    settings = replace(SETTINGS, suffix_ranking="on")
    result = await suggest(model, snap_at(RANKED_DOC), settings, invoked=True)
    # "c6": neither the greedy first token nor the plain prompt's line; every line scored.
    assert [s.text for s in result.suggestions] == ["c6", "b1", "b4"]
    bos = SPECIAL_TOKENS["<bos>"]
    prompts = {call.prompt_ids[:40] for call in backend.calls}
    hint = (bos, *byte_ids("# The code after the missing line:\n# print(y + 6)\n\nx = 1\ny = "))
    assert hint[:40] in prompts  # the second prompt shows the code after the cursor first
    *_, (scored_prompt, continuations) = backend.scored
    assert scored_prompt == (bos, *byte_ids("x = 1\ny = "))
    assert {bytes(t - 16 for t in c[:3]) for c in continuations} >= {b"c6\n", b"b1\n", b"a2\n"}
    assert all(c[3:] == tuple(byte_ids("print(y + 6)\n")) for c in continuations)


@pytest.mark.parametrize("setting", ["off", "auto"])
async def test_no_ranking_when_off_or_on_a_cpu_by_default(
    make_model: MakeModel, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    model, backend = ranking_model(make_model, monkeypatch)
    settings = replace(SETTINGS, suffix_ranking=setting)
    result = await suggest(model, snap_at(RANKED_DOC), settings, invoked=False)
    assert [s.text for s in result.suggestions] == ["1"]  # the plain greedy answer
    assert backend.scored == []


async def test_ranking_is_on_by_default_where_the_model_runs_on_a_gpu(
    make_model: MakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, backend = ranking_model(make_model, monkeypatch, device="cuda:0")
    # The scripted scorer's numbers are no model's: the confidence gate is not what is tested.
    ungated = replace(SETTINGS, min_confidence=0.0)
    result = await suggest(model, snap_at(RANKED_DOC), ungated, invoked=False)
    assert [s.text for s in result.suggestions] == ["c6"]
    assert backend.scored


async def test_no_ranking_when_code_follows_the_cursor_on_its_line(
    make_model: MakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, backend = ranking_model(make_model, monkeypatch)
    settings = replace(SETTINGS, suffix_ranking="on")
    await suggest(model, snap_at("x = 1\ny = f(|, 2)\n"), settings, invoked=False)
    assert backend.scored == []
