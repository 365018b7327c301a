"""The confidence gate: how sure the model was of a suggestion, from what the engine
already has, and whether an automatic suggestion is shown at all.

A wrong suggestion costs the user more than none: they read it and reject it. The model's own
numbers say much of which ones are wrong: its tokens' log-probabilities (the mean, the least
likely token, the first tokens'), the ranking score where lines were ranked, and where the
cursor is (after an opening bracket, at a line's end, in a comment or a string, after which
character). `features_of` gathers them, `confidence` weighs them into a number from 0 to 1,
and `passes` compares it with the `minConfidence` setting. Invoked requests are never gated
(the caller's rule, `suggest`); a suggestion whose log-probabilities the engine does not know
(a remote server) has no features and always passes.

The weights and the default threshold were chosen with bench/confidence.py on its tuning
cases only (see `WEIGHTS`, and the benchmark's curves in docs/benchmarks/).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lsp_server.postprocess import CompletionMode, CursorContext
from lsp_server.postprocess.context import is_closing_text, is_word_char
from lsp_server.postprocess.syntax import Place, cursor_place

#: The tokens whose log-probabilities make the "first tokens" feature: the model's first
#: choices decide what the line is about.
FIRST_TOKENS = 3
#: Log-probabilities are clipped here before they are averaged: one token the model found
#: near impossible (an end-of-line at -30) says no more than one at -10.
FLOOR = -10.0
#: Characters that open a bracket, and those of operators and separators.
OPENERS = frozenset("([{")
OPERATORS = frozenset("=,:;+-*/%<>&|!^~")


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """What the gate reads of one suggestion: the model's numbers and the cursor's place."""

    tokens: int  # tokens scored (the answer's, up to its stop)
    mean_logprob: float  # their mean log-probability (each clipped at `FLOOR`)
    min_logprob: float  # the least likely one's (clipped)
    first_logprob: float  # the mean of the first `FIRST_TOKENS` ones (clipped)
    #: The ranking score per scored token (the line's and the following code's), where lines
    #: were ranked by the code after the cursor; None otherwise.
    ranking: float | None
    multi_line: bool
    # Where the cursor is. "Last": the last character before the cursor on its line, blanks
    # aside (what the user typed last).
    after_opener: bool  # the last opens a bracket
    at_line_end: bool  # code before the cursor on its line, nothing but closers after it
    blank_line: bool  # nothing but indentation before the cursor on its line
    in_comment: bool
    in_string: bool
    after_word: bool  # the last is part of a word
    after_space: bool  # blanks between the last and the cursor
    after_dot: bool  # the last is a "."
    after_operator: bool  # the last is an operator or a separator (`OPERATORS`)

    def vector(self) -> dict[str, float]:
        """The features as numbers, by the names `WEIGHTS` uses."""
        return {
            "mean_logprob": self.mean_logprob,
            "min_logprob": self.min_logprob,
            "first_logprob": self.first_logprob,
            "log_tokens": math.log(self.tokens),
            "ranking": self.ranking if self.ranking is not None else 0.0,
            "ranked": float(self.ranking is not None),
            "multi_line": float(self.multi_line),
            "after_opener": float(self.after_opener),
            "at_line_end": float(self.at_line_end),
            "blank_line": float(self.blank_line),
            "in_comment": float(self.in_comment),
            "in_string": float(self.in_string),
            "after_word": float(self.after_word),
            "after_space": float(self.after_space),
            "after_dot": float(self.after_dot),
            "after_operator": float(self.after_operator),
        }


#: A logistic model over `Features.vector()`: confidence = sigmoid(BIAS + sum(w * x)), the
#: chance that the suggestion is right. Fitted by `bench/confidence.py --fit` (L2 penalty 1)
#: on its 270 tuning suggestions only (HumanEval's even problems, attrs and click; 73 right).
#: In 5-fold cross-validation there, the area under the ROC curve was 0.81 with every feature,
#: 0.81 with the three log-probability ones alone, 0.80 with the first tokens' alone, 0.77
#: with the mean alone: the first tokens say most. Features with weight 0 never varied in
#: those cases (`ranking`: ranking is off on a CPU by default; `after_word`, `after_space`,
#: `in_comment`); they count for nothing until a measurement gives them a weight.
BIAS = 1.392
WEIGHTS: Mapping[str, float] = {
    "first_logprob": 2.401,
    "mean_logprob": 1.188,
    "min_logprob": 0.675,
    "log_tokens": -0.190,
    "multi_line": 0.974,
    "in_string": -0.957,
    "after_dot": -0.301,
    "after_operator": 0.301,
    "after_opener": 0.129,
    "at_line_end": 0.128,
    "blank_line": -0.128,
}


def features_of(
    logprobs: Sequence[float] | None,
    ctx: CursorContext,
    mode: CompletionMode,
    *,
    ranking: float | None = None,
) -> Features | None:
    """The features of a suggestion whose tokens had `logprobs`, written at the cursor of
    `ctx` in `mode`; None where the log-probabilities are not known (nothing to judge by)."""
    if not logprobs:
        return None
    clipped = [max(FLOOR, p) for p in logprobs]
    first = clipped[:FIRST_TOKENS]
    line_prefix = ctx.line_prefix
    before = line_prefix.rstrip()
    last = before[-1:]  # the last character before the cursor on its line, blanks aside
    # By the tree where the language has a grammar (the window the syntax check parsed, so
    # this is a walk down a cached tree), else by the lexer (`syntax.cursor_place`).
    place = cursor_place(ctx.prefix, ctx.suffix, ctx.language_id)
    return Features(
        tokens=len(clipped),
        mean_logprob=sum(clipped) / len(clipped),
        min_logprob=min(clipped),
        first_logprob=sum(first) / len(first),
        ranking=ranking,
        multi_line=mode is CompletionMode.MULTI_LINE,
        after_opener=bool(last) and last in OPENERS,
        at_line_end=bool(before.strip()) and is_closing_text(ctx.line_suffix),
        blank_line=not before.strip(),
        in_comment=place is Place.COMMENT,
        in_string=place is Place.STRING,
        after_word=bool(last) and is_word_char(last),
        after_space=bool(before.strip()) and line_prefix != before,
        after_dot=last == ".",
        after_operator=bool(last) and last in OPERATORS,
    )


def confidence(features: Features) -> float:
    """How likely the suggestion is right, from 0 to 1 (`WEIGHTS`)."""
    values = features.vector()
    z = BIAS + sum(weight * values[name] for name, weight in WEIGHTS.items())
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def passes(score: float | None, min_confidence: float) -> bool:
    """Whether a suggestion of confidence `score` is shown: always with `min_confidence` 0,
    or where there is no score (no log-probabilities to judge by)."""
    return min_confidence <= 0 or score is None or score >= min_confidence


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """The gate's word on one suggestion of an automatic request."""

    features: Features | None  # None: the engine gave no log-probabilities
    confidence: float | None
    shown: bool
    seconds: float  # what judging it took (the gate's added latency)

    def json(self) -> dict[str, Any]:
        return {
            "features": None if self.features is None else asdict(self.features),
            "confidence": self.confidence,
            "shown": self.shown,
            "ms": round(self.seconds * 1000, 3),
        }


def judge(
    logprobs: Sequence[float] | None,
    ctx: CursorContext,
    mode: CompletionMode,
    min_confidence: float,
    *,
    ranking: float | None = None,
) -> Judgement:
    """The features, the confidence and the verdict for one suggestion (`passes`)."""
    started = time.perf_counter()
    features = features_of(logprobs, ctx, mode, ranking=ranking)
    score = None if features is None else confidence(features)
    return Judgement(
        features=features,
        confidence=score,
        shown=passes(score, min_confidence),
        seconds=time.perf_counter() - started,
    )


class GateRecord:
    """What the gate did since the server started, for `infill/stats`: automatic suggestions
    judged, those held back, and the last judgement. Used on the event loop only."""

    def __init__(self) -> None:
        self.judged = 0
        self.hidden = 0
        self.last: Judgement | None = None

    def note(self, judgement: Judgement | None) -> None:
        if judgement is None:
            return
        self.judged += 1
        self.hidden += not judgement.shown
        self.last = judgement

    def json(self) -> dict[str, Any]:
        return {
            "judged": self.judged,
            "hidden": self.hidden,
            "last": None if self.last is None else self.last.json(),
        }
