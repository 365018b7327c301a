"""Next edits offered to the client, by id: what the accept command and the shown / rejected
notifications name, and the counts per source that `infill/stats` reports (kept in this
process, never sent anywhere)."""

from __future__ import annotations

import enum
import itertools
from collections import OrderedDict
from dataclasses import dataclass


class Source(enum.StrEnum):
    """Where a next edit came from."""

    #: The user's last change made again where the old text still stands (`propagate.py`).
    PROPAGATION = "propagation"
    #: A next-edit model's rewrite of the region around the cursor.
    MODEL = "model"


class Outcome(enum.StrEnum):
    """What became of an offered edit, as the client tells it."""

    SHOWN = "shown"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True, kw_only=True)
class Offer:
    """One edit sent to the client: its id (the accept command's argument), its document and
    the version it was computed for, and its source."""

    id: str
    uri: str
    version: int
    source: Source


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
        self._counts = {source: dict.fromkeys(Outcome, 0) for source in Source}
        self._ids = itertools.count(1)

    def offer(self, uri: str, version: int, source: Source) -> Offer:
        offer = Offer(id=f"ne-{next(self._ids)}", uri=uri, version=version, source=source)
        self._open[offer.id] = (offer, set())
        while len(self._open) > KEPT_OFFERS:
            self._open.popitem(last=False)
        return offer

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
        implied = {outcome} if outcome is Outcome.SHOWN else {Outcome.SHOWN, outcome}
        for each in implied - seen:
            self._counts[offer.source][each] += 1
        seen |= implied
        return offer

    def forget(self, uri: str) -> None:
        """The document was closed: its offers can no longer be accepted."""
        for offer_id in [i for i, (o, _) in self._open.items() if o.uri == uri]:
            del self._open[offer_id]

    def counts(self) -> dict[str, dict[str, int]]:
        """Shown, accepted and rejected next edits per source (`infill/stats`)."""
        return {
            source.value: {outcome.value: n for outcome, n in counts.items()}
            for source, counts in self._counts.items()
        }
