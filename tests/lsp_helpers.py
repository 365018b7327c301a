"""Speaking to the real server as an editor does: a pytest-lsp client over stdio, documents,
positions in the negotiated encoding, and an independent model of LSP document edits."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.workspace.position_codec import PositionCodec
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp_server.client import SERVER_COMMAND as CLIENT_SERVER_COMMAND
from lsp_server.json_values import plain

SERVER_COMMAND = list(CLIENT_SERVER_COMMAND)
#: The checkout under test: `-P` leaves the current folder off the server's import path, so
#: without this the server would import whichever copy of the packages is installed.
REPO = Path(__file__).resolve().parents[1]
INLINE = types.TEXT_DOCUMENT_INLINE_COMPLETION
STATUS = "infill/status"
STATS = "infill/stats"

#: Where LSP ends a line (and nowhere else: not at U+2028, U+0085, form feeds ...).
LINE_BREAK = re.compile(r"\r\n|\r|\n")

T = TypeVar("T")
Handler = TypeVar("Handler", bound=Callable[..., object])

_PAST_LINE = re.compile(r"past the end of line (\d+) \((\d+) units\)")
_PAST_DOCUMENT = re.compile(r"past the end of the document \((\d+) lines\)")


#: SmolLM2 writes a good hundred tokens about this: a cancel or a reload finds
#: it still writing.
MERGE = (
    "def merge_sorted(left, right):\n"
    "    result = []\n"
    "    i = j = 0\n"
    "    while i < len(left) and j < len(right):\n"
    "        if left[i] <= right[j]:\n"
    "            result.append(left[i])\n"
    "            i += 1\n"
    "        else:\n"
    "            result.append(right[j])\n"
    "            j += 1\n"
    "    result.extend(left[i:])\n"
    "    result.extend(right[j:])\n"
    "    return result\n"
)
MERGE_RANGE = {"start": {"line": 0, "character": 0}, "end": {"line": 12, "character": 17}}


def server_env() -> dict[str, str]:
    """This environment, without the variables that would pick another model than the
    default one, and with this checkout first on the import path (whatever the folder the
    server starts in)."""
    env = {k: v for k, v in os.environ.items() if k not in ("INFILL_MODEL", "INFILL_CHAT_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def client_feature(client: LanguageClient, method: str) -> Callable[[Handler], Handler]:
    """`client.feature(method)`: the decorator that makes a function the client's answer to
    the server's `method`, with its type (pygls leaves the decorator unannotated)."""
    register: Callable[[Handler], Handler] = client.feature(method)
    return register


def plain_text(item: types.InlineCompletionItem) -> str:
    """An inline item's text: this server sends plain text, never a snippet (StringValue)."""
    assert isinstance(item.insert_text, str), item.insert_text
    return item.insert_text


def lsp_lines(text: str) -> list[str]:
    """The document's lines without their endings, as LSP counts them (the empty line after a
    final line break included)."""
    return LINE_BREAK.split(text)


def client_units(text: str, encoding: str) -> int:
    """The length of `text` in the encoding's code units, by Python's own codecs (a check of
    the server's conversion that does not share its code)."""
    if encoding == types.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8"))
    if encoding == types.PositionEncodingKind.Utf16:
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def _offset(text: str, position: Mapping[str, int], encoding: str) -> int:
    starts = [0, *(m.end() for m in LINE_BREAK.finditer(text))]
    line = lsp_lines(text)[position["line"]]
    character = position["character"]
    if encoding == types.PositionEncodingKind.Utf8:
        code_points = len(line.encode("utf-8")[:character].decode("utf-8"))
    elif encoding == types.PositionEncodingKind.Utf16:
        code_points = len(line.encode("utf-16-le")[: 2 * character].decode("utf-16-le"))
    else:
        code_points = character
    return starts[position["line"]] + code_points


def apply_changes(text: str, changes: Sequence[Mapping[str, Any]], encoding: str) -> str:
    """`didChange` content changes (JSON), applied in order, each to the result of the one
    before: the editor's own view of the document."""
    for change in changes:
        if "range" not in change:
            text = change["text"]
            continue
        start = _offset(text, change["range"]["start"], encoding)
        end = _offset(text, change["range"]["end"], encoding)
        text = text[:start] + change["text"] + text[end:]
    return text


async def wait_until(
    predicate: Callable[[], T | Literal[False] | None], what: str, give_up_after: float = 120
) -> T:
    """Poll `predicate` until it is truthy, and give that value. Giving up only keeps a broken
    server from hanging the suite; nothing is asserted about how long it took."""
    deadline = time.monotonic() + give_up_after
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)
    return value


async def poll_until(
    fetch: Callable[[], Awaitable[T]],
    until: Callable[[T], object],
    what: str,
    give_up_after: float = 120,
) -> T:
    """Ask the server (`fetch`, an `infill/status` or `infill/stats` request, say) until its
    answer satisfies `until`, and return that answer. The state a test waits for is the
    server's own report of it, never a guess at how long it takes."""
    deadline = time.monotonic() + give_up_after
    while not until(value := await fetch()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)
    return value


