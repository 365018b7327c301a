"""The inline completer: what the language server holds for inline completion, and the one
call its handler makes (`InlineCompleter.complete`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence

from engine.completion import CompletionModel
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.confidence import GateRecord
from lsp_server.inline.latest import LatestWins, unless_superseded
from lsp_server.inline.result import InlineResult
from lsp_server.inline.speculator import Speculator
from lsp_server.inline.suggest import suggest
from lsp_server.inline.type_ahead import TypeAheadCache
from lsp_server.neighbors import NeighborContext, OtherDocument
from lsp_server.settings import Settings


class InlineCompleter:
    """Inline completion for every open document: a newer request for a document supersedes
    the older one (`LatestWins`), typing along a suggestion is answered from the type-ahead
    cache, an automatic suggestion is followed by the answers that come after it
    (`Speculator`), and other documents' snippets go first in the prompt (`NeighborContext`).

    `model`: awaits the completion model (it may be loading). `speculator`: None to write
    nothing ahead (tests that count model calls)."""

    def __init__(
        self,
        model: Callable[[], Awaitable[CompletionModel]],
        *,
        speculator: Speculator | None = None,
        neighbors: NeighborContext | None = None,
    ) -> None:
        self._model = model
        self._latest = LatestWins()
        self._type_ahead = TypeAheadCache()
        self.speculator = speculator
        self.gate = GateRecord()  # what the confidence gate did, for `infill/stats`
        self.neighbors = neighbors or NeighborContext()

    def note_edit(self, uri: str, line: int) -> None:
        """An edit at `line`: a region the user works in, for other documents' prompts."""
        self.neighbors.note(uri, line)

    def forget(self, uri: str) -> None:
        """The document was closed: its live request is superseded (it answers nothing), and
        its type-ahead answer, recent regions and context selection are dropped."""
        self._latest.forget(uri)
        self._type_ahead.forget(uri)
        self.neighbors.forget(uri)

    def ready(self, snap: DocumentSnapshot, invoked: bool) -> InlineResult | None:
        """What typing along the document's last suggestion leaves of it, without the model
        (the type-ahead cache); None if the user's typing left it, or there is none."""
        return self._type_ahead.lookup(snap, invoked)

    @property
    def live_requests(self) -> int:
        """Requests under way (one at most per document)."""
        return len(self._latest)

    @property
    def remembered_answers(self) -> int:
        """Documents whose last answer is kept for typing along it."""
        return len(self._type_ahead)

    async def complete(
        self,
        snap: DocumentSnapshot,
        settings: Settings,
        *,
        invoked: bool,
        others: Mapping[str, OtherDocument] | None = None,
        roots: Sequence[str] = (),
    ) -> InlineResult | None:
        """`suggest`, after the debounce, unless a newer request for the document supersedes
        this one first (then None, at once: the engine is told to stop within one token).
        `others` and `roots`: the other open documents and the workspace folders, taken with
        the snapshot; their snippets are chosen once the model is known (their budget is
        counted in its tokens)."""
        self.neighbors.note(snap.uri, snap.line)  # a region the user is looking at
        superseded = self._latest.claim(snap.uri)
        cached = self._type_ahead.lookup(snap, invoked)
        if cached is not None:
            self._latest.release(snap.uri, superseded)
            return cached
        try:
            if settings.debounce_ms > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(superseded.wait(), settings.debounce_ms / 1000)
            if superseded.is_set():
                return None
            model = await self._model()
            if superseded.is_set():
                return None
            context = None
            if others is not None:
                context = self.neighbors.context_for(
                    snap,
                    others,
                    budget=settings.context_tokens,
                    count_tokens=model.format.count_tokens,
                    roots=roots,
                )
            result = await unless_superseded(
                suggest(
                    model,
                    snap,
                    settings,
                    invoked=invoked,
                    speculator=self.speculator,
                    context=context,
                ),
                superseded,
            )
            if result is None:
                return None
            self.gate.note(result.gate)
            self._type_ahead.remember(
                snap, invoked, result, documents=settings.type_ahead_documents
            )
            if self.speculator is not None and not invoked:
                self.speculator.anticipate(model, snap, result, settings, context)
            return result
        finally:
            self._latest.release(snap.uri, superseded)
