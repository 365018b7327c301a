"""Inline suggestions' counts per language (`lsp_server/usage.py`): what a user checks in
`infill/stats` after showing, accepting, partly accepting and typing over suggestions."""

from __future__ import annotations

import pytest

from lsp_server.usage import (
    KEPT_SUGGESTIONS,
    MAX_LANGUAGES,
    SURVIVAL_S,
    Offered,
    Usage,
    code_points,
    language_name,
    utf16_units,
)

URI = "file:///work/app.py"
BEFORE = "total = "
AFTER = "\nprint(total)\n"


def offer(usage: Usage, text: str, *, uri: str = URI, language: str = "python") -> str:
    """One suggestion at the end of BEFORE in BEFORE + AFTER; its id."""
    (suggestion_id,) = usage.offer(uri, language, BEFORE + AFTER, len(BEFORE), [Offered(text=text)])
    return suggestion_id


def typed(usage: Usage, text: str, *, uri: str = URI) -> None:
    """The document after `text` was put at the cursor (typed, or inserted by an accept)."""
    usage.changed(uri, BEFORE + text + AFTER)


def row(usage: Usage, language: str = "python") -> dict[str, int]:
    return usage.counts()[language]


def test_shown_and_accepted_count_once_per_suggestion_in_its_language() -> None:
    usage = Usage()
    first = offer(usage, "sum(values)")
    usage.shown(first)
    usage.shown(first)  # shown again as VS Code asks again: once
    typed(usage, "sum(values)")
    assert usage.accepted(first, now=0.0)
    other = offer(usage, "x + 1", uri="file:///work/app.ts", language="typescript")
    usage.accepted(other, now=0.0)  # accepted without a shown notice: it was shown
    python = row(usage)
    assert (python["shown"], python["accepted"], python["rejected"]) == (1, 1, 0)
    assert python["characters_accepted"] == len("sum(values)")
    assert row(usage, "typescript")["shown"] == 1
    assert row(usage, "typescript")["accepted"] == 1


def test_characters_are_counted_in_utf16_units() -> None:
    usage = Usage()
    suggestion = offer(usage, "'👩‍💻'")  # an astral character is two units
    typed(usage, "'👩‍💻'")
    usage.accepted(suggestion, now=0.0)
    assert row(usage)["characters_accepted"] == utf16_units("'👩‍💻'") == 7


def test_accepted_text_untouched_for_a_minute_is_kept() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    typed(usage, "sum(values)")
    usage.accepted(suggestion, now=100.0)
    usage.due(100.0 + SURVIVAL_S - 1)
    assert row(usage)["characters_checked"] == 0  # its minute has not passed
    usage.due(100.0 + SURVIVAL_S)
    assert row(usage)["characters_checked"] == row(usage)["characters_kept"] == 11


def test_accepted_text_partly_rewritten_within_the_minute_keeps_the_rest() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    typed(usage, "sum(values)")
    usage.accepted(suggestion, now=0.0)
    typed(usage, "sum(vals)")  # "ue" deleted
    usage.changed(URI, "# note\n" + BEFORE + "sum(vals)" + AFTER)  # a line above: it moves
    usage.due(SURVIVAL_S)
    assert row(usage)["characters_checked"] == 11
    assert row(usage)["characters_kept"] == 9


def test_a_deleted_and_retyped_suggestion_is_not_kept() -> None:
    usage = Usage()
    suggestion = offer(usage, "abc")
    typed(usage, "abc")
    usage.accepted(suggestion, now=0.0)
    typed(usage, "")
    typed(usage, "abc")  # the user's own typing, not the suggestion's text
    usage.due(SURVIVAL_S)
    assert row(usage)["characters_kept"] == 0


def test_the_accept_notice_may_come_before_the_change_it_made() -> None:
    """Neovim sends its changes after a short delay, and the accept command at once."""
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    usage.accepted(suggestion, now=0.0)
    typed(usage, "sum(values)")
    usage.due(SURVIVAL_S)
    assert row(usage)["characters_kept"] == 11


def test_typing_along_keeps_the_suggestion_and_its_id() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    usage.shown(suggestion)
    typed(usage, "su")
    # Asked again after the keystrokes, the server offers the rest: the same suggestion.
    (again,) = usage.offer(
        URI, "python", BEFORE + "su" + AFTER, len(BEFORE) + 2, [Offered(text="m(values)")]
    )
    assert again == suggestion
    usage.shown(again)
    typed(usage, "sum(values)")
    usage.accepted(again, now=0.0)
    assert row(usage)["shown"] == 1
    assert row(usage)["rejected"] == 0
    assert row(usage)["characters_accepted"] == len("m(values)")  # what the accept added


def test_typing_that_diverges_rejects_a_shown_suggestion() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    usage.shown(suggestion)
    typed(usage, "su")
    typed(usage, "sux")
    assert row(usage)["rejected"] == 1
    typed(usage, "suxm")
    assert row(usage)["rejected"] == 1  # once