async def answer(awaitable: Awaitable[T], give_up_after: float = 120) -> T:
    """The response to a request. Giving up (a lost response, a hung server) fails the test
    instead of hanging the suite; nothing is asserted about how long the answer took."""
    try:
        return await asyncio.wait_for(awaitable, give_up_after)
    except TimeoutError:
        raise AssertionError("no response: it was lost, or the server hangs") from None


@dataclass
class Session:
    """One server process and the client speaking to it."""

    client: LanguageClient
    initialize_result: types.InitializeResult
    _names: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def encoding(self) -> str:
        encoding = self.initialize_result.capabilities.position_encoding
        return types.PositionEncodingKind.Utf16 if encoding is None else encoding

    @property
    def codec(self) -> PositionCodec:
        return PositionCodec(self.encoding)

    def open(
        self,
        text: str,
        *,
        name: str | None = None,
        language_id: str = "python",
        uri: str | None = None,
    ) -> str:
        """Open a new document (a fresh URI, so that no earlier request's state applies), or
        the document at `uri` exactly as an editor would send it."""
        uri = uri or f"file:///e2e/{name or 'doc'}-{next(self._names)}.py"
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id=language_id, version=1, text=text
                )
            )
        )
        return uri

    def change(self, uri: str, version: int, changes: Sequence[Mapping[str, Any]]) -> None:
        """Send one `didChange` notification holding `changes` (JSON content changes)."""
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    get_converter().structure(dict(c), types.TextDocumentContentChangePartial)
                    for c in changes
                ],
            )
        )

    def position(self, text: str, line: int, code_points: int) -> types.Position:
        """The position in the negotiated encoding of the cursor `code_points` characters into
        `line` of `text` (through pygls's codec, as an editor's own LSP client converts)."""
        content = lsp_lines(text)[line]
        return types.Position(
            line=line, character=self.codec.client_num_units(content[:code_points])
        )

    def inline_params(
        self, uri: str, position: types.Position, *, invoked: bool = False
    ) -> types.InlineCompletionParams:
        kind = (
            types.InlineCompletionTriggerKind.Invoked
            if invoked
            else types.InlineCompletionTriggerKind.Automatic
        )
        return types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=kind),
        )

    def send(self, method: str, params: Any) -> tuple[str, asyncio.Future[Any]]:
        """Send a request now (not when awaited), for tests where message order matters."""
        msg_id = str(uuid.uuid4())
        future = self.client.protocol.send_request(method, params, msg_id=msg_id)
        return msg_id, asyncio.wrap_future(future)

    def send_raw(self, method: str, params: Any) -> asyncio.Future[Any]:
        """Send a request with params exactly as given (JSON), whatever their shape: the typed
        client would refuse to send malformed ones."""
        msg_id = str(uuid.uuid4())
        future: Future[Any] = Future()
        protocol = self.client.protocol
        protocol._request_futures[msg_id] = future
        protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return asyncio.wrap_future(future)

    def cancel(self, msg_id: str) -> None:
        self.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))

    async def inline(
        self, uri: str, position: types.Position, *, invoked: bool = False
    ) -> list[types.InlineCompletionItem]:
        result = await self.client.text_document_inline_completion_async(
            self.inline_params(uri, position, invoked=invoked)
        )
        if result is None:
            return []
        if isinstance(result, types.InlineCompletionList):
            return list(result.items)
        return list(result)

    async def status(self) -> dict[str, Any]:
        # pygls leaves send_request_async unannotated.
        pending = self.client.protocol.send_request_async(STATUS, {})  # type: ignore[no-untyped-call]
        result = await answer(pending)
        return dict(result._asdict())

    async def until_loaded(self) -> dict[str, Any]:
        """The status once the model has loaded (or failed to)."""
        return await poll_until(
            self.status, lambda status: status["status"] != "loading", "the model to load"
        )

    async def line_widths(self, uri: str) -> list[int]:
        """The server's own view of the document: the width of each line in client units, as
        it reports them when it refuses a position past the end of a line."""
        widths: list[int] = []
        for line in itertools.count():
            position = types.Position(line=line, character=1_000_000)
            try:
                await self.inline(uri, position)
            except Exception as e:  # JsonRpcInvalidParams, checked by the patterns below
                message = str(e)
            else:
                raise AssertionError(f"{position} was accepted")
            if match := _PAST_DOCUMENT.search(message):
                assert int(match.group(1)) == len(widths), message
                return widths
            match = _PAST_LINE.search(message)
            assert match is not None, message
            assert int(match.group(1)) == line, message
            widths.append(int(match.group(2)))
        raise AssertionError("unreachable")

    async def wait_for_messages(self) -> None:
        """Return once the server has handled everything sent so far: requests and
        notifications are handled in order, and a status request is answered at once."""
        await self.status()


