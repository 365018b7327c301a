"""The real server for the benchmarks: `python -P -m lsp_server.cli serve` over stdio, through the
shared client (`lsp_server/client.py`), driven the way an editor drives it.

`ServerClient` keeps its own copy of every open document so that it can turn code-point
offsets into LSP positions (UTF-16, the default encoding, which it negotiates), send
incremental `didChange` insertions and apply returned items. What the engine really did for a
request (prompt tokens, tokens generated, times, finish) comes from `infill/stats`, which
reports the completion engine's recent jobs and how many it has finished in all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from bench._common import ROOT
from engine.models import resolve_model_path
from engine.types import Role
from lsp_server.client import InfillClient, insert_text_of, items_of
from lsp_server.next_edit.requests import INLINE_EDIT_REQUEST
from lsp_server.postprocess import CursorContext, decide_mode

#: A typist's pace in the typing benchmarks: one character every 60 ms.
KEYSTROKE_S = 0.060

_UTF16 = PositionCodec(encoding=types.PositionEncodingKind.Utf16)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLine:
    """One completion engine job, as `infill/stats` reports it."""

    request_id: str
    prompt_tokens: int
    prompt_evaluated: int | None
    generated: int
    first_token_ms: float | None
    total_ms: float
    finish: str  # "stop", "length", "cancelled", ... (comma-separated when n > 1)

    @classmethod
    def from_stats(cls, job: dict[str, Any]) -> JobLine:
        return cls(
            request_id=job["request_id"],
            prompt_tokens=job["prompt_tokens"],
            prompt_evaluated=job.get("prompt_evaluated"),
            generated=job["generated_tokens"],
            first_token_ms=job["first_token_ms"],
            total_ms=job["total_ms"],
            finish=",".join(str(r) for r in job["finish_reasons"]),
        )


def mode_at(text: str, offset: int) -> str:
    """The server's mode decision for a cursor: "single_line", "multi_line" or "None" (nothing
    to suggest, no engine job). The same public function the server calls, on the same text."""
    return str(decide_mode(CursorContext(prefix=text[:offset], suffix=text[offset:])))


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


def _position_json(position: types.Position) -> dict[str, int]:
    return {"line": position.line, "character": position.character}


def _position(value: dict[str, Any]) -> types.Position:
    return types.Position(line=int(value["line"]), character=int(value["character"]))


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
    """The real server as a subprocess, with a copy of every document the benchmark opened."""

    def __init__(
        self,
        settings: dict[str, Any] | None = None,
        *,
        model: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        # The benchmarks count the engine's jobs per request: no work ahead after each answer
        # unless a benchmark measures it. The models run where a user's do (the shared engine,
        # `engine` `auto`; the `shared` suite compares it with `here`), and an engine left idle
        # exits within seconds rather than holding its memory through the next part.
        self.settings = {"speculativeSuggestions": 0, "engineIdleExit": 5, **(settings or {})}
        self.model = model
        self.env = env  # added to the server's environment (after its own runtime folder)
        self.shown: list[str] = []  # window/showMessage texts
        self.client = InfillClient("infill-lsp-bench", on_show=self._show)
        self._docs: dict[str, _Doc] = {}
        self._ids = itertools.count(1)
        self._tmp = tempfile.TemporaryDirectory(prefix="infill-bench-")
        self._stopped = False

    def _show(self, message: str) -> None:
        self.shown.append(message)
        print(f"server: {message}", file=sys.stderr)

    @property
    def log_file(self) -> Path:
        return Path(self._tmp.name) / "server.log"

    async def start(self, wait_s: float = 300.0, *, root: Path = ROOT) -> dict[str, Any]:
        """Start the server, initialize (with `root` as the workspace folder), and wait until
        the completion model is loaded; a server that never gets there is stopped."""
        args = ["--log-file", str(self.log_file)]
        if self.model:
            args += ["--model", self.model]
        try:
            # A shared engine of its own, started from this tree: one another checkout or an
            # earlier run left would answer with other code, and compute beside the raw side.
            env = {**os.environ, "XDG_RUNTIME_DIR": self._tmp.name, **(self.env or {})}
            await self.client.start(
                root_uri=root.as_uri(),
                options=self.settings,
                server_args=args,
                cwd=str(ROOT),
                env=env,
            )
            deadline = time.monotonic() + wait_s
            while True:
                status = await asyncio.wait_for(self.status(), 30)
                if status.get("status") == "ready":
                    return self._with_model_file(status)
                if status.get("status") == "error" or self.shown:
                    raise RuntimeError(f"the server could not load its model: {status}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the server was not ready after {wait_s:.0f} s")
                await asyncio.sleep(0.05)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()
            raise

    async def status(self) -> dict[str, Any]:
        return await self.client.status()

    def _with_model_file(self, status: dict[str, Any]) -> dict[str, Any]:
        """`status`, its `model_path` the completion model's file where the models run in the
        shared engine (the status names the engine's API there): the records hash the file."""
        engine = status.get("engine") or {}
        if engine.get("mode") != "shared":
            return status
        return {**status, "model_path": str(resolve_model_path(Role.COMPLETION, self.model))}

    def configure(self, settings: dict[str, Any]) -> None:
        """`workspace/didChangeConfiguration` with the `infill` section (merged by the server
        over its current settings)."""
        self.settings.update(settings)
        self.client.configure(settings)

    async def stop(self) -> None:
        """Shut the server down; once is enough (a later call does nothing)."""
        if self._stopped:
            return
        self._stopped = True
        await self.client.stop()
        self._tmp.cleanup()

    # --- the engine's jobs (`infill/stats`) --------------------------------------------------

    async def _completion_engine(self) -> dict[str, Any]:
        report = await self.client.stats()
        for engine in report["engines"]:
            if "completion" in engine["roles"]:
                return dict(engine)
        return {"total_jobs": 0, "jobs": []}

    async def job_count(self) -> int:
        """How many jobs the completion engine has finished so far."""
        return int((await self._completion_engine())["total_jobs"])

    async def jobs_since(
        self, count: int, *, at_least: int = 0, wait_s: float = 5.0
    ) -> list[JobLine]:
        """The completion engine's jobs finished after `job_count()` returned `count`, oldest
        first, once there are `at_least` of them (a job is recorded when it ends, which may
        be just after the response went out) or `wait_s` has passed."""
        deadline = time.monotonic() + wait_s
        while True:
            engine = await self._completion_engine()
            new = engine["total_jobs"] - count
            if new >= at_least or time.monotonic() > deadline:
                jobs = engine["jobs"][len(engine["jobs"]) - new :] if new > 0 else []
                return [JobLine.from_stats(job) for job in jobs]
            await asyncio.sleep(0.01)

    # --- documents ----------------------------------------------------------------------------

    def open(self, uri: str, text: str, language: str = "python") -> None:
        self._docs[uri] = _Doc(uri=uri, text=text, language=language)
        self.client.open(uri, text, language)

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)
        self.client.close(uri)

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
        self.client.change(uri, doc.version, changes)

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

    # --- next edits ---------------------------------------------------------------------------

    async def next_edits(self, uri: str, offset: int) -> list[tuple[int, int, str]]:
        """`textDocument/copilotInlineEdit` for the cursor at `offset` of the document as it
        is: the proposed edits as (start, end, new text) in its code points, nearest first."""
        doc = self._docs[uri]
        params = {
            "textDocument": {"uri": uri, "version": doc.version},
            "position": _position_json(position_of(doc.text, offset)),
        }
        answer = await self.client.request(INLINE_EDIT_REQUEST, params)
        return [
            (
                offset_of(doc.text, _position(edit["range"]["start"])),
                offset_of(doc.text, _position(edit["range"]["end"])),
                str(edit["text"]),
            )
            for edit in answer["edits"]
        ]

    # --- inline completion --------------------------------------------------------------------

    def request_inline(self, uri: str, offset: int, *, invoked: bool = False) -> Pending:
        """Send `textDocument/inlineCompletion` for the cursor at `offset`; do not wait."""
        doc = self._docs[uri]
        msg_id = f"bench-{next(self._ids)}"
        sent = time.perf_counter()
        future = self.client.send_inline(
            uri, position_of(doc.text, offset), invoked=invoked, msg_id=msg_id
        )
        pending = Pending(msg_id=msg_id, uri=uri, offset=offset, sent_at=sent, future=future)

        def done(_: concurrent.futures.Future[Any]) -> None:
            pending.done_at = time.perf_counter()

        future.add_done_callback(done)
        return pending

    def cancel(self, pending: Pending) -> None:
        """`$/cancelRequest` for a request, as VS Code sends it when the user types on."""
        self.client.cancel(pending.msg_id)

    async def inline(
        self, uri: str, offset: int, *, invoked: bool = False
    ) -> tuple[list[types.InlineCompletionItem], Pending]:
        pending = self.request_inline(uri, offset, invoked=invoked)
        items = await pending.wait()
        return items, pending

    async def type_keys(self, uri: str, start: int, typed: str, *, cancel: bool = False) -> Typed:
        """Type `typed` into the document at `start`, one character every `KEYSTROKE_S`
        (`didChange` per character, then an inline request, as VS Code sends them: each
        supersedes the one before; `cancel`: with `$/cancelRequest` for that one too), and wait
        for every answer."""
        timer = Timer()
        pendings: list[Pending] = []
        key_at = 0.0
        for k, char in enumerate(typed):
            await timer.until(k * KEYSTROKE_S)
            self.edit(uri, start + k, start + k, char)
            key_at = time.perf_counter()
            if cancel and pendings:
                self.cancel(pendings[-1])
            pendings.append(self.request_inline(uri, start + k + 1))
        last = pendings[-1]
        items = await last.wait()
        latency = last.seconds + (last.sent_at - key_at)
        for pending in pendings[:-1]:
            with contextlib.suppress(Exception):  # RequestCancelled (-32800) when we cancelled
                await pending.wait()
        return Typed(pendings=pendings, items=items, last_keystroke_s=latency)


@dataclass(frozen=True, slots=True, kw_only=True)
class Typed:
    """A line typed with a request per keystroke: every request, and the last one's answer."""

    pendings: list[Pending]
    items: list[types.InlineCompletionItem]
    last_keystroke_s: float  # from the last keystroke to the answer to its request


@dataclass(slots=True)
class Timer:
    """Wall-clock pacing from a fixed start, so a late step does not delay the rest."""

    start: float = field(default_factory=time.perf_counter)

    async def until(self, seconds: float) -> None:
        delay = self.start + seconds - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
