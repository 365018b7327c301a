"""A client's held seconds, fading: what the worker takes turns among editor windows by."""

from __future__ import annotations

import pytest

from engine.turns import FORGOTTEN_SECONDS, HALF_LIFE_SECONDS, HeldSeconds
from engine.worker import TURN_SECONDS


def test_held_seconds_add_up_and_halve_every_half_life() -> None:
    held = HeldSeconds()
    held.charge("w1", 2.0, now=0.0)
    held.charge("w1", 1.0, now=0.0)
    assert held.at("w1", 0.0) == 3.0
    assert held.at("w1", HALF_LIFE_SECONDS) == pytest.approx(1.5)
    assert held.at("w2", 0.0) == 0.0  # a client not seen is new


def test_a_window_that_typed_a_lot_a_minute_ago_is_not_behind_any_more() -> None:
    held = HeldSeconds()
    for tenth in range(1, 6001):  # ten minutes of the model without a pause, 0.1 s a job
        held.charge("busy", 0.1, now=tenth / 10)
    # However long a window held it, its seconds stay under what a half-life's fading takes
    # back (about 14 s); a minute later it is within one turn of a new window.
    assert held.at("busy", 600.0) < HALF_LIFE_SECONDS * 1.5
    assert held.at("busy", 660.0) < TURN_SECONDS


def test_fading_keeps_the_order_of_clients_idle_meanwhile() -> None:
    held = HeldSeconds()
    held.charge("w1", 4.0, now=0.0)
    held.charge("w2", 1.0, now=5.0)
    for now in (5.0, 20.0, 45.0):
        assert held.at("w1", now) > held.at("w2", now)


def test_clients_whose_seconds_faded_away_are_forgotten() -> None:
    held = HeldSeconds()
    held.charge("old", 1.0, now=0.0)
    later = HALF_LIFE_SECONDS * 11  # 1 s / 2**11 is below FORGOTTEN_SECONDS
    assert held.at("old", later) < FORGOTTEN_SECONDS
    held.charge("new", 0.5, now=later)
    assert len(held) == 1
    assert held.at("old", later) == 0.0


def test_a_half_life_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="half-life"):
        HeldSeconds(half_life=0)