def without_work_ahead(options: Any) -> Any:
    """`options` with `speculativeSuggestions` 0 unless they set it: these tests count the
    engine's jobs and read its KV cache's figures, which the work the server does ahead after
    each answer would change (test_ahead_e2e.py tests that work; the editor tests run
    with the default)."""
    if options is None:
        return {"speculativeSuggestions": 0}
    if not isinstance(options, dict):
        return options  # a malformed value, sent as it is on purpose
    if isinstance(options.get("infill"), dict):
        return {**options, "infill": without_work_ahead(options["infill"])}
    return {"speculativeSuggestions": 0, **options}


def ungated(options: Any) -> Any:
    """`options` with `minConfidence` 0 unless they set it: these tests check what the server
    makes of the model's suggestions (post-processing, stops, caches), which the confidence
    gate would hide where the small model is unsure (test_confidence.py tests the gate; the
    editor tests run with the default)."""
    if not isinstance(options, dict):
        return options  # a malformed value, sent as it is on purpose
    if isinstance(options.get("infill"), dict):
        return {**options, "infill": ungated(options["infill"])}
    return {"minConfidence": 0, **options}


@contextlib.asynccontextmanager
async def lsp_session(
    capabilities: types.ClientCapabilities,
    initialization_options: Any = None,
    server_command: Sequence[str] = SERVER_COMMAND,
    env: Mapping[str, str] | None = None,
    client_name: str = "infill-lsp tests",
) -> AsyncIterator[Session]:
    """Start the real server (`infill-lsp serve`, stdio; or `server_command`; `env` added to
    its environment), initialize it as the client with `capabilities` (and `clientInfo.name`
    `client_name`) would, and shut it down cleanly afterwards (unless the test did)."""
    initialization_options = ungated(without_work_ahead(initialization_options))
    config = ClientServerConfig(
        server_command=list(server_command), server_env={**server_env(), **(env or {})}
    )
    client = await config.start()
    # ClientServerConfig.start is annotated with pygls's base class; its default factory makes
    # pytest-lsp's LanguageClient, whose session methods are used here.
    assert isinstance(client, LanguageClient)
    try:
        result = await client.initialize_session(
            types.InitializeParams(
                capabilities=capabilities,
                initialization_options=initialization_options,
                client_info=types.ClientInfo(name=client_name),
            )
        )
        yield Session(client=client, initialize_result=result)
    finally:
        # Also after a failed test: a server that was never told to exit keeps the client's
        # stop() waiting forever. (pygls leaves stop() unannotated.)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 30)
        await asyncio.wait_for(client.stop(), 30)  # type: ignore[no-untyped-call]


def load_recording(path: os.PathLike[str]) -> list[dict[str, Any]]:
    """An lsp-devtools recording: one JSON-RPC message per line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plain_json(value: Any) -> Any:
    """A message's value as the JSON the server wrote. pygls's client turns the objects of
    untyped messages (custom notifications, `send_raw` results) into namedtuples, and types
    some results wrongly (a `list[Command | CodeAction]` comes back as Commands): this reads
    back what was on the wire."""
    return plain(value)


async def request_json(session: Session, method: str, params: Any) -> Any:
    """Send a request with JSON params and return its result as plain JSON (an error response
    raises JsonRpcException)."""
    return plain_json(await answer(session.send_raw(method, params)))


@contextlib.asynccontextmanager
async def ready_session(
    capabilities: types.ClientCapabilities, initialization_options: Any = None
) -> AsyncIterator[Session]:
    """`lsp_session`, once its completion model has loaded."""
    async with lsp_session(capabilities, initialization_options) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        yield session


async def completion_engine(session: Session) -> dict[str, Any]:
    """The completion model's engine in `infill/stats`."""
    report = await request_json(session, STATS, None)
    (engine,) = [e for e in report["engines"] if "completion" in e["roles"]]
    return dict(engine)


async def document_jobs(
    session: Session,
    document: str,
    until: Callable[[list[dict[str, Any]], list[dict[str, Any]]], object],
    what: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The completion engine's jobs for `document` (its URI) from `infill/stats`: those under
    way and those finished (oldest first), once `until(running, finished)` is true. A test reads
    only its own document's jobs, whatever ran before it."""

    async def jobs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        engine = await completion_engine(session)
        running = [job for job in engine.get("running", []) if job["document"] == document]
        finished = [job for job in engine["jobs"] if job["document"] == document]
        return running, finished

    return await poll_until(jobs, lambda found: until(*found), what)


async def settled_jobs(session: Session, document: str, more_than: int) -> list[dict[str, Any]]:
    """The document's finished engine jobs once there are more than `more_than` of them and
    none is under way (the worker records a job when it ends, which may be just after the
    response went out). Only the document's own jobs count, whatever else the server ran."""
    _, finished = await document_jobs(
        session,
        document,
        lambda running, finished: not running and len(finished) > more_than,
        f"more than {more_than} finished job(s) for {document}",
    )
    return finished


async def generating(session: Session, document: str) -> dict[str, Any]:
    """The document's engine job once the model is generating its tokens."""
    running, _ = await document_jobs(
        session,
        document,
        lambda running, _: any(job["phase"] == "generating" for job in running),
        f"a job generating for {document}",
    )
    return next(job for job in running if job["phase"] == "generating")
