"""What became of a suggestion the server offered, and the one rule that counts it: shared by
inline completions (`usage.py`, per language) and next edits (`next_edit/offers.py`, per
source), so that "shown", "accepted" and "rejected" mean the same in both reports.

The rule: each outcome counts once per suggestion, and every outcome but "shown" implies
"shown" (a client that accepts without having said that it showed still showed it).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar


class Outcome(enum.StrEnum):
    """What became of an offered suggestion, as the client tells it (or, for an inline
    suggestion typed over, as its document's changes show)."""

    SHOWN = "shown"
    ACCEPTED = "accepted"
    #: A part of it taken (a word or a line); the rest still on show.
    PARTIALLY_ACCEPTED = "partially_accepted"
    REJECTED = "rejected"


K = TypeVar("K", bound=Hashable)


class Tally(Generic[K]):
    """Counts of outcomes per key (a language, a source): each outcome once per suggestion,
    every other outcome implying "shown"."""

    def __init__(self, outcomes: Iterable[Outcome] = Outcome, keys: Iterable[K] = ()) -> None:
        self.outcomes = tuple(outcomes)
        self._counts: dict[K, dict[Outcome, int]] = {}
        for key in keys:
            self._row(key)

    def note(self, key: K, seen: set[Outcome], outcome: Outcome) -> frozenset[Outcome]:
        """Count `outcome` of a suggestion whose outcomes so far are `seen` (updated in
        place); the outcomes this counted (none if all were seen before)."""
        implied = {outcome} if outcome is Outcome.SHOWN else {Outcome.SHOWN, outcome}
        new = frozenset(implied - seen)
        row = self._row(key)
        for each in new:
            row[each] += 1
        seen |= implied
        return new

    def counts(self) -> dict[K, dict[str, int]]:
        """Each key's counts, by outcome name."""
        return {
            key: {outcome.value: n for outcome, n in row.items()}
            for key, row in self._counts.items()
        }

    def clear(self) -> None:
        self._counts.clear()

    def _row(self, key: K) -> dict[Outcome, int]:
        row = self._counts.get(key)
        if row is None:
            row = self._counts[key] = dict.fromkeys(self.outcomes, 0)
        return row
