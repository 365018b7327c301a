"""Next edits from a next-edit model, through the real server on the scripted model: the
prompt in each format's own layout (the user's edit as a diff, the region around the cursor
marked, the cursor in it), the rewrite read back as minimal edits of the document, no edit
from an answer that is no rewrite or that undoes the user's change, latest wins and
`$/cancelRequest` with exactly one answer each. The scripted model has no next-edit tokens:
`nextEditFormat` names the format, and its markers are text (as the published Zeta models
have them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import Session, completion_engine, lsp_session, request_json, wait_until
from next_edit_client import INLINE_EDIT, Document
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities
from scripted_lsp import ScriptedModel, scripted_command, write_script

from engine.next_edit import NEXT_EDIT_FAMILIES, NextEditInput, RecentEdit

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

NEOVIM = "neovim"
REQUEST_CANCELLED = -32800
URI = "file:///work/my%20project/caf%C3%A9.py"
ROOT = "file:///work/my%20project"

BEFORE = (
    "import math\n"
    "\n"
    "def scale(points):\n"
    "    xs = [p.x for p in points]\n"
    "    ys = [p.y for p in points]\n"
    "    return xs, ys\n"
)
#: The user's edit: the first comprehension scaled. Propagation has nothing to repeat (no
#: other `p.x`): the next edit is the model's.
EDITED = BEFORE.replace("[p.x for", "[p.x * 2 for")
#: What a next-edit model would write: the same change on the next line.
REWRITTEN = EDITED.replace("[p.y for", "[p.y * 2 for")
#: The cursor, after the typed " * 2".
CURSOR = EDITED.index(" for p in points]")

#: The region the server marks (engine/next_edit.py says how each format is written): from
#: two lines above the cursor's line (the blank one) to six below, whole lines (here: to the
#: file's end).
REGION_START = EDITED.index("\n") + 1


def answer(family: str, region: str) -> str:
    """The scripted model's answer in `family`'s format, rewriting the region as `region`."""
    if family == "zeta1":
        return f"<|editable_region_start|>\n{region}\n<|editable_region_end|>"
    return f"{region}>>>>>>> UPDATED\n"


@contextlib.asynccontextmanager
async def server(
    tmp_path: Path, entries: list[Any], family: str, **options: Any
) -> AsyncIterator[tuple[Session, ScriptedModel]]:
    coder = write_script(tmp_path, "coder", entries, **options)
    chat = write_script(tmp_path, "chat", ["-"])
    settings = {"infill": {"debounceMs": 0, "nextEditFormat": family}}
    async with lsp_session(
        client_capabilities(NEOVIM), settings, scripted_command(coder, chat)
    ) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        yield session, coder


def edited(session: Session) -> Document:
    document = Document(session, BEFORE, URI, "python")
    document.replace("[p.x for", "[p.x * 2 for")
    assert document.text == EDITED
    return document


def rewrite_prompts(coder: ScriptedModel) -> list[str]:
    return [e["prompt"] for e in coder.starts()]


@pytest.mark.parametrize("family", ["zeta1", "zeta2"])
async def test_the_models_rewrite_is_offered_as_the_minimal_edit(
    tmp_path: Path, family: str
) -> None:
    region = REWRITTEN[REGION_START:]
    async with server(tmp_path, [answer(family, region)], family) as (session, coder):
        document = edited(session)
        edits = await document.next_edits(CURSOR)
        (edit,) = edits
        # An insertion of the four characters on the next line (which side of the space it
        # is written on is the trim's choice: the result is the same).
        assert edit["text"].strip() == "* 2"
        assert edit["range"]["start"] == edit["range"]["end"]
        assert edit["range"]["start"]["line"] == 4
        assert edit["command"]["command"] == "infill.acceptNextEdit"
        document.accept(edits)
        assert document.text == REWRITTEN

        # The prompt is the format's own, with the user's edit as its diff and the cursor
        # where it stands; the scripted model saw it as text.
        (prompt,) = rewrite_prompts(coder)
        expected = NEXT_EDIT_FAMILIES[family].pieces(
            NextEditInput(
                path=_prompt_path(session),
                text=EDITED,
                region_start=REGION_START,
                region_end=len(EDITED),
                cursor=CURSOR,
                edits=(RecentEdit(path=_prompt_path(session), diff=_diff(prompt)),),
                at_file_start=True,
            )
        )
        assert prompt.endswith("".join(text for _, text in expected))
        assert "-    xs = [p.x for p in points]\n+    xs = [p.x * 2 for p in points]\n" in prompt


async def test_a_sweep_rewrite_is_offered_as_the_minimal_edit(tmp_path: Path) -> None:
    """Sweep's format through the server: the user's edit shown as an original/updated block
    (a line of context each side),
    the region before it and as it is (the cursor marked), and the model's new region after
    `updated/` read back as the one edit on the next line."""
    region = REWRITTEN[REGION_START:]
    async with server(tmp_path, [region + "<|file_sep|>"], "sweep") as (session, coder):
        document = edited(session)
        edits = await document.next_edits(CURSOR)
        (edit,) = edits
        assert edit["text"].strip() == "* 2"
        assert edit["range"]["start"]["line"] == 4
        document.accept(edits)
        assert document.text == REWRITTEN

        (prompt,) = rewrite_prompts(coder)
        path = _prompt_path(session)
        # The file comes first (after the scripted model's BOS), named as the client names it.
        assert prompt.index("<|file_sep|>") == prompt.index(f"<|file_sep|>{path}\nimport math")
        assert (
            "original:\ndef scale(points):\n    xs = [p.x for p in points]\n"
            "    ys = [p.y for p in points]\nupdated:\ndef scale(points):\n"
            "    xs = [p.x * 2 for p in points]\n    ys = [p.y for p in points]\n"
        ) in prompt
        # The sections of the region depend on the edit's old and new text alone.
        expected = NEXT_EDIT_FAMILIES["sweep"].pieces(
            NextEditInput(
                path=path,
                text=EDITED,
                region_start=REGION_START,
                region_end=len(EDITED),
                cursor=CURSOR,
                edits=(
                    RecentEdit(
                        path=path,
                        diff="@@ -4 +4 @@\n-    xs = [p.x for p in points]\n"
                        "+    xs = [p.x * 2 for p in points]\n",
                    ),
                ),
                at_file_start=True,
            )
        )
        sections = "".join(text for _, text in expected)
        tail = sections[sections.index(f"<|file_sep|>original/{path}") :]
        assert prompt.endswith(tail)
        assert "    xs = [p.x for p in points]\n" in tail.split("<|file_sep|>current/")[0]


def _prompt_path(session: Session) -> str:
    """The path the prompt names the document by: its path, decoded (the session opens no
    workspace folder holding it)."""
    return "/work/my project/café.py"


def _diff(prompt: str) -> str:
    """The hunk the prompt shows (from its `@@` line), as the server's history wrote it."""
    start = prompt.index("@@ ")
    end = prompt.index("+    xs = [p.x * 2 for p in points]\n") + len(
        "+    xs = [p.x * 2 for p in points]\n"
    )
    rest = prompt[end:]
    context = []
    for line in rest.splitlines(keepends=True):
        if not line.startswith(" "):
            break
        context.append(line)
    return prompt[start:end] + "".join(context)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param("the region, without its markers", id="no-markers"),
        pytest.param(
            "<|editable_region_start|>\n" + "    xs = [p.x * 2 for p in points]\n" * 50,
            id="cut-at-the-token-limit",
        ),
    ],
)
async def test_an_answer_that_is_no_rewrite_gives_no_edit(tmp_path: Path, reply: str) -> None:
    async with server(tmp_path, [reply], "zeta1") as (session, coder):
        document = edited(session)
        assert await document.next_edits(CURSOR) == []
        assert len(coder.starts()) == 1


