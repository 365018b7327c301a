"""Usage counts through the real server (`serve`, the protocol, the handlers), its model a
script so that each suggestion is known: what a user sees in `infill/stats` and in the file
`doctor` reads after showing, accepting, partly accepting and typing over suggestions, and
that the setting turns it all off."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import Session, lsp_session, request_json
from lsprotocol import types
from lsprotocol.converters import get_converter
from pytest_lsp import client_capabilities
from scripted_lsp import SCRIPTED_SERVER_COMMAND, scripted_command, write_script

from lsp_server.commands import ACCEPT_COMPLETION_COMMAND
from lsp_server.usage import COUNT_NAMES
from lsp_server.usage_file import FILE_NAME, STATE_DIR_ENV, read_counts

pytestmark = pytest.mark.asyncio

VSCODE = "visual_studio_code@v1.65.2"
LINE = "total = price * \n"
SHOW = "textDocument/didShowCompletion"
PARTIAL = "textDocument/didPartiallyAcceptCompletion"


@asynccontextmanager
async def server(
    tmp_path: Path, answers: list[str], options: dict[str, Any] | None = None
) -> AsyncIterator[Session]:
    """The server on a scripted model that answers `answers` in turn; its state folder in
    `tmp_path/state`."""
    coder = write_script(tmp_path, "coder", answers)
    chat = write_script(tmp_path, "chat", ["-"])
    env = {STATE_DIR_ENV: str(tmp_path / "state")}
    async with lsp_session(
        client_capabilities(VSCODE),
        {"infill": {"debounceMs": 0, **(options or {})}},
        scripted_command(coder, chat),
        env=env,
    ) as session:
        yield session


def item_json(item: types.InlineCompletionItem) -> Any:
    """The item as it was on the wire (and as a client sends it back)."""
    return get_converter().unstructure(item)


def typed_at(session: Session, uri: str, version: int, column: int, text: str) -> None:
    position = {"line": 0, "character": column}
    session.change(uri, version, [{"range": {"start": position, "end": position}, "text": text}])


async def output(command: list[str], env: dict[str, str]) -> str:
    """What `command` prints; it must succeed."""
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode()


async def usage(session: Session) -> dict[str, Any]:
    report = await request_json(session, "infill/stats", {})
    counts: dict[str, Any] = report["usage"]
    return counts


async def test_shown_typed_along_and_accepted_counts_once_in_its_language(tmp_path: Path) -> None:
    async with server(tmp_path, ["quantity\n"]) as session:
        uri = session.open(LINE)
        (item,) = await session.inline(uri, session.position(LINE, 0, 16))
        assert item.command is not None
        assert item.command.command == ACCEPT_COMPLETION_COMMAND
        session.client.protocol.notify(SHOW, {"item": item_json(item)})
        typed_at(session, uri, 2, 16, "qua")  # typing along
        typed = "total = price * qua\n"
        (rest,) = await session.inline(uri, session.position(typed, 0, 19))
        assert rest.insert_text == "ntity"
        assert rest.command == item.command  # the same suggestion
        session.client.protocol.notify(SHOW, {"item": item_json(rest)})
        typed_at(session, uri, 3, 19, "ntity")  # what the editor's accept inserts
        await request_json(
            session,
            types.WORKSPACE_EXECUTE_COMMAND,
            {"command": item.command.command, "arguments": item.command.arguments},
        )
        report = await usage(session)
        python = report["languages"]["python"]
        assert report["counting"] is True
        assert (python["shown"], python["accepted"], python["rejected"]) == (1, 1, 0)
        assert python["characters_accepted"] == len("ntity")
        assert python["characters_checked"] == 0  # its minute has not passed
        session.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        python = (await usage(session))["languages"]["python"]
        assert python["characters_checked"] == python["characters_kept"] == len("ntity")


async def test_typing_over_a_shown_suggestion_rejects_it_and_part_of_one_is_counted(
    tmp_path: Path,
) -> None:
    async with server(tmp_path, ["quantity\n", "amount + tax\n"]) as session:
        uri = session.open(LINE, language_id="typescript")
        (item,) = await session.inline(uri, session.position(LINE, 0, 16))
        session.client.protocol.notify(SHOW, {"item": item_json(item)})
        typed_at(session, uri, 2, 16, "x")  # diverges from "quantity"
        typed = "total = price * x\n"
        (other,) = await session.inline(uri, session.position(typed, 0, 17))
        assert other.insert_text == "amount + tax"
        assert other.command != item.command
        # A word accepted (as Copilot's clients report it), then the editor's change.
        session.client.protocol.notify(PARTIAL, {"item": item_json(other), "acceptedLength": 6})
        typed_at(session, uri, 3, 17, "amount")
        counts = (await usage(session))["languages"]["typescript"]
        assert counts["shown"] == 2  # the partly accepted one was shown too
        assert counts["rejected"] == 1
        assert counts["partially_accepted"] == 1
        assert counts["accepted"] == 0
        assert counts["characters_accepted"] == len("amount")


async def test_the_file_holds_only_counts_and_adds_up_across_restarts(tmp_path: Path) -> None:
    for _ in range(2):
        async with server(tmp_path, ["quantity\n"]) as session:
            uri = session.open(LINE)
            (item,) = await session.inline(uri, session.position(LINE, 0, 16))
            session.client.protocol.notify(SHOW, {"item": item_json(item)})
            await session.wait_for_messages()
    path = tmp_path / "state" / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kept = json.loads(path.read_text(encoding="utf-8"))
    assert set(kept) == {"version", "languages"}
    assert set(kept["languages"]) == {"python"}
    assert set(kept["languages"]["python"]) == set(COUNT_NAMES)
    assert all(isinstance(n, int) for n in kept["languages"]["python"].values())
    assert read_counts(path)["python"]["shown"] == 2
    text = path.read_text(encoding="utf-8")
    assert "quantity" not in text
    assert "total" not in text
    assert "file:" not in text

    # `doctor`, another process, shows them.
    doctor = [
        *SCRIPTED_SERVER_COMMAND[:-1],
        "doctor",
        "--backend",
        "scripted",
        "--model",
        str(tmp_path / "coder.json"),
        "--chat-model",
        str(tmp_path / "chat.json"),
    ]
    env = {**os.environ, STATE_DIR_ENV: str(tmp_path / "state")}
    usage = json.loads(await output([*doctor, "--json"], env))["usage"]
    assert usage["file"] == str(path)
    assert usage["languages"]["python"]["shown"] == 2
    as_text = await output(doctor, env)
    assert f"usage (kept on this machine only, {path})" in as_text
    assert "shown 2, accepted 0" in as_text


async def test_with_counting_off_nothing_is_counted_or_written(tmp_path: Path) -> None:
    async with server(tmp_path, ["quantity\n"], {"usageCounts": False}) as session:
        uri = session.open(LINE)
        (item,) = await session.inline(uri, session.position(LINE, 0, 16))
        assert item.insert_text == "quantity"
        assert item.command is None
        session.client.protocol.notify(SHOW, {"item": {"command": {"arguments": ["ic-1"]}}})
        report = await usage(session)
        assert report == {**report, "counting": False, "languages": {}}
    assert not (tmp_path / "state" / FILE_NAME).exists()


@pytest.mark.slow
async def test_the_default_models_suggestion_accepted_counts_its_characters(
    tmp_path: Path,
) -> None:
    """Whatever the real default model suggests: shown once, accepted once, its characters
    (UTF-16) accepted and, the document closed, still there."""
    document = "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return "
    env = {STATE_DIR_ENV: str(tmp_path / "state")}
    async with lsp_session(
        client_capabilities(VSCODE), {"infill": {"debounceMs": 0}}, env=env
    ) as session:
        assert (await session.until_loaded())["status"] == "ready"
        uri = session.open(document)
        items = await session.inline(uri, session.position(document, 3, 11))
        assert items, "the default model suggests something after `return `"
        item = items[0]
        assert item.command is not None
        assert isinstance(item.insert_text, str)
        session.client.protocol.notify(SHOW, {"item": item_json(item)})
        end = item.range.end if item.range else session.position(document, 3, 11)
        start = session.position(document, 3, 11)
        session.change(
            uri,
            2,
            [
                {
                    "range": {
                        "start": {"line": start.line, "character": start.character},
                        "end": {"line": end.line, "character": end.character},
                    },
                    "text": item.insert_text,
                }
            ],
        )
        await request_json(
            session,
            types.WORKSPACE_EXECUTE_COMMAND,
            {"command": item.command.command, "arguments": item.command.arguments},
        )
        session.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        python = (await usage(session))["languages"]["python"]
        units = len(item.insert_text.encode("utf-16-le")) // 2
        assert (python["shown"], python["accepted"], python["rejected"]) == (1, 1, 0)
        assert python["characters_accepted"] == units
        assert python["characters_kept"] == python["characters_checked"] == units
