"""The README's claims proved exactly: the real server process (host, worker, scheduler, stops,
post-processing, the protocol) with only the model replaced by a script (`serve --backend scripted`,
tests/scripted_backend.py), so that each answer, and each prompt the model saw, is known.
test_code_actions_e2e.py and test_server_e2e.py hold the same claims to properties any answer of the
real default models must have.

Each test starts its own server on its own script files, and waits for events (responses, the
model's record of its calls, a held answer released by the test), never for time.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import (
    Session,
    answer,
    client_feature,
    document_jobs,
    lsp_session,
    plain_json,
    request_json,
    wait_until,
)
from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient, client_capabilities
from scripted_lsp import ScriptedModel, scripted_command, write_script
from test_server_e2e import MALFORMED

from lsp_server.action_logic import DEFAULT_INSTRUCTION, PRESET_INSTRUCTIONS

pytestmark = pytest.mark.asyncio

VSCODE = "visual_studio_code@v1.65.2"  # resolves a Rewrite's edit (codeAction/resolve)
EGLOT = "emacs@v29.1"  # does not: its Rewrite is the infill.rewrite command
CODE_ACTION = types.TEXT_DOCUMENT_CODE_ACTION
RESOLVE = types.CODE_ACTION_RESOLVE
EXECUTE = types.WORKSPACE_EXECUTE_COMMAND
EXPLAIN_CHUNK = "infill/explainChunk"
INVALID_PARAMS = -32602
REQUEST_CANCELLED = -32800
REQUEST_FAILED = -32803

SOURCE = (
    "import functools\n"  # 0
    "\n"
    "\n"
    "class Cache:\n"  # 3
    "    @functools.lru_cache(maxsize=None)\n"  # 4
    "    def lookup(self, key):\n"  # 5
    "        value = key * 2\n"  # 6
    "        return value\n"  # 7
    "\n"
    "\n"
    "TOTAL = 3\n"  # 10
)
#: The method with its decorator, the block an empty selection on line 6 stands for.
METHOD = {"start": {"line": 4, "character": 0}, "end": {"line": 7, "character": 20}}
METHOD_CODE = "".join(SOURCE.splitlines(keepends=True)[4:8]).rstrip("\n")
#: The chat model's answer: prose around a fenced block, written at the left margin.
REWRITTEN = (
    "@functools.lru_cache(maxsize=None)\ndef lookup(self, key: int) -> int:\n    return key * 2\n"
)
ANSWER = f"Here is the clearer version:\n\n```python\n{REWRITTEN}```\n\nIt returns at once."
#: What replaces METHOD: the answer's code moved to the method's indentation.
NEW_TEXT = (
    "    @functools.lru_cache(maxsize=None)\n"
    "    def lookup(self, key: int) -> int:\n"
    "        return key * 2"
)
DIAGNOSTICS = [
    {
        "range": {"start": {"line": 6, "character": 16}, "end": {"line": 6, "character": 19}},
        "severity": 1,
        "source": "pyflakes",
        "message": "undefined name 'kee'",
    },
    {
        "range": {"start": {"line": 7, "character": 15}, "end": {"line": 7, "character": 20}},
        "severity": 2,
        "message": "value may be unbound",
    },
]
#: The instruction the Fix action sends, as the chat model must see it.
FIX_INSTRUCTION = (
    "Fix these problems and change nothing else:\n"
    "- line 7: undefined name 'kee' (pyflakes)\n"
    "- line 8: value may be unbound"
)
STALE = "the document changed while the rewrite was being written: nothing was changed"


def cursor(line: int, character: int) -> dict[str, Any]:
    position = {"line": line, "character": character}
    return {"start": position, "end": position}


def method_edit(uri: str, new_text: str = NEW_TEXT) -> dict[str, Any]:
    """The WorkspaceEdit that replaces exactly METHOD of version 1 of `uri`."""
    return {
        "documentChanges": [
            {
                "textDocument": {"uri": uri, "version": 1},
                "edits": [{"range": METHOD, "newText": new_text}],
            }
        ]
    }


def applied(text: str, new_text: str = NEW_TEXT) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:4]) + new_text + "".join(lines[7:])[len("        return value") :]


# --- the editor -------------------------------------------------------------------------------


@dataclass
class Editor:
    """A client of a server on scripted models, and what it received besides responses."""

    session: Session
    chat: ScriptedModel
    completion: ScriptedModel
    chunks: list[dict[str, Any]] = field(default_factory=list)
    applied_edits: list[dict[str, Any]] = field(default_factory=list)
    #: The answer to `window/showMessageRequest` (an action's title, None: dismissed), and
    #: the requests that came.
    choice: str | None = None
    asked: list[types.ShowMessageRequestParams] = field(default_factory=list)

    @property
    def client(self) -> LanguageClient:
        return self.session.client

    async def actions(
        self, uri: str, rng: dict[str, Any], diagnostics: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        params = {
            "textDocument": {"uri": uri},
            "range": rng,
            "context": {"diagnostics": diagnostics or []},
        }
        result: list[dict[str, Any]] = await request_json(self.session, CODE_ACTION, params)
        return result

    async def execute(self, command: str, arguments: list[Any]) -> Any:
        return await request_json(
            self.session, EXECUTE, {"command": command, "arguments": arguments}
        )

    def shown(self, since: int) -> list[tuple[types.MessageType, str]]:
        return [(m.type, m.message) for m in self.client.messages[since:]]

    def chat_prompts(self) -> list[str]:
        return [e["prompt"] for e in self.chat.starts()]


@contextlib.asynccontextmanager
async def editor_on(
    client: str,
    completion: ScriptedModel,
    chat: ScriptedModel | None = None,
    options: dict[str, Any] | None = None,
) -> AsyncIterator[Editor]:
    """A server on the scripted models (`chat` None: `completion` serves both roles), spoken
    to with the recorded capabilities of `client`."""
    command = scripted_command(completion, chat)
    async with lsp_session(client_capabilities(client), options, command) as session:
        editor = Editor(session, chat or completion, completion)

        @client_feature(session.client, EXPLAIN_CHUNK)
        def explain_chunk(_: LanguageClient, params: Any) -> None:
            editor.chunks.append(plain_json(params))

        @client_feature(session.client, types.WORKSPACE_APPLY_EDIT)
        def apply_edit(
            _: LanguageClient, params: types.ApplyWorkspaceEditParams
        ) -> types.ApplyWorkspaceEditResult:
            editor.applied_edits.append(get_converter().unstructure(params))
            return types.ApplyWorkspaceEditResult(applied=True)

        @client_feature(session.client, types.WINDOW_SHOW_MESSAGE_REQUEST)
        def show_message_request(
            _: LanguageClient, params: types.ShowMessageRequestParams
        ) -> types.MessageActionItem | None:
            editor.asked.append(params)
            return None if editor.choice is None else types.MessageActionItem(editor.choice)

        status = await session.until_loaded()
        assert status["status"] == "ready", status
        assert status["backend"] == "scripted"
        yield editor


def models(
    tmp_path: Path, chat: list[Any], completion: list[Any] | None = None, **options: Any
) -> tuple[ScriptedModel, ScriptedModel]:
    """A chat script and a completion script in `tmp_path`."""
    return (
        write_script(tmp_path, "coder", completion or ["pass\n"], **options),
        write_script(tmp_path, "chat", chat, **options),
    )


# --- Rewrite and Fix --------------------------------------------------------------------------


async def test_resolving_rewrite_gives_exactly_the_scripted_edit_of_the_range_and_version(
    tmp_path: Path,
) -> None:
    coder, chat = models(tmp_path, [ANSWER])
    async with editor_on(VSCODE, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        _, rewrite = await editor.actions(uri, cursor(6, 8))
        since = len(editor.client.messages)
        resolved = await request_json(editor.session, RESOLVE, rewrite)
        assert resolved.pop("edit") == method_edit(uri)
        assert resolved == rewrite
        assert editor.shown(since) == []
        (prompt,) = editor.chat_prompts()
        assert f"Instruction: {DEFAULT_INSTRUCTION}" in prompt
        assert f"```python\n{METHOD_CODE}\n```" in prompt
    ast.parse(applied(SOURCE))


async def test_listing_the_actions_asks_neither_model_anything(tmp_path: Path) -> None:
    """README "Code actions": the actions are listed at once, without the model: for a
    selection, an empty selection in a method, and the top level (no actions), neither
    scripted model is called; only resolving a Rewrite is."""
    coder, chat = models(tmp_path, [ANSWER])
    async with editor_on(VSCODE, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        selection = {"start": {"line": 6, "character": 8}, "end": {"line": 7, "character": 20}}
        assert [a["title"] for a in await editor.actions(uri, selection)] == [
            "Explain",
            "Rewrite",
        ]
        _, rewrite = await editor.actions(uri, cursor(6, 8))
        assert await editor.actions(uri, cursor(10, 0)) == []
        assert (coder.starts(), chat.starts()) == ([], [])
        await request_json(editor.session, RESOLVE, rewrite)
        assert len(chat.starts()) == 1


async def test_fix_puts_the_diagnostics_into_the_instruction_and_edits_the_range(
    tmp_path: Path,
) -> None:
    coder, chat = models(tmp_path, [ANSWER])
    text = SOURCE.replace("key * 2", "kee * 2")
    async with editor_on(VSCODE, coder, chat) as editor:
        uri = editor.session.open(text)
        *_, fix = await editor.actions(uri, cursor(6, 8), DIAGNOSTICS)
        assert fix["title"] == "Fix"
        resolved = await request_json(editor.session, RESOLVE, fix)
        assert resolved["edit"] == method_edit(uri)
        (prompt,) = editor.chat_prompts()
        assert f"Instruction: {FIX_INSTRUCTION}\n" in prompt
        assert f"```python\n{METHOD_CODE.replace('key * 2', 'kee * 2')}\n```" in prompt


async def test_fix_through_the_command_applies_the_edit_with_the_diagnostics_asked_for(
    tmp_path: Path,
) -> None:
    """A client without resolve support runs the Fix action's command, with the arguments
    the action carries, and the server applies the edit with workspace/applyEdit."""
    coder, chat = models(tmp_path, [ANSWER])
    async with editor_on(EGLOT, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        *_, fix = await editor.actions(uri, cursor(6, 8), DIAGNOSTICS)
        command = fix["command"]
        since = len(editor.client.messages)
        result = await editor.execute(command["command"], command["arguments"])
        assert result == {"applied": True, "reason": None}
        (params,) = editor.applied_edits
        assert params["edit"] == method_edit(uri)
        assert params["label"] == "infill: rewrite"
        assert editor.shown(since) == []
        (prompt,) = editor.chat_prompts()
        assert f"Instruction: {FIX_INSTRUCTION}\n" in prompt


async def test_a_rewrite_command_offered_before_the_document_changed_is_refused(
    tmp_path: Path,
) -> None:
    """The Rewrite action's command carries the version its range was taken in: run after
    the user typed a line above the method, it changes nothing (the range now holds other
    code), asks nothing of the model, and says why."""
    coder, chat = models(tmp_path, [ANSWER])
    async with editor_on(EGLOT, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        rewrite, *_ = [
            a for a in await editor.actions(uri, cursor(6, 8)) if a["title"].startswith("Rewrite")
        ]
        (arguments,) = rewrite["command"]["arguments"]
        assert arguments["version"] == 1
        editor.session.change(uri, 2, [{"range": cursor(0, 0), "text": "import os\n"}])
        since = len(editor.client.messages)
        result = await editor.execute("infill.rewrite", [{**arguments, "instruction": "Hints."}])
        assert result == {
            "applied": False,
            "reason": "the document changed since the action was offered: nothing was changed",
        }
        assert editor.applied_edits == []
        assert editor.chat_prompts() == []
        assert [m for _, m in editor.shown(since)] == [f"infill: {result['reason']}"]
        # The same command for the version the document has now rewrites the method.
        moved = {
            "start": {**METHOD["start"], "line": METHOD["start"]["line"] + 1},
            "end": {**METHOD["end"], "line": METHOD["end"]["line"] + 1},
        }
        fresh = {"uri": uri, "range": moved, "instruction": "Hints.", "version": 2}
        assert await editor.execute("infill.rewrite", [fresh]) == {"applied": True, "reason": None}


async def test_the_rewrite_command_takes_its_arguments_in_order(tmp_path: Path) -> None:
    coder, chat = models(tmp_path, [ANSWER])
    async with editor_on(EGLOT, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        result = await editor.execute("infill.rewrite", [uri, METHOD, "Add type hints."])
        assert result == {"applied": True, "reason": None}
        (params,) = editor.applied_edits
        assert params["edit"] == method_edit(uri)
        (prompt,) = editor.chat_prompts()
        assert "Instruction: Add type hints.\n" in prompt


async def test_the_rewrite_command_without_an_instruction_asks_for_one(tmp_path: Path) -> None:
    coder, chat = models(tmp_path, [ANSWER])
    async with editor_on(EGLOT, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        editor.choice = "Add type hints."
        result = await editor.execute("infill.rewrite", [{"uri": uri, "range": METHOD}])
        assert result == {"applied": True, "reason": None}
        (asked,) = editor.asked
        assert asked.message == "infill: rewrite the code how?"
        assert [a.title for a in asked.actions or []] == list(PRESET_INSTRUCTIONS)
        (params,) = editor.applied_edits
        assert params["edit"] == method_edit(uri)
        (prompt,) = editor.chat_prompts()
        assert "Instruction: Add type hints.\n" in prompt

        # Dismissed: nothing is asked of the model, nothing is applied.
        editor.choice = None
        result = await editor.execute("infill.rewrite", [uri, METHOD])
        assert result == {"applied": False, "reason": "no instruction given"}
        assert len(editor.asked) == 2
        assert len(editor.applied_edits) == 1
        assert len(editor.chat_prompts()) == 1


async def test_an_answer_without_valid_code_changes_nothing_and_says_why(tmp_path: Path) -> None:
    coder, chat = models(tmp_path, ["```python\ndef lookup(self, key:\n```"])
    async with editor_on(VSCODE, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        _, rewrite = await editor.actions(uri, cursor(6, 8))
        since = len(editor.client.messages)
        resolved = await request_json(editor.session, RESOLVE, rewrite)
        assert resolved == rewrite
        ((kind, message),) = editor.shown(since)
        assert kind == types.MessageType.Warning
        assert message.startswith("infill: the model's rewrite is not valid Python (")
        assert message.endswith(": nothing was changed")


# --- a document that changes while the answer is being written ---------------------------------


async def change_while_held(editor: Editor, uri: str, pending: Any) -> Any:
    """Edit the document once the chat model has started on the held answer, then let it
    answer; the response to `pending`."""
    await wait_until(editor.chat.starts, "the chat model to start")
    editor.session.change(uri, 2, [{"range": cursor(0, 0), "text": "# cached lookups\n"}])
    await editor.session.wait_for_messages()  # the change is in before the answer
    editor.chat.release("go")
    return await answer(pending)


async def test_a_change_while_the_rewrite_is_resolved_gives_no_edit_and_says_so(
    tmp_path: Path,
) -> None:
    coder, chat = models(tmp_path, [{"text": ANSWER, "hold": "go"}])
    async with editor_on(VSCODE, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        _, rewrite = await editor.actions(uri, cursor(6, 8))
        since = len(editor.client.messages)
        pending = editor.session.send_raw(RESOLVE, rewrite)
        resolved = plain_json(await change_while_held(editor, uri, pending))
        assert resolved == rewrite
        assert editor.shown(since) == [(types.MessageType.Warning, f"infill: {STALE}")]


async def test_a_change_during_the_rewrite_command_applies_no_edit_and_says_so(
    tmp_path: Path,
) -> None:
    coder, chat = models(tmp_path, [{"text": ANSWER, "hold": "go"}])
    async with editor_on(EGLOT, coder, chat) as editor:
        uri = editor.session.open(SOURCE)
        since = len(editor.client.messages)
        params = {"command": "infill.rewrite", "arguments": [uri, METHOD, "Add type hints."]}
        pending = editor.session.send_raw(EXECUTE, params)
        result = plain_json(await change_while_held(editor, uri, pending))
        assert result == {"applied": False, "reason": STALE}
        assert editor.applied_edits == []
        assert editor.shown(since) == [(types.MessageType.Warning, f"infill: {STALE}")]


# --- inline completion ------------------------------------------------------------------------

LINE = "total = price * \n"
#: The completion model's prompt ends with the code before the cursor (no FIM tokens).
AT_LINE = "total = price * "


async def test_an_invoked_request_returns_the_distinct_answers_in_order(tmp_path: Path) -> None:
    """The greedy answer first, then the sampled ones (one call per choice), a repeated one
    left out."""
    coder, chat = models(tmp_path, ["-"], ["quantity\n", "count\n", "quantity\n", "rate\n"])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(LINE)
        items = await session.inline(uri, session.position(LINE, 0, 16), invoked=True)
        assert [i.insert_text for i in items] == ["quantity", "count", "rate"]
        calls = [(c["n"], c["temperature"] > 0) for c in coder.starts()]
        assert calls == [(1, False), (3, True), (3, True), (3, True)]
        assert all(c["prompt"].endswith(AT_LINE) for c in coder.starts())


async def test_typing_into_a_suggestion_is_answered_from_the_cache_without_the_model(
    tmp_path: Path,
) -> None:
    coder, chat = models(tmp_path, ["-"], ["quantity\n", "_never_asked\n"])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(LINE)
        (item,) = await session.inline(uri, session.position(LINE, 0, 16))
        assert item.insert_text == "quantity"
        session.change(uri, 2, [{"range": cursor(0, 16), "text": "qua"}])
        typed = "total = price * qua\n"
        (item,) = await session.inline(uri, session.position(typed, 0, 19))
        assert item.insert_text == "ntity"
        assert len(coder.starts()) == 1

        # Typing something else is a new question for the model.
        session.change(uri, 3, [{"range": cursor(0, 19), "text": "x"}])
        other = "total = price * quax\n"
        (item,) = await session.inline(uri, session.position(other, 0, 20))
        assert item.insert_text == "_never_asked"
        assert len(coder.starts()) == 2


BODY = "def area(r):\n    \n\n\nprint(area(2))\n"
#: The model writes the body, then goes on far past its end (more functions).
BODY_ANSWER = "pi = 3.14159\n    return pi * r * r\n\n\n"
BEYOND = BODY_ANSWER + "def perimeter(r):\n    return 2 * pi * r\n\n\n" * 20


async def test_a_multi_line_suggestion_stops_the_model_where_the_block_ends(
    tmp_path: Path,
) -> None:
    """The suggestion ends with the body; the model is stopped once the code has left it
    (a token at a time, slow enough for the server to stop it long before its text ends)."""
    coder, chat = models(tmp_path, ["-"], [{"text": BEYOND, "step_seconds": 0.005}])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(BODY)
        (item,) = await session.inline(uri, session.position(BODY, 1, 4))
        assert item.insert_text == "pi = 3.14159\n    return pi * r * r"
        (end,) = [e for e in await coder.ended(1) if e["event"] == "end"]
        assert end["cancelled"] is True
        assert len(BODY_ANSWER) < end["yielded"] < len(BEYOND) // 2


# --- one model serving both roles -------------------------------------------------------------

EXPLANATION = "It doubles the key and caches the result per key. " * 8


async def test_one_model_serves_a_completion_first_while_an_explanation_runs(
    tmp_path: Path,
) -> None:
    """The explanation is set aside between two tokens for the completion, then resumes where
    it stopped: the answer is whole, and the model saw the completion in between. (The
    explanation is slow at first, so that the completion comes while it runs, and quick once
    resumed.)"""
    model = write_script(
        tmp_path,
        "shared",
        [
            {"match": "<|user|>Explain", "text": EXPLANATION, "step_seconds": 0.05},
            {"match": AT_LINE, "text": "quantity\n"},
        ],
    )
    async with editor_on(VSCODE, model) as editor:
        session = editor.session
        uri = session.open(SOURCE)
        explain = asyncio.ensure_future(
            editor.execute("infill.explain", [{"uri": uri, "range": METHOD}])
        )
        await wait_until(lambda: editor.chunks, "the first explanation chunk")
        other = session.open(LINE)
        (item,) = await session.inline(other, session.position(LINE, 0, 16))
        assert item.insert_text == "quantity"
        assert await answer(explain) == EXPLANATION

        events = await model.ended(3)
        assert [(e["event"], e["call"]) for e in events] == [
            ("start", 0),
            ("end", 0),  # set aside
            ("start", 1),  # the completion
            ("end", 1),
            ("start", 2),  # the explanation, resumed
            ("end", 2),
        ]
        first, _, completion, _, resumed, last = events
        assert "<|user|>Explain" in first["prompt"]
        assert completion["prompt"].endswith(AT_LINE)
        assert resumed["continues"] == 0
        assert events[1]["yielded"] + last["yielded"] == len(EXPLANATION)
        report = await request_json(session, "infill/stats", None)
        (engine,) = report["engines"]
        assert sorted(engine["roles"]) == ["chat", "completion"]


# --- what each job asks of the model, and what status says -------------------------------------


async def test_each_job_is_sampled_as_the_readme_says(tmp_path: Path) -> None:
    """README "Settings" and "Code actions": an automatic suggestion is greedy, one choice, at
    most 48 tokens on one line and 96 for several; Explain and Rewrite sample with the chat
    defaults (512 tokens, temperature 0.2, top-p 0.95, top-k 40, repetition penalty 1.1), with one
    fixed seed, so that the same question gets the same answer."""
    coder, chat = models(
        tmp_path,
        [{"match": "<|user|>Explain", "text": "It doubles the key."}, ANSWER],
        [{"match": AT_LINE, "text": "quantity\n"}, BODY_ANSWER],
    )
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        line = session.open(LINE)
        (item,) = await session.inline(line, session.position(LINE, 0, 16))
        assert item.insert_text == "quantity"
        body = session.open(BODY)
        (item,) = await session.inline(body, session.position(BODY, 1, 4))
        assert item.insert_text == "pi = 3.14159\n    return pi * r * r"
        uri = session.open(SOURCE)
        assert await editor.execute("infill.explain", [uri, METHOD]) == "It doubles the key."
        _, rewrite = await editor.actions(uri, cursor(6, 8))
        assert "edit" in await request_json(session, RESOLVE, rewrite)

    greedy = {"temperature": 0.0, "n": 1, "min_tokens": 0, "repetition_penalty": 1.0}
    single, multi = coder.starts()
    assert single["prompt"].endswith(AT_LINE)
    assert single | {**greedy, "max_tokens": 48} == single
    assert multi | {**greedy, "max_tokens": 96} == multi
    chat_sampling = {
        "max_tokens": 512,
        "temperature": 0.2,
        "top_p": 0.95,
        "top_k": 40,
        "repetition_penalty": 1.1,
        "n": 1,
    }
    explain, rewritten = chat.starts()
    assert "<|user|>Explain" in explain["prompt"]
    for call in (explain, rewritten):
        assert call | chat_sampling == call, call
    assert explain["seed"] is not None
    assert explain["seed"] == rewritten["seed"]


async def test_status_names_every_field_the_readme_lists(tmp_path: Path) -> None:
    """README "The language server": `infill/status` returns these fields and no others, here
    for a scripted model loaded from its file."""
    coder, chat = models(tmp_path, ["-"], ["quantity\n"])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(LINE)
        await session.inline(uri, session.position(LINE, 0, 16))
        status = plain_json(await session.status())
    assert set(status) == {
        "status",
        "model",
        "model_path",
        "backend",
        "device",
        "gpu",
        "warnings",
        "context_size",
        "fim_family",
        "fim_note",
        "features_off",
        "engine",
        "last_error",
        "download",
        "kv_cache",
    }
    assert status["status"] == "ready"
    assert status["model"] == "coder"
    assert status["model_path"] == str(coder.path)
    assert status["backend"] == "scripted"
    assert status["context_size"] == 4096
    assert status["fim_family"] is None
    assert status["fim_note"].startswith("no fill-in-the-middle tokens: ")
    assert status["download"] is None  # a local model: nothing was downloaded
    assert status["last_error"] is None
    assert status["warnings"] == []
    # The scripted backend gives no log-probabilities: what it cannot do is said.
    assert status["features_off"] == [
        "ranking and invoked alternatives: off, scripted models cannot score text"
    ]
    # The scripted model keeps no KV states; test_server_e2e.py reads the real model's.
    assert status["kv_cache"] is None


# --- bounds and cancels -----------------------------------------------------------------------


async def test_over_the_limits_nothing_reaches_the_model(tmp_path: Path) -> None:
    """README "Settings": a selection over `maxSelectionChars` is refused, naming the limit,
    and a document over `maxDocumentBytes` gets empty answers; neither model is asked
    anything. A document within the limits is completed as usual."""
    coder, chat = models(tmp_path, [ANSWER], ["quantity\n"])
    options = {"maxSelectionChars": 60, "maxDocumentBytes": 400}
    async with editor_on(VSCODE, coder, chat, options) as editor:
        session = editor.session
        uri = session.open(SOURCE)  # 190 bytes; the method is 108 characters
        for command, extra in (("infill.explain", {}), ("infill.rewrite", {"instruction": "x"})):
            with pytest.raises(JsonRpcException) as caught:
                await editor.execute(command, [{"uri": uri, "range": METHOD, **extra}])
            assert caught.value.code == INVALID_PARAMS
            assert "over infill.maxSelectionChars (60)" in str(caught.value)

        big = "value = compute(a, b)\n" * 20 + LINE  # 456 bytes
        big_uri = session.open(big)
        assert await session.inline(big_uri, session.position(big, 20, 16)) == []
        assert await editor.actions(big_uri, cursor(3, 0)) == []
        assert chat.starts() == []
        assert coder.starts() == []

        small = session.open(LINE)
        (item,) = await session.inline(small, session.position(LINE, 0, 16))
        assert item.insert_text == "quantity"
        assert len(coder.starts()) == 1


async def test_a_cancelled_request_is_request_cancelled_and_its_model_stops_within_a_token(
    tmp_path: Path,
) -> None:
    """README: `$/cancelRequest` answers -32800 and the job stops within one token: the
    script's answer is far from written when the model is stopped."""
    long_answer = "quantity + " * 600 + "\n"
    coder, chat = models(tmp_path, ["-"], [{"text": long_answer, "step_seconds": 0.005}])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(LINE)
        msg_id, pending = session.send(
            types.TEXT_DOCUMENT_INLINE_COMPLETION,
            session.inline_params(uri, session.position(LINE, 0, 16)),
        )
        await document_jobs(
            session,
            uri,
            lambda running, _: any(job["phase"] == "generating" for job in running),
            "the job to generate",
        )
        session.cancel(msg_id)
        with pytest.raises(JsonRpcException) as caught:
            await answer(pending)
        assert caught.value.code == REQUEST_CANCELLED
        _, (job,) = await document_jobs(
            session, uri, lambda running, finished: not running and finished, "the job's end"
        )
        assert job["finish_reasons"] == ["cancelled"]
        assert job["tokens_after_cancel"] in (0, 1)
        (end,) = [e for e in await coder.ended(1) if e["event"] == "end"]
        assert end["cancelled"] is True
        assert end["yielded"] < len(long_answer) // 2


