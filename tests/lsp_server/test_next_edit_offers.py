"""Offered next edits and their outcomes: what `infill/stats` counts per source."""

from __future__ import annotations

from lsp_server.next_edit.offers import KEPT_OFFERS, Offers, Outcome, Source

EDIT = (4, 9, "items")


def test_each_outcome_counts_once_per_offer_and_per_source() -> None:
    offers = Offers()
    renamed = offers.offer("file:///a.py", 3, Source.PROPAGATION, EDIT)
    rewritten = offers.offer("file:///a.py", 3, Source.MODEL, EDIT)
    assert renamed.id != rewritten.id
    offers.report(renamed.id, Outcome.SHOWN)
    offers.report(renamed.id, Outcome.SHOWN)  # shown again as the cursor moves: once
    offers.report(renamed.id, Outcome.ACCEPTED)
    offers.report(rewritten.id, Outcome.REJECTED)  # rejected unseen: it was shown
    assert offers.counts() == {
        "propagation": {"shown": 1, "accepted": 1, "rejected": 0},
        "model": {"shown": 1, "accepted": 0, "rejected": 1},
    }


def test_an_unknown_or_forgotten_offer_counts_nothing() -> None:
    offers = Offers()
    kept = offers.offer("file:///a.py", 1, Source.PROPAGATION, EDIT)
    closed = offers.offer("file:///b.py", 1, Source.PROPAGATION, EDIT)
    offers.forget("file:///b.py")
    assert offers.report("ne-999", Outcome.ACCEPTED) is None
    assert offers.report(closed.id, Outcome.ACCEPTED) is None
    assert offers.report(kept.id, Outcome.ACCEPTED) == kept
    assert offers.counts()["propagation"] == {"shown": 1, "accepted": 1, "rejected": 0}


def test_only_the_most_recent_offers_are_kept() -> None:
    offers = Offers()
    first = offers.offer("file:///a.py", 1, Source.MODEL, EDIT)
    for version in range(KEPT_OFFERS):
        offers.offer("file:///a.py", version + 2, Source.MODEL, EDIT)
    assert offers.get(first.id) is None
    assert offers.report(first.id, Outcome.SHOWN) is None


def test_the_same_edit_asked_for_again_is_the_same_offer_and_a_rejected_one_is_known() -> None:
    offers = Offers()
    first = offers.offer("file:///a.py", 2, Source.PROPAGATION, EDIT)
    again = offers.offer("file:///a.py", 2, Source.PROPAGATION, EDIT)
    assert again == first  # shown once, accepted late: one offer
    other = offers.offer("file:///a.py", 2, Source.PROPAGATION, (20, 25, "items"))
    newer = offers.offer("file:///a.py", 3, Source.PROPAGATION, EDIT)
    assert len({first.id, other.id, newer.id}) == 3
    offers.report(first.id, Outcome.REJECTED)
    assert offers.rejected("file:///a.py", 2) == {EDIT}
    assert offers.rejected("file:///a.py", 3) == frozenset()
    assert offers.counts()["propagation"] == {"shown": 1, "accepted": 0, "rejected": 1}
