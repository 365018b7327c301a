"""The HTTP side of the remote backend: the client and its timeouts, and reading one streamed
choice of an OpenAI-compatible server (server-sent events) into what the request handles: pieces
of text, then the choice's end or a failure that names the endpoint and the cause.

A server is trusted with our prompts, not with our memory or our time: whatever it sends, one
answer is read within bounds, each refused with an error naming the endpoint:

- a line of the event stream holds at most MAX_LINE_BYTES (a line that never ends is no event);
- an answer takes at most `AnswerLimits.of(max_tokens)`: bytes and seconds scaled to the tokens
  asked for (keep-alives or empty pieces without end run into one of them);
- after the end, what follows (usage, `[DONE]`) is read for DRAIN_BYTES and DRAIN_SECONDS at
  most, so that the connection goes back to the pool, else the connection is closed;
- bodies are asked for and read uncompressed (a compressed one is refused: a few kilobytes of
  gzip inflate to gigabytes, in one call);
- JSON nested past Python's parser is a failure, not a RecursionError;
- a choice keeps at most one log-probability a token asked for (`max_tokens`): a chunk that
  would take it past loses its log-probabilities (the text stays), and so do the choice's
  later chunks; a chunk whose log-probabilities are not all numbers loses its own;
- every other failure of the reader is delivered too: the request never waits for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine.specs import RemoteSpec
from engine.types import CLIENT_HEADER, FinishReason

log = logging.getLogger(__name__)

#: Seconds to open a connection, and to wait for the next piece of an answer (a busy cluster
#: or a CPU server evaluating a long prompt may take a while for the first one).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 120.0
#: Bytes of an error answer read to find its message.
ERROR_BODY_BYTES = 16_384
#: Bytes of one line of an event stream. An event carries one piece of text: 200-400 bytes
#: as vLLM, llama.cpp's server and ours send them; a megabyte is a whole answer in one event.
MAX_LINE_BYTES = 1 << 20
#: Bytes of an answer: this, plus ANSWER_BYTES_PER_TOKEN for each token asked for (one event a
#: token, 200-400 bytes, and room for the keep-alive comments between them).
ANSWER_BASE_BYTES = 1 << 20
ANSWER_BYTES_PER_TOKEN = 4096
#: Seconds of an answer: the wait for its first piece (READ_TIMEOUT), plus this for each token
#: asked for (2 tokens a second: below what a CPU server makes of a small model).
ANSWER_SECONDS_PER_TOKEN = 0.5
#: What is read after a choice's end to keep its connection: our server sends about 300
#: bytes (the usage chunk and `[DONE]`) at once.
DRAIN_BYTES = 65_536
DRAIN_SECONDS = 5.0


def verifies_tls(endpoint: str) -> bool:
    """Whether connections to `endpoint` verify the server's certificate: every scheme but
    plain `http` (URL schemes are case-insensitive: `HTTPS://` is https)."""
    return urlsplit(endpoint.strip()).scheme.lower() != "http"


#: Bodies uncompressed: see the module's docstring.
IDENTITY = {"Accept-Encoding": "identity"}


def new_client(endpoint: str, socket: str | None = None) -> httpx.AsyncClient:
    """A connection pool for `endpoint` (through the Unix domain `socket` where one is
    given), with our timeouts."""
    return httpx.AsyncClient(
        transport=None if socket is None else httpx.AsyncHTTPTransport(uds=socket),
        timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
        # Loading the CA certificates takes 25-55 ms, for nothing on plain http (and on the
        # first keystroke): only an https endpoint gets them.
        verify=verifies_tls(endpoint),
        headers=IDENTITY,
    )


def headers(spec: RemoteSpec) -> dict[str, str]:
    """The headers every request to the server carries: its API key, and the client's name
    where the spec has one."""
    out = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    if spec.client is not None:
        out[CLIENT_HEADER] = spec.client
    return out


def status(response: httpx.Response) -> str:
    """An answer's status in words ("404 Not Found")."""
    return f"{response.status_code} {response.reason_phrase}".strip()


def loads(data: str | bytes) -> Any:
    """JSON from a server; ValueError for anything but JSON, nesting past Python's parser
    included (its RecursionError would end the reader)."""
    try:
        return json.loads(data)
    except RecursionError as e:
        raise ValueError("it nests too deeply") from e


