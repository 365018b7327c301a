"""Menu requests answered within a bounded wait, the generation going on for the next one.

A client's menu waits for every server's answer (blink.cmp up to 2 s, nvim-cmp 0.5 s, Helix
25.01 and Sublime for all of them), and Emacs waits with the editor blocked (eglot and lsp-mode
ask synchronously). So a menu request is answered within `completionMenuWaitMs` with what is
ready: the type-ahead answer (the rest of the last suggestion, typed along), or a generation
that ended in time. A generation still running is left to run: the list is answered empty and
incomplete, so the client asks again at the next keystroke, and that request finds it done.
While the user types at the cursor, that generation is kept (its answer is then the type-ahead
answer of what was typed); a request elsewhere, or after an edit elsewhere, starts a new one,
which supersedes it (the inline completer's latest-wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.completer import InlineCompleter
from lsp_server.inline.result import InlineResult
from lsp_server.neighbors import OtherDocument
from lsp_server.settings import Settings

log = logging.getLogger(__name__)


#: How long an explicit request (where no word is typed) waits for its suggestions: the user
#: asked and looks at the menu, and some clients ask nothing more at that place (eglot with
#: company keeps the first answer there, so an empty one stays). Several suggestions took
#: 5-7 s with the default model on 2 busy CPU cores; eglot gives a request 10 s, and Emacs
#: stops waiting at the user's next key.
INVOKED_WAIT_S = 8.0


def menu_wait_s(settings: Settings, *, invoked: bool) -> float:
    """How long a menu request waits for its suggestions."""
    wait = settings.completion_menu_wait_ms / 1000
    return max(wait, INVOKED_WAIT_S) if invoked else wait


@dataclass(frozen=True, slots=True)
class _Running:
    """A generation started by a menu request: for `snap`, as invoked or not."""

    snap: DocumentSnapshot
    invoked: bool
    task: asyncio.Task[InlineResult | None]


class MenuCompleter:
    """The menu's requests over the inline completer (`complete`), per document."""

    def __init__(self, inline: InlineCompleter) -> None:
        self._inline = inline
        self._running: dict[str, _Running] = {}

    async def complete(
        self,
        snap: DocumentSnapshot,
        settings: Settings,
        *,
        invoked: bool,
        others: Mapping[str, OtherDocument] | None = None,
        roots: Sequence[str] = (),
    ) -> InlineResult | None:
        """The suggestions for `snap` ready within the menu's wait (`menu_wait_s`); None when
        none is ready yet (the generation goes on) or the request was superseded."""
        # 1. Typed along the last suggestion: its rest, at once.
        ready = self._inline.ready(snap, invoked)
        if ready is not None:
            return ready
        deadline = asyncio.get_running_loop().time() + menu_wait_s(settings, invoked=invoked)
        # 2. The generation under way, if the user only typed on at its cursor; else a new one.
        running = self._running.get(snap.uri)
        if running is None or not self._keeps(running, snap, invoked):
            running = self._start(snap, settings, invoked, others, roots)
        # 3. What it gives within the wait. Waiting never cancels it: a request cancelled by
        # its client leaves it to the next one.
        if not await _ends_by(running.task, deadline):
            return None
        result = _result(running.task)
        if running.snap == snap:
            return result
        # 4. Made for an earlier cursor: what the user typed since, taken from it.
        ready = self._inline.ready(snap, invoked)
        if ready is not None or result is None:
            return ready
        # The typing left the suggestion: a generation for this place, within what is left.
        running = self._start(snap, settings, invoked, others, roots)
        if not await _ends_by(running.task, deadline):
            return None
        return _result(running.task)

    def forget(self, uri: str) -> None:
        """The document was closed: its generation is dropped (the inline completer stops
        it)."""
        self._running.pop(uri, None)

    @property
    def running(self) -> int:
        """Documents with a menu generation kept."""
        return len(self._running)

    def _keeps(self, running: _Running, snap: DocumentSnapshot, invoked: bool) -> bool:
        if running.task.done():
            return False
        return snap.typed_on_from(running.snap) and (running.invoked or not invoked)

    def _start(
        self,
        snap: DocumentSnapshot,
        settings: Settings,
        invoked: bool,
        others: Mapping[str, OtherDocument] | None,
        roots: Sequence[str],
    ) -> _Running:
        task = asyncio.ensure_future(
            self._inline.complete(snap, settings, invoked=invoked, others=others, roots=roots)
        )
        task.add_done_callback(_retrieve)
        running = _Running(snap=snap, invoked=invoked, task=task)
        self._running[snap.uri] = running
        task.add_done_callback(lambda _: self._drop(running))
        return running

    def _drop(self, running: _Running) -> None:
        # Kept while it runs, so that the next request can wait for it; its answer is then
        # in the type-ahead cache.
        if self._running.get(running.snap.uri) is running:
            del self._running[running.snap.uri]


async def _ends_by(task: asyncio.Task[InlineResult | None], deadline: float) -> bool:
    """Whether `task` has ended by `deadline` (the event loop's time), waited for meanwhile."""
    left = deadline - asyncio.get_running_loop().time()
    await asyncio.wait({task}, timeout=max(0.0, left))
    return task.done()


def _result(task: asyncio.Task[InlineResult | None]) -> InlineResult | None:
    """An ended generation's suggestions; None for one cancelled (or superseded)."""
    return None if task.cancelled() else task.result()


def _retrieve(task: asyncio.Task[InlineResult | None]) -> None:
    """A generation nobody waited for to its end: its failure is logged here, once (the
    request that waits for one raises it itself)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        with contextlib.suppress(Exception):
            log.debug("a menu suggestion failed: %s", error)