async def test_a_settings_change_that_swaps_the_model_fails_the_running_job_and_serves_on(
    tmp_path: Path,
) -> None:
    """README "Language server": a settings change that names another model answers the
    running job with RequestFailed "the models are being reloaded", stops that model's work,
    and the next request is the new model's."""
    long_answer = "quantity + " * 600 + "\n"
    coder, chat = models(tmp_path, ["-"], [{"text": long_answer, "step_seconds": 0.005}])
    second = write_script(tmp_path / "second", "second-coder", ["price * 2\n"])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(LINE)
        position = session.position(LINE, 0, 16)
        _, pending = session.send(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, session.inline_params(uri, position)
        )
        await document_jobs(
            session,
            uri,
            lambda running, _: any(job["phase"] == "generating" for job in running),
            "the job to generate",
        )
        session.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(
                settings={"infill": {"model": str(second.path), "chatModel": str(chat.path)}}
            )
        )
        with pytest.raises(JsonRpcException) as caught:
            await answer(pending)
        assert caught.value.code == REQUEST_FAILED
        assert "the models are being reloaded" in str(caught.value)
        (end,) = [e for e in await coder.ended(1) if e["event"] == "end"]
        assert end["cancelled"] is True
        status = await session.until_loaded()
        assert (status["status"], status["model"]) == ("ready", "second-coder")
        items = await answer(session.inline(uri, position))
        assert [item.insert_text for item in items] == ["price * 2"]
        assert len(coder.starts()) == 1  # the old model was asked nothing more