#: Seconds between two tries of a request our engine server answered "the model is loading"
#: (a chat model it loads once the completion model's first requests are answered).
LOADING_RETRY_SECONDS = 0.25


async def send_waiting(
    client: httpx.AsyncClient, spec: RemoteSpec, path: str, body: dict[str, Any]
) -> tuple[httpx.Response, bytes]:
    """POST `body` to `path`, streamed; an answer of 503 whose error is `model_loading` (the
    model is loading: our engine server says so) is asked again until it is not, within the
    caller's deadline. The response, and the body of an error answer (else empty)."""
    while True:
        request = client.build_request(
            "POST", spec.endpoint + path, json=body, headers=headers(spec)
        )
        response = await client.send(request, stream=True)
        if response.status_code < 400:
            return response, b""
        content = await _read_error_body(response)
        if response.status_code != 503 or _error_code(content) != "model_loading":
            return response, content
        await asyncio.shield(response.aclose())
        await asyncio.sleep(LOADING_RETRY_SECONDS)


def _error_code(content: bytes) -> str | None:
    """OpenAI's `error.code` of an error answer, if it has one."""
    with contextlib.suppress(ValueError):
        body = loads(content[:ERROR_BODY_BYTES])
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            code = body["error"].get("code")
            return code if isinstance(code, str) else None
    return None


