"""Drafts from the document (prompt lookup): where the text being written repeats text written
before it, in the prompt or earlier in the answer, the tokens that followed there are a guess
at what follows now. A greedy decode checks such a guess in one forward pass instead of writing
it a token at a time (engine/backends/llama_cpp.py); this module makes the guesses
(`PromptLookup`) and says how much of one is worth checking (`worth_checking`).

The rule: find the most recent earlier place where the history's last `longest` tokens
stood, else its last `longest - 1`, down to `shortest`, and propose up to `limit` tokens that
followed there. Longer matches first, because a longer shared run is likelier to go on the
same way; the most recent, because a copy (a next-edit rewrite of its region, a line that
repeats the one above) copies what is nearest.

Each n-gram length has an index from the n-gram to the position after its most recent
occurrence. The prompt's index is built in one pass of C-level `zip`/`dict` (0.5 ms for
2,000 tokens and the three lengths); each new token adds one entry per length. A draft is then
a dictionary look-up per length, whatever the history's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The n-gram lengths tried, longest first. Measured on the answers of bench/drafts.py's cases
#: (Gemma 3 270M, each draft checked against the plain answer): a rewrite writes 5.8 tokens
#: per pass with drafts of up to 8 from 4-grams down to 2-grams, 5.4 from 3-grams, 5.9 from
#: 5-grams; stopping at 3-grams checks 40% fewer draft tokens in vain but writes 10% fewer
#: tokens per pass, going down to single tokens checks 75% more in vain.
LONGEST_NGRAM = 4
SHORTEST_NGRAM = 2
#: How much of the past the acceptance estimate keeps per new observation.
MEMORY = 0.8
#: What is believed of a generation's drafts before any was judged: as many stood as broke.
PRIOR_STOOD = 1.0
PRIOR_BROKE = 1.0
#: How many more tokens per second a checked draft must promise than a pass of one token: a
#: busy machine makes passes of several tokens costlier next to a pass of one than the least
#: times seen say (fewer threads), and a check that barely pays on paper paid nothing
#: measured (Gemma 3 270M, bench/drafts.py: rewrites with 3-token passes at 0.98x).
MARGIN = 1.15


class PromptLookup:
    """The history of one generation (prompt, then the tokens written after it) and its n-gram
    indexes; `draft` proposes what comes next. Not thread-safe: one generation owns it."""

    def __init__(
        self,
        history: Sequence[int],
        *,
        longest: int = LONGEST_NGRAM,
        shortest: int = SHORTEST_NGRAM,
    ) -> None:
        if not 1 <= shortest <= longest:
            raise ValueError(f"n-gram lengths must satisfy 1 <= {shortest} <= {longest}")
        self._tokens = list(history)
        self._lengths = tuple(range(longest, shortest - 1, -1))
        size = len(self._tokens)
        # n-gram -> the position of the token after its most recent occurrence. An n-gram is
        # indexed once the token after it exists: the history's own last n tokens never are,
        # so a look-up finds an earlier place. Later occurrences overwrite earlier ones.
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: dict(
                zip(
                    zip(*(self._tokens[k : size - n + k] for k in range(n)), strict=True),
                    range(n, size),
                    strict=True,
                )
            )
            if size > n
            else {}
            for n in self._lengths
        }

    @property
    def history(self) -> Sequence[int]:
        """The prompt and the tokens appended since (the list itself: not to be changed)."""
        return self._tokens

    def append(self, token: int) -> None:
        """One more token of the answer."""
        tokens = self._tokens
        tokens.append(token)
        follower = len(tokens) - 1
        for n, index in self._index.items():
            if follower >= n:
                index[tuple(tokens[follower - n : follower])] = follower

    def extend(self, tokens: Iterable[int]) -> None:
        """More tokens of the answer, in order."""
        for token in tokens:
            self.append(token)

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the most recent earlier occurrence of the
        history's last n tokens, for the longest n that has one; none if none has."""
        if limit <= 0:
            return []
        tokens = self._tokens
        for n in self._lengths:
            if len(tokens) <= n:
                continue
            at = self._index[n].get(tuple(tokens[-n:]))
            if at is not None:
                return tokens[at : at + limit]
        return []


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftCounts:
    """What drafting did, counted since a model was loaded: forward passes of greedy decoding
    (`steps`), draft tokens checked in them, and those that stood. For benchmarks and tests."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0

    def __sub__(self, before: DraftCounts) -> DraftCounts:
        return DraftCounts(
            steps=self.steps - before.steps,
            drafted=self.drafted - before.drafted,
            accepted=self.accepted - before.accepted,
        )


class PassCosts:
    """Seconds of one forward pass by how many tokens it evaluates, on this machine: the least
    seen for each size, which is what the pass costs the machine itself; a busy moment only
    hides it. (Moving averages were tried: sizes measured at different moments then compared
    a busy moment with a quiet one, and Gemma 3's rewrites checked drafts at 0.83x the speed.)
    A size never measured is unknown, and a draft that needs it is not checked."""

    def __init__(self) -> None:
        self._seconds: dict[int, float] = {}

    def record(self, tokens: int, seconds: float) -> None:
        self._seconds[tokens] = min(seconds, self._seconds.get(tokens, seconds))

    def ratio(self, tokens: int) -> float | None:
        """A pass of `tokens` tokens over a pass of one; None while either is unknown."""
        one, this = self._seconds.get(1), self._seconds.get(tokens)
        if one is None or this is None or one <= 0:
            return None
        return this / one

    def known(self) -> dict[int, float]:
        """The seconds per size (a copy). For logs and benchmarks."""
        return dict(self._seconds)


class Acceptance:
    """How likely a draft token stands once the one before it stood, in one generation: the
    tokens that stood against the drafts that broke, recent ones weighing more (a rewrite
    copies its region, then writes its change). Drafts that were not checked are judged too,
    by the tokens written after them (`watch`, `written`), so that a generation that stopped
    checking learns when checking would pay again."""

    def __init__(self) -> None:
        self._stood = PRIOR_STOOD
        self._broke = PRIOR_BROKE
        self._watched: list[int] = []
        self._hits = 0

    @property
    def rate(self) -> float:
        return self._stood / (self._stood + self._broke)

    def observe(self, checked: int, stood: int) -> None:
        """`stood` of a draft's first `checked` tokens stood."""
        self._stood = MEMORY * self._stood + stood
        self._broke = MEMORY * self._broke + (1 if stood < checked else 0)

    def watch(self, draft: Sequence[int]) -> None:
        """A draft that was not checked: the tokens written next judge it (one at a time)."""
        if not self._watched and draft:
            self._watched = list(draft)
            self._hits = 0

    def written(self, token: int) -> None:
        """The next token written."""
        if not self._watched:
            return
        if self._watched[self._hits] == token:
            self._hits += 1
            if self._hits < len(self._watched):
                return
        self.observe(len(self._watched), self._hits)
        self._watched = []


def worth_checking(proposed: int, rate: float, costs: PassCosts) -> int:
    """How many of a draft's first `proposed` tokens to check with the next token: the number
    that promises the most tokens per second, if each stands with probability `rate` once the
    one before it stood; 0 where none beats a pass of one token by `MARGIN` (or the costs are
    unknown).

    Checking k tokens writes 1 + rate + ... + rate^k tokens on average, for a pass of k + 1
    tokens. On 2 CPU cores a pass of 9 tokens costs 4.5 times a pass of one for SmolLM2-135M,
    a pass of 3 already 3.8 times for Gemma 3 270M (its output layer, a 262,144-token
    vocabulary, is computed for every token), so only drafts that mostly stand pay; where a
    pass of several tokens costs about what one does (a GPU, by llama.cpp's design; not yet
    measured), any does.
    """
    best_rate, best = MARGIN, 0
    expected, term = 1.0, 1.0
    for k in range(1, proposed + 1):
        term *= rate
        expected += term
        ratio = costs.ratio(k + 1)
        if ratio is None:
            break
        if expected / ratio > best_rate:
            best_rate, best = expected / ratio, k
    return best
