"""Code actions' handlers: "Explain", "Rewrite" and "Fix", answered by the chat model.
The protocol side: documents, progress, notifications and edits; what the code
is, what to ask and what to make of the answer is `action_logic`.

- `textDocument/codeAction` lists the actions at once, without the model, for a selection or,
  with an empty selection, the enclosing function or block (`action_logic.enclosing_code`).
- "Explain" is the command `infill.explain` (uri, range): it streams the answer through
  work-done progress (cancellable) and `infill/explainChunk` notifications
  `{token, text, done}`, and returns the whole answer as markdown.
- "Rewrite" and "Fix" produce a `WorkspaceEdit` for exactly the selected code, carrying the
  document version it was computed for: on `codeAction/resolve` where the client resolves
  `edit`, else through the command `infill.rewrite` (uri, range, instruction) and
  `workspace/applyEdit`. Without an instruction the command asks for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace import TextDocument

from engine.errors import EngineError, GenerationError
from engine.text import leading_whitespace, newline_of
from engine.types import CHAT_SAMPLING, FinishReason, GenerationRequest, Role
from lsp_server.action_logic import (
    DEFAULT_INSTRUCTION,
    PRESET_INSTRUCTIONS,
    UnusableAnswer,
    code_from_answer,
    document_uses_tabs,
    explain_messages,
    fix_instruction,
    rewrite_messages,
)
from lsp_server.blocks import enclosing_code
from lsp_server.commands import (
    EXPLAIN_COMMAND,
    REWRITE_COMMAND,
    ExplainArguments,
    RewriteArguments,
    structure_arguments,
)
from lsp_server.documents import InvalidPosition, exceeds_bytes, find_document, snapshot
from lsp_server.protocol import InfillServer, engine_failures

log = logging.getLogger(__name__)

EXPLAIN_CHUNK = "infill/explainChunk"
EXPLAIN_KIND = "refactor.explain"
#: The kinds of action `list_actions` offers (the server advertises them).
ACTION_KINDS = (EXPLAIN_KIND, types.CodeActionKind.RefactorRewrite, types.CodeActionKind.QuickFix)
#: Code actions' answers: the chat defaults (`CHAT_SAMPLING`), with a fixed seed so that the
#: same request gives the same answer.
ACTION_SAMPLING = replace(CHAT_SAMPLING, seed=0)
#: Seconds between two progress reports of a streaming explanation.
PROGRESS_INTERVAL = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The code an action works on, frozen with the document version it was taken from."""

    uri: str
    version: int | None
    range: types.Range  # client units
    code: str
    language_id: str
    file_name: str
    indent: str  # the first line's indentation
    first_line_indented: bool  # the range starts at or before that indentation
    newline: str
    use_tabs: bool


def find_target(document: TextDocument, selection: types.Range) -> Target | None:
    """The selected code; for an empty selection, the enclosing function or block (None if
    there is none). Raises InvalidPosition for a range outside the document."""
    start = snapshot(document, selection.start)
    end = snapshot(document, selection.end)
    if end.offset < start.offset:
        raise InvalidPosition("the range ends before it starts")
    text = start.text
    lines = document.lines
    codec = document.position_codec
    rng = selection
    if end.offset == start.offset:
        block = enclosing_code(text, start.line, document.language_id or "")
        if block is None:
            return None
        last = lines[block.end].rstrip("\r\n")
        rng = types.Range(
            start=types.Position(line=block.start, character=0),
            end=types.Position(line=block.end, character=codec.client_num_units(last)),
        )
        start = snapshot(document, rng.start)
        end = snapshot(document, rng.end)
    line_text = lines[start.line] if start.line < len(lines) else ""
    indent = leading_whitespace(line_text)
    if 0 < start.character < len(indent):  # inside the indentation: take the whole line
        rng = types.Range(start=types.Position(line=rng.start.line, character=0), end=rng.end)
        start = snapshot(document, rng.start)
    code = text[start.offset : end.offset]
    if not code.strip():
        return None
    return Target(
        uri=document.uri,
        version=document.version,
        range=rng,
        code=code,
        language_id=document.language_id or "",
        file_name=PurePosixPath(unquote(urlparse(document.uri).path)).name or document.uri,
        indent=indent,
        first_line_indented=start.character == 0,
        newline=newline_of(text),
        use_tabs=document_uses_tabs(text),
    )


