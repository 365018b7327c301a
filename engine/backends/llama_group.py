"""Greedy generations of several requests advanced together in one llama.cpp context: the
llama.cpp `StepGroup` (engine/backend.py; the worker forms groups, engine/worker.py).

Each member is a sequence beside the live one (engine/backends/llama_context.py). A member
starts from whichever shares more of its history: the live cache (its cells are shared, not
copied) or a kept document's state (copied in; it stays in the store), and the rest of its
history is evaluated in its own sequence. The live cache and the kept documents are only read
while the group exists, so nothing a later request finds there has changed.

Every pass has a multiple of `ROW_GROUP` rows, as branches do (`LlamaContext.branches`): where
the members are fewer, filler sequences (copies of a member, their tokens dropped) make up
the rest. llama.cpp's CPU kernels multiply 4 rows at a time and a pass's last 1-3 rows one by
one, with other rounding; in whole groups a member's tokens do not depend on how many other
requests share its passes, nor on which.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.backend import Joined, StepGroup, StepRefusedError
from engine.backends.llama_context import LIVE_SEQUENCE, SequencesRefusedError, padded_rows
from engine.prefix_cache import common_prefix

if TYPE_CHECKING:
    from engine.backends.llama_context import LlamaContext, State
    from engine.prefix_cache import PrefixCache

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Lane:
    """A sequence of the group: the token its next row evaluates, and that token's position."""

    seq: int
    pending: int
    position: int
    #: Cells it may take of its own (its history beyond what it shares, and what it may
    #: still write): what joining counts against the cache's room.
    cells: int


class LlamaStepGroup(StepGroup):
    """A group of up to `capacity` members in `context`, starting from its live cache or
    from the states `kept`."""

    def __init__(self, context: LlamaContext, kept: PrefixCache[State], capacity: int) -> None:
        self.capacity = capacity
        self._context = context
        self._kept = kept
        self._free = list(range(LIVE_SEQUENCE + 1, LIVE_SEQUENCE + 1 + context.sequences))
        self._members: dict[int, _Lane] = {}
        self._fillers: list[_Lane] = []
        self.passes = 0

    def join(
        self,
        member: int,
        history: Sequence[int],
        ahead: int,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> tuple[Joined, int]:
        began = time.perf_counter()
        context = self._context
        if len(self._members) >= self.capacity or not history:
            return Joined.NO_ROOM, 0
        before = list(history[:-1])  # what its sequence holds; the last token is its next row
        live = context.tokens()
        shared = common_prefix(live, before)
        kept = self._kept.read(before, cache_key, shared)
        # Its own cells: a kept state's are all copied in (and, for a moment, all of that
        # state's), the live cache's shared. Fillers write a cell a pass beside them, which
        # this does not count: a pass llama.cpp then refuses ends the group (StepRefusedError).
        own = (len(before) if kept is not None else len(before) - shared) + ahead
        needed = max(own, len(kept[1])) if kept is not None else own
        if self._used() + needed > context.cells:
            return Joined.NO_ROOM, 0
        self._trim_fillers(len(self._members) + 1)
        lane = _Lane(seq=self._free.pop(0), pending=history[-1], position=len(before), cells=own)
        start = 0
        if kept is not None:
            start = context.restore_beside(lane.seq, kept[0], kept[2])
        if start == 0:  # no kept state, or llama.cpp refused it: the live cache's cells
            start = shared
            lane.cells = len(before) - shared + ahead
            context.copy_sequence(LIVE_SEQUENCE, lane.seq, shared)
        try:
            done = context.evaluate_beside(lane.seq, before[start:], start, cancelled)
        except SequencesRefusedError:
            log.warning(
                "llama.cpp found no cells for a request joining %d others", len(self._members)
            )
            self._release(lane)
            self._refill()
            return Joined.NO_ROOM, 0
        if not done:
            self._release(lane)
            self._refill()
            return Joined.CANCELLED, 0
        self._members[member] = lane
        self._refill()
        log.debug(
            "joined beside %d: %d tokens from %s, %d evaluated in %.0f ms",
            len(self._members) - 1,
            start,
            "a kept state" if kept is not None and start != shared else "the live cache",
            len(before) - start,
            (time.perf_counter() - began) * 1000,
        )
        return Joined.JOINED, len(history) - start

    def step(self) -> dict[int, tuple[int, float]]:
        lanes = [*self._members.values(), *self._fillers]
        try:
            found = self._context.rows_best([(ln.pending, ln.position, ln.seq) for ln in lanes])
        except SequencesRefusedError as e:
            raise StepRefusedError(str(e)) from e
        self.passes += 1
        for lane, (token, _logprob) in zip(lanes, found, strict=True):
            lane.pending = token
            lane.position += 1
        return {m: found[i] for i, m in enumerate(self._members)}

    def leave(self, member: int) -> None:
        lane = self._members.pop(member, None)
        if lane is not None:
            self._release(lane)
            self._refill()

    def close(self) -> None:
        for lane in [*self._members.values(), *self._fillers]:
            self._release(lane)
        self._members.clear()
        self._fillers.clear()

    # --- lanes -------------------------------------------------------------------------------

    def _used(self) -> int:
        """Cells taken or promised: the live cache's, and each member's own."""
        return self._context.length + sum(ln.cells for ln in self._members.values())

    def _release(self, lane: _Lane) -> None:
        self._context.drop_sequence(lane.seq)
        self._free.insert(0, lane.seq)

    def _trim_fillers(self, members: int) -> None:
        """As many fillers as `members` members need, or fewer (to free their sequences)."""
        wanted = padded_rows(members) - members if members else 0
        while len(self._fillers) > wanted:
            self._release(self._fillers.pop())

    def _refill(self) -> None:
        """Fillers to make the members' rows whole groups: copies of the first member."""
        members = len(self._members)
        self._trim_fillers(members)
        wanted = padded_rows(members) - members if members else 0
        if len(self._fillers) >= wanted:
            return
        source = next(iter(self._members.values()))
        while len(self._fillers) < wanted and self._free:
            seq = self._free.pop(0)
            self._context.copy_sequence(source.seq, seq)
            self._fillers.append(
                _Lane(seq=seq, pending=source.pending, position=source.position, cells=0)
            )
