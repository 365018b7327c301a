"""Which KV state a prompt starts from, and what is kept within the budget (prefix_cache.py)."""

from __future__ import annotations

import random

import pytest

from engine.prefix_cache import (
    MIN_KEPT_TOKENS,
    RESTORE_MARGIN,
    PrefixCache,
    common_prefix,
    default_budget,
    physical_memory,
)

DOC_A = list(range(1000, 1100))  # 100 tokens
DOC_B = list(range(2000, 2100))
DOC_C = list(range(3000, 3100))


def test_common_prefix_counts_the_leading_tokens_two_sequences_share() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix((5,), [6]) == 0


def test_leaving_a_document_keeps_its_state_and_coming_back_restores_it() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    cache.set_live("a", len(DOC_A))
    # The user goes to B: the live state (A's) is set aside, nothing to restore for B.
    plan = cache.plan(DOC_B, "b", DOC_A)
    assert plan.save_live
    assert plan.restore is None
    assert plan.shared == 0
    cache.keep(cache.live_key, DOC_A, "state of A", 100)
    cache.set_live("b", len(DOC_B))
    # Back in A, one token typed: A's state is restored, B's is set aside.
    typed = [*DOC_A, 7]
    plan = cache.plan(typed, "a", DOC_B)
    assert plan.save_live
    assert (plan.restore, plan.restore_tokens, plan.shared) == ("state of A", tuple(DOC_A), 100)
    assert cache.status.states == 0  # the restored state is live now, not kept twice
    assert cache.status.restored == 1


def test_typing_in_the_same_document_neither_saves_nor_restores() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    cache.set_live("a", len(DOC_A))
    edited = [*DOC_A[:60], 5, 6]  # the user went back up and typed
    plan = cache.plan(edited, "a", DOC_A)
    assert not plan.save_live
    assert plan.restore is None
    assert plan.shared == 60


def test_a_kept_state_is_restored_only_when_it_saves_enough_tokens() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    shared_head = list(range(50))
    a = [*shared_head, *DOC_A]
    b = [*shared_head[: 50 - RESTORE_MARGIN + 1], *DOC_B]
    cache.keep("a", a, "A", 100)
    cache.set_live("b", len(b))
    # B's live cache shares 35 tokens with this prompt, A's kept state 50: not enough more.
    plan = cache.plan([*shared_head, 1, 2], "c", b)
    assert plan.restore is None
    assert plan.shared == 50 - RESTORE_MARGIN + 1
    # With the margin reached, A's state is taken.
    cache.set_live("b", 10)
    plan = cache.plan([*shared_head, 1, 2], "c", b[:10])
    assert plan.restore == "A"
    assert plan.shared == 50


def test_the_newest_state_of_a_document_replaces_its_older_one() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    cache.keep("a", DOC_A, "old", 100)
    cache.keep("a", [*DOC_A, 1], "new", 101)
    assert cache.status.states == 1
    assert cache.status.bytes == 101
    cache.set_live("b", len(DOC_B))
    assert cache.plan(DOC_A, "a", DOC_B).restore == "new"


def test_a_state_that_only_extends_another_makes_the_shorter_one_useless() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    cache.keep(None, DOC_A[:50], "short", 50)
    cache.keep(None, DOC_A, "long", 100)
    assert cache.status.states == 1
    assert cache.status.tokens == 100


def test_states_are_evicted_least_recently_kept_first_within_the_budget() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=250)
    for key, doc in (("a", DOC_A), ("b", DOC_B), ("c", DOC_C)):
        cache.keep(key, doc, key.upper(), 100)
    status = cache.status
    assert (status.states, status.bytes, status.evicted, status.budget_bytes) == (2, 200, 1, 250)
    cache.set_live("x", 3)
    assert cache.plan(DOC_A, "a", [1, 2, 3]).restore is None  # A went first
    assert cache.plan(DOC_C, "c", [1, 2, 3]).restore == "C"


def test_a_state_larger_than_the_budget_is_not_kept_and_a_zero_budget_keeps_nothing() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=50)
    cache.keep("a", DOC_A, "A", 100)
    assert cache.status.states == 0
    off: PrefixCache[str] = PrefixCache(budget_bytes=0)
    off.set_live("a", len(DOC_A))
    assert not off.plan(DOC_B, "b", DOC_A).save_live


def test_a_short_live_state_is_not_worth_keeping() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    short = DOC_A[: MIN_KEPT_TOKENS - 1]
    cache.set_live("a", len(short))
    assert not cache.plan(DOC_B, "b", short).save_live


def test_without_keys_the_live_state_is_kept_when_a_prompt_would_discard_most_of_it() -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=10_000)
    cache.set_live(None, len(DOC_A))
    assert not cache.plan([*DOC_A[:80], 1], None, DOC_A).save_live
    assert cache.plan([*DOC_A[:20], 1], None, DOC_A).save_live


def test_the_default_budget_is_sized_from_the_model_and_bounded_by_the_machine() -> None:
    per_token, context = 18_000, 4096
    budget = default_budget(per_token, context)
    memory = physical_memory()
    assert budget <= per_token * context * 16
    if memory is not None:
        assert budget <= memory // 8
    cache: PrefixCache[str] = PrefixCache()
    assert cache.budget_bytes is None
    cache.size_budget(per_token, context)
    assert cache.budget_bytes == budget
    given: PrefixCache[str] = PrefixCache(budget_bytes=123)
    given.size_budget(per_token, context)
    assert given.budget_bytes == 123


@pytest.mark.parametrize("budget", [None, 0, 10_000])
def test_clear_forgets_everything(budget: int | None) -> None:
    cache: PrefixCache[str] = PrefixCache(budget_bytes=budget)
    cache.keep("a", DOC_A, "A", 100)
    cache.clear()
    assert (cache.status.states, cache.status.bytes, cache.live_key) == (0, 0, None)


def test_common_prefix_agrees_with_a_token_by_token_count_on_random_sequences() -> None:
    rng = random.Random(7)

    def by_hand(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    for _ in range(2000):
        a = [rng.randint(0, 3) for _ in range(rng.randint(0, 300))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 200))]
        assert common_prefix(a, b) == by_hand(a, b)
        assert common_prefix(tuple(b), a) == by_hand(a, b)