def error_message(content: bytes) -> str:
    """The message of an error answer: OpenAI's `{"error": {"message"}}`, FastAPI's
    `{"detail"}`, or the text itself, shortened."""
    text = content[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        body = loads(text)
        if isinstance(body, dict):
            error = body.get("error", body.get("detail"))
            if isinstance(error, dict) and error.get("message"):
                return _shortened(str(error["message"]))
            if error:
                return _shortened(str(error))
    return _shortened(text) or "no message"


def _shortened(text: str) -> str:
    return text[:300] + "…" if len(text) > 300 else text


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


# --- reading within bounds ----------------------------------------------------------------------


class AnswerRefused(Exception):
    """An answer went past one of its bounds; the message says which (without the endpoint)."""


def _check_identity(response: httpx.Response) -> None:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise AnswerRefused(f"compressed its answer ({encoding}) though asked not to")


async def raw_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body of a streamed answer as it came (never inflated)."""
    _check_identity(response)
    async for chunk in response.aiter_raw():
        yield chunk


def read_capped(response: httpx.Response, cap: int, *, what: str, deadline: float) -> bytes:
    """The body of a streamed (blocking) answer, refused past `cap` bytes or once the clock
    (`time.monotonic`) passes `deadline` (checked as each piece comes: a piece is waited for
    the client's read timeout at most)."""
    _check_identity(response)
    content = bytearray()
    for chunk in response.iter_raw():
        content += chunk
        if len(content) > cap:
            raise AnswerRefused(f"sent {what} of over {cap:,} bytes")
        if time.monotonic() > deadline:
            raise AnswerRefused(f"sent {what} too slowly")
    return bytes(content)


def read_head(response: httpx.Response, cap: int, *, deadline: float) -> bytes:
    """The first `cap` bytes of a streamed (blocking) answer, or what came by `deadline`."""
    content = bytearray()
    for chunk in response.iter_raw():
        content += chunk[: cap - len(content)]
        if len(content) >= cap or time.monotonic() > deadline:
            break
    return bytes(content)


class CappedLines:
    """The lines of a byte stream (ending in LF, CRLF or CR, as server-sent events do),
    decoded, with two bounds: each line at most `max_line` bytes, and at most `cap` bytes read
    in all (`cap` may be moved between lines; `taken` says how many were read). Past either,
    AnswerRefused. Memory holds one chunk and one unfinished line."""

    def __init__(self, chunks: AsyncIterator[bytes], *, max_line: int, cap: int) -> None:
        self._chunks = chunks
        self.max_line = max_line
        self.cap = cap
        self.taken = 0
        self._partial = bytearray()
        self._ready: deque[bytes | bytearray] = deque()
        self._done = False

    def __aiter__(self) -> CappedLines:
        return self

    async def __anext__(self) -> str:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            chunk = await anext(self._chunks, None)
            if chunk is None:
                self._done = True
                if self._partial:  # the last line, without its line break
                    self._ready.append(self._partial)
                    self._partial = bytearray()
            else:
                self._take(chunk)
        return self._ready.popleft().decode("utf-8", "replace")

    def _take(self, chunk: bytes) -> None:
        self.taken += len(chunk)
        if self.taken > self.cap:
            raise AnswerRefused(f"sent over {self.cap:,} bytes for one answer")
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) + 1
        if cut == 0:
            self._partial += chunk
        else:
            self._partial += chunk[:cut]
            # A CR at the end of one chunk and an LF at the start of the next make one blank
            # line more: blank lines separate events, one more changes nothing.
            self._ready.extend(self._partial.splitlines())
            self._partial = bytearray(chunk[cut:])
        # Only this chunk's lines are ready (a chunk is taken when none are left).
        if len(self._partial) > self.max_line or any(
            len(line) > self.max_line for line in self._ready
        ):
            raise AnswerRefused(f"sent a line of over {self.max_line:,} bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerLimits:
    """What one answer may take: bytes and seconds, scaled to the tokens asked for."""

    max_tokens: int
    bytes: int
    seconds: float

    @classmethod
    def of(cls, max_tokens: int) -> AnswerLimits:
        tokens = max(max_tokens, 1)
        return cls(
            max_tokens=tokens,
            bytes=ANSWER_BASE_BYTES + ANSWER_BYTES_PER_TOKEN * tokens,
            seconds=READ_TIMEOUT + ANSWER_SECONDS_PER_TOKEN * tokens,
        )


# --- what a stream's reader hands to the request ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    #: The log-probabilities of the tokens the text came in (None: the server sent none).
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class End:
    """The server ended the choice."""

    reason: FinishReason
    stop_reason: str | int | None


@dataclass(frozen=True, slots=True)
class PieceThenEnd:
    text: str
    end: End
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    message: str


@dataclass(slots=True)
class Usage:
    """The tokens the server says a request took, over its choices."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0


#: Where a completion asks for its tokens' log-probabilities: OpenAI's legacy field, which
#: vLLM, llama-cpp-python's server and ours answer with `token_logprobs`, and llama.cpp's
#: server with `content[].logprob`. 1, not 0: llama.cpp's server answers none for 0 (its
#: `n_probs`); the others compute the chosen token's log-probability either way.
LOGPROBS_FIELD = "logprobs"
LOGPROBS_ASKED = 1
#: What a server that refuses a field it does not take answers (FastAPI's validation: 422).
REFUSED = (400, 422)


def refuses_logprobs(response: httpx.Response, content: bytes) -> bool:
    """Whether an error answer refuses `logprobs`: a 400 or 422 that names the field (OpenAI's
    `param`, FastAPI's `loc`, or the message). A refusal for another reason (a prompt too long)
    is not tried again without it."""
    return response.status_code in REFUSED and LOGPROBS_FIELD.encode() in content.lower()


class ChoiceReader:
    """Reads the streamed choices of one server (`spec`), and learns from them whether it says
    which stop string ended a choice (`reports_stop_reason`; then it gets ours), and whether it
    takes `logprobs` (`asks_logprobs`: a server that refuses a request with it, and answers the
    same request without it, is not asked again)."""

    def __init__(self, spec: RemoteSpec, *, reports_stop_reason: bool) -> None:
        self.spec = spec
        self.reports_stop_reason = reports_stop_reason
        self.asks_logprobs = True

    async def read(
        self,
        client: httpx.AsyncClient,
        path: str,
        body: dict[str, Any],
        queue: asyncio.Queue[object],
        usage: Usage,
    ) -> None:
        """Stream one choice from the server into `queue`: pieces, then its end or a failure,
        always one of the two (unless cancelled), within the answer's limits; then read what
        follows the end, within the drain's."""
        endpoint = self.spec.endpoint
        limits = AnswerLimits.of(int(body.get("max_tokens") or 0))
        response: httpx.Response | None = None
        ended = False  # the end or a failure is in the queue
        logprobs = _LogprobsKept(room=limits.max_tokens)

        def deliver(item: object) -> None:
            nonlocal ended
            queue.put_nowait(item)
            ended = not isinstance(item, Piece)

        try:
            async with asyncio.timeout(limits.seconds):
                response, content = await self._send(client, path, body)
                if (
                    response.status_code >= 400
                    and LOGPROBS_FIELD in body
                    and refuses_logprobs(response, content)
                ):
                    refused = status(response)
                    first, response = response, None
                    await asyncio.shield(first.aclose())  # shielded: see `finally`
                    without = {k: v for k, v in body.items() if k != LOGPROBS_FIELD}
                    response, content = await self._send(client, path, without)
                    if response.status_code < 400:
                        self._stop_asking_logprobs(refused)
                if response.status_code >= 400:
                    deliver(
                        Failed(f"{endpoint} answered {status(response)}: {error_message(content)}")
                    )
                    return
                lines = CappedLines(raw_chunks(response), max_line=MAX_LINE_BYTES, cap=limits.bytes)
                chat = path == "/chat/completions"
                async for line in lines:
                    if (item := self._event(line, chat, usage)) is not None:
                        deliver(logprobs.bounded(item))
                        if ended:
                            break
            if not ended:
                deliver(Failed(f"{endpoint} ended the answer without saying why it stopped"))
                return
            await _drain(lines)
        except TimeoutError:
            if not ended:
                deliver(
                    Failed(
                        f"{endpoint} did not end an answer of at most {limits.max_tokens} "
                        f"tokens within {limits.seconds:g} s"
                    )
                )
        except AnswerRefused as e:
            if not ended:
                deliver(Failed(f"{endpoint} {e}"))
        except httpx.HTTPError as e:
            if not ended:
                deliver(Failed(f"{endpoint}: {describe(e)}"))
        except Exception as e:  # a fault of ours: the request must still hear of it
            log.exception("reading an answer of %s failed", endpoint)
            if not ended:
                deliver(Failed(f"{endpoint}: its answer could not be read ({type(e).__name__})"))
        finally:
            if response is not None:
                # Shielded: a cancel that lands while the response closes would leave its
                # connection counted as in use for good (httpcore shields with anyio, which a
                # plain task.cancel() goes through), and after 100 of them every request
                # would wait for the pool. An answer not read to its end closes its connection.
                with contextlib.suppress(Exception):
                    await asyncio.shield(response.aclose())

    def _stop_asking_logprobs(self, refused: str) -> None:
        if self.asks_logprobs:  # once: requests under way at once may all find out
            self.asks_logprobs = False
            log.warning(
                "%s refused a completion asking for log-probabilities (%s) and answered it "
                "without: they are no longer asked for (the confidence gate, which has nothing "
                "to judge by, lets its suggestions through)",
                self.spec.endpoint,
                refused,
            )

    async def _send(
        self, client: httpx.AsyncClient, path: str, body: dict[str, Any]
    ) -> tuple[httpx.Response, bytes]:
        return await send_waiting(client, self.spec, path, body)

    def _event(self, line: str, chat: bool, usage: Usage) -> object | None:
        """What one line of the event stream means: a piece, the end, a failure, or nothing."""
        endpoint = self.spec.endpoint
        if not line.startswith("data:"):
            return None  # blank separators, comments (keep-alives), event names
        data = line[5:].strip()
        if data == "[DONE]":
            return End(FinishReason.STOP, None)  # a server that never said why: it is done
        try:
            event = loads(data)
        except ValueError as e:
            return Failed(f"{endpoint} sent an event that is not JSON ({e}): {data[:200]}")
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
        logprobs = None
        if chat:
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
        else:
            text = choice.get("text")
            logprobs = token_logprobs(choice.get("logprobs"))
        text = text if isinstance(text, str) else ""
        finish = choice.get("finish_reason")
        if finish is None:
            # A token without text (withheld by the server, or bytes of a character) still
            # brings its log-probability.
            return Piece(text, logprobs) if text or logprobs else None
        if "stop_reason" in choice:
            self.reports_stop_reason = True
        if text or logprobs:
            # A last piece and the end in one event: hand over both, in order.
            return PieceThenEnd(text, _end(finish, choice.get("stop_reason")), logprobs)
        return _end(finish, choice.get("stop_reason"))


def token_logprobs(raw: object) -> tuple[float, ...] | None:
    """The log-probabilities a streamed completion chunk's `logprobs` holds: OpenAI's legacy
    `token_logprobs` (vLLM, llama-cpp-python's server, ours), or `content[].logprob` (llama.cpp's
    server); None for anything else, or where one is no number. Null entries are left out: text
    without a token of its own (as ours sends what it withheld when a choice ended). A value
    above 0 (rounding) is 0."""
    if not isinstance(raw, dict):
        return None
    values = raw.get("token_logprobs")
    if values is None and isinstance(raw.get("content"), list):
        content = raw["content"]
        if not all(isinstance(entry, dict) for entry in content):
            return None
        values = [entry.get("logprob") for entry in content]
    if not isinstance(values, list):
        return None
    out = []
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value):
            return None
        out.append(min(float(value), 0.0))
    return tuple(out)


@dataclass(slots=True)
class _LogprobsKept:
    """How many more log-probabilities one choice may keep (`room`: one a token asked for);
    once a chunk would go past, none more."""

    room: int
    lost: bool = False

    def bounded(self, item: object) -> object:
        """`item`, without its log-probabilities if they go past the bound."""
        if not isinstance(item, Piece | PieceThenEnd) or item.logprobs is None:
            return item
        if self.lost or len(item.logprobs) > self.room:
            self.lost = True
            return dataclasses.replace(item, logprobs=None)
        self.room -= len(item.logprobs)
        return item


def _end(finish: object, stop_reason: object) -> End:
    reason = FinishReason.LENGTH if finish == "length" else FinishReason.STOP
    return End(reason, stop_reason if isinstance(stop_reason, str | int) else None)


def _take_usage(raw: Mapping[str, Any], usage: Usage) -> None:
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if isinstance(prompt, int):
        usage.prompt_tokens = prompt
    if isinstance(completion, int):
        usage.completion_tokens += completion


async def _read_error_body(response: httpx.Response) -> bytes:
    """The first ERROR_BODY_BYTES of an error answer (within the answer's deadline)."""
    content = bytearray()
    async for chunk in response.aiter_raw():
        content += chunk[: ERROR_BODY_BYTES - len(content)]
        if len(content) >= ERROR_BODY_BYTES:
            break
    return bytes(content)


async def _drain(lines: CappedLines) -> None:
    """Read what follows a choice's end (usage, `[DONE]`) so that the connection goes back to
    the pool: at most DRAIN_BYTES in DRAIN_SECONDS, else the caller closes it."""
    lines.cap = lines.taken + DRAIN_BYTES
    with contextlib.suppress(TimeoutError, AnswerRefused, httpx.HTTPError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in lines:
                pass


# --- one JSON answer (our extension routes) -----------------------------------------------------

#: Bytes of a JSON answer of our extension routes, past what `AnswerLimits` gives its tokens:
#: a scoring's log-probability or top token is 20-50 bytes of JSON, a branch's token a few.
JSON_BYTES_PER_TOKEN = 256


async def post_json(
    client: httpx.AsyncClient, spec: RemoteSpec, path: str, body: dict[str, Any], *, tokens: int
) -> Any:
    """POST `body` to `path` and return the JSON answer, read within the bounds of an answer
    of `tokens` tokens (`AnswerLimits`: seconds; bytes, here `JSON_BYTES_PER_TOKEN` a token
    over the base), uncompressed. AnswerRefused, httpx.HTTPError or TimeoutError where it
    cannot be had (the caller names the endpoint); a 4xx/5xx answer is AnswerRefused with the
    server's message. Cancelling the awaiting task closes the connection."""
    limits = AnswerLimits.of(tokens)
    cap = ANSWER_BASE_BYTES + JSON_BYTES_PER_TOKEN * limits.max_tokens
    response: httpx.Response | None = None
    try:
        async with asyncio.timeout(limits.seconds):
            response, error = await send_waiting(client, spec, path, body)
            if response.status_code >= 400:
                raise AnswerRefused(f"answered {status(response)}: {error_message(error)}")
            content = bytearray()
            async for chunk in raw_chunks(response):
                content += chunk
                if len(content) > cap:
                    raise AnswerRefused(f"sent an answer of over {cap:,} bytes")
        try:
            return loads(bytes(content))
        except ValueError as e:
            raise AnswerRefused(f"sent an answer that is not JSON ({e})") from e
    finally:
        if response is not None:
            # Shielded, as in `ChoiceReader.read`: a cancel must not leave the connection
            # counted as in use.
            with contextlib.suppress(Exception):
                await asyncio.shield(response.aclose())
