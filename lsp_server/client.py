"""A client for the real server, on pygls' `LanguageClient`: what `infill-lsp complete` and the
benchmarks share.

It starts `python -P -m lsp_server.cli serve` as a subprocess over stdio (`-P`: the current
folder is not put first on the import path, so a user's own `engine/` or `lsp_server/` cannot
shadow ours) and speaks to it as an editor does: initialize (UTF-16 positions), open documents,
ask for inline completions, read `infill/status` and `infill/stats`, shut down. Whatever the
server (or the model library) writes to stderr is drained, so that a full pipe never blocks it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp_server.host import STATUS_REQUEST
from lsp_server.json_values import plain
from lsp_server.stats import STATS_REQUEST

SERVER_MODULE = "lsp_server.cli"
#: The server, started the safe way: `python -m` alone puts the current folder first on
#: `sys.path`, where any `engine/` or `lsp_server/` folder of the user's would be imported
#: instead of ours; `-P` (Python 3.11) leaves it off.
SERVER_COMMAND = (sys.executable, "-P", "-m", SERVER_MODULE, "serve")


def items_of(result: Any) -> list[types.InlineCompletionItem]:
    """The items of an inline completion response, whichever form it took."""
    if result is None:
        return []
    if isinstance(result, types.InlineCompletionList):
        return list(result.items)
    return list(result)


def insert_text_of(item: types.InlineCompletionItem) -> str:
    text = item.insert_text
    return text if isinstance(text, str) else text.value


class InfillClient:
    """The real server as a subprocess, and the pygls client speaking to it.

    `on_log` and `on_show` receive the server's `window/logMessage` and `window/showMessage`
    texts (on the event loop).
    """

    def __init__(
        self,
        name: str,
        *,
        on_log: Callable[[str], None] | None = None,
        on_show: Callable[[str], None] | None = None,
    ) -> None:
        # pygls logs every feature it registers and every message it sends at INFO; callers
        # want the server's log only.
        logging.getLogger("pygls").setLevel(logging.WARNING)
        self.lsp = LanguageClient(name, "1")
        self._drain: asyncio.Task[None] | None = None

        @self.lsp.feature(types.WINDOW_LOG_MESSAGE)  # type: ignore[untyped-decorator]  # pygls
        def log_message(params: types.LogMessageParams) -> None:
            if on_log is not None:
                on_log(params.message)

        @self.lsp.feature(types.WINDOW_SHOW_MESSAGE)  # type: ignore[untyped-decorator]
        def show_message(params: types.ShowMessageParams) -> None:
            if on_show is not None:
                on_show(params.message)

    async def start(
        self,
        *,
        root_uri: str | None,
        options: dict[str, Any] | None = None,
        server_args: Sequence[str] = (),
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> types.InitializeResult:
        """Start the server (`serve` plus `server_args`; in `cwd` with `env`, or this process's
        own) and initialize it with the `infill` settings in `options`."""
        await self.lsp.start_io(
            *SERVER_COMMAND, *server_args, cwd=cwd, env=None if env is None else dict(env)
        )
        process = self.lsp._server  # pygls keeps the subprocess here; it exposes no accessor
        if process is not None and process.stderr is not None:
            self._drain = asyncio.create_task(_drain(process.stderr))
        result: types.InitializeResult = await self.lsp.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(
                    general=types.GeneralClientCapabilities(
                        position_encodings=[types.PositionEncodingKind.Utf16]
                    ),
                    window=types.WindowClientCapabilities(work_done_progress=False),
                ),
                process_id=None,
                root_uri=root_uri,
                initialization_options=None if options is None else {"infill": options},
            )
        )
        self.lsp.initialized(types.InitializedParams())
        return result

    @property
    def pid(self) -> int | None:
        """The server process's id (None before `start`)."""
        process = self.lsp._server
        return None if process is None else int(process.pid)

    async def stop(self) -> None:
        """Shut the server down (it may be gone already) and end the connection."""
        try:
            await asyncio.wait_for(self.lsp.shutdown_async(None), 30)
            self.lsp.exit(None)
        except Exception:  # the server may be gone already
            pass
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.lsp.stop(), 30)  # type: ignore[no-untyped-call]
        if self._drain is not None:
            self._drain.cancel()

    # --- custom requests ----------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """A custom request's result, as plain JSON."""
        return plain(await self.lsp.protocol.send_request_async(method, params))

    async def status(self) -> dict[str, Any]:
        """`infill/status`: health and model information."""
        result: dict[str, Any] = await self.request(STATUS_REQUEST, {})
        return result

    async def stats(self) -> dict[str, Any]:
        """`infill/stats`: each loaded engine's recent job figures."""
        result: dict[str, Any] = await self.request(STATS_REQUEST, {})
        return result

    def configure(self, settings: dict[str, Any]) -> None:
        """`workspace/didChangeConfiguration` with the `infill` section."""
        self.lsp.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"infill": settings})
        )

    # --- documents and inline completion ------------------------------------------------------

    def open(self, uri: str, text: str, language: str = "python") -> None:
        self.lsp.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id=language, version=1, text=text
                )
            )
        )

    def close(self, uri: str) -> None:
        self.lsp.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    def change(
        self, uri: str, version: int, changes: Sequence[types.TextDocumentContentChangeEvent]
    ) -> None:
        self.lsp.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=list(changes),
            )
        )

    def send_inline(
        self,
        uri: str,
        position: types.Position,
        *,
        invoked: bool = False,
        msg_id: str | None = None,
    ) -> concurrent.futures.Future[Any]:
        """Send `textDocument/inlineCompletion` now; the future holds the raw result."""
        trigger = (
            types.InlineCompletionTriggerKind.Invoked
            if invoked
            else types.InlineCompletionTriggerKind.Automatic
        )
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=trigger),
        )
        future: concurrent.futures.Future[Any] = self.lsp.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id
        )
        return future

    def send_completion(
        self, uri: str, position: types.Position, *, msg_id: str | None = None
    ) -> concurrent.futures.Future[Any]:
        """Send `textDocument/completion` now, as a menu asks while the user types a word;
        the future holds the raw result."""
        params = types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.CompletionContext(trigger_kind=types.CompletionTriggerKind.Invoked),
        )
        future: concurrent.futures.Future[Any] = self.lsp.protocol.send_request(
            types.TEXT_DOCUMENT_COMPLETION, params, msg_id=msg_id
        )
        return future

    async def inline(
        self, uri: str, position: types.Position, *, invoked: bool = False
    ) -> list[types.InlineCompletionItem]:
        """The items of one inline completion request."""
        return items_of(await asyncio.wrap_future(self.send_inline(uri, position, invoked=invoked)))

    def cancel(self, msg_id: str) -> None:
        """`$/cancelRequest`, as VS Code sends it when the user types on."""
        self.lsp.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))


async def _drain(stream: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stream.read(65536):
            pass
