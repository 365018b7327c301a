"""Next edits in the Neovim plugin (editors/nvim), in a real headless Neovim with the real
server and the real default models: a rename typed in insert mode is proposed at the other
uses, and an argument typed into one call at the same function's other call; each is shown
with extmarks, jumped to and applied with Tab as one undo step, and counted by the server as
accepted; Esc or moving away dismisses them, counted as rejected.

The Neovim session and its helpers are test_nvim.py's (one Neovim and one server per module).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nvim_helpers import Session, poll
from test_nvim import byte_col, leave_insert, no_window_left_open, nv, project

# Fixtures used here by name (pytest finds them in this module's namespace).
__all__ = ["no_window_left_open", "nv", "project"]

#: `count` is the parameter; the function's name before it on the line is not ASCII, so a
#: UTF-16 column would differ from the UTF-8 one Neovim negotiates.
SOURCE = (
    "def größe(count):\n"
    "    # count is how many\n"
    "    total = count * 2  # ½\n"
    '    label = "count"\n'
    "    return total + count\n"
)
RENAMED_FIRST = SOURCE.replace("(count)", "(items)")
#: Every use renamed; not the comment, not the string.
EXPECTED = (
    "def größe(items):\n"
    "    # count is how many\n"
    "    total = items * 2  # ½\n"
    '    label = "count"\n'
    "    return total + items\n"
)


STATS = """
local client = require('infill.lsp').get_client()
local answer = require('infill.compat').request_sync(client, 'infill/stats', vim.empty_dict(), 5000)
return answer and answer.result
"""


def stats(nv: Session) -> dict[str, Any]:
    """The server's `infill/stats`."""
    stats: dict[str, Any] = nv.lua(STATS)
    return stats


def accepted_count(nv: Session) -> int:
    return int(stats(nv)["next_edits"]["propagation"]["accepted"])


LAST_ERROR = "return vim.inspect(require('infill.next_edit').last_error)"


def next_edit_marks(nv: Session) -> list[Any]:
    marks: list[Any] = nv.lua(
        "local ns = require('infill.next_edit').ns\n"
        "return vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })"
    )
    return marks


def shown_next_edits(nv: Session, what: str) -> list[Any]:
    """The next edits the plugin shows, once it shows some (the first ask loads the models)."""
    edits: list[Any] = poll(
        lambda: nv.lua("return require('infill').next_edits()"),
        what=what,
        timeout=60,
        describe=lambda: f"last error: {nv.lua(LAST_ERROR)}",
    )
    return edits


def deleted_and_added_marks(nv: Session) -> tuple[list[Any], list[Any]]:
    """The next-edit extmarks that highlight text to delete, and those that show new text."""
    marks = next_edit_marks(nv)
    deleted = [m for m in marks if m[3].get("hl_group") == "InfillNextEditDelete"]
    added = [m for m in marks if m[3].get("virt_text")]
    return deleted, added


def test_a_rename_is_shown_jumped_to_applied_in_one_undo_and_counted(
    nv: Session, project: Path
) -> None:
    folder = project / "my project"
    folder.mkdir()
    path = folder / "café größe.py"
    path.write_text(SOURCE, encoding="utf-8")
    bufnr = nv.open(path)
    assert nv.lua("return require('infill.lsp').get_client().offset_encoding") == "utf-8"
    buffer = nv.nvim.buffers[bufnr]
    before = accepted_count(nv)

    # Rename the parameter where it is first used, in insert mode (`cw`, as a user types it).
    first = SOURCE.splitlines()[0]
    nv.nvim.current.window.cursor = (1, byte_col(first, first.index("count")))
    nv.nvim.input("cwitems")
    poll(lambda: nv.mode() == "i" and buffer[0] == RENAMED_FIRST.splitlines()[0], what="typing")
    leave_insert(nv)

    # The other uses show: their old text highlighted, the new text after it, a sign.
    edits = shown_next_edits(nv, "next edits to show")
    assert [e["text"] for e in edits] == ["items", "items"], edits
    deleted, added = deleted_and_added_marks(nv)
    assert [(m[1], m[2], m[3]["end_row"], m[3]["end_col"]) for m in deleted] == [
        (e["start"][0], e["start"][1], e["stop"][0], e["stop"][1]) for e in edits
    ]
    assert [m[3]["virt_text"] for m in added] == [[["items", "InfillNextEditInsert"]]] * 2
    assert all(m[3]["virt_text_pos"] == "inline" for m in added)
    assert all(m[3].get("sign_text", "").strip() for m in added)

    # The cursor is not on an edit: Tab jumps to the nearest one (the next line's), Tab again
    # applies every shown edit; one undo takes back the whole application, and only it.
    third = SOURCE.splitlines()[2]
    jump_apply_undo(
        nv,
        buffer,
        cursor=(3, byte_col(third, third.index("count"))),
        applied=EXPECTED,
        undone=RENAMED_FIRST,
        accepted=lambda: accepted_count(nv) - before == len(edits),
    )


