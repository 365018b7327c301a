"""The Neovim plugin (editors/nvim) in a real headless Neovim, with the real server and the
real default models.

One Neovim and one server serve the whole module (the models load once); each test opens its
own file, so the tests pass in any order. Waiting is polling with a deadline, never a sleep.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nvim_helpers import (
    PLUGIN_DIR,
    Session,
    find_nvim,
    find_server,
    nvim_version,
    poll,
    start_session,
)
from scripted_lsp import scripted_command, write_script

NVIM, NVIM_WHY = find_nvim()
SERVER, SERVER_WHY = find_server()


def _needs() -> None:
    if NVIM is None:
        pytest.skip(NVIM_WHY)
    if SERVER is None:
        pytest.skip(SERVER_WHY)
    try:
        import pynvim  # type: ignore[import-untyped]  # noqa: F401  # pynvim ships no types
    except ImportError:
        pytest.skip("pynvim is not installed: pip install pynvim")


@pytest.fixture(scope="module")
def nv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    _needs()
    assert NVIM is not None
    assert SERVER is not None
    with start_session(NVIM, SERVER, tmp_path_factory.mktemp("nvim")) as session:
        yield session


@pytest.fixture(scope="module")
def nv_utf16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """A second Neovim whose client offers only UTF-16 positions (as most editors do)."""
    _needs()
    assert NVIM is not None
    assert SERVER is not None
    folder = tmp_path_factory.mktemp("nvim-utf16")
    with start_session(NVIM, SERVER, folder, 'position_encodings = { "utf-16" },') as session:
        yield session


#: The scripted chat model's explanation: long and slow (a minute), so that a stop always
#: comes while it is being written.
SCRIPTED_EXPLANATION = "It adds the two numbers before it, again and again. " * 60


@pytest.fixture(scope="module")
def nv_scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """A third Neovim, its server on scripted models (`serve --backend scripted`): what the
    plugin does with an answer whose every character and pace are known."""
    _needs()
    assert NVIM is not None
    assert SERVER is not None
    folder = tmp_path_factory.mktemp("nvim-scripted")
    coder = write_script(folder, "coder", ["x\n"])
    chat = write_script(folder, "chat", [{"text": SCRIPTED_EXPLANATION, "step_seconds": 0.02}])
    python, *args = scripted_command(coder, chat)  # the launcher that offers the scripted backend
    with start_session(NVIM, python, folder, server_args=args) as session:
        yield session


#: What the paced session's model writes in `scripted_sign` (below), after the indentation:
#: three lines in the function's block.
MULTI_LINE_ANSWER = "if x < 0:\n        return -1\n    return 1"
#: The paced session's options: a long debounce and changed keymaps (accept on `<C-l>`, no
#: dismiss key), as a user would write them in setup().
PACED_OPTIONS = 'debounce_ms = 600, keymaps = { accept = "<C-l>", dismiss = false },'
#: The paced session's answer in `scripted_counts` (below): a word, then the rest.
COUNTED_ANSWER = "total + tax"
#: Its scripted completion: ten digits at 0.15 s each, so that a request is still under way
#: when the next key comes.
PACED_ANSWER = "0123456789"


@pytest.fixture(scope="module")
def nv_paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Session, Any]]:
    """A fourth Neovim with PACED_OPTIONS, its server on a scripted model that answers slowly
    (the model and what it was asked: `ScriptedModel`)."""
    _needs()
    assert NVIM is not None
    assert SERVER is not None
    folder = tmp_path_factory.mktemp("nvim-paced")
    # The multi-line answer first, for its own function only; then the paced one, for every
    # other prompt. A call takes the first entry it matches, and takes it out of the script
    # unless it is the only one left: the paced entry is there for each call of the module.
    entries = [
        {"text": "    " + MULTI_LINE_ANSWER + "\n", "match": "def scripted_sign("},
        {"text": COUNTED_ANSWER + "\n", "match": "def scripted_counts("},
        *[{"text": PACED_ANSWER + "\n", "step_seconds": 0.15}] * 50,
    ]
    coder = write_script(folder, "coder", entries)
    python, *args = scripted_command(coder)
    with start_session(NVIM, python, folder, PACED_OPTIONS, args) as session:
        yield session, coder


CLOSE_FLOATS = """
for _, win in ipairs(vim.api.nvim_list_wins()) do
  if vim.api.nvim_win_get_config(win).relative ~= "" then
    pcall(vim.api.nvim_win_close, win, true)
  end
end
"""


@pytest.fixture(autouse=True)
def no_window_left_open(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, whatever it left (a failed one too): normal mode, no floating window,
    so that the next test's `edit` lands in a window of its own."""
    yield
    for name in ("nv", "nv_utf16", "nv_scripted", "nv_paced"):
        if name in request.fixturenames:
            found = request.getfixturevalue(name)
            session: Session = found[0] if isinstance(found, tuple) else found
            with contextlib.suppress(Exception):
                session.nvim.input("<Esc>")
                session.lua(CLOSE_FLOATS)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()  # a root marker: the project root is this folder
    return tmp_path


def byte_col(text: str, chars: int) -> int:
    return len(text[:chars].encode("utf-8"))


