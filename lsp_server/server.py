"""The language server: handlers are adapters over plain functions (STYLE 1).

Each handler takes what it needs out of the protocol objects, freezes a document snapshot
before its first `await`, calls into `inline`, `host` or `settings`, and wraps the answer in
lsprotocol types. Model work runs on the engine's worker thread, never in pygls's pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from lsp_server import code_actions
from lsp_server.documents import InvalidPosition, find_document, snapshot, use_lsp_lines
from lsp_server.host import ModelHost, ModelUnavailableError
from lsp_server.inline import LatestWins, TypeAheadCache, complete_latest
from lsp_server.settings import Settings, parse_settings
from lsp_server.stats import register_stats

log = logging.getLogger(__name__)

STATUS_REQUEST = "infill/status"

try:
    __version__ = version("infill-lsp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"


#: What `structure_message` returns for a request it has already answered with an error.
_ANSWERED = object()


class InfillProtocol(LanguageServerProtocol):
    """pygls's protocol, except that a request whose params do not parse still gets its one
    response (InvalidParams). pygls 2.1 only logs such a request and tells the user "Error in
    server" out of band: the client would wait for an answer forever."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as e:
            if "id" not in data or "method" not in data:
                raise  # a notification or a response: nobody waits for an answer
            cause = e.__cause__
            detail = (
                "; ".join(transform_error(cause))
                if isinstance(cause, ClassValidationError)
                else str(cause or e)
            )
            error = JsonRpcInvalidParams(f"invalid params for {data['method']}: {detail}")
            self._send_response(data["id"], error=error.to_response_error())
            return _ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is not _ANSWERED:
            super().handle_message(message)


class InfillServer(LanguageServer):
    """pygls's server with our state: settings, models, live inline requests."""

    def __init__(self, base: Settings) -> None:
        super().__init__(
            "infill-lsp",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=InfillProtocol,
        )
        self.base_settings = base  # from the command line; the client's settings go over it
        self.settings = base
        self.host = ModelHost()
        self.inline_slots = LatestWins()
        self.type_ahead = TypeAheadCache()
        self.client_log = ClientLogHandler(self)

    def show_once(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))


def request_failed(message: str) -> JsonRpcException:
    return JsonRpcException(message, code=types.LSPErrorCodes.RequestFailed)


def build_server(*, model: str | None = None, chat_model: str | None = None) -> InfillServer:
    server = InfillServer(Settings(model=model, chat_model=chat_model))

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
        # 1. Snapshot before the first await: later edits must not change this request.
        document = find_document(ls.workspace, params.text_document.uri)
        if document is None:
            raise JsonRpcInvalidParams(
                f"unknown document {params.text_document.uri}: open it first"
            )
        try:
            snap = snapshot(document, params.position)
        except InvalidPosition as e:
            raise JsonRpcInvalidParams(str(e)) from None
        invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        settings = ls.settings

        # 2. Plain functions do the work; a newer request for the document wins.
        try:
            result = await complete_latest(
                ls.inline_slots,
                ls.type_ahead,
                snap,
                settings,
                ls.host.completion,
                invoked=invoked,
            )
        except ModelUnavailableError as e:
            raise request_failed(str(e)) from None
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
            "inline %s: %s, %d item(s), prompt %d tokens, %.0f ms",
            snap.uri.rsplit("/", 1)[-1],
            result.mode,
            len(items),
            result.prompt_tokens,
            result.seconds * 1000,
        )
        return items

    @server.feature(STATUS_REQUEST)
    def status(ls: InfillServer, params: Any) -> dict[str, Any]:
        return ls.host.status()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: InfillServer, params: Any) -> None:
        ls.host.close()

    code_actions.register(server)
    register_stats(server)
    return server


async def load_models(ls: InfillServer) -> None:
    """Load the completion model in the background, with work-done progress where the client
    supports it. A failure is shown once; requests then get an error naming the cause."""
    future = ls.host.start(ls.settings)
    token: str | None = None
    window = ls.client_capabilities.window
    if window is not None and window.work_done_progress:
        token = f"infill-load-{uuid.uuid4()}"
        try:
            await ls.work_done_progress.create_async(token)
            ls.work_done_progress.begin(
                token, types.WorkDoneProgressBegin(title="infill: loading the completion model")
            )
        except Exception:  # the client refused the token: load without progress
            log.warning("work done progress refused by the client", exc_info=True)
            token = None
    try:
        await asyncio.shield(future)
        message = f"infill: {ls.host.status()['model']} ready"
    except ModelUnavailableError as e:
        message = str(e)
        log.error("%s", message)
        ls.show_once(message)
    if token is not None:
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))


class ClientLogHandler(logging.Handler):
    """Sends log records (INFO and above) to the client as `window/logMessage`.

    Records may come from any thread (the engine's worker logs too): they are handed to the
    server's event loop, which owns the connection.
    """

    _TYPES: ClassVar[dict[int, types.MessageType]] = {
        logging.ERROR: types.MessageType.Error,
        logging.WARNING: types.MessageType.Warning,
        logging.INFO: types.MessageType.Info,
    }

    def __init__(self, server: InfillServer) -> None:
        super().__init__(level=logging.INFO)
        self._server = server
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def emit(self, record: logging.LogRecord) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        kind = next((t for level, t in self._TYPES.items() if record.levelno >= level), None)
        if kind is None:
            return
        params = types.LogMessageParams(type=kind, message=self.format(record))
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._server.window_log_message, params)
