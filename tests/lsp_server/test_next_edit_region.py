"""What a next-edit model is shown and how its rewrite lands: the editable region (whole lines
around the cursor, bounded in tokens), the code around it, the recent edits named by their
path in the workspace, and the rewrite's edits placed in the document, less an undo of the
user's own change or a substitution the user reverted."""

from __future__ import annotations

import pytest

from engine.next_edit import RegionEdit, apply_region_edits
from lsp_server.documents import DocumentSnapshot
from lsp_server.next_edit.history import EditHistory
from lsp_server.next_edit.propagate import ProposedEdit
from lsp_server.next_edit.region import (
    REGION_LINES_ABOVE,
    REGION_LINES_BELOW,
    REGION_TOKENS,
    document_edits,
    prompt_path,
    region_bounds,
    region_input,
)


def words(text: str) -> int:
    """A token counter: a token per word (what matters here is that it is monotonic)."""
    return len(text.split())


def numbered(count: int, newline: str = "\n") -> str:
    return newline.join(f"line{i} = {i}" for i in range(count)) + newline


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_the_region_is_whole_lines_around_the_cursor(newline: str) -> None:
    text = numbered(20, newline)
    cursor = text.index("line10") + 3
    start, end = region_bounds(text, cursor, words)
    region = text[start:end]
    first, last = 10 - REGION_LINES_ABOVE, 10 + REGION_LINES_BELOW
    assert region.startswith(f"line{first} = ")
    assert region.endswith(f"line{last} = {last}")  # ends before its line break
    assert text[start - len(newline) : start] == newline  # starts a line
    assert region.count(newline) == last - first


def test_the_region_stops_at_the_files_ends() -> None:
    text = numbered(3)
    start, end = region_bounds(text, text.index("line0"), words)
    assert (start, end) == (0, len(text))  # the empty line after the last break is a line
    start, end = region_bounds("only", 2, words)
    assert (start, end) == (0, 4)


def test_a_region_over_its_tokens_loses_its_farthest_lines_but_never_the_cursors() -> None:
    long_line = "word " * (REGION_TOKENS // 3)
    text = "\n".join([long_line] * 10) + "\n"
    cursor = len(long_line) * 5 + 5 + 2
    start, end = region_bounds(text, cursor, words)
    assert words(text[start:end]) <= REGION_TOKENS
    assert start <= cursor <= end
    assert text[start:end].count("\n") == 2  # three lines of a third of the budget each

    minified = "x=1;" * 5000
    start, end = region_bounds(minified, 100, words)
    assert (start, end) == (0, len(minified))  # the cursor's line stays, however long


def history_with(text: str, old: str, new: str, uri: str) -> tuple[EditHistory, str]:
    history = EditHistory()
    history.opened(uri, text)
    changed = text.replace(old, new, 1)
    history.changed(uri, changed, now=1.0)
    return history, changed


def test_the_input_marks_the_region_and_cursor_and_names_the_edit_by_its_workspace_path() -> None:
    uri = "file:///home/me/my%20project/src/caf%C3%A9.py"
    text = "a = 1\nb = 2\nc = 3\n"
    history, changed = history_with(text, "b = 2", "b = 20", uri)
    cursor = changed.index("20") + 2
    snap = DocumentSnapshot.at(changed, cursor, uri=uri)
    region = region_input(snap, history.recent(), words, roots=["file:///home/me/my%20project"])
    given = region.given
    assert given.path == "src/café.py"
    assert given.text == changed
    assert given.before == ""
    assert given.at_file_start
    assert given.region == changed  # every line is within reach, the empty last one too
    assert given.text[given.cursor - 2 : given.cursor] == "20"
    (edit,) = given.edits
    assert edit.path == "src/café.py"
    assert "-b = 2\n+b = 20\n" in edit.diff


def test_a_path_outside_every_workspace_folder_is_whole() -> None:
    assert prompt_path("file:///tmp/x%20y.py", ["file:///home/me"]) == "/tmp/x y.py"
    assert prompt_path("untitled:Untitled-1", []) == "Untitled-1"  # the name its tab shows


def test_the_rewrites_edits_land_in_the_document_and_an_undo_is_left_out() -> None:
    uri = "file:///p.py"
    text = "x = 1\n" * 30
    history, changed = history_with(text, "x = 1", "y = 1", uri)
    last = history.last_group(uri)
    snap = DocumentSnapshot.at(changed, 1, uri=uri)
    region = region_input(snap, history.recent(), words)
    assert region.offset == 0
    new_region = region.given.region.replace("x = 1", "y = 1", 1)
    undo = region.given.region.replace("y = 1", "x = 1", 1)
    kept = document_edits(region, (RegionEdit(start=6, end=7, text="y"),), changed, last=last)
    assert kept == (ProposedEdit(start=6, end=7, text="y"),)
    assert new_region.startswith("y = 1\ny = 1")
    assert document_edits(region, (RegionEdit(start=0, end=1, text="x"),), changed, last=last) == ()
    assert apply_region_edits(region.given.region, (RegionEdit(start=0, end=1, text="x"),)) == undo
    reverted = {("x", "z")}
    assert (
        document_edits(
            region, (RegionEdit(start=6, end=7, text="z"),), changed, last=last, reverted=reverted
        )
        == ()
    )


def test_a_region_further_down_places_its_edits_at_its_own_offset() -> None:
    text = numbered(400)  # more before the region than its budget of tokens
    cursor = text.index("line300")
    snap = DocumentSnapshot.at(text, cursor, uri="file:///n.py")
    region = region_input(snap, (), words)
    at = region.given.region.index("line301 = 301") + len("line301 = ")
    (edit,) = document_edits(
        region, (RegionEdit(start=at, end=at + 3, text="999"),), text, last=None
    )
    assert text[edit.start : edit.end] == "301"
    assert not region.given.at_file_start
    assert region.given.before.endswith("\n")
