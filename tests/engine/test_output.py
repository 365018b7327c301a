"""How a request's streams end: flush, errors, several choices."""

from __future__ import annotations

from engine.errors import DetokenizeError
from engine.output import OutputProcessor
from engine.types import FinishReason, StopConditions, TextDelta

# A tokenizer in the spirit of the seed's tests: 1 -> "abc", 2 -> "STOP", 3 -> "o",
# 4 -> "there", 101 -> "Okay", 102 -> " Okay", 103 -> "<|user|>"; 99 cannot be decoded.
PIECES = {1: "abc", 2: "STOP", 3: "o", 4: "there", 101: "Okay", 102: " Okay", 103: "<|user|>"}


class TableDetokenizer:
    def step(self, token_id: int) -> str:
        if token_id not in PIECES:
            raise DetokenizeError(f"simulated decode failure for {token_id}")
        return PIECES[token_id]

    def finish(self) -> str:
        return ""


def processor(
    n: int = 1, stop: tuple[str, ...] = ("STOPPED",), stop_token_ids_hidden: tuple[int, ...] = ()
) -> OutputProcessor:
    return OutputProcessor(
        n=n,
        stops=StopConditions(stop=stop, stop_token_ids_hidden=stop_token_ids_hidden),
        max_tokens=100,
        min_tokens=0,
        new_detokenizer=TableDetokenizer,
    )


def finishes(deltas: list[TextDelta], index: int) -> list[TextDelta]:
    return [d for d in deltas if d.index == index and d.finish_reason is not None]


def text_of(deltas: list[TextDelta], index: int) -> str:
    return "".join(d.text for d in deltas if d.index == index)


def test_bare_end_flushes_each_choices_withheld_text() -> None:
    p = processor(n=2)
    deltas = []
    for index in (0, 1):
        deltas += p.on_tokens(index, [1])
        deltas += p.on_tokens(index, [2])
    assert [d.text for d in deltas] == ["abc", "", "abc", ""]
    deltas += p.end()
    for index in (0, 1):
        (last,) = finishes(deltas, index)
        assert last.text == "STOP"
        assert last.finish_reason is FinishReason.STOP
        assert text_of(deltas, index) == "abcSTOP"
    assert p.all_finished
    assert p.end() == []  # ending again adds nothing


def test_no_synthetic_stop_after_a_choices_decode_error() -> None:
    p = processor(n=2)
    deltas = p.on_tokens(0, [1, 2]) + p.on_tokens(0, [99]) + p.on_tokens(1, [1, 2])
    deltas += p.end()
    (choice0,) = finishes(deltas, 0)
    assert choice0.finish_reason is FinishReason.ERROR
    assert "decode error" in (choice0.error or "")
    assert text_of(deltas, 0) == "abc"  # the withheld "STOP" is not flushed after an error
    (choice1,) = finishes(deltas, 1)
    assert (choice1.text, choice1.finish_reason) == ("STOP", FinishReason.STOP)


def test_no_synthetic_stop_after_a_request_level_error() -> None:
    p = processor(n=1)
    deltas = p.on_tokens(0, [1]) + p.on_tokens(0, [2]) + p.error("engine reported a fatal error")
    deltas += p.end()
    errors = [d for d in deltas if d.finish_reason is FinishReason.ERROR]
    assert len(errors) == 1
    assert errors[0].error == "engine reported a fatal error"
    assert not [d for d in deltas if d.finish_reason is FinishReason.STOP]


def test_a_local_stop_drops_the_rest_of_the_chunk_and_later_chunks() -> None:
    p = processor(n=2, stop=(), stop_token_ids_hidden=(103,))
    first = p.on_tokens(0, [101, 103, 102])
    later = p.on_tokens(0, [102])
    other = p.on_tokens(1, [101, 103])
    (d0,) = first
    assert (d0.text, d0.token_ids, d0.finish_reason) == ("Okay", (101, 103), FinishReason.STOP)
    assert d0.stop_reason is None  # an end-of-generation id is not the user's stop
    assert later == []
    (d1,) = other
    assert (d1.index, d1.text, d1.finish_reason) == (1, "Okay", FinishReason.STOP)


def test_engine_finish_puts_withheld_text_before_nothing_newer() -> None:
    p = processor(stop=("ozzy",))
    deltas = p.on_tokens(0, [3])
    assert deltas[0].text == ""  # "o" may start "ozzy"
    deltas += p.finish(0, FinishReason.LENGTH)
    assert (deltas[-1].text, deltas[-1].finish_reason) == ("o", FinishReason.LENGTH)
    # Withheld text released by newer text comes first, in order: "o" + "there".
    q = processor(stop=("ozzy",))
    assert "".join(d.text for d in q.on_tokens(0, [3]) + q.on_tokens(0, [4])) == "othere"


def test_user_stop_string_is_reported_and_cut() -> None:
    p = processor(stop=("Okay",))
    (delta,) = p.on_tokens(0, [1, 102, 4])
    assert (delta.text, delta.stop_reason, delta.token_ids) == ("abc ", "Okay", (1, 102))


def test_cancel_ends_open_choices_without_flushing() -> None:
    p = processor(n=2)
    deltas = p.on_tokens(0, [1, 2]) + p.on_tokens(1, [1]) + p.on_tokens(1, [1])
    deltas += p.end(1)
    deltas += p.cancel()
    (c0,) = finishes(deltas, 0)
    assert (c0.text, c0.finish_reason) == ("", FinishReason.CANCELLED)
    (c1,) = finishes(deltas, 1)
    assert c1.finish_reason is FinishReason.STOP  # it had finished before the cancel


def test_an_unknown_choice_index_is_ignored() -> None:
    p = processor(n=1)
    assert p.on_tokens(5, [1]) == []
    assert p.end(5) == []
