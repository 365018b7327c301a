"""The language server: every feature registered in one place, each handler an adapter over
plain functions (STYLE 1).

Each handler takes what it needs out of the protocol objects, freezes a document snapshot
before its first `await`, calls into `inline.completer`, `action_handlers`, `host` or
`settings`, and wraps the answer in lsprotocol types. Model work runs on the engine's worker
thread, never in pygls's pool. The server object itself, its protocol and its log handler
live in `protocol.py`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types
from pygls.workspace import TextDocument

from lsp_server import action_handlers
from lsp_server.commands import (
    EXPLAIN_COMMAND,
    REWRITE_COMMAND,
    ExplainArguments,
    RewriteArguments,
)
from lsp_server.documents import exceeds_bytes, snapshot, use_lsp_lines
from lsp_server.host import STATUS_REQUEST, ModelUnavailableError
from lsp_server.protocol import InfillServer, engine_failures
from lsp_server.settings import Settings, parse_settings
from lsp_server.stats import STATS_REQUEST, stats_report

log = logging.getLogger(__name__)


def build_server(base: Settings | None = None) -> InfillServer:
    """The server with every feature registered: a handler per request, notification and
    command, each a few lines over the feature modules. `base`: the settings of the command
    line, which the client's settings go over."""
    server = InfillServer(base or Settings())

    @server.feature(types.INITIALIZE)
    def initialize(ls: InfillServer, params: types.InitializeParams) -> None:
        ls.client_log.attach(asyncio.get_running_loop())
        use_lsp_lines(ls.workspace)
        settings, problems = parse_settings(params.initialization_options, ls.base_settings)
        ls.settings = settings
        for problem in problems:  # allowed before the initialize response (LSP 3.17)
            ls.show_once(problem, types.MessageType.Warning)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: InfillServer, params: types.InitializedParams) -> None:
        await load_models(ls)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: InfillServer, params: types.DidChangeConfigurationParams
    ) -> None:
        settings, problems = parse_settings(params.settings, ls.settings)
        for problem in problems:
            ls.show_once(problem, types.MessageType.Warning)
        reload = settings.model_options() != ls.settings.model_options()
        ls.settings = settings
        if reload:
            log.info("model settings changed: loading the models again")
            await load_models(ls)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: InfillServer, params: types.InlineCompletionParams
    ) -> list[types.InlineCompletionItem]:
        # 1. Snapshot before the first await: later edits must not change this request. A
        # document over the size limit gets no completion, and no snapshot (a copy).
        document = ls.open_document(params.text_document.uri)
        settings = ls.settings
        if too_large(ls, document, settings):
            return []
        snap = snapshot(document, params.position)  # InvalidParams outside the document
        invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked

        # 2. Plain functions do the work; a newer request for the document wins.
        with engine_failures():  # RequestFailed naming the cause, never a traceback
            result = await ls.inline.complete(
                snap,
                settings,
                invoked=invoked,
                others=ls.other_documents(snap.uri),
                roots=ls.workspace_roots(),
            )
        if result is None:  # superseded by a newer request for the same document
            return []

        # 3. Items: the range covers the cursor and the closers a suggestion absorbs, measured
        # on the snapshot (the document may have changed while the model ran).
        codec = document.position_codec
        items = []
        for fitted in result.suggestions:
            absorbed = snap.suffix[: fitted.replace_chars]
            end = types.Position(
                line=params.position.line,
                character=params.position.character + codec.client_num_units(absorbed),
            )
            items.append(
                types.InlineCompletionItem(
                    insert_text=fitted.text, range=types.Range(start=params.position, end=end)
                )
            )
        log.info(
            "inline %s: %s, %d item(s)%s, prompt %d tokens, %.0f ms",
            snap.uri.rsplit("/", 1)[-1],
            result.mode,
            len(items),
            " (written ahead)" if result.written_ahead else "",
            result.prompt_tokens,
            result.seconds * 1000,
        )
        return items

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: InfillServer, params: types.DidChangeTextDocumentParams) -> None:
        # pygls has already applied the changes; where they were is a recently edited region.
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                ls.inline.note_edit(params.text_document.uri, change.range.start.line)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: InfillServer, params: types.DidCloseTextDocumentParams) -> None:
        # pygls has already removed the document from the workspace.
        ls.forget_document(params.text_document.uri)

    @server.feature(STATUS_REQUEST)
    def status(ls: InfillServer, params: Any) -> dict[str, Any]:
        return ls.host.status()

    @server.feature(STATS_REQUEST)
    def stats(ls: InfillServer, params: Any) -> dict[str, Any]:
        report = stats_report(ls.host.loaded_engines())
        if ls.inline.speculator is not None:
            report["ahead"] = ls.inline.speculator.status()
        return report

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: InfillServer, params: Any) -> None:
        await ls.host.aclose()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=list(action_handlers.ACTION_KINDS), resolve_provider=True
        ),
    )
    def code_action(ls: InfillServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return action_handlers.list_actions(ls, params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: InfillServer, action: types.CodeAction) -> types.CodeAction:
        return await action_handlers.resolve_action(ls, action)

    # pygls structures each command's arguments from these annotations (`commands.py`).
    @server.command(EXPLAIN_COMMAND)
    async def explain(ls: InfillServer, arguments: ExplainArguments) -> str:
        return await action_handlers.explain(ls, arguments)

    @server.command(REWRITE_COMMAND)
    async def rewrite(ls: InfillServer, arguments: RewriteArguments) -> dict[str, Any]:
        return await action_handlers.rewrite(ls, arguments)

    return server


def too_large(ls: InfillServer, document: TextDocument, settings: Settings) -> bool:
    """Whether the document is over `infill.maxDocumentBytes`; logged once per document
    (again after it has been under the limit, or closed)."""
    if not exceeds_bytes(document.source, settings.max_document_bytes):
        ls.large_documents.discard(document.uri)
        return False
    if document.uri not in ls.large_documents:
        ls.large_documents.add(document.uri)
        log.info(
            "inline %s: no completions: over infill.maxDocumentBytes (%d)",
            document.uri.rsplit("/", 1)[-1],
            settings.max_document_bytes,
        )
    return True


async def load_models(ls: InfillServer) -> None:
    """Load the completion model in the background, with work-done progress where the client
    supports it. A failure is shown once; requests then get an error naming the cause."""
    future = ls.host.start(ls.settings)
    token = await ls.begin_progress("load", "infill: loading the completion model")
    try:
        await asyncio.shield(future)
        message = f"infill: {ls.host.status()['model']} ready"
    except ModelUnavailableError as e:
        message = str(e)
        log.error("%s", message)
        ls.show_once(message)
    if token is not None:
        ls.end_progress(token, message)
