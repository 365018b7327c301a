"""The server object, its protocol and its client log handler: what every feature module is
handed, and nothing of any one feature.

`server.py` builds an `InfillServer` and registers the features on it; the feature modules
(`inline`, `action_handlers`) take an `InfillServer` and import it from here, so no module
imports the one that registers it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import sys
import uuid
from collections.abc import Generator, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar, NoReturn

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import JsonRPCNotification
from pygls.workspace import TextDocument

from engine.errors import EngineError
from engine.hub import DownloadProgress, Phase
from lsp_server.commands import fold_positional, make_converter
from lsp_server.documents import exceeds_bytes, find_document
from lsp_server.host import ModelHost, ModelUnavailableError
from lsp_server.inline.completer import InlineCompleter
from lsp_server.inline.speculator import Speculator
from lsp_server.menu.completer import MenuCompleter
from lsp_server.menu.items import MenuClient
from lsp_server.neighbors import OtherDocument
from lsp_server.next_edit.editor import NextEditor
from lsp_server.next_edit.requests import CAPABILITY, INLINE_EDIT_REQUEST
from lsp_server.settings import Settings
from lsp_server.usage_file import KeptUsage

log = logging.getLogger(__name__)

try:
    __version__ = version("infill-lsp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"


#: lsp-mode's name for itself in `clientInfo`.
LSP_MODE = "emacs"


def counts_code_points(params: types.InitializeParams) -> bool:
    """Whether the client counts columns in code points without saying so: lsp-mode 8 (Emacs's
    own columns) declares no position encodings, which would mean UTF-16, so a line with a
    character beyond the BMP (an emoji) would put every position after it off by one (its
    edits applied to the wrong text, the word before the cursor misread). Newer lsp-mode
    declares UTF-32 first, as it counts."""
    general = params.capabilities.general
    declared = general is not None and general.position_encodings is not None
    return not declared and params.client_info is not None and params.client_info.name == LSP_MODE


#: What `structure_message` returns for a request it has already answered with an error.
_ANSWERED = object()

#: The `workDoneToken` of the `workspace/executeCommand` request being handled: pygls runs
#: each message's handlers in a copy of the context this is set in (see `handle_message`).
_WORK_DONE_TOKEN: contextvars.ContextVar[types.ProgressToken | None] = contextvars.ContextVar(
    "infill_work_done_token", default=None
)


class InfillProtocol(LanguageServerProtocol):
    """pygls's protocol, with these changes to how a message is read:

    - a request whose params do not parse still gets its one response (InvalidParams).
      pygls 2.1 only logs such a request and tells the user "Error in server" out of band:
      the client would wait for an answer forever;
    - our commands' positional arguments are folded into the one object their handlers take
      (`commands.fold_positional`);
    - a command sent as a notification is run, unanswered;
    - a change to a document that is not open is dropped, not an error;
    - `shutdown` is answered at once, whatever is under way.
    """

    #: The id of the `shutdown` request, once it came.
    shutdown_id: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The ids of the client's requests not yet answered (pygls's futures hold the
        #: server's own requests to the client too, which a client may never answer).
        self._incoming: set[Any] = set()

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, Any]:
        # pygls builds the capabilities from the registered features; next edits are not an
        # LSP feature, so a client learns of them from this `experimental` entry.
        if counts_code_points(params):  # UTF-32 chosen, and said in the capabilities
            general = params.capabilities.general or types.GeneralClientCapabilities()
            general.position_encodings = [types.PositionEncodingKind.Utf32]
            params.capabilities.general = general
        result = yield from super().lsp_initialize(params)
        result.capabilities.experimental = {CAPABILITY: {"request": INLINE_EDIT_REQUEST}}
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(
        self, params: types.DidChangeTextDocumentParams
    ) -> Generator[Any, Any, Any]:
        # A change to a document that is not open (it raced its own didClose, or the client
        # never opened it) has nothing to apply to: pygls would raise KeyError and show the
        # user "Error in server". It is dropped, in one line of log.
        if find_document(self.workspace, params.text_document.uri) is None:
            log.info("a change to %s, which is not open: ignored", params.text_document.uri)
            return None
        return (yield from super().lsp_text_document__did_change(params))

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        # pygls's own step cancels the requests under way while it iterates over them, and a
        # command's request (a future whose callbacks run at once) removes itself from that
        # dict meanwhile: `shutdown` was then answered with an internal error. Here the user's
        # handler gives them a moment to end (their engines are stopped: they end within a
        # token, with an error saying why), and the rest are cancelled over a copy.
        self.shutdown_id = self.msg_id
        if (user_handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield user_handler, args, None
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != self.shutdown_id and not future.done():
                future.cancel()
        self._shutdown = True
        return None

    async def requests_settled(self, seconds: float) -> None:
        """Wait up to `seconds` for the requests under way (but `shutdown`) to end."""
        pending = [
            asyncio.wrap_future(future) if isinstance(future, concurrent.futures.Future) else future
            for msg_id, future in list(self._request_futures.items())
            if msg_id in self._incoming and msg_id != self.shutdown_id and not future.done()
        ]
        if pending:
            await asyncio.wait(pending, timeout=seconds)

    def structure_message(self, data: dict[str, Any]) -> Any:
        if "id" not in data and data.get("method") == types.WORKSPACE_EXECUTE_COMMAND:
            # Some clients run a command as a notification (they want no answer: Copilot's
            # accept command); pygls knows `workspace/executeCommand` only as a request.
            try:
                command = self._converter.structure(data.get("params"), types.ExecuteCommandParams)
            except Exception as e:
                raise JsonRpcInvalidParams(f"invalid params for a command: {e}") from None
            command.arguments = fold_positional(command.command, command.arguments)
            return JsonRPCNotification(method=data["method"], params=command, jsonrpc="2.0")
        try:
            message = super().structure_message(data)
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
        params = getattr(message, "params", None)
        if isinstance(params, types.ExecuteCommandParams):
            params.arguments = fold_positional(params.command, params.arguments)
        return message

    def _send_handler_result(self, future: Any, *, msg_id: Any) -> None:
        """A request that failed on purpose (RequestFailed, InvalidParams) is answered with its
        error and logged in one line: pygls logs each with a traceback, which for a model that
        fails is one traceback per keystroke."""
        self._incoming.discard(msg_id)
        error = None if future.cancelled() else future.exception()
        if not isinstance(error, JsonRpcException):
            super()._send_handler_result(future, msg_id=msg_id)
            return
        self._request_futures.pop(msg_id, None)
        log.info("request %s failed: %s", msg_id, error)
        self._send_response(msg_id, error=error.to_response_error())

    @property
    def shut_down(self) -> bool:
        """Whether `shutdown` was answered (the exit status of `exit` is 0 only then)."""
        return bool(self._shutdown)

    def handle_message(self, message: Any) -> None:
        if message is _ANSWERED:
            return
        method = getattr(message, "method", None)
        if self._shutdown and method not in (None, types.EXIT) and hasattr(message, "id"):
            # LSP: a request after `shutdown` is an InvalidRequest error; pygls drops it, and
            # the client would wait for its answer forever.
            error = JsonRpcInvalidRequest(f"the server is shut down: {method} is refused")
            self._send_response(message.id, error=error.to_response_error())
            return
        if method is not None and hasattr(message, "id"):
            self._incoming.add(message.id)
        params = getattr(message, "params", None)
        token = params.work_done_token if isinstance(params, types.ExecuteCommandParams) else None
        reset = _WORK_DONE_TOKEN.set(token)
        try:
            super().handle_message(message)
        finally:
            _WORK_DONE_TOKEN.reset(reset)


def end_process(status: int) -> NoReturn:
    """End the process now, with `status`, its logs and output flushed first: no interpreter
    teardown, which waits for every thread (a model load or free in progress)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


