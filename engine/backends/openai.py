"""The remote backend: an OpenAI-compatible server stands in for the local model (DESIGN §2).

A team's inference deployment (vLLM, llama-server, NVIDIA Dynamo, our own `infill-lsp
engine`, ...) serves the models; this module speaks its HTTP API with httpx:

- FIM prompts are rendered here as text (the family comes from the settings, or from our own
  engine server's model list) and sent to `/v1/completions`; chats go to
  `/v1/chat/completions` as messages, rendered by the server with its model's template.
- Every answer is streamed (server-sent events), and our own stop processor runs on the text
  as it comes (`OutputProcessor.on_text`): hidden and visible stop strings, `stop_reason`,
  withheld partial matches and `min_tokens` behave exactly as with a local model. The stop
  strings are also sent, to save the server's tokens, to servers that say which one matched
  (ours and vLLM report `stop_reason`); a server that does not would leave us unable to tell
  a stop string from the end of the text, so it gets none and we close the stream ourselves.
- Cancelling a request closes its connection (the server then stops generating).
- Connection errors, timeouts, 4xx/5xx answers and errors sent mid-stream end the request
  with an error delta naming the endpoint and the cause; the next request tries again, so a
  server that comes back is used again at once.

There is no worker thread: nothing here holds a model, and waiting on a socket belongs to the
event loop, where a cancel interrupts it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.backend import ModelInfo
from engine.engine import BaseEngine, JobTable
from engine.errors import EngineError, ModelLoadError
from engine.fim import FIM_FAMILIES, PromptFormat
from engine.jobs import JobRecord, JobStats
from engine.output import OutputProcessor
from engine.specs import REMOTE_BACKEND, RemoteSpec
from engine.types import FinishReason, GenerationRequest, TextDelta

log = logging.getLogger(__name__)

#: Seconds to open a connection, and to wait for the next piece of an answer (a busy cluster
#: or a CPU server evaluating a long prompt may take a while for the first one).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 120.0
#: Seconds the model list may take when the backend connects.
DISCOVERY_TIMEOUT = 10.0
#: Bytes of an error answer read to find its message.
ERROR_BODY_BYTES = 16_384
#: Who owns the models in our own engine server's list (engine/api/).
OURS = "infill-lsp"
#: `owned_by` values of OpenAI's own API, which refuses parameters it does not know.
OPENAI_OWNERS = frozenset({"openai", "system", "openai-internal"})


def estimate_tokens(text: str) -> int:
    """Tokens of `text` for budgeting a prompt without the server's tokenizer: one per three
    UTF-8 bytes, above what code tokenizers average (3.5-4 characters a token), so a window
    cut to a budget fits the model's context."""
    return (len(text.encode("utf-8")) + 2) // 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    """What the server's model list says about the model we ask for."""

    model: str | None  # the name sent in requests (None: let the server choose)
    context_size: int
    fim_family: str | None
    ours: bool  # our own engine server: it takes our extensions (cache_key, ...)
    extensions: bool  # the server takes fields beyond OpenAI's (top_k, repeat_penalty, ...)


def discover(spec: RemoteSpec, *, client: httpx.Client | None = None) -> Discovery:
    """Ask the server for its models (`GET /models`) and pick the one for `spec.role`: the
    named one, else the one our engine server lists for the role, else the first. Raises
    ModelLoadError naming the endpoint and the cause when the server cannot be asked."""
    owned = client is None
    client = client or httpx.Client(timeout=DISCOVERY_TIMEOUT)
    try:
        response = client.get(f"{spec.endpoint}/models", headers=_headers(spec))
        if response.status_code >= 400:
            raise ModelLoadError(
                f"{spec.endpoint} answered the model list with {_status(response)}: "
                f"{_error_message(response.content)}"
            )
        listed = _model_entries(response.content)
    except httpx.HTTPError as e:
        raise ModelLoadError(f"cannot reach {spec.endpoint}: {_describe(e)}") from e
    finally:
        if owned:
            client.close()
    entry = _pick(listed, spec)
    ours = entry.get("owned_by") == OURS
    context = entry.get("context_size") or entry.get("max_model_len")
    fim = spec.fim_family
    if fim is None and ours and entry.get("fim_family") in FIM_FAMILIES:
        fim = str(entry["fim_family"])
    return Discovery(
        model=spec.model or (str(entry["id"]) if "id" in entry else None),
        context_size=context if isinstance(context, int) and context > 0 else spec.context_size,
        fim_family=None if fim == "none" else fim,
        ours=ours,
        extensions=entry.get("owned_by") not in OPENAI_OWNERS,
    )


