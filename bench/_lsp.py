"""A pygls client for the benchmarks: the real server (`python -m lsp_server.cli serve`) over
stdio, driven the way an editor drives it (the pattern of `lsp_server/complete.py`).

The client keeps its own copy of every open document so that it can turn code-point offsets
into LSP positions (UTF-16, the default encoding, which it negotiates), send incremental
`didChange` insertions and apply returned items. It records every `window/logMessage` with its
arrival time: the server's engine logs one line per generation job, which is how the
benchmarks learn how many tokens the engine really generated for a request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.workspace.position_codec import PositionCodec

ROOT = Path(__file__).resolve().parents[1]

#: `engine/worker.py` logs this after every job (the client sees "<logger>: <message>").
WORKER_LINE = re.compile(
    r"^engine\.worker: (?P<worker>\S+) (?P<request>\S+): prompt (?P<prompt>\d+) tokens, "
    r"generated (?P<generated>\d+), first token (?:(?P<first>\d+) ms|-), "
    r"total (?P<total>\d+) ms, finish (?P<finish>\S+)$"
)
#: `lsp_server/server.py` logs this for every answered (not superseded) inline request.
INLINE_LINE = re.compile(
    r"^lsp_server\.server: inline (?P<file>\S+): (?P<mode>\S+), (?P<items>\d+) item\(s\), "
    r"prompt (?P<prompt>\d+) tokens, (?P<ms>\d+) ms$"
)

#: `lsp_server/host.py` logs this once the completion model is loaded.
LOADED = "lsp_server.host: completion model"

_UTF16 = PositionCodec(encoding=types.PositionEncodingKind.Utf16)


@dataclass(frozen=True, slots=True)
class LogLine:
    at: float  # perf_counter() when the client received it
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLine:
    """One engine job as the server's worker logged it."""

    at: float
    request_id: str
    prompt_tokens: int
    generated: int
    first_token_ms: int | None
    total_ms: int
    finish: str  # "stop", "length", "cancelled", ... (comma-separated when n > 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class InlineLine:
    """One answered inline request as the server logged it."""

    at: float
    file: str
    mode: str  # "single_line", "multi_line" or "None" (nothing to suggest)
    items: int
    prompt_tokens: int
    ms: int


@dataclass(slots=True)
class Pending:
    """An inline request in flight; `done_at` is set the moment its response arrives."""

    msg_id: str
    uri: str
    offset: int
    sent_at: float
    future: concurrent.futures.Future[Any]
    done_at: float | None = None

    @property
    def seconds(self) -> float:
        assert self.done_at is not None, "no response yet"
        return self.done_at - self.sent_at

    async def wait(self) -> list[types.InlineCompletionItem]:
        return items_of(await asyncio.wrap_future(self.future))

    def outcome(self) -> str:
        """ "items", "empty" or the error, once done."""
        if not self.future.done():
            return "pending"
        error = self.future.exception()
        if error is not None:
            code = getattr(error, "code", None)
            return f"error {code}" if code is not None else f"error {error}"
        return "items" if items_of(self.future.result()) else "empty"


@dataclass(slots=True)
class _Doc:
    uri: str
    text: str
    version: int = 1
    language: str = "python"


def items_of(result: Any) -> list[types.InlineCompletionItem]:
    if result is None:
        return []
    if isinstance(result, types.InlineCompletionList):
        return list(result.items)
    return list(result)


def insert_text_of(item: types.InlineCompletionItem) -> str:
    text = item.insert_text
    return text if isinstance(text, str) else text.value


def line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def position_of(text: str, offset: int) -> types.Position:
    """The UTF-16 position of a code-point offset (documents here use "\\n" line ends)."""
    start = line_start(text, offset)
    return types.Position(
        line=text.count("\n", 0, start), character=_UTF16.client_num_units(text[start:offset])
    )


def offset_of(text: str, position: types.Position) -> int:
    """The code-point offset of a UTF-16 position."""
    start = 0
    for _ in range(position.line):
        start = text.index("\n", start) + 1
    end = text.find("\n", start)
    line = text[start : len(text) if end < 0 else end]
    units = 0
    for index, char in enumerate(line):
        if units >= position.character:
            return start + index
        units += _UTF16.client_num_units(char)
    return start + len(line)