async def test_a_sweep_answer_opening_with_a_special_token_gives_no_edit(tmp_path: Path) -> None:
    """Sweep's server reads an answer that opens with a special token as none: so does ours,
    though the rest would be a good rewrite."""
    reply = "<|im_start|>" + REWRITTEN[REGION_START:] + "<|file_sep|>"
    async with server(tmp_path, [reply], "sweep") as (session, coder):
        document = edited(session)
        assert await document.next_edits(CURSOR) == []
        assert len(coder.starts()) == 1


async def test_a_rewrite_that_undoes_the_users_edit_is_not_offered(tmp_path: Path) -> None:
    region = BEFORE[REGION_START:]
    async with server(tmp_path, [answer("zeta1", region)], "zeta1") as (session, coder):
        document = edited(session)
        assert await document.next_edits(CURSOR) == []
        assert len(coder.starts()) == 1


async def test_propagation_answers_first_without_the_model(tmp_path: Path) -> None:
    text = "def f(count):\n    return count + count\n"
    async with server(tmp_path, [answer("zeta1", "x")], "zeta1") as (session, coder):
        document = Document(session, text, URI, "python")
        document.replace("count", "items")
        edits = await document.next_edits(text.index(":"))
        assert [e["text"] for e in edits] == ["items", "items"]
        assert coder.starts() == []


