"""Deadlines on the engine server's connections, which uvicorn does not have: a slow or
silent client cannot hold a socket (and the coroutine behind it) forever.

uvicorn closes a connection that stays idle `timeout_keep_alive` seconds after an answer, but
any byte restarts that wait, and nothing bounds the wait for a request's head or body: 200
sockets trickling a header line each were all still open after 25 s. Here the
h11 protocol gets three deadlines:

- the head: a request line and its headers, complete within `head_seconds` of the connection
  (or of the previous answer);
- the body: complete within `body_seconds` of its head (whether the route reads it or not);
- the send: a client whose socket stays full (it does not read the answer, say an event
  stream) for `send_seconds` is cut off, which cancels its generation (`streaming`).

A deadline missed closes the connection: the client gets no answer, as from a server that
went away, and the route sees a disconnect.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadlines:
    """Seconds a client gets for each part of a request."""

    head_seconds: float = 10.0
    body_seconds: float = 30.0
    send_seconds: float = 30.0


def protocol_with(deadlines: Deadlines) -> type[H11Protocol]:
    """uvicorn's h11 protocol with `deadlines` (uvicorn makes one per connection)."""

    class Protocol(DeadlineProtocol):
        DEADLINES = deadlines

    return Protocol


class DeadlineProtocol(H11Protocol):
    """H11Protocol with a head, a body and a send deadline. The timers read uvicorn's state:
    a new request is a new `cycle`; a body still coming is `cycle.more_body`."""

    DEADLINES = Deadlines()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._seen_cycle: object = None

    # --- the head and the body ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._notice_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined request may have started in there; else the next head has its deadline.
        if not self._notice_request() and not self.transport.is_closing():
            self._wait_for_head()

    def _wait_for_head(self) -> None:
        _cancel(self._head_timer)
        cycle = self.cycle
        self._head_timer = self.loop.call_later(
            self.DEADLINES.head_seconds, self._head_missed, cycle
        )

    def _head_missed(self, cycle: object) -> None:
        if self.cycle is cycle:  # no request began since
            self.transport.close()

    def _notice_request(self) -> bool:
        """Whether a request began since last seen: then its head has come, its body has
        its own deadline."""
        cycle = self.cycle
        if cycle is None or cycle is self._seen_cycle:
            return False
        self._seen_cycle = cycle
        _cancel(self._head_timer)
        _cancel(self._body_timer)
        self._body_timer = self.loop.call_later(
            self.DEADLINES.body_seconds, self._body_missed, cycle
        )
        return True

    def _body_missed(self, cycle: object) -> None:
        if self.cycle is cycle and self.cycle.more_body:
            self.transport.close()

    # --- the send ----------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.DEADLINES.send_seconds, self._send_missed)

    def resume_writing(self) -> None:
        super().resume_writing()
        _cancel(self._send_timer)
        self._send_timer = None

    def _send_missed(self) -> None:
        # close() would wait to write what the client never reads.
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer, self._send_timer):
            _cancel(timer)
        super().connection_lost(exc)


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()
