"""Drafts from the document (engine/drafts.py): what a prompt-lookup draft proposes."""

from __future__ import annotations

import random

import pytest

from engine.drafts import Acceptance, DraftCounts, PassCosts, PromptLookup, worth_checking


def naive_draft(history: list[int], limit: int, longest: int, shortest: int) -> list[int]:
    """The rule written the slow way: for n from longest down, the last earlier position
    whose n tokens equal the history's last n, and what followed it."""
    for n in range(longest, shortest - 1, -1):
        if len(history) <= n:
            continue
        tail = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):
            if history[start : start + n] == tail:
                return history[start + n : start + n + limit]
    return []


@pytest.mark.parametrize(
    ("history", "limit", "expected"),
    [
        # The last 2 tokens (3, 4) stood before, followed by 5 6 7.
        ([1, 2, 3, 4, 5, 6, 7, 9, 3, 4], 3, [5, 6, 7]),
        # Fewer tokens follow than the limit: what there is.
        ([1, 2, 3, 4, 9, 3, 4], 8, [9, 3, 4]),
        # A longer match wins over a more recent shorter one: (1 2 3 4) is at 0, (3 4) at 6.
        ([1, 2, 3, 4, 5, 0, 3, 4, 6, 1, 2, 3, 4], 2, [5, 0]),
        # Of two occurrences of the same n-gram, the most recent.
        ([7, 8, 1, 0, 7, 8, 2, 0, 7, 8], 1, [2]),
        # No earlier occurrence of even the last 2 tokens.
        ([1, 2, 3, 4, 5], 4, []),
        # A single repeated token is no match (the shortest n-gram is 2)...
        ([5, 1, 2, 5], 4, []),
        # ...but a run of it is, and the draft runs on into the history's own end.
        ([5, 5, 5], 4, [5]),
        ([], 4, []),
        ([1, 2, 1, 2], 0, []),
    ],
)
def test_a_draft_is_what_followed_the_most_recent_longest_match(
    history: list[int], limit: int, expected: list[int]
) -> None:
    assert PromptLookup(history).draft(limit) == expected


def test_tokens_appended_are_found_as_the_prompt_is() -> None:
    """The index the prompt builds at once and the one tokens add one by one agree."""
    rng = random.Random(3)
    tokens = [rng.randrange(6) for _ in range(400)]
    grown = PromptLookup(tokens[:50])
    for i in range(50, len(tokens)):
        assert (
            grown.draft(6) == PromptLookup(tokens[:i]).draft(6) == naive_draft(tokens[:i], 6, 4, 2)
        )
        grown.append(tokens[i])
    assert list(grown.history) == tokens


@pytest.mark.parametrize(("longest", "shortest"), [(4, 2), (3, 3), (6, 1)])
def test_random_histories_match_the_rule(longest: int, shortest: int) -> None:
    rng = random.Random(longest * 10 + shortest)
    for _ in range(200):
        history = [rng.randrange(4) for _ in range(rng.randrange(0, 40))]
        lookup = PromptLookup(history, longest=longest, shortest=shortest)
        assert lookup.draft(5) == naive_draft(history, 5, longest, shortest)


def test_a_copied_region_is_drafted_in_full() -> None:
    """A rewrite: once the answer starts repeating a region of the prompt, each draft is the
    rest of the region (up to the limit), so a copy takes one check per `limit` tokens."""
    region = list(range(100, 160))
    prompt = [1, 2, 3, *region, 4, 5]
    lookup = PromptLookup(prompt)
    lookup.extend(region[:3])
    checks = 0
    while len(lookup.history) < len(prompt) + len(region):
        rest = region[len(lookup.history) - len(prompt) :]
        draft = lookup.draft(8)
        # Past the region's end the draft goes on with what followed it in the prompt.
        assert draft[: len(rest)] == rest[:8]
        lookup.extend(draft[: len(rest)])
        checks += 1
    assert checks == -(-(len(region) - 3) // 8)


def test_lengths_are_checked() -> None:
    with pytest.raises(ValueError, match="n-gram lengths"):
        PromptLookup([1, 2], longest=2, shortest=3)
    with pytest.raises(ValueError, match="n-gram lengths"):
        PromptLookup([1, 2], longest=2, shortest=0)


def test_counts_subtract() -> None:
    later = DraftCounts(steps=10, drafted=30, accepted=12)
    earlier = DraftCounts(steps=4, drafted=10, accepted=2)
    assert later - earlier == DraftCounts(steps=6, drafted=20, accepted=10)


def costs(*seconds: float) -> PassCosts:
    """Passes of 1, 2, ... tokens taking these seconds."""
    known = PassCosts()
    for tokens, took in enumerate(seconds, start=1):
        known.record(tokens, took)
    return known


@pytest.mark.parametrize(
    ("proposed", "rate", "passes", "expected"),
    [
        # A pass of several tokens costs what one does: every token is worth checking.
        (4, 0.5, costs(1, 1, 1, 1, 1), 4),
        # It costs its tokens' worth: checking k tokens writes fewer than k + 1 on average.
        (4, 0.95, costs(1, 2, 3, 4, 5), 0),
        # Costs between: the drafts must mostly stand (Gemma's 3-token pass, 3.8 times).
        (2, 0.95, costs(12.2, 28.3, 45.8), 0),
        # SmolLM2's passes here: 7 of 8 draft tokens, since a pass of 8 costs less than one
        # of 7 or 9 (the kernels take rows 4 at a time).
        (8, 0.95, costs(6.2, 13.5, 17.8, 17.5, 22.0, 21.8, 25.8, 24.1, 28.1), 7),
        (8, 0.5, costs(6.2, 13.5, 17.8, 17.5, 22.0, 21.8, 25.8, 24.1, 28.1), 0),
        # A check that pays on paper by less than the costs' noise (MARGIN) is not made.
        (1, 0.1, costs(1, 1), 0),
        (1, 0.2, costs(1, 1), 1),
        # A size never measured is not checked, nor any past it.
        (4, 0.95, costs(1, 1), 1),
        (4, 0.95, PassCosts(), 0),
        (0, 0.95, costs(1, 1), 0),
    ],
)
def test_a_draft_is_checked_as_far_as_it_promises_the_most_tokens_per_second(
    proposed: int, rate: float, passes: PassCosts, expected: int
) -> None:
    assert worth_checking(proposed, rate, passes) == expected


def test_pass_costs_are_the_least_seen() -> None:
    """A busy moment makes a pass slower; what it costs the machine is the least time seen."""
    passes = costs(10.0, 20.0)
    assert passes.ratio(2) == 2.0
    assert passes.ratio(3) is None
    passes.record(2, 80.0)  # a busy moment
    assert passes.ratio(2) == 2.0
    passes.record(1, 8.0)
    assert passes.ratio(2) == 2.5


def test_acceptance_learns_from_drafts_checked_and_not() -> None:
    acceptance = Acceptance()
    assert acceptance.rate == 0.5  # as many stood as broke, before anything was seen
    acceptance.observe(8, 8)
    assert acceptance.rate > 0.8
    broken = Acceptance()
    broken.observe(8, 0)
    assert broken.rate < 0.5
    # A draft not checked is judged by the tokens written after it: 2 of 3 stood.
    watched = Acceptance()
    watched.watch([7, 8, 9])
    watched.watch([1, 2])  # one at a time: the first is still being judged
    for token in (7, 8, 5):
        watched.written(token)
    expected = Acceptance()
    expected.observe(3, 2)
    assert watched.rate == expected.rate
    watched.written(1)  # nothing watched now: nothing changes
    assert watched.rate == expected.rate
