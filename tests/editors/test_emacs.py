"""The completion menu in a real Emacs (28, `--batch -Q`) with eglot 1.9 and with lsp-mode 8 and
company (Debian's elpa-eglot, elpa-lsp-mode and elpa-company), against the real server and the
real default model, configured as the README shows.

Each test runs one Emacs scenario (tests/editors/emacs/infill-test.el): the editor connects,
the user asks for completion until the suggestion is there (the server answers empty while the
model writes, and the user asks again), and accepts it as a user would. The test then compares
the buffer with the item the server sent, applied as LSP says. The lsp-mode run is shared by
the tests that judge its parts (the insertion, the accept command's count, the shutdown).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from emacs_helpers import Run, apply_edit, find_emacs, offset, poll_gone, run_scenario

EMACS, EMACS_WHY = find_emacs()

pytestmark = pytest.mark.slow

#: A word being typed at the end of a function (the suggestion is then a single line).
TYPED = "def fibonacci(n):\n    if n < 2:\n        return n\n    retu"
TYPED_WORD = "retu"
#: A word typed after an emoji: one column in Emacs, two UTF-16 units.
EMOJI_TYPED = TYPED.replace("    retu", '    s = "😀"; retu')
#: A blank line in a new function's body: asked for there, the suggestions may be whole blocks.
BLANK = "def is_even(n):\n    "
#: Long enough for the model to write three suggestions on a small CPU, several times over.
COMPANY_WAIT_S = 20


def _emacs() -> str:
    if EMACS is None:
        pytest.skip(EMACS_WHY)
    return EMACS


def _file(folder: Path, text: str) -> Path:
    """`text` in a file whose path has a space and a non-ASCII letter (URIs escape both)."""
    file = folder / "my project" / "naïve.py"
    file.parent.mkdir(parents=True)
    file.write_text(text, encoding="utf-8")
    return file


def _first(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The item a menu sorted by `sortText` lists first (eglot, company and *Completions* do)."""
    return min(items, key=lambda item: item["sortText"])


def _edit(item: dict[str, Any]) -> dict[str, Any]:
    """The item's edit as the client applies it: a `TextEdit`, or an `InsertReplaceEdit` with
    lsp-mode's default (`lsp-completion-default-behaviour` :replace)."""
    edit: dict[str, Any] = item["textEdit"]
    if "range" in edit:
        return edit
    return {"range": edit["replace"], "newText": edit["newText"]}


def _chosen(run: Run) -> dict[str, Any]:
    """The item the user took: the one company selected, else the first of the list."""
    items = run.last_items()
    candidates = run.found.get("candidates")
    if candidates is None:
        return _first(items)
    label = candidates[run.found["company_selection"]]
    matching = [item for item in items if item["label"] == label]
    assert len(matching) == 1, f"company's candidate {label!r} is not one item's label" + run.why()
    return matching[0]


def _assert_inserted(
    run: Run, original: str, item: dict[str, Any], encoding: str = "utf-16"
) -> str:
    """The buffer is exactly `original` with the item's edit applied (its columns in
    `encoding`), point after its text; the text put in."""
    edit = _edit(item)
    expected = apply_edit(original, edit, encoding)
    buffer = run.found["buffer"]
    assert run.found["original"] == original, run.why()
    assert buffer == expected, f"buffer {buffer!r}, expected {expected!r}" + run.why()
    new_text: str = edit["newText"]
    end_of_insert = offset(original, edit["range"]["start"], encoding) + len(new_text)
    assert run.found["point"] == end_of_insert, run.why()
    return new_text


# --- eglot ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [TYPED, EMOJI_TYPED], ids=["ascii", "emoji"])
def test_eglot_completion_at_point_replaces_the_typed_word(tmp_path: Path, text: str) -> None:
    """C-M-i after a typed word, with eglot: the word becomes the item's whole text, once
    (after an emoji too: eglot counts UTF-16 columns, as the server does)."""
    run = run_scenario(_emacs(), "eglot-completion-at-point", _file(tmp_path, text), tmp_path)
    run.completed()
    item = _chosen(run)
    new_text = _assert_inserted(run, text, item)
    before = text[: -len(TYPED_WORD)]
    assert run.found["buffer"] == before + new_text, run.why()
    assert new_text.startswith(TYPED_WORD), run.why()
    assert len(new_text) > len(TYPED_WORD), run.why()
    assert "returetu" not in run.found["buffer"], run.why()
    last_line = before.split("\n")[-1]
    word_start = len(last_line.encode("utf-16-le")) // 2
    assert item["textEdit"]["range"] == {
        "start": {"line": 3, "character": word_start},
        "end": {"line": 3, "character": word_start + len(TYPED_WORD)},
    }, run.why()


def test_eglot_completion_at_point_on_a_blank_line_inserts_the_suggestion(tmp_path: Path) -> None:
    """C-M-i where no word is typed (the user asks for it): several candidates in *Completions*;
    RET on the first leaves exactly its suggestion, every line as the server wrote it."""
    run = run_scenario(_emacs(), "eglot-completion-at-point", _file(tmp_path, BLANK), tmp_path)
    run.completed()
    item = _chosen(run)
    new_text = _assert_inserted(run, BLANK, item)
    assert run.found["buffer"] == BLANK + new_text, run.why()
    assert new_text.strip(), run.why()