def test_typing_over_a_suggestion_never_shown_rejects_nothing() -> None:
    usage = Usage()
    offer(usage, "sum(values)")
    typed(usage, "x")
    assert usage.counts() == {}


def test_an_auto_closed_bracket_does_not_diverge() -> None:
    usage = Usage()
    suggestion = offer(usage, "len(values)")
    usage.shown(suggestion)
    typed(usage, "len()")  # the editor closed the bracket it opened
    assert row(usage)["rejected"] == 0


def test_moving_on_is_neither_accepted_nor_rejected() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    usage.shown(suggestion)
    usage.changed(URI, "import math\n" + BEFORE + AFTER)  # typed elsewhere
    usage.offer(URI, "python", "import math\n" + BEFORE + AFTER, 4, [Offered(text="rt sys")])
    typed_text = "import math\n" + BEFORE + "x" + AFTER
    usage.changed(URI, typed_text)
    assert row(usage)["shown"] == 1
    assert row(usage)["accepted"] == row(usage)["rejected"] == 0


def test_partial_accepts_count_each_part_once_and_add_up_to_the_whole() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values) + 1")
    usage.partially_accepted(suggestion, 3, "sum(values) + 1", now=0.0)  # "sum"
    typed(usage, "sum")
    # Copilot's clients send the length from the item's start: "sum(values)", 8 more.
    usage.partially_accepted(suggestion, 11, "sum(values) + 1", now=1.0)
    typed(usage, "sum(values)")
    usage.partially_accepted(suggestion, 11, "sum(values) + 1", now=2.0)  # repeated: nothing
    usage.accepted(suggestion, now=3.0)
    typed(usage, "sum(values) + 1")
    counts = row(usage)
    assert counts["partially_accepted"] == 1
    assert counts["accepted"] == 1
    assert counts["characters_accepted"] == len("sum(values) + 1")
    usage.due(3.0 + SURVIVAL_S)
    assert counts["characters_accepted"] == row(usage)["characters_kept"]


def test_a_partial_accept_of_a_continued_item_counts_from_that_items_start() -> None:
    usage = Usage()
    suggestion = offer(usage, "sum(values)")
    typed(usage, "sum")
    usage.offer(URI, "python", BEFORE + "sum" + AFTER, len(BEFORE) + 3, [Offered(text="(values)")])
    usage.partially_accepted(suggestion, 7, "(values)", now=0.0)  # "(values"
    assert row(usage)["characters_accepted"] == 7


def test_closers_the_suggestion_absorbs_are_not_counted_as_accepted() -> None:
    usage = Usage()
    text = "print(" + ")"  # the cursor between the brackets the user typed
    (suggestion,) = usage.offer(URI, "python", text, 6, [Offered(text="total)", absorbed=1)])
    usage.changed(URI, "print(total)")
    usage.accepted(suggestion, now=0.0)
    usage.due(SURVIVAL_S)
    assert row(usage)["characters_accepted"] == row(usage)["characters_kept"] == len("total")


def test_a_closed_document_is_checked_as_it_was_left() -> None:
    usage = Usage()
    suggestion = offer(usage, "abc")
    typed(usage, "abc")
    usage.accepted(suggestion, now=0.0)
    usage.forget(URI)
    assert row(usage)["characters_kept"] == 3
    assert usage.next_due() is None


def test_unknown_ids_count_nothing() -> None:
    usage = Usage()
    assert not usage.shown("ic-999")
    assert not usage.accepted("ic-999", now=0.0)
    assert not usage.partially_accepted("ic-999", 3, None, now=0.0)
    assert usage.counts() == {}


def test_memory_is_bounded_and_an_evicted_suggestion_is_checked_at_once() -> None:
    usage = Usage()
    first = offer(usage, "abc")
    typed(usage, "abc")
    usage.accepted(first, now=0.0)
    for n in range(KEPT_SUGGESTIONS + 5):
        usage.offer(f"file:///work/f{n}.py", "python", "", 0, [Offered(text="x")])
    assert row(usage)["characters_kept"] == 3  # checked when it was pushed out
    assert not usage.shown(first)


def test_language_names_are_ids_or_other() -> None:
    assert language_name("typescriptreact") == "typescriptreact"
    assert language_name("c++") == "c++"
    assert language_name("/home/me/secret.py") == "other"
    assert language_name("") == "other"
    usage = Usage()
    for n in range(MAX_LANGUAGES + 3):
        usage.shown(usage.offer(f"file:///f{n}", f"lang{n}", "", 0, [Offered(text="x")])[0])
    assert len(usage.counts()) == MAX_LANGUAGES + 1
    assert usage.counts()["other"]["shown"] == 3


@pytest.mark.parametrize(
    ("text", "units", "characters"),
    [("abc", 2, 2), ("👩x", 2, 1), ("👩x", 1, 0), ("👩x", 3, 2), ("ab", 9, 2)],
)
def test_utf16_units_to_characters(text: str, units: int, characters: int) -> None:
    assert code_points(text, units) == characters