async def test_requests_sent_while_the_model_loads_wait_for_it_and_are_all_answered(
    tmp_path: Path,
) -> None:
    """README "Language server": the model loads in the background; requests that come
    meanwhile (inline completions on two documents, a code action list, a status) are
    answered: the status says loading, the others wait for the model, none is lost."""
    coder = write_script(tmp_path, "coder", ["price * 2\n"], load_hold="loaded")
    chat = write_script(tmp_path, "chat", ["Hi"])
    command = scripted_command(coder, chat)
    async with lsp_session(client_capabilities(VSCODE), None, command) as session:
        status = await session.status()
        assert status["status"] == "loading", status
        uris = [session.open(LINE), session.open(LINE)]
        position = session.position(LINE, 0, 16)
        pending = [
            session.send(types.TEXT_DOCUMENT_INLINE_COMPLETION, session.inline_params(u, position))
            for u in uris
        ]
        selection = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 16}}
        params = {
            "textDocument": {"uri": uris[0]},
            "range": selection,
            "context": {"diagnostics": []},
        }
        actions = await request_json(session, CODE_ACTION, params)  # needs no model
        assert (await session.status())["status"] == "loading"
        assert not any(future.done() for _, future in pending)  # they wait for the model
        (tmp_path / "loaded").touch()
        for _, future in pending:
            items = await answer(future)
            assert [item.insert_text for item in items] == ["price * 2"]
        assert (await session.status())["status"] == "ready"
        assert [action["title"] for action in actions] == ["Explain", "Rewrite"]


