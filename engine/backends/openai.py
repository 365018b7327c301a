"""The remote backend: an OpenAI-compatible server stands in for the local model.

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
- Completions ask for the tokens' log-probabilities (`logprobs`), which the confidence gate
  judges a suggestion by; a server that answers none leaves them unknown, and one that refuses
  a request with them, and answers it without, is not asked again.
- Cancelling a request closes its connection (the server then stops generating).
- Connection errors, timeouts, 4xx/5xx answers, errors sent mid-stream and answers past their
  bounds (bytes, lines, time: openai_stream.py) end the request with an error delta naming the
  endpoint and the cause; the next request tries again, so a server that comes back is used
  again at once.

There is no worker thread: nothing here holds a model, and waiting on a socket belongs to the
event loop, where a cancel interrupts it at once.

Where each part lives: the model list in engine/backends/openai_discovery.py; the HTTP client
and the reading of a streamed answer in engine/backends/openai_stream.py; here, the engine that
turns a request into choices and deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine.backend import ModelInfo, Tokenizer
from engine.backends.openai_discovery import OURS as OURS
from engine.backends.openai_discovery import Discovery, discover
from engine.backends.openai_stream import (
    LOGPROBS_ASKED,
    LOGPROBS_FIELD,
    AnswerRefused,
    ChoiceReader,
    End,
    Failed,
    Piece,
    PieceThenEnd,
    Usage,
    describe,
    new_client,
    post_json,
)
from engine.engine import BaseEngine, JobTable
from engine.errors import EngineError, ModelLoadError
from engine.fim import FIM_FAMILIES, PromptFormat
from engine.jobs import JobRecord, JobStats
from engine.output import OutputProcessor
from engine.specs import REMOTE_BACKEND, RemoteSpec
from engine.types import (
    Branches,
    BranchRequest,
    FinishReason,
    GenerationRequest,
    ScoreRequest,
    Scores,
    TextDelta,
)

log = logging.getLogger(__name__)


def estimate_tokens(text: str) -> int:
    """Tokens of `text` for budgeting a prompt without the server's tokenizer: one per three
    UTF-8 bytes, above what code tokenizers average (3.5-4 characters a token), so a window
    cut to a budget fits the model's context."""
    return (len(text.encode("utf-8")) + 2) // 3


