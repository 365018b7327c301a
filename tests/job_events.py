"""Waiting for the engine's own events instead of sleeping: a sleep long enough for a loaded machine
slows every run, and one short enough to be quick flakes under load; events make a test pass in any
order and at any load.

- `JobWatch`: the phases an engine's job record announces (submitted, generating, ended),
  brought onto the test's event loop; a test waits for those of its own request ids.
- `TokenGate`: a scripted backend's `on_step` hook that tells the event loop when a call is
  about to yield its k-th token, and can hold the "model" right there until the test lets it go, so
  that "the job is running when X happens" is certain, not likely.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from fake_backend import FakeCall

from engine.jobs import JobEvent, JobPhase, JobRecord, JobStats

#: Only keeps a broken engine from hanging the suite; nothing is asserted about how long.
GIVE_UP_AFTER = 60.0


class JobWatch:
    """Every job event of `record` from now on, delivered on the running event loop."""

    def __init__(self, record: JobRecord) -> None:
        self._loop = asyncio.get_running_loop()
        self.events: list[JobEvent] = []
        self._changed = asyncio.Event()
        self._stop = record.watch(self._on_event)

    def _on_event(self, event: JobEvent) -> None:  # any thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._arrive, event)

    def _arrive(self, event: JobEvent) -> None:
        self.events.append(event)
        self._changed.set()

    async def reached(
        self, phase: JobPhase, request_id: str | None = None, *, document: str | None = None
    ) -> JobEvent:
        """The first event of `phase` for `request_id` (or for any job of `document`)."""

        def matches(event: JobEvent) -> bool:
            return (
                event.phase is phase
                and (request_id is None or event.request_id == request_id)
                and (document is None or event.cache_key == document)
            )

        async with asyncio.timeout(GIVE_UP_AFTER):
            while True:
                found = next((e for e in self.events if matches(e)), None)
                if found is not None:
                    return found
                self._changed.clear()
                await self._changed.wait()

    async def ended(self, request_id: str) -> JobStats:
        """The figures of `request_id`'s job once it has ended (it must have run)."""
        event = await self.reached(JobPhase.ENDED, request_id)
        assert event.stats is not None, f"{request_id} ended without running"
        return event.stats

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> JobWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TokenGate:
    """A `FakeBackend.on_step` hook: `reached` is set (on the event loop) when a call is about
    to yield its `at`-th token (the worker has had `at - 1`); with `hold`, that call then
    waits there until `release()`; with `until_cancelled`, until its job is cancelled (the
    cancel then comes while the "model" computes that token, whenever the test's code gets
    round to it).

    Only the first call that reaches `at` tokens is held, so that a job let go, or a later
    job, runs freely. `also` is called on every step, for a test's own bookkeeping.
    """

    def __init__(
        self,
        at: int = 1,
        *,
        hold: bool = False,
        until_cancelled: bool = False,
        also: Callable[[FakeCall], None] | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.at = at
        self.hold = hold
        self.until_cancelled = until_cancelled
        self.also = also
        self.reached = asyncio.Event()
        self._released = threading.Event()
        self._fired = False

    def __call__(self, call: FakeCall) -> None:  # on the worker thread
        if self.also is not None:
            self.also(call)
        if self._fired or call.yielded != self.at:
            return
        self._fired = True
        self._loop.call_soon_threadsafe(self.reached.set)
        # Bounded: a test that fails before releasing must not hang the worker forever.
        if self.until_cancelled:
            assert call.cancelled is not None
            call.cancelled.wait(GIVE_UP_AFTER)
        elif self.hold:
            self._released.wait(GIVE_UP_AFTER)

    def release(self) -> None:
        self._released.set()

    async def wait(self) -> None:
        async with asyncio.timeout(GIVE_UP_AFTER):
            await self.reached.wait()
