"""The edit history, the first source of next edits: what a user calls one edit.

Every test feeds `EditHistory` whole texts, as the server does after pygls applied a
`didChange`, and checks the groups a next-edit prompt or propagation would read: what was
replaced by what, where, and its diff. The merge rule is checked by hypothesis: applying a
group to the text before it gives the text after it, whatever the keystrokes.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.text import common_affixes
from lsp_server.next_edit.history import (
    MAX_DOCUMENTS,
    MAX_GROUP_BYTES,
    MAX_GROUPS_PER_DOCUMENT,
    MAX_HISTORY_BYTES,
    PAUSE_S,
    EditGroup,
    EditHistory,
)

URI = "file:///home/me/my%20project/stats.py"
SOURCE = "def mean(values):\n    count = len(values)\n    return sum(values) / count\n"


def apply_group(before: str, group: EditGroup) -> str:
    """The text after `group`, from the text before it."""
    return before[: group.start] + group.inserted + before[group.start + len(group.removed) :]


def keystrokes(text: str, at: int, delete: int, typed: str) -> list[str]:
    """The texts an editor goes through: `delete` characters at `at` erased one by one
    (backspace from the end), then `typed` typed one character at a time."""
    texts = []
    for end in range(at + delete, at, -1):
        text = text[: end - 1] + text[end:]
        texts.append(text)
    for i, char in enumerate(typed):
        text = text[: at + i] + char + text[at + i :]
        texts.append(text)
    return texts


def opened(text: str = SOURCE, uri: str = URI) -> EditHistory:
    history = EditHistory()
    history.opened(uri, text)
    return history


def test_one_change_is_one_group_with_its_place_and_diff() -> None:
    history = opened()
    after = SOURCE.replace("count = len", "total = len")

    group = history.changed(URI, after, now=10.0)

    assert group is not None
    assert (group.removed, group.inserted) == ("count", "total")
    assert after[group.start : group.end] == "total"
    assert group.line == 1
    assert group.unified_diff() == (
        "--- /home/me/my project/stats.py\n"
        "+++ /home/me/my project/stats.py\n"
        "@@ -1,3 +1,3 @@\n"
        " def mean(values):\n"
        "-    count = len(values)\n"
        "+    total = len(values)\n"
        "     return sum(values) / count\n"
    )
    assert history.last_group(URI) == group


def test_diff_line_numbers_are_the_documents_far_down_a_file() -> None:
    source = "".join(f"line_{n} = {n}\n" for n in range(1, 101))
    history = opened(source)

    group = history.changed(URI, source.replace("line_50 = 50", "line_50 = 55"), now=0.0)

    assert group is not None
    diff = group.unified_diff().splitlines()
    assert diff[2] == "@@ -47,7 +47,7 @@"
    assert diff[3:] == [
        " line_47 = 47",
        " line_48 = 48",
        " line_49 = 49",
        "-line_50 = 50",
        "+line_50 = 55",
        " line_51 = 51",
        " line_52 = 52",
        " line_53 = 53",
    ]


def test_neovim_rename_in_one_notification_is_read_whole() -> None:
    # Neovim's `ciw` + typing, sent as one didChange: a delete, then one change per character.
    # The server hands the history only the text with all of them applied.
    at = SOURCE.index("count")
    final = keystrokes(SOURCE, at, len("count"), "total")[-1]
    history = opened()

    group = history.changed(URI, final, now=1.0)

    assert group is not None
    assert (group.removed, group.inserted) == ("count", "total")
    assert len(history.groups(URI)) == 1


def test_typing_at_adjacent_places_is_coalesced_into_one_group() -> None:
    history = opened()
    at = SOURCE.index("count")
    now = 0.0
    for text in keystrokes(SOURCE, at, len("count"), "total"):
        now += 0.2
        history.changed(URI, text, now)

    (group,) = history.groups(URI)
    assert (group.removed, group.inserted) == ("count", "total")
    assert (group.started, group.ended) == (0.2, now)


def test_typing_then_erasing_a_typo_stays_one_group() -> None:
    history = opened()
    at = SOURCE.index("count")
    texts = keystrokes(SOURCE, at, len("count"), "totla")
    texts += keystrokes(texts[-1], at + 3, 2, "al")
    for n, text in enumerate(texts):
        history.changed(URI, text, now=n * 0.1)

    (group,) = history.groups(URI)
    assert (group.removed, group.inserted) == ("count", "total")


def test_a_pause_starts_the_next_group() -> None:
    history = opened()
    at = SOURCE.index("count")
    first = SOURCE[:at] + "total" + SOURCE[at + 5 :]
    history.changed(URI, first, now=0.0)
    second = first[: at + 5] + "s" + first[at + 5 :]

    history.changed(URI, second, now=PAUSE_S + 0.1)

    groups = history.groups(URI)
    assert [(g.removed, g.inserted) for g in groups] == [("count", "total"), ("", "s")]


def test_a_pause_just_under_the_limit_does_not() -> None:
    history = opened()
    at = SOURCE.index("count")
    first = SOURCE[:at] + "total" + SOURCE[at + 5 :]
    history.changed(URI, first, now=0.0)

    history.changed(URI, first[: at + 5] + "s" + first[at + 5 :], now=PAUSE_S - 0.1)

    assert [(g.removed, g.inserted) for g in history.groups(URI)] == [("count", "totals")]


def test_an_edit_away_from_the_group_starts_the_next_group() -> None:
    history = opened()
    first = SOURCE.replace("count = len", "total = len")
    history.changed(URI, first, now=0.0)
    second = first.replace("/ count", "/ total")

    history.changed(URI, second, now=0.3)

    groups = history.groups(URI)
    assert [(g.removed, g.inserted) for g in groups] == [("count", "total")] * 2
    assert [second[g.start : g.end] for g in groups] == ["total", "total"]
    assert groups[0].start < groups[1].start


def test_older_groups_follow_the_text_when_lines_are_added_above() -> None:
    history = opened()
    first = SOURCE.replace("return sum", "return fsum")
    history.changed(URI, first, now=0.0)
    second = "import math\n\n" + first

    history.changed(URI, second, now=5.0)

    older, newer = history.groups(URI)
    assert second[older.start : older.end] == "f"
    assert older.line == 4
    assert older.unified_diff().splitlines()[2] == "@@ -3,3 +3,3 @@"
    assert (newer.removed, newer.inserted, newer.line) == ("", "import math\n\n", 0)


def test_typed_then_erased_leaves_no_group_and_counts_as_reverted() -> None:
    history = opened()
    at = SOURCE.index("count")
    typed = SOURCE[:at] + "x" + SOURCE[at:]
    history.changed(URI, typed, now=0.0)

    assert history.changed(URI, SOURCE, now=0.2) is None

    assert history.groups(URI) == ()
    assert ("", "x") in history.reverted(URI)


def test_undo_after_a_pause_marks_the_substitution_reverted() -> None:
    history = opened()
    renamed = SOURCE.replace("count = len", "total = len")
    history.changed(URI, renamed, now=0.0)

    undo = history.changed(URI, SOURCE, now=10.0)  # Ctrl+Z: one change, the old text back

    assert undo is not None

    assert undo.undoes
    assert (undo.removed, undo.inserted) == ("total", "count")
    assert history.reverted(URI) == frozenset({("count", "total")})


def test_undo_within_the_pause_drops_the_group_and_marks_it_reverted() -> None:
    history = opened()
    history.changed(URI, SOURCE.replace("count = len", "total = len"), now=0.0)

    assert history.changed(URI, SOURCE, now=0.5) is None

    assert history.groups(URI) == ()
    assert ("count", "total") in history.reverted(URI)


def test_the_same_change_elsewhere_is_not_an_undo() -> None:
    history = opened()
    renamed = SOURCE.replace("count = len", "total = len")
    history.changed(URI, renamed, now=0.0)

    group = history.changed(URI, renamed.replace("/ count", "/ total"), now=10.0)

    assert group is not None

    assert not group.undoes
    assert history.reverted(URI) == frozenset()


def test_groups_per_document_are_bounded_oldest_out() -> None:
    lines = [f"v{n} = 0\n" for n in range(20)]
    history = opened("".join(lines))
    for n in range(MAX_GROUPS_PER_DOCUMENT + 3):
        lines[n] = f"v{n} = 1\n"
        history.changed(URI, "".join(lines), now=n * 10.0)

    groups = history.groups(URI)
    assert len(groups) == MAX_GROUPS_PER_DOCUMENT
    assert [g.line for g in groups] == list(range(3, MAX_GROUPS_PER_DOCUMENT + 3))


def test_recently_edited_documents_are_bounded_least_recent_out() -> None:
    history = EditHistory()
    uris = [f"file:///src/m{n}.py" for n in range(MAX_DOCUMENTS + 2)]
    for n, uri in enumerate(uris):
        history.opened(uri, "x = 0\n")
        history.changed(uri, "x = 1\n", now=float(n))

    kept = [uri for uri in uris if history.groups(uri)]
    assert kept == uris[-MAX_DOCUMENTS:]
    assert [g.uri for g in history.recent()] == kept
    assert history.text(uris[0]) == "x = 1\n"  # the text stays while the document is open


def test_a_change_over_the_byte_limit_is_not_kept_and_closes_the_group() -> None:
    history = opened()
    history.changed(URI, SOURCE + "#", now=0.0)
    pasted = SOURCE + "#" + "é" * (MAX_GROUP_BYTES // 2 + 1)  # 2 bytes each in UTF-8

    assert history.changed(URI, pasted, now=0.1) is None
    group = history.changed(URI, pasted + "!", now=0.2)

    assert group is not None

    assert (group.removed, group.inserted) == ("", "!")
    assert [g.inserted for g in history.groups(URI)] == ["#", "!"]


def test_all_groups_together_stay_within_the_byte_limit() -> None:
    history = EditHistory()
    chunk = "y" * (MAX_GROUP_BYTES - 10)
    for n in range(MAX_DOCUMENTS):
        uri = f"file:///src/big{n}.py"
        history.opened(uri, "")
        for k in range(3):
            text = history.text(uri) or ""
            history.changed(uri, text + "\n" + chunk, now=n * 100.0 + k * 10.0)

    kept = history.recent()
    assert sum(len(g.removed) + len(g.inserted) for g in kept) <= MAX_HISTORY_BYTES
    assert kept[-1].uri == "file:///src/big3.py"  # the newest group is never the one dropped


def test_close_forgets_the_document() -> None:
    history = opened()
    history.changed(URI, SOURCE.replace("count", "total"), now=0.0)

    history.closed(URI)

    assert history.groups(URI) == ()
    assert history.text(URI) is None
    assert history.changed(URI, SOURCE, now=1.0) is None  # never reopened: nothing to compare


def test_reopening_starts_afresh() -> None:
    history = opened()
    history.changed(URI, SOURCE.replace("count", "total"), now=0.0)

    history.opened(URI, SOURCE)

    assert history.groups(URI) == ()


def test_non_ascii_identifiers_are_code_point_offsets() -> None:
    source = "def fläche(breite, höhe):\n    größe = breite * höhe\n    return größe\n"
    history = opened(source)
    after = source.replace("größe =", "maß =")

    group = history.changed(URI, after, now=0.0)

    assert group is not None
    assert (group.removed, group.inserted) == ("größe", "maß")
    assert after[group.start : group.end] == "maß"
    assert apply_group(source, group) == after


def test_emoji_before_the_edit_counts_one_code_point() -> None:
    source = 'msg = "🎉🎉 done"\ncount = 1\n'
    history = opened(source)
    after = source.replace("count", "total")

    group = history.changed(URI, after, now=0.0)

    assert group is not None
    assert group.start == source.index("count") == 16
    assert after[group.start : group.end] == "total"


def test_crlf_documents_keep_their_line_endings_out_of_the_diff() -> None:
    source = "a = 1\r\nb = a\r\nc = 3\r\n"
    history = opened(source)

    group = history.changed(URI, source.replace("b = a", "b = a + 1"), now=0.0)

    assert group is not None
    assert (group.removed, group.inserted, group.line) == ("", " + 1", 1)
    assert group.unified_diff().splitlines()[2:] == [
        "@@ -1,3 +1,3 @@",
        " a = 1",
        "-b = a",
        "+b = a + 1",
        " c = 3",
    ]


def test_affixes_of_large_texts_are_exact() -> None:
    base = "x = 1\n" * 50_000
    for at in (0, 1, 255, 256, 257, 10_000, len(base) - 1, len(base)):
        changed = base[:at] + "Z" + base[at:]
        prefix, suffix = common_affixes(base, changed)
        assert base[:prefix] == changed[:prefix]
        assert prefix + suffix == len(base)
        assert changed[prefix : len(changed) - suffix] == "Z"


@dataclass
class _Edit:
    offset: int  # from the end of the open group, so keystrokes stay near it
    delete: int
    insert: str
    pause: bool


_edits = st.builds(
    _Edit,
    offset=st.integers(-4, 4),
    delete=st.integers(0, 3),
    insert=st.text(alphabet="ab\n é🎉", max_size=3),
    pause=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(start=st.text(alphabet="ab\n é🎉", max_size=30), edits=st.lists(_edits, max_size=25))
def test_a_group_applied_to_the_text_before_it_gives_the_text_after_it(
    start: str, edits: list[_Edit]
) -> None:
    history = opened(start)
    text, now, cursor = start, 0.0, len(start) // 2
    before_group: dict[float, str] = {}  # a group's start time -> the text before it
    for edit in edits:
        now += PAUSE_S + 1 if edit.pause else 0.1
        at = min(max(cursor + edit.offset, 0), len(text))
        new = text[:at] + edit.insert + text[at + edit.delete :]
        before_group.setdefault(now, text)
        group = history.changed(URI, new, now)
        if group is not None:
            assert apply_group(before_group[group.started], group) == new
            assert new[group.start : group.end] == group.inserted
            assert group.line == new.count("\n", 0, group.start)
            cursor = group.end
        text = new
