"""Latest wins: one live inline request per document, a new one superseding the one before."""

from __future__ import annotations

import asyncio


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
