"""The language server: every feature registered in one place, each handler an adapter over
plain functions (as jedi-language-server's and ruff's servers do).

Each handler takes what it needs out of the protocol objects, freezes a document snapshot
before its first `await`, calls into `inline.completer`, `action_handlers`, `host` or
`settings`, and wraps the answer in lsprotocol types. Model work runs on the engine's worker
thread, never in pygls's pool. The server object itself, its protocol and its log handler
live in `protocol.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from lsprotocol import types
from pygls.workspace import PositionCodec, TextDocument

from lsp_server import action_handlers
from lsp_server.commands import (
    ACCEPT_COMPLETION_COMMAND,
    ACCEPT_NEXT_EDIT_COMMAND,
    EXPLAIN_COMMAND,
    REWRITE_COMMAND,
    AcceptCompletionArguments,
    AcceptNextEditArguments,
    ExplainArguments,
    RewriteArguments,
)
from lsp_server.documents import (
    DocumentSnapshot,
    exceeds_bytes,
    position_at,
    snapshot,
    use_lsp_lines,
)
from lsp_server.host import STATUS_REQUEST, ModelUnavailableError
from lsp_server.menu.items import (
    MenuClient,
    MenuMode,
    MenuPlace,
    keeping_closers,
    menu_items,
    serves_menu,
    typed_word,
)
from lsp_server.next_edit.offers import Outcome
from lsp_server.next_edit.requests import (
    DID_FOCUS,
    DID_PARTIALLY_ACCEPT_COMPLETION,
    DID_REJECT,
    DID_SHOW_COMPLETION,
    DID_SHOW_INLINE_EDIT,
    INLINE_EDIT_REQUEST,
    answer_json,
    completion_id,
    edit_json,
    focused_uri,
    mentioned_ids,
    parse_inline_edit,
    partial_accept,
)
from lsp_server.postprocess import Fitted
from lsp_server.protocol import InfillServer, end_process, engine_failures
from lsp_server.settings import Settings, parse_settings
from lsp_server.stats import STATS_REQUEST, stats_report
from lsp_server.usage import Offered

log = logging.getLogger(__name__)

#: How long `shutdown` lets the requests under way end with their reason before they are
#: cancelled: a stopped engine ends a job within a token (15-50 ms on a CPU), and lsp-mode
#: gives the whole answer 0.5 s.
SHUTDOWN_GRACE_SECONDS = 0.2


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
        ls.usage.set_enabled(settings.usage_counts)
        ls.menu_client = MenuClient.of(params.capabilities, params.client_info)
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
        ls.usage.set_enabled(settings.usage_counts)
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
        # on the snapshot (the document may have changed while the model ran). While usage is
        # counted, each carries the accept command with its id, if the document is still the
        # snapshot's (else its place could not be followed).
        codec = document.position_codec
        ids = offer(ls, document, snap, result.suggestions)
        items = []
        for i, fitted in enumerate(result.suggestions):
            end = absorbed_end(params.position, snap, fitted, codec)
            command = None if ids is None else accept_command(ids[i])
            items.append(
                types.InlineCompletionItem(
                    insert_text=fitted.text,
                    range=types.Range(start=params.position, end=end),
                    command=command,
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

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION,
        # No resolve: Helix resolves an accepted item synchronously, and Neovim 0.11 drops the
        # item's edit when the user types before the answer; everything is in the item.
        types.CompletionOptions(resolve_provider=False),
    )
    async def completion(ls: InfillServer, params: types.CompletionParams) -> types.CompletionList:
        # 1. Whether this client gets the menu, and the snapshot before the first await.
        settings = ls.settings
        if not serves_menu(MenuMode(settings.completion_menu), ls.menu_client):
            return types.CompletionList(is_incomplete=False, items=[])
        document = ls.open_document(params.text_document.uri)
        if too_large(ls, document, settings):
            return types.CompletionList(is_incomplete=False, items=[])
        snap = snapshot(document, params.position)  # InvalidParams outside the document
        line_before = snap.prefix[len(snap.prefix) - snap.character :]
        word = typed_word(line_before)
        # Every menu asks with "invoked" as the user types a word (LSP's kind 1 covers typing
        # an identifier); asked where no word is typed, the user asked for it.
        invoked = (
            params.context is not None
            and params.context.trigger_kind == types.CompletionTriggerKind.Invoked
            and not word
        )

        # 2. What is ready within the menu's wait; the rest at the client's next request.
        with engine_failures():
            result = await ls.menu.complete(
                snap,
                settings,
                invoked=invoked,
                others=ls.other_documents(snap.uri),
                roots=ls.workspace_roots(),
            )
        if result is None or not result.suggestions:
            return types.CompletionList(is_incomplete=True, items=[])

        # 3. Items over the typed word, measured on the snapshot, each with its accept command.
        codec = document.position_codec
        start = types.Position(
            line=params.position.line,
            character=params.position.character - codec.client_num_units(word),
        )
        ids = offer(ls, document, snap, result.suggestions)
        items_of = tuple(keeping_closers(f, snap.suffix) for f in result.suggestions)
        items = menu_items(
            items_of,
            word=word,
            line_indent=line_before[: len(line_before) - len(line_before.lstrip())],
            start=start,
            cursor=params.position,
            replace_end=[absorbed_end(params.position, snap, f, codec) for f in items_of],
            client=ls.menu_client,
            place=MenuPlace(settings.completion_menu_place),
            model=ls.host.completion_name() or "",
            commands=(
                [accept_command(i) for i in ids] if ids is not None else [None] * len(items_of)
            ),
        )
        log.info(
            "menu %s: %d item(s)%s, %.0f ms",
            snap.uri.rsplit("/", 1)[-1],
            len(items),
            " (typed along)" if result.cached else "",
            result.seconds * 1000,
        )
        return types.CompletionList(is_incomplete=True, items=items)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: InfillServer, params: types.DidOpenTextDocumentParams) -> None:
        document = ls.open_document(params.text_document.uri)  # pygls has opened it
        if not exceeds_bytes(document.source, ls.settings.max_document_bytes):
            ls.next_edits.opened(document.uri, document.source)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: InfillServer, params: types.DidChangeTextDocumentParams) -> None:
        # pygls has already applied the changes; where they were is a recently edited region.
        uri = params.text_document.uri
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                ls.inline.note_edit(uri, change.range.start.line)
        document = ls.open_document(uri)
        ls.usage.changed(uri, document.source)  # a no-op for a document without suggestions
        if exceeds_bytes(document.source, ls.settings.max_document_bytes):
            ls.next_edits.forget(uri)  # no copy of a document this large, no next edits
        else:
            ls.next_edits.changed(uri, document.source, time.monotonic())

    @server.feature(INLINE_EDIT_REQUEST)
    async def inline_edit(ls: InfillServer, params: Any) -> dict[str, Any]:
        request = parse_inline_edit(params)  # InvalidParams naming what is wrong
        document = ls.open_document(request.uri)
        if request.version is not None and request.version != document.version:
            return answer_json([])  # the client's copy is another version than ours
        snap = snapshot(document, request.position)  # InvalidParams outside the document
        codec = document.position_codec
        suggestions = await ls.next_edits.suggest(
            snap, ls.host.next_edit, roots=ls.workspace_roots()
        )
        if suggestions is None:  # superseded by a newer request for the document
            return answer_json([])
        edits = [
            edit_json(
                uri=snap.uri,
                version=suggestion.offer.version,
                range_=types.Range(
                    start=position_at(snap.text, suggestion.edit.start, codec),
                    end=position_at(snap.text, suggestion.edit.end, codec),
                ),
                text=suggestion.edit.text,
                offer_id=suggestion.offer.id,
            )
            for suggestion in suggestions
        ]
        log.info("next edits %s: %d", snap.uri.rsplit("/", 1)[-1], len(edits))
        return answer_json(edits)

    @server.command(ACCEPT_NEXT_EDIT_COMMAND)
    def accept_next_edit(ls: InfillServer, arguments: AcceptNextEditArguments) -> None:
        ls.next_edits.report(arguments.id, Outcome.ACCEPTED)

    @server.feature(DID_SHOW_INLINE_EDIT)
    def did_show_inline_edit(ls: InfillServer, params: Any) -> None:
        for mentioned in mentioned_ids(params):
            ls.next_edits.report(mentioned, Outcome.SHOWN)

    @server.feature(DID_REJECT)
    def did_reject_next_edit(ls: InfillServer, params: Any) -> None:
        for mentioned in mentioned_ids(params):
            ls.next_edits.report(mentioned, Outcome.REJECTED)

    @server.feature(DID_FOCUS)
    def did_focus(ls: InfillServer, params: Any) -> None:
        # Copilot's clients say which document has the focus (`{textDocument: {uri}}`, `{uri}`
        # or `{}`); the recent documents are already known from their edits and requests.
        log.debug("focus: %s", focused_uri(params))

    @server.command(ACCEPT_COMPLETION_COMMAND)
    def accept_completion(ls: InfillServer, arguments: AcceptCompletionArguments) -> None:
        ls.usage.accepted(arguments.id)

    @server.feature(DID_SHOW_COMPLETION)
    def did_show_completion(ls: InfillServer, params: Any) -> None:
        if (suggestion_id := completion_id(params)) is not None:
            ls.usage.shown(suggestion_id)

    @server.feature(DID_PARTIALLY_ACCEPT_COMPLETION)
    def did_partially_accept_completion(ls: InfillServer, params: Any) -> None:
        if (notice := partial_accept(params)) is not None:
            ls.usage.partially_accepted(notice)

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
        report["gate"] = ls.inline.gate.json()
        report["next_edits"] = ls.next_edits.offers.counts()
        report["usage"] = ls.usage.report()
        return report

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: InfillServer, params: Any) -> None:
        # Answered at once, whatever the models are doing: clients wait briefly for it and then
        # kill the server (lsp-mode 0.5 s, eglot 1.5 s). Waiting for the models to be freed
        # took 2.4 s once loaded, and longer while they loaded (the load finishes first). What
        # must outlive the process is written now; the models are freed behind the answer,
        # or the process ends first, which frees them as well. The requests under way end
        # within a token of their stopped engines, each answered with the reason.
        ls.usage.close()  # the accepted parts checked as they are, the counts written
        ls.host.begin_close()
        ls.closing = asyncio.ensure_future(ls.host.aclose())
        await ls.protocol.requests_settled(SHUTDOWN_GRACE_SECONDS)

    @server.feature(types.EXIT)
    def exit_(ls: InfillServer, params: Any) -> None:
        # pygls ends the process with sys.exit after this, and Python's exit waits for the
        # thread that frees the models: 6-15 s when `exit` follows `shutdown` at once (a load
        # finishes first). The counts are written and the engines stopped, so nothing is lost
        # by ending now: the process's end frees the models.
        ls.host.left()
        if ls.closing is not None and not ls.closing.done():
            end_process(0 if ls.protocol.shut_down else 1)

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


def offer(
    ls: InfillServer, document: TextDocument, snap: DocumentSnapshot, suggestions: Sequence[Fitted]
) -> list[str] | None:
    """The usage counts' id of each suggestion offered for `snap`; None when the document has
    changed since the snapshot (its suggestions' places could not be followed)."""
    if document.version != snap.version:
        return None
    return ls.usage.offer(
        snap.uri,
        snap.language_id,
        snap.text,
        snap.offset,
        [Offered(text=f.text, absorbed=f.replace_chars) for f in suggestions],
    )


def absorbed_end(
    cursor: types.Position, snap: DocumentSnapshot, fitted: Fitted, codec: PositionCodec
) -> types.Position:
    """Where a suggestion's range ends: past the closers after the cursor that it absorbs,
    counted in the client's units."""
    absorbed = snap.suffix[: fitted.replace_chars]
    return types.Position(
        line=cursor.line, character=cursor.character + codec.client_num_units(absorbed)
    )


def accept_command(suggestion_id: str) -> types.Command:
    """The command a client runs when the user accepts the suggestion `suggestion_id`."""
    return types.Command(
        title="Accept suggestion", command=ACCEPT_COMPLETION_COMMAND, arguments=[suggestion_id]
    )


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