def jump_apply_undo(
    nv: Session,
    buffer: Any,
    *,
    cursor: tuple[int, int],
    applied: str,
    undone: str,
    accepted: Callable[[], bool],
) -> None:
    """Tab: the cursor at `cursor`, the edits still on show. Tab again: the buffer reads
    `applied`, the marks are gone and `accepted()` holds (the server counted them). One undo:
    the buffer reads `undone`."""
    nv.nvim.input("<Tab>")
    poll(
        lambda: tuple(nv.nvim.current.window.cursor) == cursor,
        what="the cursor at the nearest edit",
        timeout=10,
        describe=lambda: repr(nv.nvim.current.window.cursor),
    )
    assert nv.lua("return require('infill').next_edits()") is not None  # still on show
    nv.nvim.input("<Tab>")
    poll(
        lambda: "\n".join(buffer[:]) + "\n" == applied,
        what="the edits to apply",
        timeout=10,
        describe=lambda: repr(buffer[:]),
    )
    poll(lambda: not next_edit_marks(nv), what="the marks to go", timeout=10)
    poll(accepted, what="the server to count the acceptances", timeout=10)
    nv.nvim.input("u")
    poll(
        lambda: "\n".join(buffer[:]) + "\n" == undone,
        what="one undo to take back the edits",
        timeout=10,
        describe=lambda: repr(buffer[:]),
    )


#: `fetch` is called the same way twice; `parse` with the same argument, and the string and the
#: comment that spell the call, are not calls of `fetch`.
FETCHES = (
    "def download(url):\n"
    "    page = fetch(url)\n"
    "    if page is None:\n"
    "        page = fetch(url)\n"
    '    print("fetch(url) failed")  # fetch(url)\n'
    "    return parse(url)\n"
)
ARGUMENT = ", timeout=5"
FETCHES_TYPED = FETCHES.replace("fetch(url)", f"fetch(url{ARGUMENT})", 1)
#: The argument at both calls of `fetch`, and nowhere else.
FETCHES_EXPECTED = (
    "def download(url):\n"
    "    page = fetch(url, timeout=5)\n"
    "    if page is None:\n"
    "        page = fetch(url, timeout=5)\n"
    '    print("fetch(url) failed")  # fetch(url)\n'
    "    return parse(url)\n"
)