def start_insert_at(nv: Session, row: int, col: int) -> None:
    """Insert mode with the cursor before byte `col` of 1-based `row` (like `i` there)."""
    nv.lua("local g = require('infill.ghost'); g.last_error, g.last_answer, g.trace = nil, nil, {}")
    nv.nvim.current.window.cursor = (row, col)
    nv.nvim.input("i")
    poll(lambda: nv.mode() == "i", what="insert mode", timeout=10)


NOTHING_NOW = """
local g = require('infill.ghost')
local a = g.last_answer
if not a or a.count > 0 or g.busy(0) or a.bufnr ~= vim.api.nvim_get_current_buf() then
  return false
end
local pos = vim.api.nvim_win_get_cursor(0)
return a.tick == vim.b.changedtick and a.row == pos[1] - 1 and a.col == pos[2]
"""


def trace(nv: Session) -> str:
    """What the plugin's requests did since start_insert_at (the ghost module's trace)."""
    lines = nv.lua("return require('infill.ghost').trace or {}")
    return "trace:\n  " + "\n  ".join(lines[-40:])


def wait_suggestion(nv: Session, what: str) -> dict[str, Any]:
    """Waits for a suggestion to show. A request that fails, or the server's answer of no
    suggestion at all for the cursor of now (with nothing else asked), ends the wait at once."""

    def probe() -> dict[str, Any] | None:
        if nv.lua("return require('infill.ghost').last_error ~= nil"):
            raise AssertionError(f"a suggestion request failed: {nv.last_error()}; {trace(nv)}")
        if suggestion := nv.suggestion():
            return suggestion
        if nv.lua(NOTHING_NOW):
            raise AssertionError(f"the server had no suggestion here; {trace(nv)}")
        return None

    return poll(probe, what=what, describe=lambda: trace(nv))


def shown_text(mark: Any) -> str:
    """What the extmark shows: the inline text, then one line per virtual line."""
    details = mark[3]
    first = "".join(chunk[0] for chunk in details.get("virt_text") or [])
    rest = ["".join(chunk[0] for chunk in line) for line in details.get("virt_lines") or []]
    return "\n".join([first, *rest])


def leave_insert(nv: Session) -> None:
    nv.nvim.input("<Esc>")
    poll(lambda: nv.mode() == "n", what="normal mode", timeout=10)


# --- status and health ------------------------------------------------------------------------


def test_status_becomes_ready(nv: Session, project: Path) -> None:
    path = project / "status.py"
    path.write_text("x = 1\n", encoding="utf-8")
    nv.open(path)
    status = poll(
        lambda: (
            (s := nv.lua("return require('infill').status()")) and s["status"] != "loading" and s
        ),
        what="the model to load",
    )
    assert status["status"] == "ready", status
    assert status["model"]
    assert status["backend"]
    assert "infill: ready" in nv.output("InfillStatus")


def test_checkhealth_reports_version_server_and_model(nv: Session, project: Path) -> None:
    path = project / "health.py"
    path.write_text("y = 2\n", encoding="utf-8")
    nv.open(path)
    poll(
        lambda: (nv.lua("return require('infill').status()") or {}).get("status") != "loading",
        what="the model to load",
    )
    nv.nvim.command("checkhealth infill")
    report = "\n".join(nv.nvim.current.buffer[:])
    nv.nvim.command("bwipeout!")
    assert NVIM is not None
    version = nvim_version(NVIM)
    assert version is not None
    assert f"Neovim {'.'.join(map(str, version))}" in report
    assert "server executable" in report
    assert str(SERVER) in report
    assert "client" in report
    assert "running" in report
    assert "ready" in report


# --- ghost text -------------------------------------------------------------------------------