def _model_entries(content: bytes) -> list[dict[str, Any]]:
    try:
        body = json.loads(content)
    except ValueError as e:
        raise ModelLoadError(f"the model list is not JSON: {e}") from e
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ModelLoadError("the model list has no `data` list: not an OpenAI-compatible server")
    return [entry for entry in data if isinstance(entry, dict)]


def _pick(listed: list[dict[str, Any]], spec: RemoteSpec) -> dict[str, Any]:
    if spec.model is not None:
        named = next((e for e in listed if e.get("id") == spec.model), None)
        if named is None:
            # Some gateways list nothing, or not everything: ask for it all the same.
            log.warning(
                "%s does not list %r; asking for it all the same", spec.endpoint, spec.model
            )
            return {}
        return named
    for entry in listed:
        roles = entry.get("roles")
        if entry.get("owned_by") == OURS and isinstance(roles, list) and spec.role in roles:
            return entry
    if not listed:
        raise ModelLoadError(
            f"{spec.endpoint} lists no model; name one with --remote-model or the remoteModel "
            "setting"
        )
    return listed[0]


def _headers(spec: RemoteSpec) -> dict[str, str]:
    return {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}


def _status(response: httpx.Response) -> str:
    return f"{response.status_code} {response.reason_phrase}".strip()


def _error_message(content: bytes) -> str:
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


def _describe(error: httpx.HTTPError) -> str:
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
class _Piece:
    text: str


@dataclass(frozen=True, slots=True)
class _End:
    """The server ended the choice."""

    reason: FinishReason
    stop_reason: str | int | None


@dataclass(frozen=True, slots=True)
class _Failed:
    message: str


_STOPPED = object()  # the request was cancelled or the engine stopped: see the job


@dataclass(slots=True)
class _Usage:
    prompt_tokens: int | None = None
    completion_tokens: int = 0


@dataclass(slots=True, eq=False)
class _Job:
    """A request in flight. Touched on the event loop only (`RemoteEngine` hops to it)."""

    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    aborted: EngineError | None = None

    def stop(self, error: EngineError | None) -> None:
        self.cancelled = True
        if error is not None:
            self.aborted = error
        self.queue.put_nowait(_STOPPED)


class _NoDetokenizer:
    """Text comes decoded; `OutputProcessor.on_text` never asks for a token's text."""

    def step(self, token_id: int) -> str:
        raise EngineError("the remote backend streams text, not token ids")

    def finish(self) -> str:
        return ""


