"""The confidence gate: an automatic suggestion the model was unsure of is not shown;
`minConfidence` 0 shows everything; what the user asked for is never held back; a suggestion without
log-probabilities (a remote server that sends none) always shows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from fake_backend import FakeBackend

from engine.completion import CompletionModel
from engine.engine import Engine
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.completer import InlineCompleter
from lsp_server.inline.confidence import (
    FLOOR,
    GateRecord,
    confidence,
    features_of,
    judge,
)
from lsp_server.inline.suggest import suggest
from lsp_server.postprocess import CompletionMode, CursorContext
from lsp_server.settings import Settings

SETTINGS = Settings(debounce_ms=0)
DOCUMENT = "def add(a, b):\n    return |\n"
#: What a sure model gives its tokens (e^-0.01: 99%), and an unsure one (e^-4: 2%).
SURE, UNSURE = -0.01, -4.0


def snap_at(text: str, marker: str = "|") -> DocumentSnapshot:
    offset = text.index(marker)
    return DocumentSnapshot.at(text.replace(marker, "", 1), offset, uri="file:///t.py")


#: The `model_with` fixture: a model whose every token reports this log-probability (None:
#: the backend does not say).
ModelWith = Callable[[float | None], CompletionModel]


@pytest.fixture
def model_with() -> Iterator[ModelWith]:
    engines: list[Engine] = []

    def make(logprob: float | None) -> CompletionModel:
        backend = FakeBackend(script=["a + b\n"], token_logprob=logprob)
        engine = Engine(backend)
        engines.append(engine)
        return CompletionModel.of(engine, None)

    yield make
    for engine in engines:
        engine.close()


async def test_the_default_gate_hides_a_suggestion_the_model_was_unsure_of(
    model_with: ModelWith,
) -> None:
    assert SETTINGS.min_confidence > 0, "the gate is on by default"
    unsure = await suggest(model_with(UNSURE), snap_at(DOCUMENT), SETTINGS, invoked=False)
    assert unsure.suggestions == ()
    assert unsure.gate is not None
    assert not unsure.gate.shown
    assert unsure.gate.confidence is not None
    assert unsure.gate.confidence < SETTINGS.min_confidence
    sure = await suggest(model_with(SURE), snap_at(DOCUMENT), SETTINGS, invoked=False)
    assert [s.text for s in sure.suggestions] == ["a + b"]
    assert sure.gate is not None
    assert sure.gate.shown


async def test_min_confidence_zero_shows_every_suggestion(
    model_with: ModelWith,
) -> None:
    everything = replace(SETTINGS, min_confidence=0.0)
    result = await suggest(model_with(UNSURE), snap_at(DOCUMENT), everything, invoked=False)
    assert [s.text for s in result.suggestions] == ["a + b"]
    assert result.gate is not None
    assert result.gate.shown


async def test_an_invoked_request_is_shown_however_unsure(
    model_with: ModelWith,
) -> None:
    result = await suggest(model_with(UNSURE), snap_at(DOCUMENT), SETTINGS, invoked=True)
    assert "a + b" in [s.text for s in result.suggestions]
    assert result.gate is None  # never judged


async def test_without_log_probabilities_the_gate_lets_everything_through(
    model_with: ModelWith,
) -> None:
    result = await suggest(model_with(None), snap_at(DOCUMENT), SETTINGS, invoked=False)
    assert [s.text for s in result.suggestions] == ["a + b"]
    assert result.gate is not None
    assert result.gate.features is None
    assert result.gate.shown


async def test_the_completer_counts_what_the_gate_held_back(
    model_with: ModelWith,
) -> None:
    model = model_with(UNSURE)

    async def get_model() -> CompletionModel:
        return model

    completer = InlineCompleter(get_model, speculator=None)
    gated = replace(SETTINGS, min_confidence=0.5)
    result = await completer.complete(snap_at(DOCUMENT), gated, invoked=False)
    assert result is not None
    assert result.suggestions == ()
    report = completer.gate.json()
    assert report["judged"] == 1
    assert report["hidden"] == 1
    assert report["last"]["shown"] is False
    assert report["last"]["features"]["mean_logprob"] == pytest.approx(UNSURE)


def _context(text: str) -> CursorContext:
    before, after = text.split("|")
    return CursorContext(prefix=before, suffix=after)


@pytest.mark.parametrize(
    ("text", "fact"),
    [
        ("print(|)\n", "after_opener"),
        ("x = compute(|\n", "after_opener"),
        ("value = |\n", "after_operator"),
        ("obj.|\n", "after_dot"),
        ("total = a + b|\n", "at_line_end"),
        ("total = a + b|\n", "after_word"),
        ("def f():\n    |\n", "blank_line"),
        ("x = 1  # the count of |\n", "in_comment"),
        ('name = "hello |\n', "in_string"),
        ('def f():\n    """Return the |\n', "in_string"),
    ],
)
def test_features_say_where_the_cursor_is(text: str, fact: str) -> None:
    features = features_of([SURE], _context(text), CompletionMode.SINGLE_LINE)
    assert features is not None
    assert getattr(features, fact) is True