# The cursor goes before the last `)`: the emoji is before it on the line, and the closing
# paren after it is one that a suggestion may absorb (its range then covers it).
EMOJI_SOURCE = """\
def greet(name):
    message = "🎉 party for " + name
    print(message)


greet("🎉 ")
"""
EMOJI_ROW = 6


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_ghost_text_after_emoji_sits_at_the_cursor_and_accepts_exactly(
    request: pytest.FixtureRequest, encoding: str, project: Path
) -> None:
    nv: Session = request.getfixturevalue("nv" if encoding == "utf-8" else "nv_utf16")
    path = project / "emoji.py"
    path.write_text(EMOJI_SOURCE, encoding="utf-8")
    bufnr = nv.open(path)
    assert nv.lua("return require('infill.lsp').get_client().offset_encoding") == encoding
    line = EMOJI_SOURCE.splitlines()[EMOJI_ROW - 1]
    col = byte_col(line, line.rindex(")"))
    start_insert_at(nv, EMOJI_ROW, col)

    wait_suggestion(nv, "a suggestion after the emoji")
    (mark,) = nv.ghost_marks()
    _, row, mark_col, details = mark
    cursor = nv.nvim.current.window.cursor
    assert (row + 1, mark_col) == (cursor[0], cursor[1]) == (EMOJI_ROW, col)
    assert details["virt_text_pos"] == "inline" or not details.get("virt_text")
    chunks = [c for c in details.get("virt_text") or []] + [
        c for line_chunks in details.get("virt_lines") or [] for c in line_chunks
    ]
    assert chunks
    assert all(c[1] == "InfillSuggestion" for c in chunks)
    ghost = shown_text(mark)
    assert ghost.strip(), details

    # Accepting inserts exactly what was shown, between what was before and after the cursor.
    raw = line.encode("utf-8")
    before, after = raw[:col].decode("utf-8"), raw[col:].decode("utf-8")
    expected = (before + ghost + after).split("\n")
    buffer = nv.nvim.buffers[bufnr]
    nv.nvim.input("<Tab>")
    top = EMOJI_ROW - 1
    poll(lambda: buffer[top] != line, what="the suggestion to be accepted", timeout=10)
    assert buffer[top : top + len(expected)] == expected
    # The cursor ends right after the inserted text: after the ghost text, and after the
    # closers that the suggestion's range replaced (the item's text holds them too).
    last = (before + ghost).split("\n")[-1].encode("utf-8")
    cursor_row, cursor_col = nv.nvim.current.window.cursor
    assert cursor_row == top + len(expected)
    passed = expected[-1].encode("utf-8")[len(last) : cursor_col].decode("utf-8")
    assert cursor_col >= len(last), (cursor_col, passed)
    assert set(passed) <= set(")]}\"'"), (cursor_col, passed)
    assert buffer[:top] == EMOJI_SOURCE.splitlines()[:top]
    leave_insert(nv)

    # One undo takes back the suggestion and nothing else.
    nv.nvim.command("undo")
    assert buffer[:] == EMOJI_SOURCE.splitlines()


MULTI_LINE_SOURCE = (
    'def is_prime(n):\n    """Whether n is a prime number."""\n'
    "    if n < 2:\n        return False\n    \n"
)


def test_multi_line_ghost_text_accepts_line_by_line_then_whole(nv: Session, project: Path) -> None:
    path = project / "primes.py"
    path.write_text(MULTI_LINE_SOURCE, encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]
    start_insert_at(nv, 5, 3)
    nv.nvim.input("<End>")
    wait_suggestion(nv, "a multi-line suggestion")
    (mark,) = nv.ghost_marks()
    ghost = shown_text(mark)
    if "\n" not in ghost:
        pytest.skip(f"the model suggested a single line here: {ghost!r}")
    assert mark[3]["virt_lines"]  # the lines below the cursor's line
    first, rest = ghost.split("\n", 1)

    # Accept a line: the first line goes in, the rest stays on show.
    nv.nvim.input("<M-Down>")
    poll(lambda: buffer[4] != "    ", what="the first line to be accepted", timeout=10)
    assert buffer[4] == "    " + first
    remaining = poll(nv.suggestion, what="the rest to stay on show", timeout=10)
    assert remaining["text"] == "\n" + rest

    # Accept the rest: the buffer now reads the whole suggestion.
    nv.nvim.input("<Tab>")
    expected = ("    " + ghost).split("\n")
    poll(lambda: buffer[4:] == expected, what="the rest to be accepted", timeout=10)
    assert buffer[:4] == MULTI_LINE_SOURCE.splitlines()[:4]
    assert nv.nvim.current.window.cursor == (4 + len(expected), len(expected[-1].encode()))
    leave_insert(nv)


def test_next_cycles_through_invoked_suggestions(nv: Session, project: Path) -> None:
    # No space after `return`: the greedy choice (always among the invoked ones) is then a
    # suggestion. After "return " the model often has nothing to say, greedy or sampled.
    source = "def greet(name):\n    return\n"
    path = project / "cycle.py"
    path.write_text(source, encoding="utf-8")
    nv.open(path)
    start_insert_at(nv, 2, 3)
    nv.nvim.input("<End>")
    nv.nvim.input("<M-]>")
    first = wait_suggestion(nv, "invoked suggestions")
    seen = [first["text"]]

    def another() -> dict[str, Any] | None:
        shown = nv.suggestion()
        return shown if shown and shown["text"] not in seen else None

    for _ in range(first["count"] - 1):
        nv.nvim.input("<M-]>")
        seen.append(poll(another, what="the next suggestion", timeout=30)["text"])
    print(f"invoked suggestions: {seen}")
    assert len(set(seen)) == first["count"] >= 1
    if first["count"] > 1:
        nv.nvim.input("<M-[>")
        poll(
            lambda: (s := nv.suggestion()) and s["text"] == seen[-2],
            what="the previous one",
            timeout=10,
        )
    leave_insert(nv)


