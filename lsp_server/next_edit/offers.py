"""Next edits offered to the client, by id: what the accept command and the shown / rejected
notifications name, and the counts per source that `infill/stats` reports (kept in this
process, never sent anywhere; counted by the rule inline completions share, `outcomes.py`)."""

from __future__ import annotations

import enum
import itertools
from collections import OrderedDict
from dataclasses import dataclass

from lsp_server.outcomes import Outcome, Tally

__all__ = ["KEPT_OFFERS", "EditKey", "Offer", "Offers", "Outcome", "Source"]


class Source(enum.StrEnum):
    """Where a next edit came from."""

    #: The user's last change made again where the old text still stands (`propagate.py`).
    PROPAGATION = "propagation"
    #: A next-edit model's rewrite of the region around the cursor.
    MODEL = "model"


#: The outcomes a next edit has: taken whole or not at all (no part of one is accepted).
NEXT_EDIT_OUTCOMES = (Outcome.SHOWN, Outcome.ACCEPTED, Outcome.REJECTED)


#: What an edit is, for telling two offers of it apart: `(start, end, text)` in the text of
#: its version (code points).
EditKey = tuple[int, int, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Offer:
    """One edit sent to the client: its id (the accept command's argument), its document and
    the version it was computed for, its source and the edit."""

    id: str
    uri: str
    version: int
    source: Source
    edit: EditKey


#: Offers remembered for their outcomes: far more than a client shows at once (one or a few
#: per request), so that a late accept still counts, and bounded so that a client that never
#: reports outcomes costs nothing.
KEPT_OFFERS = 256


class Offers:
    """The offers still open to an outcome, and the counts of each outcome per source. Each
    outcome counts once per offer; an id the server never gave (or long forgotten) counts
    nothing."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, tuple[Offer, set[Outcome]]] = OrderedDict()
        # The open offer of each edit: asked again about the same version, the server offers
        # the same edit under the same id (a client counts it shown once, accepts it late).
        self._by_edit: dict[tuple[str, int, Source, EditKey], str] = {}
        self._tally: Tally[Source] = Tally(NEXT_EDIT_OUTCOMES, Source)
        self._ids = itertools.count(1)

    def offer(self, uri: str, version: int, source: Source, edit: EditKey = (0, 0, "")) -> Offer:
        """The offer of `edit` to the document's `version`: the open one, if it was offered
        before (it moves to the newest), else a new one."""
        key = (uri, version, source, edit)
        known = self._by_edit.get(key)
        if known is not None and known in self._open:
            self._open.move_to_end(known)
            return self._open[known][0]
        offer = Offer(
            id=f"ne-{next(self._ids)}", uri=uri, version=version, source=source, edit=edit
        )
        self._open[offer.id] = (offer, set())
        self._by_edit[key] = offer.id
        while len(self._open) > KEPT_OFFERS:
            _, (gone, _) = self._open.popitem(last=False)
            self._by_edit.pop((gone.uri, gone.version, gone.source, gone.edit), None)
        return offer

    def rejected(self, uri: str, version: int) -> frozenset[EditKey]:
        """The edits of the document's `version` the user rejected: not offered again."""
        return frozenset(
            offer.edit
            for offer, seen in self._open.values()
            if offer.uri == uri and offer.version == version and Outcome.REJECTED in seen
        )

    def get(self, offer_id: str) -> Offer | None:
        entry = self._open.get(offer_id)
        return None if entry is None else entry[0]

    def report(self, offer_id: str, outcome: Outcome) -> Offer | None:
        """Count `outcome` for the offer `offer_id` (once); the offer, or None if unknown.
        An accepted or rejected edit was shown, whether or not the client said so."""
        entry = self._open.get(offer_id)
        if entry is None:
            return None
        offer, seen = entry
        self._tally.note(offer.source, seen, outcome)
        return offer

    def forget(self, uri: str) -> None:
        """The document was closed: its offers can no longer be accepted."""
        for offer_id in [i for i, (o, _) in self._open.items() if o.uri == uri]:
            offer, _ = self._open.pop(offer_id)
            self._by_edit.pop((offer.uri, offer.version, offer.source, offer.edit), None)

    def counts(self) -> dict[str, dict[str, int]]:
        """Shown, accepted and rejected next edits per source (`infill/stats`)."""
        return {source.value: counts for source, counts in self._tally.counts().items()}
