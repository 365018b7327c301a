"""The HTTP side of the remote backend: the client and its timeouts, and reading one streamed
choice of an OpenAI-compatible server (server-sent events) into what the request handles: pieces
of text, then the choice's end or a failure that names the endpoint and the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from engine.specs import RemoteSpec
from engine.types import FinishReason

#: Seconds to open a connection, and to wait for the next piece of an answer (a busy cluster
#: or a CPU server evaluating a long prompt may take a while for the first one).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 120.0
#: Bytes of an error answer read to find its message.
ERROR_BODY_BYTES = 16_384


def new_client(endpoint: str) -> httpx.AsyncClient:
    """A connection pool for `endpoint`, with our timeouts."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
        # Loading the CA certificates takes 25-55 ms, for nothing on plain http (and on the
        # first keystroke): only an https endpoint gets them.
        verify=endpoint.startswith("https:"),
    )


def headers(spec: RemoteSpec) -> dict[str, str]:
    """The headers every request to the server carries (its API key)."""
    return {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}


def status(response: httpx.Response) -> str:
    """An answer's status in words ("404 Not Found")."""
    return f"{response.status_code} {response.reason_phrase}".strip()


def error_message(content: bytes) -> str:
    """The message of an error answer: OpenAI's `{"error": {"message"}}`, FastAPI's
    `{"detail"}`, or the text itself, shortened."""
    text = content[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        body = json.loads(text)
        if isinstance(body, dict):
            error = body.get("error", body.get("detail"))
            if isinstance(error, dict) and error.get("message"):
                return str(error["message"])
            if error:
                return str(error)
    return (text[:300] + "…" if len(text) > 300 else text) or "no message"


def describe(error: httpx.HTTPError) -> str:
    """A connection-level failure in words."""
    if isinstance(error, httpx.ConnectTimeout):
        return f"no connection within {CONNECT_TIMEOUT:g} s"
    if isinstance(error, httpx.ConnectError):
        return f"cannot connect ({error})"
    if isinstance(error, httpx.ReadTimeout):
        return f"nothing came for {READ_TIMEOUT:g} s"
    if isinstance(error, httpx.RemoteProtocolError):
        return f"the connection broke mid-answer ({error})"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


# --- what a stream's reader hands to the request ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Piece:
    text: str


@dataclass(frozen=True, slots=True)
class End:
    """The server ended the choice."""

    reason: FinishReason
    stop_reason: str | int | None


@dataclass(frozen=True, slots=True)
class PieceThenEnd:
    text: str
    end: End


@dataclass(frozen=True, slots=True)
class Failed:
    message: str


@dataclass(slots=True)
class Usage:
    """The tokens the server says a request took, over its choices."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0


class ChoiceReader:
    """Reads the streamed choices of one server (`spec`), and learns from them whether it says
    which stop string ended a choice (`reports_stop_reason`; then it gets ours)."""

    def __init__(self, spec: RemoteSpec, *, reports_stop_reason: bool) -> None:
        self.spec = spec
        self.reports_stop_reason = reports_stop_reason

    async def read(
        self,
        client: httpx.AsyncClient,
        path: str,
        body: dict[str, Any],
        queue: asyncio.Queue[object],
        usage: Usage,
    ) -> None:
        """Stream one choice from the server into `queue`: pieces, then its end or failure."""
        endpoint = self.spec.endpoint
        chat = path == "/chat/completions"
        response: httpx.Response | None = None
        ended = False
        try:
            request = client.build_request(
                "POST", endpoint + path, json=body, headers=headers(self.spec)
            )
            response = await client.send(request, stream=True)
            if response.status_code >= 400:
                content = b""
                async for chunk in response.aiter_bytes():
                    content += chunk
                    if len(content) >= ERROR_BODY_BYTES:
                        break
                queue.put_nowait(
                    Failed(f"{endpoint} answered {status(response)}: {error_message(content)}")
                )
                return
            async for line in response.aiter_lines():
                if ended:
                    continue  # read to the end: an answer read whole keeps its connection
                item = self._event(line, chat, usage)
                if item is None:
                    continue
                queue.put_nowait(item)
                ended = not isinstance(item, Piece)
            if not ended:
                queue.put_nowait(
                    Failed(f"{endpoint} ended the answer without saying why it stopped")
                )
        except httpx.HTTPError as e:
            if not ended:
                queue.put_nowait(Failed(f"{endpoint}: {describe(e)}"))
        finally:
            if response is not None:
                # Shielded: a cancel that lands while the response closes would leave its
                # connection counted as in use for good (httpcore shields with anyio, which a
                # plain task.cancel() goes through), and after 100 of them every request
                # would wait for the pool.
                await asyncio.shield(response.aclose())

    def _event(self, line: str, chat: bool, usage: Usage) -> object | None:
        """What one line of the event stream means: a piece, the end, a failure, or nothing."""
        endpoint = self.spec.endpoint
        if not line.startswith("data:"):
            return None  # blank separators, comments (keep-alives), event names
        data = line[5:].strip()
        if data == "[DONE]":
            return End(FinishReason.STOP, None)  # a server that never said why: it is done
        try:
            event = json.loads(data)
        except ValueError:
            return Failed(f"{endpoint} sent an event that is not JSON: {data[:200]}")
        if not isinstance(event, dict):
            return None
        if "error" in event:
            return Failed(f"{endpoint} failed: {error_message(data.encode())}")
        if isinstance(event.get("usage"), dict):
            _take_usage(event["usage"], usage)
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        choice = choices[0]
        if chat:
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
        else:
            text = choice.get("text")
        finish = choice.get("finish_reason")
        if finish is None:
            return Piece(text) if isinstance(text, str) and text else None
        if "stop_reason" in choice:
            self.reports_stop_reason = True
        if isinstance(text, str) and text:
            # A last piece and the end in one event: hand over both, in order.
            return PieceThenEnd(text, _end(finish, choice.get("stop_reason")))
        return _end(finish, choice.get("stop_reason"))


def _end(finish: object, stop_reason: object) -> End:
    reason = FinishReason.LENGTH if finish == "length" else FinishReason.STOP
    return End(reason, stop_reason if isinstance(stop_reason, str | int) else None)


def _take_usage(raw: Mapping[str, Any], usage: Usage) -> None:
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if isinstance(prompt, int):
        usage.prompt_tokens = prompt
    if isinstance(completion, int):
        usage.completion_tokens += completion