_STOPPED = object()  # the request was cancelled or the engine stopped: see the job


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

    def __init__(
        self,
        spec: RemoteSpec,
        discovery: Discovery,
        *,
        load_seconds: float = 0.0,
        tokenizer: Tokenizer | None = None,
    ):
        """`tokenizer`: the served model's own, loaded here (`local_tokenizer`): prompts are
        then rendered as its ids and sent as such. None: prompts go as text."""
        self.spec = spec
        self.discovery = discovery
        self.tokenizer = tokenizer
        self._info = ModelInfo(
            name=discovery.model or "(the server's model)",
            path=spec.endpoint,
            backend=REMOTE_BACKEND,
            # Our own engine server says where its model computes, and the language server
            # decides by it as for a model here: on a CPU, suffix ranking's scorings and
            # branches made a cold request 3.1-3.4x the raw engine's
            # (docs/decisions/cold-prompt.md).
            device=discovery.device or "remote",
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
        # Reads the choices; learns whether the server says which stop string ended one.
        self._reader = ChoiceReader(spec, reports_stop_reason=discovery.ours)
        self._failing = False  # the last request failed: log the next success

    @classmethod
    def connect(cls, spec: RemoteSpec) -> RemoteEngine:
        """Ask the server about the model (blocking: call it on a loading thread)."""
        started = time.perf_counter()
        discovery = discover(spec)
        tokenizer = local_tokenizer(discovery)
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
        return cls(spec, discovery, load_seconds=seconds, tokenizer=tokenizer)

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def job_record(self) -> JobRecord:
        return self._record

    def prompt_format(self, fim_family: str | None) -> PromptFormat:
        # The family was settled when it connected (the setting, else what the server says).
        # With the model's tokenizer here, prompts are its exact ids, as in-process; else the
        # server tokenizes the prompt text, and tokens are estimated.
        family = self.discovery.fim_family
        if self.tokenizer is not None:
            return PromptFormat.local(self.tokenizer, family or "none")
        return PromptFormat(fim=FIM_FAMILIES.get(family or ""), count_tokens=estimate_tokens)

    # --- scoring and branching (our engine server's extension routes) -----------------------

    @property
    def can_score(self) -> bool:
        """Only our own engine server scores and branches (`/v1/infill/score`, `/branch`)."""
        return {"score", "branch"} <= self.discovery.capabilities

    @property
    def cannot_score(self) -> str | None:
        if self.can_score:
            return None
        return "the server does not score text"

    async def score(self, request: ScoreRequest) -> Scores | None:
        """The server's scoring of the request (`/v1/infill/score`). EngineError naming the
        endpoint where the server fails or answers past its bounds."""
        if not self.can_score:
            return await super().score(request)
        body: dict[str, Any] = {
            "prompt": list(request.prompt_token_ids),
            "continuations": [list(c) for c in request.continuations],
            "top": request.top,
        }
        tokens = sum(len(c) for c in request.continuations) + request.top
        answer = await self._extension("/infill/score", body, request.cache_key, tokens)
        try:
            continuations = tuple(
                tuple(float(p) for p in c["logprobs"]) for c in answer["continuations"]
            )
            top = tuple((int(t["token_id"]), float(t["logprob"])) for t in answer["top"])
        except (KeyError, TypeError, ValueError) as e:
            raise self._malformed("a scoring", e) from None
        if len(continuations) != len(request.continuations):
            raise self._malformed("a scoring", "one answer per continuation")
        return Scores(continuations=continuations, top=top)

    async def branch(self, request: BranchRequest) -> Branches | None:
        """The server's branches of the request (`/v1/infill/branch`). `request.ends` cannot
        cross HTTP: each branch runs to its stops or token limit, and the caller trims an
        answer that went on past its whole answer (as it does a streamed one)."""
        if not self.can_score:
            return await super().branch(request)
        stops = request.stops
        if stops.stop_token_ids_visible:
            raise EngineError("the remote backend cannot keep the text of stop token ids")
        body: dict[str, Any] = {
            "prompt": list(request.prompt_token_ids),
            "first_tokens": list(request.first_tokens),
            "max_tokens": request.sampling.max_tokens,
        }
        if stops.stop:
            body["stop"] = list(stops.stop)
            body["include_stop_str_in_output"] = stops.include_stop_str_in_output
        if stops.stop_token_ids:
            body["stop_token_ids"] = list(stops.stop_token_ids)
        tokens = request.sampling.max_tokens * max(1, len(request.first_tokens))
        answer = await self._extension("/infill/branch", body, request.cache_key, tokens)
        try:
            branches = answer["branches"]
            texts = tuple(str(b["text"]) for b in branches)
            reasons = tuple(FinishReason(b["finish_reason"]) for b in branches)
        except (KeyError, TypeError, ValueError) as e:
            raise self._malformed("a branching", e) from None
        if len(texts) != len(request.first_tokens):
            raise self._malformed("a branching", "one branch per first token")
        return Branches(texts=texts, finish_reasons=reasons)

    async def _extension(
        self, path: str, body: dict[str, Any], cache_key: str | None, tokens: int
    ) -> dict[str, Any]:
        """One of our extension routes' JSON answer, or EngineError naming the endpoint."""
        if self.discovery.model is not None:
            body["model"] = self.discovery.model
        if cache_key is not None:
            body["cache_key"] = cache_key
        endpoint = self.spec.endpoint
        try:
            answer = await post_json(self._http(), self.spec, path, body, tokens=tokens)
        except AnswerRefused as e:
            raise EngineError(f"{endpoint}{path} {e}") from None
        except TimeoutError:
            raise EngineError(f"{endpoint}{path} did not answer in time") from None
        except httpx.HTTPError as e:
            raise EngineError(f"{endpoint}{path}: {describe(e)}") from None
        if not isinstance(answer, dict):
            raise self._malformed(path, "not a JSON object")
        self._note_success()
        return answer

    def _malformed(self, what: str, why: object) -> EngineError:
        return EngineError(f"{self.spec.endpoint} sent {what} answer that cannot be read ({why})")

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
        usage = Usage()
        started = time.perf_counter()
        first: float | None = None
        try:
            for index in range(sampling.n):
                seed = sampling.for_choice(index).seed
                choice_body = body if seed is None else {**body, "seed": seed}
                reader = asyncio.ensure_future(
                    self._reader.read(self._http(), path, choice_body, job.queue, usage)
                )
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
                        if first is None and isinstance(item, Piece | PieceThenEnd):
                            first = time.perf_counter()
                        ended = not isinstance(item, Piece)
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
        if isinstance(item, Piece):
            return processor.on_text(index, item.text, item.logprobs)
        if isinstance(item, PieceThenEnd):
            return [
                *processor.on_text(index, item.text, item.logprobs),
                *self._deltas(processor, index, item.end),
            ]
        if isinstance(item, End):
            self._note_success()
            return processor.finish(index, item.reason, stop_reason=item.stop_reason)
        assert isinstance(item, Failed)
        if self.spec.on_unreachable is not None:
            self.spec.on_unreachable()  # a shared engine that died is started again
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
        prompt = self._prompt(request)
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
            body["prompt"] = prompt
            if self._reader.asks_logprobs:
                # What the confidence gate judges a suggestion by, as with a local model.
                body[LOGPROBS_FIELD] = LOGPROBS_ASKED
        if stops.stop and self._reader.reports_stop_reason:
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

    def _prompt(self, request: GenerationRequest) -> str | list[int] | None:
        """What a request's `prompt` field holds: its text, or its token ids where the
        server's model's tokenizer is here (our own server takes a list of ids as a prompt)."""
        if request.prompt_token_ids is None:
            return request.prompt
        if self.tokenizer is None:
            raise EngineError(
                "the remote backend sends prompts as text (the server has its own tokenizer)"
            )
        return list(request.prompt_token_ids)

    def _http(self) -> httpx.AsyncClient:
        """The connection pool of the running event loop (a client belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = new_client(self.spec.endpoint, self.spec.socket)
            self._client_loop = loop
        return self._client

    def _record_job(
        self,
        request: GenerationRequest,
        processor: OutputProcessor,
        usage: Usage,
        started: float,
        first: float | None,
    ) -> None:
        n = request.sampling.n
        done = time.perf_counter()
        pieces = sum(processor.generated_tokens(i) for i in range(n))
        stats = JobStats(
            request_id=request.request_id,
            # A stream closed at its stop ends before the usage chunk: the ids sent, where
            # the prompt went as ids, are its tokens.
            prompt_tokens=usage.prompt_tokens or len(request.prompt_token_ids or ()),
            prompt_evaluated=None,
            generated_tokens=max(usage.completion_tokens, pieces),
            queued_seconds=0.0,
            first_token_seconds=None if first is None else first - started,
            total_seconds=done - started,
            finish_reasons=tuple(processor.finish_reason(i) for i in range(n)),
            cache_key=request.cache_key,
            client=self.spec.client,  # the name the server knows this client's jobs by
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


def local_tokenizer(discovery: Discovery) -> Tokenizer | None:
    """The served model's own tokenizer, loaded here without its weights, where the server is
    our own, takes prompts as token ids, and serves a GGUF file this machine can read (the
    same machine, or one sharing its model folder): prompts are then exactly the ids a model
    in this process would get (`LlamaTokenizer.vocab_only`: 0.4 s and 44 MB for the default
    model). None for every other server, and where it cannot be loaded (logged): prompts go
    as text. A transformers model folder is left to the server's tokenizer."""
    path = discovery.model_path
    if path is None or "token_ids" not in discovery.capabilities:
        return None
    file = Path(path)
    if not file.is_file() or file.suffix.lower() != ".gguf":
        log.info("the server's model %s is not a GGUF file here: prompts go as text", path)
        return None
    from engine.backends.llama_cpp import LlamaTokenizer

    try:
        return LlamaTokenizer.vocab_only(file)
    except (ModelLoadError, EngineError) as e:
        log.info("cannot load the server's tokenizer here (%s): prompts go as text", e)
        return None


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
