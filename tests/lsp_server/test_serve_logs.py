"""The language server's log, which must neither expose the user's code nor let another user's link
or FIFO redirect it: `--log-file` is created for its owner only and never written through a link or
into a FIFO, and `-v` says what happened without the user's code (the messages the server sends,
completions in them, are logged only with `--log-protocol`)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lsp_helpers import SERVER_COMMAND, lsp_session, server_env
from lsprotocol import types
from pytest_lsp import client_capabilities
from scripted_lsp import scripted_command, write_script

from lsp_server.serve import LogFileError, open_log_file

#: Written in the user's document, and in what the scripted model answers.
SECRET = "zebra_secret_7f3c"
ANSWERED = "giraffe_answer_91d"

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes and FIFOs are POSIX's")


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most users have (022): a file made without care is readable by all."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@posix_only
def test_the_log_file_is_created_readable_by_its_owner_only(
    tmp_path: Path, usual_umask: None
) -> None:
    path = tmp_path / "infill.log"
    with open_log_file(str(path)) as log:
        log.write("a line\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with open_log_file(str(path)) as log:  # appended to, not replaced
        log.write("another\n")
    assert path.read_text() == "a line\nanother\n"


@posix_only
def test_an_existing_log_file_others_could_read_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "infill.log"
    path.write_text("old\n")
    path.chmod(0o644)
    with open_log_file(str(path)) as log:
        log.write("new\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "old\nnew\n"


def test_a_symbolic_link_as_the_log_file_is_refused_and_its_target_left_alone(
    tmp_path: Path,
) -> None:
    target = tmp_path / "someone-elses-file"
    target.write_text("theirs\n")
    link = tmp_path / "infill.log"
    link.symlink_to(target)
    with pytest.raises(LogFileError, match="is a symbolic link"):
        open_log_file(str(link))
    assert target.read_text() == "theirs\n"
    dangling = tmp_path / "dangling.log"
    dangling.symlink_to(tmp_path / "not-yet")
    with pytest.raises(LogFileError, match="is a symbolic link"):
        open_log_file(str(dangling))
    assert not (tmp_path / "not-yet").exists()  # not created through the link


@posix_only
def test_a_fifo_as_the_log_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "infill.log"
    os.mkfifo(fifo)
    # Without a reader, opening it for writing would wait for one forever.
    with pytest.raises(LogFileError, match=r"infill\.log"):
        open_log_file(str(fifo))


def test_serve_with_a_linked_log_file_stops_with_a_clear_error(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("")
    link = tmp_path / "infill.log"
    link.symlink_to(target)
    done = subprocess.run(
        [*SERVER_COMMAND, "--log-file", str(link)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=120,
    )
    assert done.returncode == 2
    assert f"infill-lsp: error: the log file {link} is a symbolic link" in done.stderr
    assert target.read_text() == ""


async def completed_with_logging(tmp_path: Path, *flags: str) -> str:
    """A server on a scripted model, logging with `flags` to a file: a document holding
    `SECRET` opened, edited and completed (the answer holds `ANSWERED`). Its log."""
    model = write_script(tmp_path / "models", "coder", [f"{ANSWERED}()\n"])
    log_file = tmp_path / "server.log"
    command = [*scripted_command(model), "--log-file", str(log_file), *flags]
    async with lsp_session(client_capabilities("visual_studio_code@v1.65.2"), None, command) as (
        session
    ):
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        uri = session.open(f"def {SECRET}():\n    return ")
        session.change(
            uri,
            2,
            [{"range": _at(1, 11), "text": f"{SECRET}_"}],
        )
        items = await session.inline(uri, types.Position(line=1, character=11 + len(SECRET) + 1))
        assert any(ANSWERED in str(item.insert_text) for item in items), items
    sys.stderr.flush()
    return log_file.read_text(encoding="utf-8")


def _at(line: int, character: int) -> dict[str, dict[str, int]]:
    point = {"line": line, "character": character}
    return {"start": point, "end": point}


async def test_verbose_logs_say_what_happened_without_the_users_code(tmp_path: Path) -> None:
    log = await completed_with_logging(tmp_path, "-v")
    assert " DEBUG " in log  # -v logs more...
    assert " INFO " in log
    assert SECRET not in log  # ...but neither the document, nor the prompt...
    assert ANSWERED not in log  # ...nor the completion


async def test_the_protocol_is_logged_whole_only_when_asked_and_it_says_so(
    tmp_path: Path,
) -> None:
    log = await completed_with_logging(tmp_path, "--log-protocol")
    assert "the messages the server sends are logged whole, your code in them" in log
    assert ANSWERED in log  # the completion, as the server sent it