def test_moving_the_cursor_or_leaving_insert_mode_clears_the_ghost_text(
    nv: Session, project: Path
) -> None:
    source = "def area(width, height):\n    return width * \n"
    path = project / "moving.py"
    path.write_text(source, encoding="utf-8")
    nv.open(path)
    line = source.splitlines()[1]
    start_insert_at(nv, 2, len(line))  # `i` at the end: before the last character
    nv.nvim.input("<End>")
    wait_suggestion(nv, "a suggestion at the end of the line")
    assert nv.ghost_marks()

    # No new suggestion may come for a while: what clears the old one is the move itself.
    nv.lua("require('infill.config').options.debounce_ms = 600000")
    try:
        nv.nvim.input("<Left>")
        poll(
            lambda: not nv.ghost_marks() and nv.suggestion() is None,
            what="ghost text to go",
            timeout=10,
        )
    finally:
        nv.lua("require('infill.config').options.debounce_ms = 30")

    # Asked for again (the "next" key asks the server when there is nothing to cycle), then
    # leaving insert mode clears it. Keys are queued while Lua runs at once: wait for <End> to
    # be done, or next() would ask about the cursor before it.
    nv.nvim.input("<End>")
    poll(
        lambda: tuple(nv.nvim.current.window.cursor) == (2, len(line.encode())),
        what="the cursor at the end",
        timeout=10,
    )
    nv.lua("require('infill').next()")
    wait_suggestion(nv, "an invoked suggestion")
    leave_insert(nv)
    poll(lambda: not nv.ghost_marks(), what="ghost text to go in normal mode", timeout=10)


def test_tab_without_a_suggestion_types_a_tab(nv: Session, project: Path) -> None:
    path = project / "tabs.py"
    path.write_text("x = 1\n", encoding="utf-8")
    bufnr = nv.open(path)
    nv.lua("require('infill').toggle(false)")
    try:
        nv.nvim.command("setlocal expandtab shiftwidth=4 softtabstop=4")
        start_insert_at(nv, 1, 0)
        nv.nvim.input("<Tab>")
        buffer = nv.nvim.buffers[bufnr]
        poll(lambda: buffer[0] != "x = 1", what="the tab to be typed", timeout=10)
        assert buffer[0] == "    x = 1"
        leave_insert(nv)
    finally:
        nv.lua("require('infill').toggle(true)")


def test_a_path_with_a_space_and_non_ascii_gets_suggestions(nv: Session, tmp_path: Path) -> None:
    folder = tmp_path / "my project é"
    folder.mkdir()
    path = folder / "naïve module.py"
    source = "def add(a, b):\n    return \n"
    path.write_text(source, encoding="utf-8")
    nv.open(path)
    uri = nv.lua("return vim.uri_from_bufnr(0)")
    assert "%20" in uri  # the URI the server sees does carry escapes
    start_insert_at(nv, 2, len("    return "))
    nv.nvim.input("<End>")
    suggestion = wait_suggestion(nv, f"a suggestion in {path}")
    assert suggestion["text"].strip()
    leave_insert(nv)


# --- explain ----------------------------------------------------------------------------------


EXPLAIN_STATE = """
local ex = require('infill.explain').current
if not ex or not vim.api.nvim_buf_is_valid(ex.buf) then return vim.NIL end
local win_ok = vim.api.nvim_win_is_valid(ex.win)
return {
  done = vim.b[ex.buf].infill_explain_done,
  chunks = ex.chunks,
  text = table.concat(vim.api.nvim_buf_get_lines(ex.buf, 0, -1, false), "\\n"),
  filetype = vim.bo[ex.buf].filetype,
  relative = win_ok and vim.api.nvim_win_get_config(ex.win).relative or "",
  wrap = win_ok and vim.wo[ex.win].wrap,
  win = ex.win,
  token = ex.token,
}
"""

EXPLAIN_SOURCE = """\
def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
"""


def test_explain_fills_a_floating_window(nv: Session, project: Path) -> None:
    path = project / "fib.py"
    path.write_text(EXPLAIN_SOURCE, encoding="utf-8")
    nv.open(path)
    nv.nvim.current.window.cursor = (3, 4)  # inside the function: the server takes all of it
    nv.nvim.command("InfillExplain")
    state = poll(
        lambda: (s := nv.lua(EXPLAIN_STATE)) and s["done"] and s,
        what="the explanation to finish",
    )
    assert state["done"] == "done", state
    assert state["chunks"] > 0  # it came in pieces, through infill/explainChunk
    assert state["text"].strip()
    assert "Thinking" not in state["text"]
    assert state["filetype"] == "markdown"
    assert state["relative"] == "editor"
    assert state["wrap"]
    # `q` closes it.
    assert nv.nvim.current.window.handle == state["win"]
    nv.nvim.input("q")
    poll(
        lambda: not nv.lua("return vim.api.nvim_win_is_valid(...)", state["win"]),
        what="q to close",
        timeout=10,
    )


RECORD_CANCELS = """
_G.infill_test_cancels = {}
vim.api.nvim_create_autocmd("LspNotify", {
  -- One recorder, however many tests install it.
  group = vim.api.nvim_create_augroup("infill_test_cancels", { clear = true }),
  callback = function(ev)
    if ev.data.method == "window/workDoneProgress/cancel" then
      table.insert(_G.infill_test_cancels, ev.data.params)
    end
  end,
})
"""