def test_an_argument_typed_into_one_call_is_inserted_into_the_same_call_with_tab(
    nv: Session, project: Path
) -> None:
    path = project / "fetch twice.py"
    path.write_text(FETCHES, encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]
    before = accepted_count(nv)

    # The argument typed in insert mode before the first call's closing parenthesis.
    lines = FETCHES.splitlines()
    first = lines[1]
    nv.nvim.current.window.cursor = (2, byte_col(first, first.index("url)") + len("url")))
    nv.nvim.input("i" + ARGUMENT)
    poll(
        lambda: nv.mode() == "i" and buffer[1] == FETCHES_TYPED.splitlines()[1],
        what="typing",
        describe=lambda: repr(buffer[1]),
    )
    leave_insert(nv)

    # The same insertion shows at the other call: nothing highlighted as deleted, the argument
    # inline before that call's closing parenthesis, a sign.
    edits = shown_next_edits(nv, "the insertion to show")
    other = lines[3]
    at = byte_col(other, other.index("url)") + len("url"))
    assert [(e["text"], e["start"], e["stop"]) for e in edits] == [(ARGUMENT, [3, at], [3, at])]
    deleted, added = deleted_and_added_marks(nv)
    assert not deleted, deleted
    assert [(m[1], m[2], m[3]["virt_text"]) for m in added] == [
        (3, at, [[ARGUMENT, "InfillNextEditInsert"]])
    ]
    assert added[0][3]["virt_text_pos"] == "inline"
    assert added[0][3].get("sign_text", "").strip()

    # Tab: the cursor jumps to where the argument goes, the insertion still on show; Tab
    # again: the argument is in both calls and the server counts it; one undo takes back the
    # applied insertion only, the typed argument stays.
    jump_apply_undo(
        nv,
        buffer,
        cursor=(4, at),
        applied=FETCHES_EXPECTED,
        undone=FETCHES_TYPED,
        accepted=lambda: accepted_count(nv) - before == 1,
    )


def outcome_count(nv: Session, outcome: str) -> int:
    return int(stats(nv)["next_edits"]["propagation"][outcome])


@pytest.mark.parametrize("key", ["<Esc>", "j"])
def test_esc_or_moving_away_dismisses_and_the_server_counts_a_rejection(
    nv: Session, project: Path, key: str
) -> None:
    path = project / f"dismiss {key.strip('<>')}.py"
    path.write_text(SOURCE, encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]
    before = outcome_count(nv, "rejected")
    first = SOURCE.splitlines()[0]
    nv.nvim.current.window.cursor = (1, byte_col(first, first.index("count")))
    nv.nvim.input("cwitems")
    poll(lambda: nv.mode() == "i" and buffer[0] == RENAMED_FIRST.splitlines()[0], what="typing")
    leave_insert(nv)
    edits = poll(lambda: nv.lua("return require('infill').next_edits()"), what="next edits")
    nv.nvim.input(key)
    poll(lambda: not next_edit_marks(nv), what="the next edits to go", timeout=10)
    assert nv.lua("return require('infill').next_edits()") is None
    poll(
        lambda: outcome_count(nv, "rejected") - before == len(edits),
        what="the server to count the rejections",
        timeout=10,
    )
    assert "\n".join(buffer[:]) + "\n" == RENAMED_FIRST  # nothing applied


def test_edits_for_an_older_version_of_the_buffer_are_dropped_not_applied(
    nv: Session, project: Path
) -> None:
    path = project / "stale.py"
    path.write_text(SOURCE, encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]
    first = SOURCE.splitlines()[0]
    nv.nvim.current.window.cursor = (1, byte_col(first, first.index("count")))
    nv.nvim.input("cwitems")
    poll(lambda: nv.mode() == "i" and buffer[0] == RENAMED_FIRST.splitlines()[0], what="typing")
    leave_insert(nv)
    poll(lambda: nv.lua("return require('infill').next_edits()"), what="next edits")
    nv.nvim.input("<Tab>")  # the cursor onto the nearest edit
    poll(lambda: nv.nvim.current.window.cursor[0] == 3, what="the jump", timeout=10)
    # A change the plugin has not heard of yet (its TextChanged comes after this Lua), below
    # the edits so that their ranges still fit and the cursor stays on one; then the accept:
    # the edits are about the version before the change, so they are dropped.
    nv.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, { '# new last line' })\n"
        "require('infill').next_edit_accept()"
    )
    assert "\n".join(buffer[:]) + "\n" == RENAMED_FIRST + "# new last line\n"
    assert nv.lua("return require('infill').next_edits()") is None
    assert not next_edit_marks(nv)
