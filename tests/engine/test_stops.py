"""The stop processor, case by case: where a choice's text ends and what is withheld."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from engine.stops import StopChecker, StopKind, StopTrigger
from engine.types import FinishReason, StopConditions

EOS = 1
USER_STOP = 7
VISIBLE_STOP = 9
TEXT = 100  # any id that is no stop token


@dataclass(frozen=True)
class Case:
    name: str
    pieces: list[str | tuple[int, str]]  # text pieces (id TEXT), or (id, text)
    shown: list[str]  # what each step releases
    trigger: StopTrigger | None
    flushed: str = ""  # what a flush at the end releases
    stop: tuple[str, ...] = ()
    include: bool = False
    min_tokens: int = 0
    max_tokens: int = 1000
    ignore_eos: bool = False


CASES = [
    Case("no stops: text passes through", ["a", "b"], ["a", "b"], None),
    Case(
        "hidden stop string inside one token",
        ["boxes"],
        ["b"],
        StopTrigger(StopKind.HIDDEN_STRING, "ox"),
        stop=("ox",),
    ),
    Case(
        "stop string split across tokens",
        ["Hel", "lo W", "orld"],
        ["Hel", "l"],
        StopTrigger(StopKind.HIDDEN_STRING, "o W"),
        stop=("o W",),
    ),
    Case(
        "withheld text is released once it cannot match",
        ["abc", "STOP", "x"],
        ["abc", "", "STOPx"],
        None,
        stop=("STOPPED",),
    ),
    Case(
        "only the longest viable tail is withheld",
        ["xyzST", "OP"],
        ["xyz", ""],
        None,
        flushed="STOP",
        stop=("STOPPED",),
    ),
    Case(
        "withheld partial match is flushed at the end",
        ["abc", "STOP"],
        ["abc", ""],
        None,
        flushed="STOP",
        stop=("STOPPED",),
    ),
    Case(
        "visible stop string is kept, what follows is cut",
        ["boxes"],
        ["box"],
        StopTrigger(StopKind.VISIBLE_STRING, "ox"),
        stop=("ox",),
        include=True,
    ),
    Case(
        "visible stop string is not withheld while it might match",
        ["ab", "\n", "x"],
        ["ab", "\n", "x"],
        None,
        stop=("\n\n",),
        include=True,
    ),
    Case(
        "visible stop string across tokens",
        ["a\n", "\nb"],
        ["a\n", "\n"],
        StopTrigger(StopKind.VISIBLE_STRING, "\n\n"),
        stop=("\n\n",),
        include=True,
    ),
    Case(
        "visible stop token keeps its text",
        ["ab", (VISIBLE_STOP, "<end>")],
        ["ab", "<end>"],
        StopTrigger(StopKind.VISIBLE_TOKEN, VISIBLE_STOP),
    ),
    Case(
        "visible stop token releases withheld text before its own",
        ["a\n", (VISIBLE_STOP, "<end>")],
        ["a", "\n<end>"],
        StopTrigger(StopKind.VISIBLE_TOKEN, VISIBLE_STOP),
        stop=("\n\n",),
    ),
    Case(
        "user stop token is hidden and reported",
        ["ab", (USER_STOP, "<stop>")],
        ["ab", ""],
        StopTrigger(StopKind.USER_TOKEN, USER_STOP),
    ),
    Case(
        "end-of-generation token is hidden and not reported",
        ["ab", (EOS, "<eos>")],
        ["ab", ""],
        StopTrigger(StopKind.EOS_TOKEN, EOS),
    ),
    Case(
        "end-of-generation token releases withheld text",
        ["ab\n", (EOS, "")],
        ["ab", "\n"],
        StopTrigger(StopKind.EOS_TOKEN, EOS),
        stop=("\n\n",),
    ),
    Case(
        "ignore_eos lets generation run past the model's end token",
        ["a", (EOS, ""), "b"],
        ["a", "", "b"],
        None,
        ignore_eos=True,
    ),
    Case(
        "earliest match wins, not the first stop listed",
        ["hello world"],
        ["hel"],
        StopTrigger(StopKind.HIDDEN_STRING, "lo"),
        stop=("world", "lo"),
    ),
    Case(
        "overlapping stops: the one that starts first",
        ["xab", "cd"],
        ["x", "a"],
        StopTrigger(StopKind.HIDDEN_STRING, "bcd"),
        stop=("abce", "bcd"),
    ),
    Case(
        "self-overlapping stop: withhold shifts by one",
        ["a", "a", "a", "b"],
        ["", "", "a", ""],
        StopTrigger(StopKind.HIDDEN_STRING, "aab"),
        stop=("aab",),
    ),
    Case(
        "same start: the shorter stop, which completes first",
        ["ab"],
        [""],
        StopTrigger(StopKind.HIDDEN_STRING, "ab"),
        stop=("abc", "ab"),
    ),
    Case(
        "multi-byte characters in a withheld tail",
        ["a😀", "é", "😀x"],
        ["a", "", "😀é😀x"],
        None,
        stop=("😀éé",),
    ),
    Case(
        "stop made of multi-byte characters",
        ["日本", "語です"],
        ["日", ""],
        StopTrigger(StopKind.HIDDEN_STRING, "本語"),
        stop=("本語",),
    ),
    Case(
        "no stop applies before min_tokens",
        ["x", (EOS, ""), "x", "x"],
        ["x", "", "x", ""],
        StopTrigger(StopKind.HIDDEN_STRING, "x"),
        stop=("x",),
        min_tokens=3,
    ),
    Case(
        "text shown before min_tokens is not searched for stops",
        ["ab", "c"],
        ["ab", "c"],
        None,
        stop=("bc",),
        min_tokens=1,
    ),
    Case(
        "max_tokens ends with LENGTH and flushes withheld text",
        ["a", "b", "S"],
        ["a", "b", "S"],
        StopTrigger(StopKind.MAX_TOKENS),
        stop=("STOP",),
        max_tokens=3,
    ),
    Case(
        "a stop on the last allowed token wins over LENGTH",
        ["a", "b", "cS"],
        ["a", "b", "c"],
        StopTrigger(StopKind.HIDDEN_STRING, "S"),
        stop=("S",),
        max_tokens=3,
    ),
]


def _run(case: Case) -> tuple[list[str], StopTrigger | None, StopChecker]:
    checker = StopChecker(
        StopConditions(
            stop=case.stop,
            stop_token_ids=(USER_STOP,),
            stop_token_ids_hidden=(EOS,),
            stop_token_ids_visible=(VISIBLE_STOP,),
            include_stop_str_in_output=case.include,
            ignore_eos=case.ignore_eos,
        ),
        max_tokens=case.max_tokens,
        min_tokens=case.min_tokens,
    )
    shown: list[str] = []
    trigger = None
    for piece in case.pieces:
        token_id, text = piece if isinstance(piece, tuple) else (TEXT, piece)
        result = checker.step(token_id, text)
        shown.append(result.text)
        if result.trigger is not None:
            trigger = result.trigger
            break
    return shown, trigger, checker


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stop_checker(case: Case) -> None:
    shown, trigger, checker = _run(case)
    assert shown == case.shown
    assert trigger == case.trigger
    assert checker.flush() == case.flushed


@pytest.mark.parametrize(
    ("trigger", "finish", "stop_reason"),
    [
        (StopTrigger(StopKind.MAX_TOKENS), FinishReason.LENGTH, None),
        (StopTrigger(StopKind.EOS_TOKEN, EOS), FinishReason.STOP, None),
        (StopTrigger(StopKind.USER_TOKEN, USER_STOP), FinishReason.STOP, USER_STOP),
        (StopTrigger(StopKind.VISIBLE_TOKEN, VISIBLE_STOP), FinishReason.STOP, VISIBLE_STOP),
        (StopTrigger(StopKind.HIDDEN_STRING, "\n\n"), FinishReason.STOP, "\n\n"),
        (StopTrigger(StopKind.VISIBLE_STRING, "```"), FinishReason.STOP, "```"),
    ],
)
def test_user_stops_report_stop_reason_and_end_of_generation_does_not(
    trigger: StopTrigger, finish: FinishReason, stop_reason: str | int | None
) -> None:
    assert trigger.finish_reason is finish
    assert trigger.stop_reason == stop_reason


def _reference_cut(text: str, stops: tuple[str, ...]) -> tuple[str, str | None]:
    """Non-streaming answer for one-character tokens: the stop that completes first; of those
    completing at the same character, the one that starts first."""
    best: tuple[int, int, str] | None = None
    for stop in stops:
        start = text.find(stop)
        if start >= 0:
            key = (start + len(stop), start, stop)
            if best is None or key[:2] < best[:2]:
                best = key
    if best is None:
        return text, None
    return text[: best[1]], best[2]


@pytest.mark.parametrize("seed", range(300))
def test_streamed_output_matches_the_non_streamed_cut(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "ab\né"
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    stops = tuple(
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
        for _ in range(rng.randint(1, 3))
    )
    checker = StopChecker(StopConditions(stop=stops), max_tokens=10_000)

    # One character per token: the cut must equal the reference exactly.
    shown = []
    trigger = None
    for ch in text:
        result = checker.step(TEXT, ch)
        shown.append(result.text)
        if result.trigger:
            trigger = result.trigger
            break
    if trigger is None:
        shown.append(checker.flush())
    expected_text, expected_stop = _reference_cut(text, stops)
    assert "".join(shown) == expected_text
    assert (trigger.value if trigger else None) == expected_stop

    # Random chunking: the output is a prefix of the text, holds no whole stop string, and is
    # followed in the text by the stop that was reported.
    checker = StopChecker(StopConditions(stop=stops), max_tokens=10_000)
    shown, trigger, i = [], None, 0
    while i < len(text) and trigger is None:
        size = rng.randint(1, 5)
        result = checker.step(TEXT, text[i : i + size])
        shown.append(result.text)
        trigger = result.trigger
        i += size
    if trigger is None:
        shown.append(checker.flush())
    out = "".join(shown)
    assert text.startswith(out)
    assert not any(stop in out for stop in stops)
    if trigger is None:
        assert out == text
    else:
        assert text[len(out) :].startswith(str(trigger.value))


def test_per_token_state_stays_bounded_over_long_outputs() -> None:
    checker = StopChecker(StopConditions(stop=("\n\n\n", "<|end|>")), max_tokens=100_000)
    for i in range(20_000):
        checker.step(TEXT, "x\n" if i % 3 else "y")
    # Only a window as long as the longest stop string is kept from earlier tokens.
    assert len(checker._tail) <= len("<|end|>") + 2


def _longest_withheld(text: str, stops: tuple[str, ...]) -> int:
    """The reference: the longest suffix of `text` that is a proper prefix of a stop."""
    return max(
        (k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])),
        default=0,
    )


@pytest.mark.parametrize("seed", range(200))
def test_the_withheld_tail_is_the_longest_proper_prefix_of_a_stop(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "abc"
    stops = tuple(
        "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6)))
        for _ in range(rng.randint(1, 4))
    )
    checker = StopChecker(StopConditions(stop=stops), max_tokens=10_000)
    text = ""
    for _ in range(rng.randint(1, 30)):
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))
        result = checker.step(TEXT, piece)
        if result.trigger is not None:
            break
        text += piece
        k = _longest_withheld(text, stops)
        assert checker.withheld == (text[-k:] if k else "")


def test_a_long_stop_string_costs_memory_linear_in_its_length() -> None:
    """A set of every prefix of one 100,000-character stop string would hold about 5 GB for
    each choice: the request's stops are compiled once, and grow with their length."""
    import tracemalloc

    from engine.detokenizer import ByteDetokenizer
    from engine.output import OutputProcessor

    stop = "a" * 100_000
    tracemalloc.start()
    try:
        processor = OutputProcessor(
            n=2,
            stops=StopConditions(stop=(stop,)),
            max_tokens=1_000_000,
            min_tokens=0,
            new_detokenizer=lambda: ByteDetokenizer(lambda token: b""),  # never fed
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MiB for one 100,000-character stop string"
    checker = processor._choices[1].checker
    assert checker.step(TEXT, "a" * 500).text == ""
    assert checker.withheld == "a" * 500
    assert checker.step(TEXT, "b").text == "a" * 500 + "b"