@pytest.mark.parametrize(
    ("language_id", "text"),
    [
        ("rust", "fn f<T>(x: T) where T: 'a + |Clone {}\n"),
        ("go", "func f(name string) string {\n\treturn `C:\\dir\\` + |name\n}\n"),
        ("javascript", "const s = `a ${b ? `x` : |y} c`;\n"),
    ],
)
def test_in_string_follows_the_tree_where_the_lexer_was_wrong(language_id: str, text: str) -> None:
    """A Rust lifetime, a Go raw string ending in a backslash, a template nested in a template's
    `${...}`: the lexer (the language unknown) puts the cursor in a string, which the gate
    counts against the suggestion; the language's tree puts it in code."""
    context = _context(text)
    lexed = features_of([SURE], context, CompletionMode.SINGLE_LINE)
    treed = features_of(
        [SURE], replace(context, language_id=language_id), CompletionMode.SINGLE_LINE
    )
    assert lexed is not None
    assert treed is not None
    assert lexed.in_string
    assert not treed.in_string
    assert not treed.in_comment
    assert confidence(treed) > confidence(lexed)


def test_features_in_plain_code_are_not_comment_or_string() -> None:
    features = features_of([SURE], _context("x = 1  # note\ny = |\n"), CompletionMode.SINGLE_LINE)
    assert features is not None
    assert not features.in_comment
    assert not features.in_string
    assert not features.blank_line


def test_log_probability_features_are_mean_min_and_first_tokens_clipped_at_the_floor() -> None:
    logprobs = [-0.5, -1.5, -0.1, -60.0]
    features = features_of(logprobs, _context("x = |\n"), CompletionMode.MULTI_LINE)
    assert features is not None
    assert features.tokens == 4
    assert features.min_logprob == FLOOR
    assert features.mean_logprob == pytest.approx((-0.5 - 1.5 - 0.1 + FLOOR) / 4)
    assert features.first_logprob == pytest.approx((-0.5 - 1.5 - 0.1) / 3)
    assert features.multi_line


def test_more_likely_tokens_give_a_higher_confidence() -> None:
    ctx = _context("value = |\n")
    scores = [
        confidence(f)
        for p in (-3.0, -1.0, -0.1)
        if (f := features_of([p] * 6, ctx, CompletionMode.SINGLE_LINE)) is not None
    ]
    assert scores == sorted(scores)
    assert scores[0] < scores[-1]
    assert all(0 <= s <= 1 for s in scores)


def test_no_log_probabilities_no_features_and_the_suggestion_passes() -> None:
    judged = judge(None, _context("x = |\n"), CompletionMode.SINGLE_LINE, 0.99)
    assert judged.features is None
    assert judged.confidence is None
    assert judged.shown


def test_the_record_counts_judged_and_hidden() -> None:
    record = GateRecord()
    ctx = _context("x = |\n")
    record.note(judge([UNSURE] * 4, ctx, CompletionMode.SINGLE_LINE, 0.999))
    record.note(judge([SURE] * 4, ctx, CompletionMode.SINGLE_LINE, 0.0))
    record.note(None)
    assert record.json()["judged"] == 2
    assert record.json()["hidden"] == 1
