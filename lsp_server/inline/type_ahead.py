"""The type-ahead cache: the last answer per document, reused while the user types along it."""

from __future__ import annotations

from collections import OrderedDict

from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.result import InlineResult
from lsp_server.postprocess import Fitted


class TypeAheadCache:
    """The last answer per document, reused while the user types into it.

    When the new cursor text extends the old one by exactly what the user typed, and the
    typed text is the start of a suggestion, the rest of that suggestion is the answer: no
    model call, no wait (what Copilot does while you type along its ghost text).
    """

    def __init__(self) -> None:
        # Least recently answered first: the first to go when there are too many.
        self._last: OrderedDict[str, tuple[DocumentSnapshot, bool, InlineResult]] = OrderedDict()

    def remember(
        self, snap: DocumentSnapshot, invoked: bool, result: InlineResult, *, documents: int
    ) -> None:
        """Keep `result` as the document's last answer, and the last answers of at most
        `documents` documents in all (each holds a snapshot: a copy of its text)."""
        self._last.pop(snap.uri, None)
        if result.suggestions:
            self._last[snap.uri] = (snap, invoked, result)
        while len(self._last) > documents:
            self._last.popitem(last=False)

    def __len__(self) -> int:
        return len(self._last)

    def lookup(self, snap: DocumentSnapshot, invoked: bool) -> InlineResult | None:
        entry = self._last.get(snap.uri)
        if entry is None:
            return None
        old, old_invoked, result = entry
        if invoked and not old_invoked:  # the user asks for several: make them
            return None
        if not snap.typed_on_from(old):
            return None
        typed = snap.prefix[len(old.prefix) :]
        rest = tuple(
            Fitted(text=s.text[len(typed) :], replace_chars=s.replace_chars)
            for s in result.suggestions
            if s.text.startswith(typed) and len(s.text) > len(typed)
        )
        if not rest:
            return None
        return InlineResult(suggestions=rest, mode=result.mode, cached=True)

    def forget(self, uri: str) -> None:
        self._last.pop(uri, None)