def test_eglot_company_complete_on_a_blank_line_shows_the_suggestion(tmp_path: Path) -> None:
    """M-x company-complete where no word is typed, with eglot: company keeps its first answer
    at that place and eglot 1.9 asks nothing more there, so the server waits for the
    suggestions of an explicit request (`INVOKED_WAIT_S`), and they show."""
    file = _file(tmp_path, BLANK)
    run = run_scenario(_emacs(), "eglot-company", file, tmp_path, wait_s=COMPANY_WAIT_S)
    run.completed()
    new_text = _assert_inserted(run, BLANK, _chosen(run))
    assert run.found["buffer"] == BLANK + new_text, run.why()


# --- lsp-mode with company --------------------------------------------------------------------


@pytest.fixture(scope="module")
def lsp_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Run]:
    """The lsp-mode scenario (complete, usage counts, shutdown) on a text, run once per text
    for the module."""
    _runs: dict[str, Run] = {}

    def run(text: str) -> Run:
        if text not in _runs:
            folder = tmp_path_factory.mktemp("lsp-mode")
            _runs[text] = run_scenario(_emacs(), "lsp-company", _file(folder, text), folder)
        return _runs[text]

    return run


def test_lsp_mode_company_replaces_the_typed_word(lsp_run: Callable[[str], Run]) -> None:
    run = lsp_run(TYPED).completed()
    item = _chosen(run)
    new_text = _assert_inserted(run, TYPED, item)
    assert run.found["buffer"] == TYPED[: -len(TYPED_WORD)] + new_text, run.why()
    assert new_text.startswith(TYPED_WORD), run.why()
    assert len(new_text) > len(TYPED_WORD), run.why()


def test_lsp_mode_columns_after_an_emoji(lsp_run: Callable[[str], Run]) -> None:
    """lsp-mode 8 counts columns in code points without declaring it: the server takes them
    so, and the word after an emoji is replaced where it is."""
    run = lsp_run(EMOJI_TYPED).completed()
    item = _chosen(run)
    new_text = _assert_inserted(run, EMOJI_TYPED, item, "utf-32")
    assert run.found["buffer"] == EMOJI_TYPED[: -len(TYPED_WORD)] + new_text, run.why()
    assert new_text.startswith(TYPED_WORD), run.why()


def test_lsp_mode_company_keeps_a_multi_line_suggestion_as_sent(
    lsp_run: Callable[[str], Run],
) -> None:
    """lsp-mode re-indents lines 2..n with python-mode unless the item says asIs: the lines stay
    as the server wrote them (the model writes a block on this blank line)."""
    run = lsp_run(BLANK).completed()
    item = _chosen(run)
    assert item["insertTextMode"] == 1, run.why()
    new_text = _assert_inserted(run, BLANK, item)
    assert run.found["buffer"] == BLANK + new_text, run.why()
    assert "\n" in new_text, "the model wrote a single line here: nothing to re-indent" + run.why()


def test_lsp_mode_runs_the_accept_command(lsp_run: Callable[[str], Run]) -> None:
    """Accepting the item runs its command (lsp-mode sends workspace/executeCommand): the
    server's usage counts show the suggestion shown once and accepted once."""
    run = lsp_run(TYPED).completed()
    item = _chosen(run)
    assert item["command"]["command"] == "infill.acceptCompletion", run.why()
    stats = json.loads(run.found["stats"])
    python = stats["usage"]["languages"]["python"]
    assert python["accepted"] == 1, run.why()
    assert python["characters_accepted"] == len(item["textEdit"]["newText"]) - len(TYPED_WORD)


def test_lsp_mode_shutdown_is_answered_within_its_half_second(
    lsp_run: Callable[[str], Run],
) -> None:
    """M-x lsp-workspace-shutdown waits 0.5 s for the answer, then kills the server."""
    run = lsp_run(TYPED).completed()
    _assert_shut_down(run, 0.5)


# --- shutdown ---------------------------------------------------------------------------------


def _assert_shut_down(run: Run, within_s: float) -> None:
    """The client's shutdown request was answered within `within_s`, and the server is gone."""
    assert "shutdown_error" not in run.found, run.why()
    assert run.found["shutdown_seconds"] < within_s, run.why()
    # Both kill the process right after sending `exit` (Emacs 28's jsonrpc without waiting
    # for it to end, lsp-mode with kill-process): it is gone either way.
    assert run.found["exit"] in ("exit 0", "signal 9"), run.why()
    assert "timed out" not in run.output.lower(), run.why()
    pid = run.found["server_pid"]
    assert poll_gone(pid), f"the server (pid {pid}) is still running" + run.why()


@pytest.mark.parametrize(("client", "within_s"), [("eglot", 1.5), ("lsp", 0.5)])
def test_shutdown_while_the_model_loads(tmp_path: Path, client: str, within_s: float) -> None:
    """M-x eglot-shutdown (or lsp-workspace-shutdown) right after connecting, the model still
    loading: the answer comes within the client's wait (eglot 1.5 s, lsp-mode 0.5 s), else
    eglot signals "timed out" and skips `exit`."""
    file = _file(tmp_path, TYPED)
    run = run_scenario(_emacs(), f"{client}-shutdown-at-once", file, tmp_path)
    run.completed()
    _assert_shut_down(run, within_s)