async def test_a_newer_request_supersedes_the_rewrite_and_each_gets_one_answer(
    tmp_path: Path,
) -> None:
    region = REWRITTEN[REGION_START:]
    entries = [{"text": answer("zeta1", region), "hold": "go"}, answer("zeta1", region)]
    async with server(tmp_path, entries, "zeta1") as (session, coder):
        document = edited(session)
        first = asyncio.ensure_future(document.next_edits(CURSOR))
        await wait_until(lambda: len(coder.starts()) == 1, "the first rewrite to start")
        second = await document.next_edits(CURSOR)
        assert [e["text"].strip() for e in second] == ["* 2"]
        assert await first == []  # superseded: answered, with nothing
        events = await coder.ended(2)
        ends = [e for e in events if e["event"] == "end"]
        assert [e["cancelled"] for e in ends] == [True, False]


async def test_a_cancelled_rewrite_is_request_cancelled_and_the_model_stops(
    tmp_path: Path,
) -> None:
    region = REWRITTEN[REGION_START:]
    entries = [{"text": answer("zeta1", region), "hold": "go"}]
    async with server(tmp_path, entries, "zeta1") as (session, coder):
        document = edited(session)
        params = {
            "textDocument": {"uri": document.uri, "version": document.version},
            "position": document.point(CURSOR),
        }
        msg_id, pending = session.send(INLINE_EDIT, params)
        await wait_until(lambda: len(coder.starts()) == 1, "the rewrite to start")
        session.cancel(msg_id)
        with pytest.raises(JsonRpcException) as caught:
            await asyncio.wait_for(pending, 30)
        assert caught.value.code == REQUEST_CANCELLED
        (end,) = [e for e in await coder.ended(1) if e["event"] == "end"]
        assert end["cancelled"] is True
        # The server serves on: the same question is answered.
        coder.release("go")
        assert [e["text"].strip() for e in await document.next_edits(CURSOR)] == ["* 2"]


async def test_a_stale_version_is_answered_with_nothing_and_the_model_is_not_asked(
    tmp_path: Path,
) -> None:
    region = REWRITTEN[REGION_START:]
    async with server(tmp_path, [answer("zeta1", region)], "zeta1") as (session, coder):
        document = edited(session)
        assert await document.next_edits(CURSOR, version=document.version - 1) == []
        assert coder.starts() == []
        # Without a version the server's copy is the one asked about.
        unversioned = await request_json(
            session,
            INLINE_EDIT,
            {"textDocument": {"uri": document.uri}, "position": document.point(CURSOR)},
        )
        assert len(coder.starts()) == 1
        (edit,) = unversioned["edits"]
        assert edit["textDocument"]["version"] == document.version


# --- the real server with the real default model -----------------------------------------------


async def test_with_the_default_model_only_propagation_runs() -> None:
    """The default completion model has no next-edit format: an edit propagation cannot
    repeat gets no edit, and the model is never asked."""
    async with lsp_session(client_capabilities(NEOVIM), {"infill": {"debounceMs": 0}}) as session:
        assert (await session.until_loaded())["status"] == "ready"
        document = Document(session, BEFORE, "untitled:Untitled-3", "python")
        document.replace("[p.x for", "[p.x * 2 for")
        assert await document.next_edits(CURSOR) == []
        engine = await completion_engine(session)
        assert engine["roles"] == ["completion"]  # no next-edit model was loaded
        assert [job for job in engine["jobs"] if job["document"] == document.uri] == []


async def test_the_default_model_named_a_zeta_model_rewrites_through_the_real_engine() -> None:
    """`nextEditFormat` names a format for the default model, which was never trained on it:
    the rewrite runs on it through llama.cpp, within its token limit, as one job of the
    document, and the request gets its one answer (no valid rewrite from this model: no edit,
    or edits that apply)."""
    settings = {"infill": {"debounceMs": 0, "nextEditFormat": "zeta1"}}
    async with lsp_session(client_capabilities(NEOVIM), settings) as session:
        assert (await session.until_loaded())["status"] == "ready"
        document = Document(session, BEFORE, "file:///tmp/a%20b/n%C3%BA.py", "python")
        document.replace("[p.x for", "[p.x * 2 for")
        edits = await document.next_edits(CURSOR)
        document.accept(edits)  # whatever it proposed applies to the version it was made for
        engine = await completion_engine(session)
        assert sorted(engine["roles"]) == ["completion", "next_edit"]  # one model, both roles
        (job,) = [job for job in engine["jobs"] if job["document"] == document.uri]
        region_tokens = job["prompt_tokens"]  # a bound above the region's own tokens
        assert 0 < job["generated_tokens"] <= 2 * region_tokens + 64
        assert job["finish_reasons"][0] in ("stop", "length")