# --- listing ----------------------------------------------------------------------------------


def _range_json(rng: types.Range) -> dict[str, Any]:
    return {
        "start": {"line": rng.start.line, "character": rng.start.character},
        "end": {"line": rng.end.line, "character": rng.end.character},
    }


def _resolves_edits(ls: InfillServer) -> bool:
    support = get_capability(ls.client_capabilities, "text_document.code_action.resolve_support")
    return support is not None and "edit" in support.properties


def list_actions(ls: InfillServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    """The actions for the range, at once and without the model."""
    document = find_document(ls.workspace, params.text_document.uri)
    if document is None or exceeds_bytes(document.source, ls.settings.max_document_bytes):
        return []  # clients ask on every cursor move: a huge document costs nothing
    try:
        target = find_target(document, params.range)
    except InvalidPosition:
        return []
    if target is None:
        return []
    args: dict[str, Any] = {"uri": target.uri, "range": _range_json(target.range)}
    resolve = _resolves_edits(ls)
    actions = [
        types.CodeAction(
            title="Explain",
            kind=EXPLAIN_KIND,
            command=types.Command(title="Explain", command=EXPLAIN_COMMAND, arguments=[args]),
        ),
        _rewrite_action(
            "Rewrite" if resolve else "Rewrite...",
            types.CodeActionKind.RefactorRewrite,
            {
                **args,
                "version": target.version,
                "instruction": DEFAULT_INSTRUCTION if resolve else None,
            },
            resolve,
        ),
    ]
    diagnostics = list(params.context.diagnostics or [])
    if diagnostics:
        instruction = fix_instruction([_describe(d) for d in diagnostics])
        fix = _rewrite_action(
            "Fix",
            types.CodeActionKind.QuickFix,
            {**args, "version": target.version, "instruction": instruction},
            resolve,
        )
        fix.diagnostics = diagnostics
        actions.append(fix)
    only = params.context.only
    if only:
        actions = [a for a in actions if any(_kind_within(a.kind, k) for k in only)]
    return actions


def _kind_within(kind: Any, wanted: Any) -> bool:
    """Whether `kind` is `wanted` or below it (`refactor` covers `refactor.rewrite`).
    CodeActionKind members are str enums whose str() is their name, not their value."""
    value, prefix = str(getattr(kind, "value", kind)), str(getattr(wanted, "value", wanted))
    return value == prefix or value.startswith(f"{prefix}.")


def _describe(diagnostic: types.Diagnostic) -> str:
    where = f"line {diagnostic.range.start.line + 1}"
    source = f" ({diagnostic.source})" if diagnostic.source else ""
    return f"{where}: {diagnostic.message}{source}"


def _rewrite_action(title: str, kind: str, data: dict[str, Any], resolve: bool) -> types.CodeAction:
    if resolve:
        return types.CodeAction(title=title, kind=kind, data=data)
    arguments = {
        k: data[k] for k in ("uri", "range", "instruction", "version") if data.get(k) is not None
    }
    return types.CodeAction(
        title=title,
        kind=kind,
        command=types.Command(title=title, command=REWRITE_COMMAND, arguments=[arguments]),
    )


# --- explain ----------------------------------------------------------------------------------


#: Why a Rewrite offered for an earlier version of the document does nothing.
STALE_VERSION = "the document changed since the action was offered: nothing was changed"


def _document_and_target(
    ls: InfillServer, arguments: ExplainArguments | RewriteArguments
) -> tuple[TextDocument, Target]:
    document = ls.open_document(arguments.uri)
    target = find_target(document, arguments.range)  # InvalidParams outside the document
    if target is None:
        raise JsonRpcInvalidParams("there is no code in that range")
    limit = ls.settings.max_selection_chars
    if len(target.code) > limit:  # before any model work
        raise JsonRpcInvalidParams(
            f"the code is {len(target.code):,} characters, over infill.maxSelectionChars "
            f"({limit:,}): select less"
        )
    return document, target


async def explain(ls: InfillServer, arguments: ExplainArguments) -> str:
    """Stream an explanation of the code; the result is the whole answer (markdown). An
    engine failure is a RequestFailed error naming the cause, after the chunks so far."""
    _, target = _document_and_target(ls, arguments)
    with engine_failures():
        return await _explain(ls, target)


async def _explain(ls: InfillServer, target: Target) -> str:
    engine = await ls.host.chat()
    request = GenerationRequest(
        messages=explain_messages(
            target.code, language_id=target.language_id, file_name=target.file_name
        ),
        role=Role.CHAT,
        sampling=ACTION_SAMPLING,
    )
    progress = await ls.begin_progress("explain", "Explain", cancellable=True, client_token=True)
    # Chunks name a token all the same.
    token = progress if progress is not None else f"infill-explain-{uuid.uuid4()}"
    parts: list[str] = []
    reported = [0.0]  # when the progress was last updated: a few times a second is enough

    async def stream() -> None:
        async with contextlib.aclosing(engine.generate(request)) as deltas:
            async for delta in deltas:
                if delta.finish_reason is FinishReason.ERROR:
                    raise GenerationError(f"the chat model failed: {delta.error}")
                if delta.text:
                    parts.append(delta.text)
                    ls.protocol.notify(
                        EXPLAIN_CHUNK, {"token": token, "text": delta.text, "done": False}
                    )
                    now = time.monotonic()
                    if progress is not None and now - reported[0] >= PROGRESS_INTERVAL:
                        reported[0] = now
                        ls.work_done_progress.report(
                            token, types.WorkDoneProgressReport(message=_tail("".join(parts)))
                        )

    work = asyncio.ensure_future(stream())
    if progress is not None:
        _cancel_on_progress_cancel(ls, token, work)
    outcome = "done"
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        if not work.cancelled():
            work.cancel()  # the request itself was cancelled: stop the model, and say so
            raise
        outcome = "cancelled"  # the user stopped it from the progress: keep what came
    except EngineError as e:
        outcome = f"failed: {e}"
        raise
    finally:
        ls.protocol.notify(EXPLAIN_CHUNK, {"token": token, "text": "", "done": True})
        if progress is not None:
            ls.end_progress(progress, outcome)
    return "".join(parts)


def _tail(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else "…" + flat[-width:]


def _cancel_on_progress_cancel(
    ls: InfillServer, token: types.ProgressToken, work: asyncio.Future[None]
) -> None:
    """A cancel from the progress UI cancels `work` (pygls cancels the token's future)."""
    future = ls.work_done_progress.tokens.get(token)
    if future is None:
        return
    loop = asyncio.get_running_loop()

    def cancelled(done: Any) -> None:
        if done.cancelled():
            loop.call_soon_threadsafe(work.cancel)

    future.add_done_callback(cancelled)


# --- rewrite ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RewriteOutcome:
    edit: types.WorkspaceEdit | None
    message: str | None  # why there is no edit


async def compute_rewrite(ls: InfillServer, target: Target, instruction: str) -> RewriteOutcome:
    """The model's rewrite of the target as an edit of exactly its range, or why not. An
    engine failure is a RequestFailed error naming the cause."""
    with engine_failures():
        return await _compute_rewrite(ls, target, instruction)


async def _compute_rewrite(ls: InfillServer, target: Target, instruction: str) -> RewriteOutcome:
    engine = await ls.host.chat()
    request = GenerationRequest(
        messages=rewrite_messages(
            target.code,
            language_id=target.language_id,
            file_name=target.file_name,
            instruction=instruction,
        ),
        role=Role.CHAT,
        sampling=ACTION_SAMPLING,
    )
    (answer,) = await engine.collect(request)
    if answer.finish_reason is FinishReason.ERROR:
        raise GenerationError(f"the chat model failed: {answer.error}")
    document = find_document(ls.workspace, target.uri)
    if document is None or document.version != target.version:
        return RewriteOutcome(
            None, "the document changed while the rewrite was being written: nothing was changed"
        )
    try:
        new_text = code_from_answer(
            answer.text,
            selected=target.code,
            language_id=target.language_id,
            indent=target.indent,
            first_line_indented=target.first_line_indented,
            newline=target.newline,
            use_tabs=target.use_tabs,
        )
    except UnusableAnswer as e:
        return RewriteOutcome(None, f"{e}: nothing was changed")
    edit = types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(
                    uri=target.uri, version=target.version
                ),
                edits=[types.TextEdit(range=target.range, new_text=new_text)],
            )
        ]
    )
    return RewriteOutcome(edit, None)