def test_explain_of_a_selection_can_be_stopped(nv_scripted: Session, project: Path) -> None:
    """`<C-c>` in the explanation's window stops it. The scripted explanation takes a minute
    (the real model's may end before the key is read): the stop always comes first, and the
    window keeps a start of the answer."""
    nv = nv_scripted
    path = project / "stop.py"
    path.write_text(EXPLAIN_SOURCE, encoding="utf-8")
    nv.open(path)
    nv.lua(RECORD_CANCELS)
    nv.nvim.command("2,4InfillExplain")
    poll(lambda: (s := nv.lua(EXPLAIN_STATE)) and s["chunks"] > 0, what="the first chunk")
    nv.nvim.input("<C-c>")  # in the explanation's window
    state = poll(
        lambda: (s := nv.lua(EXPLAIN_STATE)) and s["done"] and s, what="the stop", timeout=10
    )
    assert state["done"] == "stopped"
    shown = " ".join(state["text"].split())
    assert shown, state
    assert " ".join(SCRIPTED_EXPLANATION.split()).startswith(shown[: len(shown) // 2]), shown
    # The stop is the progress's cancel, with the token the chunks came with.
    sent = poll(lambda: nv.lua("return _G.infill_test_cancels"), what="the cancel", timeout=10)
    assert sent == [{"token": state["token"]}]
    nv.nvim.input("q")
    poll(lambda: nv.lua(EXPLAIN_STATE) is None, what="q to close", timeout=10)
    # The server is still well (the model stopped, it did not break).
    status = nv.lua("return require('infill').status()")
    assert status["status"] == "ready", status


RECORD_EXPLAIN_RANGE = """
local explain = require('infill.explain')
local real = explain.explain
explain.explain = function(_, _, range)
  explain.explain = real
  _G.infill_test_range = range
end
"""


def units(text: str, encoding: str) -> int:
    return len(text.encode("utf-8")) if encoding == "utf-8" else len(text.encode("utf-16-le")) // 2


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_explain_sends_the_selection_in_the_clients_encoding(
    request: pytest.FixtureRequest, encoding: str, project: Path
) -> None:
    nv: Session = request.getfixturevalue("nv" if encoding == "utf-8" else "nv_utf16")
    source = 'def party():\n    label = "🎉 party 🎈 time"\n    return label\n'
    path = project / "ranges.py"
    path.write_text(source, encoding="utf-8")
    nv.open(path)
    line = source.splitlines()[1]
    start, end = line.index("party"), line.index("time") + len("time")
    # A charwise selection from "party" to "time" (the 🎈 between them): exactly those
    # characters; then a linewise one: whole lines; then none: the cursor.
    cases = [
        (f"normal! 0{start}lv{end - start - 1}l", "'<,'>InfillExplain", (1, start, 1, end)),
        ("normal! V", "'<,'>InfillExplain", (1, 0, 1, len(line))),
        (f"normal! 0{start}l", "InfillExplain", (1, start, 1, start)),
    ]
    for select, command, (row1, col1, row2, col2) in cases:
        nv.nvim.current.window.cursor = (2, 0)
        nv.nvim.command(select)
        nv.lua(RECORD_EXPLAIN_RANGE)
        nv.nvim.input("<Esc>")
        nv.nvim.command(command)
        sent = nv.lua("return _G.infill_test_range")
        assert sent == {
            "start": {"line": row1, "character": units(line[:col1], encoding)},
            "end": {"line": row2, "character": units(line[:col2], encoding)},
        }, (command, select)


# --- rewrite ----------------------------------------------------------------------------------


def test_rewrite_of_a_selection_applies_an_edit_or_says_why(nv: Session, project: Path) -> None:
    source = "def double(x):\n    return x * 2\n"
    path = project / "rewrite.py"
    path.write_text(source, encoding="utf-8")
    bufnr = nv.open(path)
    nv.nvim.command("1,2InfillRewrite Add type hints.")
    result = poll(
        lambda: nv.lua("return require('infill.rewrite').last_result"),
        what="the rewrite to finish",
    )
    assert "error" not in result, result
    lines = nv.nvim.buffers[bufnr][:]
    if result["applied"]:  # the model may also give the code back as it was
        assert any("def double" in line for line in lines), lines
    else:  # the small model's answer may hold no valid code: then nothing changes
        assert result["reason"]
        assert lines == source.splitlines()


# --- terminal capture -------------------------------------------------------------------------


def test_terminal_capture_shows_ghost_text(tmp_path: Path) -> None:
    """The real TUI in tmux: editors/nvim/capture.sh writes what the terminal shows."""
    _needs()
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    script = PLUGIN_DIR / "capture.sh"
    suggestion_file = tmp_path / "suggestion.txt"
    env = {
        "NVIM_BIN": str(NVIM),
        "INFILL_LSP": str(SERVER),
        "SUGGESTION_FILE": str(suggestion_file),
    }
    done = subprocess.run(
        ["bash", str(script), str(tmp_path)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    plain = (tmp_path / "ghost-text.txt").read_text(encoding="utf-8")
    colored = (tmp_path / "ghost-text.ansi").read_text(encoding="utf-8")
    assert "def is_prime(n):" in plain
    suggestion = suggestion_file.read_text(encoding="utf-8").strip()
    first_line = suggestion.splitlines()[0]
    assert first_line
    assert first_line in plain
    assert "\x1b[" in colored  # with its colors


def test_rewrite_without_an_instruction_offers_presets(nv: Session, project: Path) -> None:
    path = project / "presets.py"
    path.write_text("def half(x):\n    return x / 2\n", encoding="utf-8")
    nv.open(path)
    # The user picks the second preset in vim.ui.select.
    nv.lua(
        """
        local real = vim.ui.select
        vim.ui.select = function(items, opts, on_choice)
          vim.ui.select = real
          _G.infill_test_offered = { items = items, prompt = opts.prompt }
          on_choice(items[2], 2)
        end
        """
    )
    nv.nvim.command("%InfillRewrite")
    offered = nv.lua("return _G.infill_test_offered")
    assert offered["items"][1] == "Add type hints."
    result = poll(
        lambda: nv.lua("return require('infill.rewrite').last_result"),
        what="the rewrite to finish",
    )
    assert "error" not in result, result


# --- commands and keys ------------------------------------------------------------------------


def test_infill_stop_stops_the_running_explanation(nv_scripted: Session, project: Path) -> None:
    """`:InfillStop`, from the source window, ends the explanation as `<C-c>` in its window
    does: the progress is cancelled with its token and the window says it stopped."""
    nv = nv_scripted
    path = project / "stop_command.py"
    path.write_text(EXPLAIN_SOURCE, encoding="utf-8")
    nv.open(path)
    source_window = nv.nvim.current.window.handle
    nv.lua(RECORD_CANCELS)
    nv.nvim.command("2,4InfillExplain")
    poll(lambda: (s := nv.lua(EXPLAIN_STATE)) and s["chunks"] > 0, what="the first chunk")
    nv.lua("vim.api.nvim_set_current_win(...)", source_window)
    nv.nvim.command("InfillStop")
    state = poll(
        lambda: (s := nv.lua(EXPLAIN_STATE)) and s["done"] and s, what="the stop", timeout=10
    )
    assert state["done"] == "stopped"
    sent = poll(lambda: nv.lua("return _G.infill_test_cancels"), what="the cancel", timeout=10)
    assert sent == [{"token": state["token"]}]
    nv.lua("vim.api.nvim_win_close(...)", state["win"], True)


def test_infill_toggle_turns_automatic_suggestions_off_and_on(nv: Session, project: Path) -> None:
    path = project / "toggle.py"
    source = "def area(width, height):\n    return width * \n"
    path.write_text(source, encoding="utf-8")
    nv.open(path)
    enabled = "return require('infill.ghost').enabled"
    assert nv.lua(enabled) is True
    nv.nvim.command("messages clear")  # earlier tests toggled too
    try:
        nv.nvim.command("InfillToggle")
        assert nv.lua(enabled) is False
        assert "infill: automatic suggestions off" in nv.output("messages")
    finally:
        nv.nvim.command("InfillToggle")
    assert nv.lua(enabled) is True
    said = nv.output("messages").splitlines()
    assert [m for m in said if "automatic suggestions" in m] == [
        "infill: automatic suggestions off",
        "infill: automatic suggestions on",
    ]
    # On again: typing brings a suggestion.
    line = source.splitlines()[1]
    start_insert_at(nv, 2, len(line))
    nv.nvim.input("<End>")
    assert wait_suggestion(nv, "a suggestion once back on")["text"].strip()
    leave_insert(nv)


def first_word(text: str) -> str:
    """The part of a suggestion that accepting a word takes (the plugin's `first_word`)."""
    found = re.match(r"\s*[A-Za-z0-9_]+|\s*[^A-Za-z0-9_\s]+|\s+", text)
    return found.group(0) if found else text


def test_dismiss_clears_the_suggestion_and_accepting_a_word_keeps_the_rest(
    nv: Session, project: Path
) -> None:
    """`<C-]>` takes the ghost text away and leaves the buffer as it was; `<M-Right>` puts in
    the suggestion's first word and keeps the rest on show."""
    source = "def area(width, height):\n    return width * \n"
    path = project / "words.py"
    path.write_text(source, encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]
    line = source.splitlines()[1]
    start_insert_at(nv, 2, len(line))
    nv.nvim.input("<End>")
    wait_suggestion(nv, "a suggestion to dismiss")
    nv.nvim.input("<C-]>")
    poll(lambda: not nv.ghost_marks() and nv.suggestion() is None, what="the dismiss", timeout=10)
    assert buffer[:] == source.splitlines()

    nv.lua("require('infill').next()")  # asked for again, explicitly
    text = wait_suggestion(nv, "a suggestion to take a word of")["text"]
    word = first_word(text)
    nv.nvim.input("<M-Right>")
    poll(lambda: buffer[1] != line, what="the word to be accepted", timeout=10)
    assert buffer[1] == line + word
    if text[len(word) :]:
        rest = poll(nv.suggestion, what="the rest to stay on show", timeout=10)
        assert rest["text"] == text[len(word) :]
    leave_insert(nv)


def test_a_buffer_without_a_file_name_is_left_alone(nv: Session, project: Path) -> None:
    """No file, no URI: the plugin does not attach the server to an unnamed buffer, even one
    with a filetype; the same buffer, once named, is attached."""
    attached = "return #vim.lsp.get_clients({ bufnr = 0, name = 'infill' }) > 0"
    nv.nvim.input("<Esc>")
    nv.nvim.command("enew")
    try:
        nv.nvim.command("setlocal filetype=python")  # FileType: where the plugin attaches
        assert nv.lua(attached) is False
        nv.nvim.command(f"file {nv.nvim.funcs.fnameescape(str(project / 'named.py'))}")
        nv.nvim.command("setlocal filetype=python")
        poll(lambda: nv.lua(attached), what="the named buffer to be attached", timeout=30)
    finally:
        nv.nvim.command("bwipeout!")


# --- the debounce, cancelling and the keymap options (a scripted, slow model) -----------------


def requests_in(nv: Session) -> list[str]:
    """The plugin's requests in its trace since start_insert_at."""
    lines = nv.lua("return require('infill.ghost').trace or {}")
    return [line for line in lines if re.search(r": request \d+ \(", line)]


def our_keymap(nv: Session, key: str) -> str | None:
    """What the plugin maps `key` to in insert mode (its description), None if not ours:
    Neovim 0.11 maps `<Tab>` itself, for snippets."""
    found = nv.nvim.funcs.maparg(key, "i", False, True)
    desc = found.get("desc", "") if found else ""
    return desc if desc.startswith("infill:") else None


def test_keys_typed_within_the_debounce_ask_once(
    nv_paced: tuple[Session, Any], project: Path
) -> None:
    """README "Neovim": a suggestion is asked for only once typing pauses for `debounce_ms`:
    three keys 0.1 s apart under a 0.6 s debounce make one request, not three."""
    nv, _ = nv_paced
    path = project / "debounce.py"
    path.write_text("value = \n", encoding="utf-8")
    bufnr = nv.open(path)
    start_insert_at(nv, 1, len("value = "))
    nv.nvim.input("<End>")
    for key in "abc":
        nv.nvim.input(key)
        time.sleep(0.1)  # the pause under test: well inside the debounce
    poll(
        lambda: nv.nvim.buffers[bufnr][0] == "value = abc", what="the keys to be typed", timeout=10
    )
    shown = wait_suggestion(nv, "the suggestion after the pause")
    assert shown["text"] == PACED_ANSWER
    assert len(requests_in(nv)) == 1, trace(nv)
    leave_insert(nv)


def test_a_key_typed_while_a_request_runs_cancels_it(
    nv_paced: tuple[Session, Any], project: Path
) -> None:
    """README "Neovim": the older request is cancelled when the user types on: the plugin sends
    `$/cancelRequest` for it, the model stops writing its answer, and the newer one shows."""
    nv, coder = nv_paced
    nv.lua(
        "local c = require('infill.compat'); _G.infill_cancels = {}\n"
        "if not _G.infill_cancel then _G.infill_cancel = c.cancel end\n"
        "c.cancel = function(client, id) table.insert(_G.infill_cancels, id)\n"
        "  return _G.infill_cancel(client, id) end"
    )
    path = project / "cancel.py"
    path.write_text("value = \n", encoding="utf-8")
    bufnr = nv.open(path)
    calls = len(coder.starts())
    start_insert_at(nv, 1, len("value = "))
    nv.nvim.input("<End>a")
    poll(lambda: len(coder.starts()) > calls, what="the model to be asked", timeout=30)
    nv.nvim.input("b")
    poll(lambda: nv.nvim.buffers[bufnr][0] == "value = ab", what="the key to be typed", timeout=10)
    assert wait_suggestion(nv, "the newer request's suggestion")["text"] == PACED_ANSWER
    assert len(nv.lua("return _G.infill_cancels")) >= 1, trace(nv)
    first = coder.starts()[calls]["call"]
    ends = [e for e in coder.events() if e["event"] == "end" and e["call"] == first]
    assert ends, coder.events()
    assert ends[0]["cancelled"] is True, ends
    assert ends[0]["yielded"] < len(PACED_ANSWER), ends
    leave_insert(nv)


def test_keymaps_can_be_moved_or_turned_off(nv_paced: tuple[Session, Any], project: Path) -> None:
    """README "Neovim": `keymaps = { accept = "<C-l>", dismiss = false }` accepts on `<C-l>`,
    leaves `<Tab>` and `<C-]>` to Neovim, and keeps the other keys."""
    nv, _ = nv_paced
    path = project / "keys.py"
    path.write_text("value = \n", encoding="utf-8")
    bufnr = nv.open(path)
    start_insert_at(nv, 1, len("value = "))
    mapped = {key: our_keymap(nv, key) for key in ("<C-l>", "<Tab>", "<C-]>", "<M-Down>")}
    assert mapped == {
        "<C-l>": "infill: accept the suggestion",
        "<Tab>": None,
        "<C-]>": None,
        "<M-Down>": "infill: accept a line",
    }
    nv.nvim.input("<End>x")
    assert wait_suggestion(nv, "a suggestion to accept")["text"] == PACED_ANSWER
    nv.nvim.input("<C-l>")
    buffer = nv.nvim.buffers[bufnr]
    poll(lambda: buffer[0] != "value = x", what="the accept on <C-l>", timeout=10)
    assert buffer[0] == "value = x" + PACED_ANSWER
    leave_insert(nv)


def test_status_and_health_name_the_scripted_model_exactly(
    nv_paced: tuple[Session, Any], project: Path
) -> None:
    """README "Neovim": `:InfillStatus` says the state, model, backend, device, context size
    and FIM family; `:checkhealth infill` the same model, on a model whose every figure is
    known (the scripted one: "coder", 4096 tokens, no FIM tokens)."""
    nv, _ = nv_paced
    path = project / "status.py"
    path.write_text("y = 2\n", encoding="utf-8")
    nv.open(path)
    poll(
        lambda: (nv.lua("return require('infill').status()") or {}).get("status") == "ready",
        what="the scripted model to load",
        timeout=30,
    )
    nv.nvim.command("messages clear")
    assert nv.output("InfillStatus").strip().splitlines()[-1] == (
        "infill: ready (coder, scripted on cpu, context 4096, FIM none)"
    )
    nv.nvim.command("checkhealth infill")
    report = "\n".join(nv.nvim.current.buffer[:])
    nv.nvim.command("bwipeout!")
    assert "ready: coder (scripted on cpu, context 4096)" in report, report


def test_multi_line_ghost_text_is_shown_and_accepted_exactly(
    nv_paced: tuple[Session, Any], project: Path
) -> None:
    """README "Neovim": the first line of a suggestion shows inline at the cursor, the rest as
    virtual lines below; `<M-Down>` puts in one line and keeps the rest on show, and accepting
    puts in the rest: the buffer reads exactly the scripted answer, the cursor after it."""
    nv, _ = nv_paced
    source = "def scripted_sign(x):\n    \n"
    path = project / "sign.py"
    path.write_text(source, encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]
    start_insert_at(nv, 2, 4)
    nv.nvim.input("<End>")
    assert wait_suggestion(nv, "the scripted multi-line suggestion")["text"] == MULTI_LINE_ANSWER
    (mark,) = nv.ghost_marks()
    first, *below = MULTI_LINE_ANSWER.split("\n")
    assert [chunk[0] for chunk in mark[3]["virt_text"]] == [first]
    assert ["".join(chunk[0] for chunk in line) for line in mark[3]["virt_lines"]] == below
    assert buffer[:] == source.splitlines()  # ghost text only: nothing is in the buffer yet

    nv.nvim.input("<M-Down>")
    poll(lambda: buffer[1] != "    ", what="the first line to be accepted", timeout=10)
    assert buffer[:] == ["def scripted_sign(x):", "    " + first]
    rest = poll(nv.suggestion, what="the rest to stay on show", timeout=10)
    assert rest["text"] == "\n" + "\n".join(below)

    nv.nvim.input("<C-l>")  # this session's accept key
    expected = ["def scripted_sign(x):", *("    " + MULTI_LINE_ANSWER).split("\n")]
    poll(lambda: buffer[:] == expected, what="the rest to be accepted", timeout=10)
    assert nv.nvim.current.window.cursor == (len(expected), len(expected[-1]))
    leave_insert(nv)


USAGE = """
local client = require('infill.lsp').get_client()
local answer = require('infill.compat').request_sync(client, 'infill/stats', vim.empty_dict(), 5000)
return answer and answer.result and answer.result.usage.languages.python or vim.NIL
"""

COUNT_KEYS = ("shown", "accepted", "partially_accepted", "characters_accepted")


def test_a_shown_word_then_the_rest_accepted_are_counted_by_the_server(
    nv_paced: tuple[Session, Any], project: Path
) -> None:
    """README "Usage counts": the plugin tells the server when ghost text is drawn, when a word
    of it is taken (`acceptedLength` in UTF-16 units) and runs the item's command when the rest
    is accepted; `infill/stats` counts one suggestion shown, partly and then wholly accepted,
    all of its characters accepted."""
    nv, _ = nv_paced
    path = project / "counts.py"
    path.write_text("def scripted_counts(tax):\n    return \n", encoding="utf-8")
    bufnr = nv.open(path)
    buffer = nv.nvim.buffers[bufnr]

    def counts() -> dict[str, int]:
        python = nv.lua(USAGE)
        return {key: int(python[key]) if python else 0 for key in COUNT_KEYS}

    before = counts()
    start_insert_at(nv, 2, len("    return "))
    nv.nvim.input("<End>")
    assert wait_suggestion(nv, "the scripted suggestion")["text"] == COUNTED_ANSWER
    nv.nvim.input("<M-Right>")
    poll(lambda: buffer[1] == "    return total", what="a word to be accepted", timeout=10)
    poll(nv.suggestion, what="the rest to stay on show", timeout=10)
    nv.nvim.input("<C-l>")
    poll(lambda: buffer[1] == "    return total + tax", what="the rest", timeout=10)
    leave_insert(nv)
    expected = {
        "shown": 1,
        "accepted": 1,
        "partially_accepted": 1,
        "characters_accepted": len(COUNTED_ANSWER),
    }
    poll(
        lambda: {key: counts()[key] - before[key] for key in COUNT_KEYS} == expected,
        what="the server's counts",
        timeout=20,
        describe=lambda: f"{before} then {counts()}",
    )
