"""Latest wins: one live inline request per document, a new one superseding the one before."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class LatestWins:
    """One live inline request per document: a new one supersedes the one before it."""

    def __init__(self) -> None:
        self._live: dict[str, asyncio.Event] = {}

    def claim(self, uri: str) -> asyncio.Event:
        """Supersede the document's live request; the returned event is set when this one is."""
        previous = self._live.get(uri)
        if previous is not None:
            previous.set()
        event = asyncio.Event()
        self._live[uri] = event
        return event

    def release(self, uri: str, event: asyncio.Event) -> None:
        if self._live.get(uri) is event:
            del self._live[uri]

    def forget(self, uri: str) -> None:
        """The document was closed: its live request is superseded (it answers nothing)."""
        live = self._live.pop(uri, None)
        if live is not None:
            live.set()

    def __len__(self) -> int:
        return len(self._live)


async def unless_superseded(work: Awaitable[T], superseded: asyncio.Event) -> T | None:
    """`work`'s result; or None as soon as `superseded` is set first, `work` then cancelled
    (closing a generation's stream aborts the engine's job within a token). Cancelling the
    caller cancels `work` too."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(superseded.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
    return task.result() if task.done() and not task.cancelled() else None