async def resolve_action(ls: InfillServer, action: types.CodeAction) -> types.CodeAction:
    """Compute a Rewrite/Fix action's edit; without one, the user is told why."""
    data = action.data if isinstance(action.data, Mapping) else None
    if data is None or "instruction" not in data:
        return action
    # The version first: after a change the action's range may no longer be in the document.
    document = find_document(ls.workspace, str(data.get("uri")))
    version = data.get("version")
    if document is not None and version is not None and document.version != version:
        ls.show_once(f"infill: {STALE_VERSION}", types.MessageType.Info)
        return action
    arguments = structure_arguments(ls.converter, data, RewriteArguments)
    _, target = _document_and_target(ls, arguments)
    outcome = await compute_rewrite(ls, target, arguments.instruction or DEFAULT_INSTRUCTION)
    if outcome.edit is None:
        ls.show_once(f"infill: {outcome.message}", types.MessageType.Warning)
        return action
    action.edit = outcome.edit
    return action


async def rewrite(ls: InfillServer, arguments: RewriteArguments) -> dict[str, Any]:
    """The `infill.rewrite` command: compute the edit and apply it with workspace/applyEdit.
    Refused when its `version` is not the document's any more."""
    # The version first: after a change the range may no longer be in the document.
    document = ls.open_document(arguments.uri)
    if arguments.version is not None and document.version != arguments.version:
        ls.show_once(f"infill: {STALE_VERSION}", types.MessageType.Warning)
        return {"applied": False, "reason": STALE_VERSION}
    _, target = _document_and_target(ls, arguments)
    instruction = arguments.instruction
    if not instruction:
        instruction = await _ask_instruction(ls)
        if instruction is None:
            return {"applied": False, "reason": "no instruction given"}
    outcome = await compute_rewrite(ls, target, str(instruction))
    if outcome.edit is None:
        ls.show_once(f"infill: {outcome.message}", types.MessageType.Warning)
        return {"applied": False, "reason": outcome.message}
    result = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=outcome.edit, label="infill: rewrite")
    )
    if not result.applied:
        reason = result.failure_reason or "the editor refused the edit"
        ls.show_once(f"infill: {reason}", types.MessageType.Warning)
        return {"applied": False, "reason": reason}
    return {"applied": True, "reason": None}


async def _ask_instruction(ls: InfillServer) -> str | None:
    choice = await ls.window_show_message_request_async(
        types.ShowMessageRequestParams(
            type=types.MessageType.Info,
            message="infill: rewrite the code how?",
            actions=[types.MessageActionItem(title=t) for t in PRESET_INSTRUCTIONS],
        )
    )
    return choice.title if choice is not None else None
