"""The KV states of recently used prompts, kept in memory so that going back to a document costs
what a keystroke costs.

A backend has one live KV cache: the one its model computes in. When a request's prompt shares
little with it (the user went to another file), the live state is set aside here, under the
key of the document it belongs to, and the kept state that shares the longest token prefix
with the new prompt, if one shares more than the live cache does, becomes live again. States
are evicted least recently used once their bytes exceed the budget.

The backend decides what a state is (llama.cpp: the sequence's serialized bytes in RAM;
transformers: the `DynamicCache` itself, or a copy of a static cache's used part) and how to
save and restore it; this module decides what is kept and which state a prompt starts from, and
engine/local_backend.py carries that out. It runs on the model's worker thread; the published
`CacheStatus` is frozen, so any thread may read it.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

S = TypeVar("S")

#: A kept state is restored only when it saves at least this many more prompt tokens than the
#: live cache does: below that, evaluating them costs less than restoring it.
RESTORE_MARGIN = 16
#: Shorter states are not worth keeping (a BOS and a comment line).
MIN_KEPT_TOKENS = 32
#: The default budget holds this many full contexts of the model...
DEFAULT_CONTEXTS = 16
#: ... but never more than this share of the machine's memory.
DEFAULT_MEMORY_SHARE = 1 / 8


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheStatus:
    """What is kept: reported by `infill/status` and the benchmarks."""

    states: int  # kept states, not counting the live one
    tokens: int  # their tokens
    bytes: int  # their size
    budget_bytes: int  # the most they may take (0 until the budget is known)
    live_tokens: int  # tokens in the live cache
    restored: int  # kept states made live again since the model loaded
    evicted: int  # states dropped to stay within the budget


@dataclass(slots=True)
class _Kept(Generic[S]):
    key: str | None
    tokens: tuple[int, ...]
    state: S
    nbytes: int


@dataclass(frozen=True, slots=True)
class Plan(Generic[S]):
    """Where a prompt starts: what to do with the live cache, and how much of it is shared."""

    save_live: bool  # set the live state aside (under the live key) before anything else
    restore: S | None  # make this kept state live
    restore_tokens: tuple[int, ...]  # the tokens the restored state holds
    shared: int  # prompt tokens the cache holds once the plan is carried out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    if type(a) is not type(b):  # a list never equals a tuple: compare like with like
        a, b = tuple(a), tuple(b)
    n = min(len(a), len(b))
    # Whole blocks first (slices compare in C), then token by token in the first unequal one:
    # tens of microseconds for a 2,000-token prompt instead of a millisecond.
    i = 0
    while i < n and a[i : i + _BLOCK] == b[i : i + _BLOCK]:
        i += _BLOCK
    i = min(i, n)
    while i < n and a[i] == b[i]:
        i += 1
    return i


_BLOCK = 64


#: Between a client's name and its document's key in the key a state is kept under: no
#: client's name has it (engine/types.py `CLIENT_NAME`).
_CLIENT_SEPARATOR = "|"


def kept_key(client: str | None, cache_key: str | None) -> str | None:
    """The key a document's KV state is kept under: the document's (`cache_key`), within its
    client's (editor window's) where the request names one.

    Two windows may send one key at two versions (one file open in both, one with unsaved
    edits). Under one key each would take the other's kept state as its document's: the
    live cache would not be set aside when the other window asks (the same key is no other
    document), and `keep` would drop one window's state for the other's newest. Every switch
    between the windows would evaluate the document again from where the versions part.
    Scoped, each window's state is kept and restored on its own; a state is still found for
    another client's prompt by the tokens it shares (`PrefixCache._best` ranks by shared
    tokens first), so one version open in two windows is evaluated once. The budget stays one
    for all clients: a window's states are evicted as anyone's, least recently used first.
    """
    if client is None or cache_key is None:
        return cache_key
    return f"{client}{_CLIENT_SEPARATOR}{cache_key}"


def physical_memory() -> int | None:
    """The machine's memory in bytes, where the system says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_budget(bytes_per_token: int, context_size: int) -> int:
    """`DEFAULT_CONTEXTS` full contexts of the model, at most `DEFAULT_MEMORY_SHARE` of the
    machine's memory: a small model keeps dozens of documents, a 7B model fewer, and neither
    takes the memory the editor needs."""
    wanted = bytes_per_token * context_size * DEFAULT_CONTEXTS
    memory = physical_memory()
    return wanted if memory is None else min(wanted, int(memory * DEFAULT_MEMORY_SHARE))