class RemoteEngine(BaseEngine):
    """One role's model on a remote OpenAI-compatible server."""

    def __init__(self, spec: RemoteSpec, discovery: Discovery, *, load_seconds: float = 0.0):
        self.spec = spec
        self.discovery = discovery
        self._info = ModelInfo(
            name=discovery.model or "(the server's model)",
            path=spec.endpoint,
            backend=REMOTE_BACKEND,
            device="remote",
            context_size=discovery.context_size,
            vocab_size=0,
            eog_tokens=(),
            has_chat_template=True,  # the server renders chats with its model's template
            load_seconds=load_seconds,
        )
        self._record = JobRecord()
        self._jobs: JobTable[_Job] = JobTable()
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        # Readers of answers already over, reading the rest of their stream.
        self._draining: set[asyncio.Future[None]] = set()
        # Whether the server says which stop string ended a choice (then it gets ours).
        self._reports_stop_reason = discovery.ours
        self._failing = False  # the last request failed: log the next success

    @classmethod
    def connect(cls, spec: RemoteSpec) -> RemoteEngine:
        """Ask the server about the model (blocking: call it on a loading thread)."""
        started = time.perf_counter()
        discovery = discover(spec)
        seconds = time.perf_counter() - started
        log.info(
            "%s model %s on %s (context %d, FIM %s%s)",
            spec.role,
            discovery.model or "(server's default)",
            spec.endpoint,
            discovery.context_size,
            discovery.fim_family or "none",
            ", infill-lsp engine" if discovery.ours else "",
        )
        return cls(spec, discovery, load_seconds=seconds)

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def job_record(self) -> JobRecord:
        return self._record

    def prompt_format(self, fim_family: str | None) -> PromptFormat:
        # The family was settled when it connected (the setting, else what the server says):
        # the server tokenizes the prompt text, so tokens are estimated.
        return PromptFormat(
            fim=FIM_FAMILIES.get(self.discovery.fim_family or ""), count_tokens=estimate_tokens
        )

    # --- requests ----------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[TextDelta, None]:
        """Stream the request's deltas from the server, one choice after another."""
        path, body = self._body(request)
        job = _Job(request=request, loop=asyncio.get_running_loop())
        self._jobs.add(request.request_id, job)
        sampling = request.sampling
        processor = OutputProcessor(
            n=sampling.n,
            stops=request.stops,
            max_tokens=sampling.max_tokens,
            min_tokens=sampling.min_tokens,
            new_detokenizer=_NoDetokenizer,
        )
        usage = _Usage()
        started = time.perf_counter()
        first: float | None = None
        try:
            for index in range(sampling.n):
                seed = sampling.for_choice(index).seed
                choice_body = body if seed is None else {**body, "seed": seed}
                reader = asyncio.ensure_future(self._read(path, choice_body, job.queue, usage))
                ended = False  # the server ended the choice (its reader reads the rest alone)
                try:
                    while not processor.is_finished(index):
                        item = await job.queue.get()
                        if item is _STOPPED:
                            if job.aborted is not None:
                                processor.cancel()
                                raise job.aborted
                            for delta in processor.cancel():
                                yield delta
                            return
                        if first is None and isinstance(item, _Piece | _PieceThenEnd):
                            first = time.perf_counter()
                        ended = not isinstance(item, _Piece)
                        for delta in self._deltas(processor, index, item):
                            yield delta
                finally:
                    if ended and not reader.done():
                        # It reads what follows the end (usage, `[DONE]`) so that the
                        # connection goes back to the pool for the next request.
                        self._draining.add(reader)
                        reader.add_done_callback(self._draining.discard)
                    else:
                        reader.cancel()  # closes the connection if the answer is not over
                        with contextlib.suppress(asyncio.CancelledError):
                            await reader
                    # A piece the reader put after the choice ended belongs to no one.
                    while not job.queue.empty():
                        if job.queue.get_nowait() is _STOPPED:
                            job.queue.put_nowait(_STOPPED)
                            break
        finally:
            self._jobs.remove(request.request_id)
            self._record_job(request, processor, usage, started, first)

    def _deltas(self, processor: OutputProcessor, index: int, item: object) -> list[TextDelta]:
        if isinstance(item, _Piece):
            return processor.on_text(index, item.text)
        if isinstance(item, _PieceThenEnd):
            return [
                *processor.on_text(index, item.text),
                *self._deltas(processor, index, item.end),
            ]
        if isinstance(item, _End):
            self._note_success()
            return processor.finish(index, item.reason, stop_reason=item.stop_reason)
        assert isinstance(item, _Failed)
        if not self._failing:
            log.warning("%s", item.message)  # it names the endpoint
        self._failing = True
        return processor.error(item.message, index)

    def _note_success(self) -> None:
        if self._failing:
            log.info("%s answers again", self.spec.endpoint)
        self._failing = False

    def _body(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        """The route and the JSON body of a request (without the choice's seed)."""
        sampling, stops, discovery = request.sampling, request.stops, self.discovery
        if request.prompt_token_ids is not None:
            raise EngineError(
                "the remote backend sends prompts as text (the server has its own tokenizer)"
            )
        if stops.stop_token_ids_visible:
            raise EngineError("the remote backend cannot keep the text of stop token ids")
        body: dict[str, Any] = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if discovery.model is not None:
            body["model"] = discovery.model
        if request.messages is not None:
            path = "/chat/completions"
            body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
        else:
            path = "/completions"
            body["prompt"] = request.prompt
        if stops.stop and self._reports_stop_reason:
            body["stop"] = list(stops.stop)
            if stops.include_stop_str_in_output:
                body["include_stop_str_in_output"] = True
        if discovery.extensions:
            # vLLM's and llama.cpp's names; llama.cpp's server would otherwise apply its own
            # repeat penalty (1.1) and min_p (0.05), and answer differently from a local model.
            body["repetition_penalty"] = sampling.repetition_penalty
            body["repeat_penalty"] = sampling.repetition_penalty
            body["min_p"] = 0.0
            if sampling.top_k:
                body["top_k"] = sampling.top_k
            if sampling.min_tokens:
                body["min_tokens"] = sampling.min_tokens
            if stops.stop_token_ids:
                body["stop_token_ids"] = list(stops.stop_token_ids)
            if stops.ignore_eos:
                body["ignore_eos"] = True
        if discovery.ours and request.cache_key is not None:
            body["cache_key"] = request.cache_key  # the server keeps the document's KV state
        return path, body

    async def _read(
        self, path: str, body: dict[str, Any], queue: asyncio.Queue[object], usage: _Usage
    ) -> None:
        """Stream one choice from the server into `queue`: pieces, then its end or failure."""
        chat = path == "/chat/completions"
        client = self._http()
        response: httpx.Response | None = None
        ended = False
        try:
            request = client.build_request(
                "POST", self.spec.endpoint + path, json=body, headers=_headers(self.spec)
            )
            response = await client.send(request, stream=True)
            if response.status_code >= 400:
                content = b""
                async for chunk in response.aiter_bytes():
                    content += chunk
                    if len(content) >= ERROR_BODY_BYTES:
                        break
                queue.put_nowait(
                    _Failed(
                        f"{self.spec.endpoint} answered {_status(response)}: "
                        f"{_error_message(content)}"
                    )
                )
                return
            async for line in response.aiter_lines():
                if ended:
                    continue  # read to the end: an answer read whole keeps its connection
                item = self._event(line, chat, usage)
                if item is None:
                    continue
                queue.put_nowait(item)
                ended = not isinstance(item, _Piece)
            if not ended:
                queue.put_nowait(
                    _Failed(f"{self.spec.endpoint} ended the answer without saying why it stopped")
                )
        except httpx.HTTPError as e:
            if not ended:
                queue.put_nowait(_Failed(f"{self.spec.endpoint}: {_describe(e)}"))
        finally:
            if response is not None:
                # Shielded: a cancel that lands while the response closes would leave its
                # connection counted as in use for good (httpcore shields with anyio, which a
                # plain task.cancel() goes through), and after 100 of them every request
                # would wait for the pool.
                await asyncio.shield(response.aclose())

    def _event(self, line: str, chat: bool, usage: _Usage) -> object | None:
        """What one line of the event stream means: a piece, the end, a failure, or nothing."""
        if not line.startswith("data:"):
            return None  # blank separators, comments (keep-alives), event names
        data = line[5:].strip()
        if data == "[DONE]":
            return _End(FinishReason.STOP, None)  # a server that never said why: it is done
        try:
            event = json.loads(data)
        except ValueError:
            return _Failed(f"{self.spec.endpoint} sent an event that is not JSON: {data[:200]}")
        if not isinstance(event, dict):
            return None
        if "error" in event:
            return _Failed(f"{self.spec.endpoint} failed: {_error_message(data.encode())}")
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
            return _Piece(text) if isinstance(text, str) and text else None
        if "stop_reason" in choice:
            self._reports_stop_reason = True
        if isinstance(text, str) and text:
            # A last piece and the end in one event: hand over both, in order.
            return _PieceThenEnd(text, _end(finish, choice.get("stop_reason")))
        return _end(finish, choice.get("stop_reason"))

    def _http(self) -> httpx.AsyncClient:
        """The connection pool of the running event loop (a client belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
                # Loading the CA certificates takes 25-55 ms, for nothing on plain http (and
                # on the first keystroke): only an https endpoint gets them.
                verify=self.spec.endpoint.startswith("https:"),
            )
            self._client_loop = loop
        return self._client

    def _record_job(
        self,
        request: GenerationRequest,
        processor: OutputProcessor,
        usage: _Usage,
        started: float,
        first: float | None,
    ) -> None:
        n = request.sampling.n
        done = time.perf_counter()
        pieces = sum(processor.generated_tokens(i) for i in range(n))
        stats = JobStats(
            request_id=request.request_id,
            prompt_tokens=usage.prompt_tokens or 0,
            prompt_evaluated=None,
            generated_tokens=max(usage.completion_tokens, pieces),
            queued_seconds=0.0,
            first_token_seconds=None if first is None else first - started,
            total_seconds=done - started,
            finish_reasons=tuple(processor.finish_reason(i) for i in range(n)),
            cache_key=request.cache_key,
        )
        self._record.add(stats)
        log.info(
            "%s %s: prompt %s tokens, generated %d, first token %s, total %.0f ms, finish %s",
            self.spec.role,
            request.request_id,
            usage.prompt_tokens if usage.prompt_tokens is not None else "?",
            stats.generated_tokens,
            "-" if first is None else f"{(first - started) * 1000:.0f} ms",
            stats.total_seconds * 1000,
            ",".join(str(r) for r in stats.finish_reasons),
        )

    # --- control -----------------------------------------------------------------------------

    def cancel(self, request_id: str) -> bool:
        """Stop a running request: its connection closes and its stream ends CANCELLED."""
        job = self._jobs.get(request_id)
        if job is None:
            return False
        _on_loop(job.loop, job.stop, None)
        return True

    def stop(self, reason: str) -> None:
        """Refuse new requests; running ones end with EngineClosedError(`reason`)."""
        error, jobs = self._jobs.stop(reason)
        for job in jobs:
            _on_loop(job.loop, job.stop, error)

    def close(self, reason: str = "the engine is closed", timeout: float | None = None) -> None:
        """Stop, and let the connection pool go (its loop closes it, or the process's end)."""
        self.stop(reason)
        client, loop = self._client, self._client_loop
        self._client = None
        if client is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)


@dataclass(frozen=True, slots=True)
class _PieceThenEnd:
    text: str
    end: _End


def _end(finish: object, stop_reason: object) -> _End:
    reason = FinishReason.LENGTH if finish == "length" else FinishReason.STOP
    return _End(reason, stop_reason if isinstance(stop_reason, str | int) else None)


def _take_usage(raw: Mapping[str, Any], usage: _Usage) -> None:
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if isinstance(prompt, int):
        usage.prompt_tokens = prompt
    if isinstance(completion, int):
        usage.completion_tokens += completion


def _on_loop(loop: asyncio.AbstractEventLoop, call: Any, *args: object) -> None:
    """Run `call` on `loop`: at once when we are on it, else handed over."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        call(*args)
    else:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits any more
            loop.call_soon_threadsafe(call, *args)
