"""A client that goes away stops its work at once: `until_disconnect` for a whole answer,
`EventStream` for a server-sent event stream.

Plain ASGI, no engine: the work is an awaitable, the stream an async generator; closing what
generates the answer (`Engine.generate`) is what aborts the engine job, within one token.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client has gone (the body was read before)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """`await work`, cancelled if the client disconnects first (then ClientGone). Both tasks
    have ended on every way out, a cancellation of the caller included (which goes on)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watch):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
    if task not in done:
        raise ClientGone
    return task.result()


class EventStream(StreamingResponse):
    """A `text/event-stream` response that stops its generator the moment the client goes.

    Starlette's StreamingResponse, under ASGI 2.4 servers, notices a disconnect only when a
    write fails, and then leaves its generator to the garbage collector; here a disconnect
    cancels the pump at once, and the generators are closed on every way out, so the engine
    job is aborted within one token.
    """

    def __init__(
        self, events: AsyncGenerator[bytes, None], *, on_close: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._events = events
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            # A write to a client that has gone may fail before its disconnect is read.
            with contextlib.suppress(ClientGone, OSError):
                await until_disconnect(receive, self._pump(send))
        finally:
            await self._events.aclose()
            await self._on_close()

    async def _pump(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for event in self._events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