@pytest.mark.parametrize("token", ["explain-1", 0])
async def test_explain_streams_on_the_clients_token_and_its_cancel_keeps_the_text_so_far(
    tmp_path: Path, token: str | int
) -> None:
    """README "Code actions": Explain streams `infill/explainChunk {token, text, done}` on the
    request's `workDoneToken` (a string or an integer, even 0) with cancellable progress; a
    cancel of that progress ends it with the text so far as the result (a start of the
    script's answer) and stops the model within one token."""
    explanation = "It doubles the key. " * 300
    coder, chat = models(tmp_path, [{"text": explanation, "step_seconds": 0.005}])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        client = editor.client
        client.progress_reports.setdefault(token, [])
        uri = session.open(SOURCE)
        params = {
            "command": "infill.explain",
            "arguments": [{"uri": uri, "range": METHOD}],
            "workDoneToken": token,
        }
        pending = session.send_raw(EXECUTE, params)
        await wait_until(lambda: editor.chunks, "the first chunk")
        client.protocol.notify(
            types.WINDOW_WORK_DONE_PROGRESS_CANCEL, types.WorkDoneProgressCancelParams(token=token)
        )
        result = await answer(pending)

        chunks = editor.chunks
        assert all(set(c) == {"token", "text", "done"} for c in chunks), chunks
        assert {c["token"] for c in chunks} == {token}
        assert [c["done"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
        assert result == "".join(c["text"] for c in chunks)
        assert result
        assert explanation.startswith(result)
        assert len(result) < len(explanation)
        begin, *_, end = client.progress_reports[token]
        assert isinstance(begin, types.WorkDoneProgressBegin)
        assert begin.cancellable is True
        assert isinstance(end, types.WorkDoneProgressEnd)
        assert end.message == "cancelled"
        (ended,) = [e for e in await chat.ended(1) if e["event"] == "end"]
        assert ended["cancelled"] is True
        report = await request_json(session, "infill/stats", None)
        (job,) = next(e for e in report["engines"] if "chat" in e["roles"])["jobs"]
        assert job["finish_reasons"] == ["cancelled"]
        assert job["tokens_after_cancel"] in (0, 1)


# --- settings that reach the model ------------------------------------------------------------

WITH_SUFFIX = "total = price * \nprint(total)\n"


@pytest.mark.parametrize(
    ("setting", "family"),
    [(None, "starcoder"), ("starcoder", "starcoder"), ("none", None)],
    ids=["detected", "named", "none"],
)
async def test_the_fim_family_is_the_models_own_or_the_one_the_setting_names(
    tmp_path: Path, setting: str | None, family: str | None
) -> None:
    """README "Settings": `fimFamily` unset is the family the model's special tokens give (the
    scripted model has StarCoder's), a named family is used as it is, and `none` sends the
    prefix alone, as for a model without FIM tokens."""
    coder, chat = models(tmp_path, ["-"], ["quantity\n"], fim=True)
    options = {} if setting is None else {"fimFamily": setting}
    async with editor_on(VSCODE, coder, chat, options) as editor:
        session = editor.session
        assert (await session.status())["fim_family"] == family
        uri = session.open(WITH_SUFFIX)
        (item,) = await session.inline(uri, session.position(WITH_SUFFIX, 0, 16))
        assert item.insert_text == "quantity"
    (call,) = coder.starts()
    if family is None:
        assert "<fim" not in call["prompt"]
        assert call["prompt"].endswith(AT_LINE)
    else:
        assert call["prompt"].endswith(
            f"<fim_prefix>{AT_LINE}<fim_suffix>\nprint(total)\n<fim_middle>"
        ), call["prompt"]


async def test_a_fim_family_the_model_lacks_fails_the_load_naming_its_tokens(
    tmp_path: Path,
) -> None:
    coder, chat = models(tmp_path, ["-"], ["quantity\n"], fim=True)
    options = {"fimFamily": "qwen"}
    async with lsp_session(
        client_capabilities(VSCODE), options, scripted_command(coder, chat)
    ) as session:
        status = await session.until_loaded()
        assert status["status"] == "error"
        assert "<|fim_prefix|>" in status["last_error"]
        assert "cannot use the FIM family qwen" in status["last_error"]
    assert coder.starts() == []


@pytest.mark.parametrize("temperature", [0.0, 0.6])
async def test_automatic_suggestions_use_the_temperature_setting(
    tmp_path: Path, temperature: float
) -> None:
    """README "Settings": `temperature` (default 0, greedy) is what an automatic suggestion
    is sampled with."""
    coder, chat = models(tmp_path, ["-"], ["quantity\n"])
    async with editor_on(VSCODE, coder, chat, {"temperature": temperature}) as editor:
        session = editor.session
        uri = session.open(LINE)
        (item,) = await session.inline(uri, session.position(LINE, 0, 16))
        assert item.insert_text == "quantity"
    (call,) = coder.starts()
    assert call["temperature"] == temperature
    assert call["n"] == 1


async def test_malformed_params_are_invalid_params_and_the_server_serves_on(
    tmp_path: Path,
) -> None:
    """Each malformed request of tests/lsp_server/test_server_e2e.py is InvalidParams, and the next
    request is answered exactly as before it (the scripted answer, every time)."""
    coder, chat = models(tmp_path, ["-"], ["quantity\n"])
    async with editor_on(VSCODE, coder, chat) as editor:
        session = editor.session
        uri = session.open(LINE)
        for name, params in MALFORMED.items():
            with pytest.raises(JsonRpcException) as caught:
                await answer(session.send_raw(types.TEXT_DOCUMENT_INLINE_COMPLETION, params))
            assert caught.value.code == INVALID_PARAMS, name
            (item,) = await session.inline(uri, session.position(LINE, 0, 16))
            assert item.insert_text == "quantity", name
