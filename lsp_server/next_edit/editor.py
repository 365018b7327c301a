"""The next editor: what the language server holds for next edit suggestions (a sibling of
`inline/completer.py`), and the calls its handlers make."""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.documents import DocumentSnapshot
from lsp_server.next_edit.history import EditHistory
from lsp_server.next_edit.offers import Offer, Offers, Outcome, Source
from lsp_server.next_edit.propagate import ProposedEdit, propagate


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    """A next edit as offered: the edit (code points of the snapshot's text) and its offer."""

    edit: ProposedEdit
    offer: Offer


class NextEditor:
    """Next edits for every open document: the edit history each `didChange` feeds, the
    edits proposed from it, and the offers made (for the accept command and the counts)."""

    def __init__(self) -> None:
        self.history = EditHistory()
        self.offers = Offers()

    def opened(self, uri: str, text: str) -> None:
        self.history.opened(uri, text)

    def changed(self, uri: str, text: str, now: float) -> None:
        self.history.changed(uri, text, now)

    def forget(self, uri: str) -> None:
        """The document was closed (or grew over the size limit): its history and open
        offers go."""
        self.history.closed(uri)
        self.offers.forget(uri)

    def suggest(self, snap: DocumentSnapshot) -> tuple[Suggestion, ...]:
        """The next edits for `snap`: the last change made again at the places that still hold
        the old text (nearest first). Nothing when the history has not seen this very text
        (the edit the user just made is what the suggestions come from)."""
        if self.history.text(snap.uri) != snap.text:
            return ()
        group = self.history.last_group(snap.uri)
        if group is None:
            return ()
        edits = propagate(snap.text, group, reverted=self.history.reverted(snap.uri))
        version = snap.version or 0
        return tuple(
            Suggestion(edit=edit, offer=self.offers.offer(snap.uri, version, Source.PROPAGATION))
            for edit in edits
        )

    def report(self, offer_id: str, outcome: Outcome) -> Offer | None:
        return self.offers.report(offer_id, outcome)