class InfillServer(LanguageServer):
    """pygls's server with our state (settings, models, live inline requests) and the few
    protocol steps every feature shares: finding a document, failing a request, progress."""

    protocol: InfillProtocol

    def __init__(self, base: Settings) -> None:
        self.converter = make_converter()
        super().__init__(
            "infill-lsp",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=InfillProtocol,
            converter_factory=lambda: self.converter,
        )
        self.base_settings = base  # from the command line; the client's settings go over it
        self.settings = base
        self.host = ModelHost()
        self.downloads = DownloadReports(self)
        self.host.on_download = self.downloads.report
        self.inline = InlineCompleter(self.host.completion, speculator=Speculator())
        self.menu = MenuCompleter(self.inline)
        #: How the client takes completion items (from `initialize`).
        self.menu_client = MenuClient()
        self.next_edits = NextEditor()
        self.usage = KeptUsage()  # counts of inline suggestions, kept on this machine
        self.large_documents: set[str] = set()  # over `max_document_bytes`, each logged once
        self.client_log = ClientLogHandler(self)
        #: The models being freed after `shutdown` (held so that the task is not collected).
        self.closing: asyncio.Future[None] | None = None

    def show_once(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def forget_document(self, uri: str) -> None:
        """Drop what we keep for a closed document: what inline completion and next edits
        hold of it, its suggestions' counts (checked as it was left), and its size note."""
        self.inline.forget(uri)
        self.menu.forget(uri)
        self.next_edits.forget(uri)
        self.usage.forget(uri)
        self.large_documents.discard(uri)

    def other_documents(self, uri: str) -> dict[str, OtherDocument]:
        """The open documents but `uri`, as they are now (their texts shared, not copied);
        those over `maxDocumentBytes` left out, as they get no completions either."""
        limit = self.settings.max_document_bytes
        return {
            document.uri: OtherDocument(
                uri=document.uri, version=document.version, text=document.source
            )
            for document in list(self.workspace.text_documents.values())
            if document.uri != uri and not exceeds_bytes(document.source, limit)
        }

    def workspace_roots(self) -> list[str]:
        """The workspace folders' URIs (the root first): what document paths are relative to."""
        roots = [self.workspace.root_uri] if self.workspace.root_uri else []
        roots += [folder.uri for folder in self.workspace.folders.values()]
        return list(dict.fromkeys(roots))

    def open_document(self, uri: str) -> TextDocument:
        """The open document for `uri`; InvalidParams (naming the uri) if it is not open."""
        document = find_document(self.workspace, uri)
        if document is None:
            raise JsonRpcInvalidParams(f"unknown document {uri}: open it first")
        return document

    async def begin_progress(
        self, name: str, title: str, *, cancellable: bool = False, client_token: bool = False
    ) -> types.ProgressToken | None:
        """Begin a work-done progress and return its token; None where the client shows no
        progress or refuses the token (the work then goes on without one). With
        `client_token`, the `workDoneToken` the client sent with the request is used where it
        sent one (LSP: client-initiated progress); only without it does the server create one."""
        given = _WORK_DONE_TOKEN.get() if client_token else None
        if given is not None:
            token: types.ProgressToken = given
        elif not get_capability(self.client_capabilities, "window.work_done_progress", False):
            return None
        else:
            token = f"infill-{name}-{uuid.uuid4()}"
            try:
                await self.work_done_progress.create_async(token)
            except Exception:  # the client refused the token
                log.warning("the client refused a progress token", exc_info=True)
                return None
        self.work_done_progress.begin(
            token, types.WorkDoneProgressBegin(title=title, cancellable=cancellable or None)
        )
        return token

    def end_progress(self, token: types.ProgressToken, message: str) -> None:
        self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
        self.work_done_progress.tokens.pop(token, None)  # pygls keeps them otherwise


class DownloadReports:
    """Each hub model's download (engine/hub.py) as a work-done progress of its own in the
    editor: begun at its first report, a report at each percent with the bytes so far, ended
    with "downloaded" or the error. Reports are shown in order, one task showing them (a
    progress begins with a request to the client, which the reports after it wait for)."""

    def __init__(self, server: InfillServer) -> None:
        self._server = server
        self._queue: asyncio.Queue[DownloadProgress] | None = None
        self._task: asyncio.Task[None] | None = None
        self._tokens: dict[str, types.ProgressToken | None] = {}

    def report(self, progress: DownloadProgress) -> None:
        """Show `progress` (call on the event loop)."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._show_all(self._queue))
        self._queue.put_nowait(progress)

    async def _show_all(self, queue: asyncio.Queue[DownloadProgress]) -> None:
        while True:
            progress = await queue.get()
            try:
                await self._show(progress)
            except Exception:  # a client that went away: the download goes on regardless
                log.warning("cannot show the download's progress", exc_info=True)

    async def _show(self, progress: DownloadProgress) -> None:
        ls = self._server
        ended = progress.phase in (Phase.DONE, Phase.FAILED)
        if progress.model not in self._tokens:
            if ended:
                return
            title = f"infill: downloading {progress.model}"
            self._tokens[progress.model] = await ls.begin_progress("download", title)
        token = self._tokens[progress.model]
        if ended:
            del self._tokens[progress.model]
            if token is not None:
                ls.end_progress(token, progress.words())
        elif token is not None:
            ls.work_done_progress.report(
                token,
                types.WorkDoneProgressReport(message=progress.words(), percentage=progress.percent),
            )


def request_failed(message: str) -> JsonRpcException:
    """The error of a request that was understood but could not be done (no model)."""
    return JsonRpcException(message, code=types.LSPErrorCodes.RequestFailed)


@contextlib.contextmanager
def engine_failures() -> Iterator[None]:
    """Answer the request with RequestFailed naming the cause when the model is unavailable
    or the engine fails (a prompt too long, the model being reloaded, the backend raising),
    instead of an internal error with a traceback."""
    try:
        yield
    except (EngineError, ModelUnavailableError) as e:
        raise request_failed(str(e)) from None


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

    def __init__(self, server: LanguageServer) -> None:
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