class PrefixCache(Generic[S]):
    """Kept KV states, least recently used first, within a budget of bytes.

    `budget_bytes`: the budget; None sizes it from the model once the backend knows the bytes
    a token takes (`size_budget`); 0 keeps nothing (one live cache, as before).
    """

    def _drop(self, entry_id: int) -> None:
        entry = self._kept.pop(entry_id)
        self._bytes -= entry.nbytes
        if self._on_drop is not None:
            self._on_drop(entry.state)

    def __init__(
        self, budget_bytes: int | None = None, on_drop: Callable[[S], None] | None = None
    ) -> None:
        self._budget = budget_bytes
        #: Told of each state the store lets go of without handing it back (evicted,
        #: replaced): the backend may reuse its memory.
        self._on_drop = on_drop
        self._kept: collections.OrderedDict[int, _Kept[S]] = collections.OrderedDict()
        self._next_id = 0
        self._bytes = 0
        self._restored = 0
        self._evicted = 0
        self.live_key: str | None = None
        self.status = self._status(0)

    @property
    def budget_bytes(self) -> int | None:
        return self._budget

    def size_budget(self, bytes_per_token: int, context_size: int) -> None:
        """Set the default budget, if none was given, from what one token's state takes."""
        if self._budget is None and bytes_per_token > 0:
            self._budget = default_budget(bytes_per_token, context_size)

    def plan(self, prompt: Sequence[int], key: str | None, live: Sequence[int]) -> Plan[S]:
        """Where `prompt` (for the document `key`) starts, given the live cache's tokens.

        The live state is set aside when it belongs to another document, or (without keys)
        when the prompt would discard most of it. A kept state is restored when it shares at
        least `RESTORE_MARGIN` more tokens with the prompt than the live cache; it leaves the
        store (it is live now, and is kept again when something else needs the cache).
        """
        prompt, live = tuple(prompt), tuple(live)
        live_shared = common_prefix(live, prompt)
        best_id, best_shared = self._best(prompt, key)
        restore = best_id is not None and best_shared >= live_shared + RESTORE_MARGIN
        leaving = self.live_key != key if key is not None else live_shared * 2 < len(live)
        save_live = (
            len(live) >= MIN_KEPT_TOKENS
            and self._budget != 0
            and (restore or (leaving and live_shared < len(live)))
        )
        if not restore or best_id is None:
            return Plan(save_live=save_live, restore=None, restore_tokens=(), shared=live_shared)
        entry = self._kept.pop(best_id)
        self._bytes -= entry.nbytes
        self._restored += 1
        self.status = self._status(len(live))
        return Plan(
            save_live=save_live,
            restore=entry.state,
            restore_tokens=entry.tokens,
            shared=best_shared,
        )

    def _best(self, prompt: tuple[int, ...], key: str | None) -> tuple[int | None, int]:
        """The kept state that shares the most leading tokens with `prompt`, and how many."""
        best_id, best_shared, best_rank = None, 0, (0, False)
        for entry_id, entry in self._kept.items():
            shared = common_prefix(entry.tokens, prompt)
            # Among equals, the prompt's own document, then the most recently kept (the
            # store runs from least to most recently kept).
            rank = (shared, key is not None and entry.key == key)
            if shared > 0 and rank >= best_rank:
                best_id, best_shared, best_rank = entry_id, shared, rank
        return best_id, best_shared

    def read(
        self, prompt: Sequence[int], key: str | None, live_shared: int
    ) -> tuple[S, tuple[int, ...], int] | None:
        """The kept state to start `prompt` from beside the live cache (which shares
        `live_shared` of its tokens), its tokens and how many it shares; None where none
        shares `RESTORE_MARGIN` more. It stays in the store (it is only copied from), as the
        most recently used."""
        best_id, best_shared = self._best(tuple(prompt), key)
        if best_id is None or best_shared < live_shared + RESTORE_MARGIN:
            return None
        self._kept.move_to_end(best_id)
        entry = self._kept[best_id]
        return entry.state, entry.tokens, best_shared

    def keep(self, key: str | None, tokens: Sequence[int], state: S, nbytes: int) -> None:
        """Keep a state the live cache held (the newest of its document's)."""
        if key is not None:
            for entry_id in [i for i, e in self._kept.items() if e.key == key]:
                self._drop(entry_id)
        tokens = tuple(tokens)
        # A state that only extends another kept one makes that one useless.
        for entry_id in [
            i
            for i, e in self._kept.items()
            if len(e.tokens) <= len(tokens) and tokens[: len(e.tokens)] == e.tokens
        ]:
            self._drop(entry_id)
        if self._budget is not None and nbytes > self._budget:
            self.status = self._status(self.status.live_tokens)
            if self._on_drop is not None:
                self._on_drop(state)
            return
        self._kept[self._next_id] = _Kept(key=key, tokens=tokens, state=state, nbytes=nbytes)
        self._next_id += 1
        self._bytes += nbytes
        while self._budget is not None and self._bytes > self._budget and self._kept:
            self._drop(next(iter(self._kept)))
            self._evicted += 1
        self.status = self._status(self.status.live_tokens)

    def set_live(self, key: str | None, tokens: int) -> None:
        """The live cache now belongs to `key` and holds `tokens` tokens."""
        self.live_key = key
        if tokens != self.status.live_tokens:
            self.status = self._status(tokens)

    def clear(self) -> None:
        self._kept.clear()
        self._bytes = 0
        self.live_key = None
        self.status = self._status(0)

    def _status(self, live_tokens: int) -> CacheStatus:
        return CacheStatus(
            states=len(self._kept),
            tokens=sum(len(e.tokens) for e in self._kept.values()),
            bytes=self._bytes,
            budget_bytes=self._budget or 0,
            live_tokens=live_tokens,
            restored=self._restored,
            evicted=self._evicted,
        )