def apply_item(text: str, item: types.InlineCompletionItem, cursor: int) -> tuple[str, int, int]:
    """The document after accepting `item`, and where the inserted text starts and ends in it.
    An item without a range inserts at the cursor."""
    if item.range is None:
        start = end = cursor
    else:
        start, end = offset_of(text, item.range.start), offset_of(text, item.range.end)
    inserted = insert_text_of(item)
    return text[:start] + inserted + text[end:], start, start + len(inserted)


class ServerClient:
    """The real server as a subprocess, spoken to over stdio."""

    def __init__(self, settings: dict[str, Any] | None = None, *, model: str | None = None) -> None:
        self.settings = dict(settings or {})
        self.model = model
        self.logs: list[LogLine] = []
        self.shown: list[str] = []  # window/showMessage texts
        self.client = LanguageClient("infill-lsp-bench", "1")
        self._docs: dict[str, _Doc] = {}
        self._ids = itertools.count(1)
        self._tmp = tempfile.TemporaryDirectory(prefix="infill-bench-")
        self._drain: asyncio.Task[None] | None = None

        @self.client.feature(types.WINDOW_LOG_MESSAGE)  # type: ignore[untyped-decorator]
        def log_message(params: types.LogMessageParams) -> None:
            self.logs.append(LogLine(time.perf_counter(), params.message))

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)  # type: ignore[untyped-decorator]
        def show_message(params: types.ShowMessageParams) -> None:
            self.shown.append(params.message)
            print(f"server: {params.message}", file=sys.stderr)

    @property
    def log_file(self) -> Path:
        return Path(self._tmp.name) / "server.log"

    async def start(self, wait_s: float = 300.0) -> dict[str, Any]:
        """Start the server, initialize, and wait until the completion model is loaded."""
        logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message at INFO
        command = [
            sys.executable,
            "-m",
            "lsp_server.cli",
            "serve",
            "--log-file",
            str(self.log_file),
        ]
        if self.model:
            command += ["--model", self.model]
        await self.client.start_io(*command, cwd=str(ROOT))
        # Whatever the model library prints to stderr must not fill the pipe and block it.
        server = self.client._server
        if server is not None and server.stderr is not None:
            self._drain = asyncio.create_task(_drain(server.stderr))
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(
                    general=types.GeneralClientCapabilities(
                        position_encodings=[types.PositionEncodingKind.Utf16]
                    ),
                    window=types.WindowClientCapabilities(work_done_progress=False),
                ),
                process_id=None,
                root_uri=ROOT.as_uri(),
                initialization_options={"infill": self.settings},
            )
        )
        self.client.initialized(types.InitializedParams())
        # Nothing is sent until the model has loaded: llama-cpp-python (verbose=False) points
        # the process's stdout at /dev/null while it loads a model, so a response the server
        # writes meanwhile is lost (see the benchmark report). The server logs the load.
        deadline = time.monotonic() + wait_s
        while not any(LOADED in line.message for line in self.logs) and not self.shown:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not load its model in {wait_s:.0f} s")
            await asyncio.sleep(0.05)
        while True:
            status = await asyncio.wait_for(self.status(), 30)
            if status.get("status") == "ready":
                return status
            if status.get("status") == "error":
                raise RuntimeError(f"the server could not load its model: {status}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server was not ready after {wait_s:.0f} s")
            await asyncio.sleep(0.05)

    async def status(self) -> dict[str, Any]:
        result = await self.client.protocol.send_request_async("infill/status", {})
        if isinstance(result, dict):
            return result
        # pygls hands back a named tuple (`pygls.protocol.Object`) for custom requests.
        return dict(result._asdict())

    def configure(self, settings: dict[str, Any]) -> None:
        """`workspace/didChangeConfiguration` with the `infill` section (merged by the server
        over its current settings)."""
        self.settings.update(settings)
        self.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"infill": settings})
        )

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 30)
            self.client.exit(None)
        except Exception:  # the server may be gone already
            pass
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.stop(), 30)  # type: ignore[no-untyped-call]
        if self._drain is not None:
            self._drain.cancel()
        self._tmp.cleanup()

    # --- documents ----------------------------------------------------------------------------

    def open(self, uri: str, text: str, language: str = "python") -> None:
        self._docs[uri] = _Doc(uri=uri, text=text, language=language)
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id=language, version=1, text=text
                )
            )
        )

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    def text(self, uri: str) -> str:
        return self._docs[uri].text

    def edit(self, uri: str, start: int, end: int, new_text: str) -> None:
        """Replace code points [start, end) of the document: one incremental change."""
        self.edit_many(uri, [(start, end, new_text)])

    def edit_many(self, uri: str, edits: Sequence[tuple[int, int, str]]) -> None:
        """Several incremental changes in one `didChange`, each on the text the one before it
        left (LSP's rule)."""
        doc = self._docs[uri]
        changes: list[types.TextDocumentContentChangeEvent] = []
        for start, end, new_text in edits:
            changes.append(
                types.TextDocumentContentChangePartial(
                    range=types.Range(
                        start=position_of(doc.text, start), end=position_of(doc.text, end)
                    ),
                    text=new_text,
                )
            )
            doc.text = doc.text[:start] + new_text + doc.text[end:]
        doc.version += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=doc.version),
                content_changes=changes,
            )
        )

    def toggle_tail_edit(self, uri: str) -> tuple[int, int, str]:
        """An edit that adds or removes one blank line at the very end of the document.

        It changes the text after the cursor but not the prompt (a prefix-only prompt, or a
        suffix window that ends before the file does) nor the fit (blank lines are skipped):
        what it does change is the server's type-ahead cache key (the suffix), so the next
        request runs the model instead of reusing the previous answer.
        """
        text = self._docs[uri].text
        if text.endswith("\n\n"):
            return (len(text) - 1, len(text), "")
        return (len(text), len(text), "\n")

    # --- inline completion --------------------------------------------------------------------

    def request_inline(self, uri: str, offset: int, *, invoked: bool = False) -> Pending:
        """Send `textDocument/inlineCompletion` for the cursor at `offset`; do not wait."""
        doc = self._docs[uri]
        msg_id = f"bench-{next(self._ids)}"
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position_of(doc.text, offset),
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Invoked
                if invoked
                else types.InlineCompletionTriggerKind.Automatic
            ),
        )
        sent = time.perf_counter()
        future = self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id
        )
        pending = Pending(msg_id=msg_id, uri=uri, offset=offset, sent_at=sent, future=future)

        def done(_: concurrent.futures.Future[Any]) -> None:
            pending.done_at = time.perf_counter()

        future.add_done_callback(done)
        return pending

    def cancel(self, pending: Pending) -> None:
        """`$/cancelRequest` for a request, as VS Code sends it when the user types on."""
        self.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=pending.msg_id))

    async def inline(
        self, uri: str, offset: int, *, invoked: bool = False
    ) -> tuple[list[types.InlineCompletionItem], Pending]:
        pending = self.request_inline(uri, offset, invoked=invoked)
        items = await pending.wait()
        return items, pending

    # --- the server's log ---------------------------------------------------------------------

    def mark(self) -> int:
        return len(self.logs)

    def jobs(self, since: int = 0) -> list[JobLine]:
        found = []
        for line in self.logs[since:]:
            m = WORKER_LINE.match(line.message)
            if m is not None:
                found.append(
                    JobLine(
                        at=line.at,
                        request_id=m["request"],
                        prompt_tokens=int(m["prompt"]),
                        generated=int(m["generated"]),
                        first_token_ms=None if m["first"] is None else int(m["first"]),
                        total_ms=int(m["total"]),
                        finish=m["finish"],
                    )
                )
        return found

    def inlines(self, since: int = 0) -> list[InlineLine]:
        found = []
        for line in self.logs[since:]:
            m = INLINE_LINE.match(line.message)
            if m is not None:
                found.append(
                    InlineLine(
                        at=line.at,
                        file=m["file"],
                        mode=m["mode"],
                        items=int(m["items"]),
                        prompt_tokens=int(m["prompt"]),
                        ms=int(m["ms"]),
                    )
                )
        return found

    async def settle(
        self, since: int, *, jobs: int = 0, inlines: int = 0, wait_s: float = 5.0
    ) -> None:
        """Wait until at least `jobs` worker lines and `inlines` inline lines arrived since
        `since` (log messages travel separately from responses), then a little longer."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if len(self.jobs(since)) >= jobs and len(self.inlines(since)) >= inlines:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)


async def _drain(stream: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stream.read(65536):
            pass


@dataclass(slots=True)
class Timer:
    """Wall-clock pacing from a fixed start, so a late step does not delay the rest."""

    start: float = field(default_factory=time.perf_counter)

    async def until(self, seconds: float) -> None:
        delay = self.start + seconds - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
