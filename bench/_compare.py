"""What the benchmarks that set the server beside a baseline share: the server's options, the
raw side, one measured server request, the pause between sides, and the run around them
(the latency suite's parts); the raw engine baseline of humaneval and languages.

The server is the real one: `python -P -m lsp_server.cli serve` as a subprocess, spoken to over
stdio (bench/_lsp.py), exactly as an editor does. The raw side is the raw llama.cpp baseline
(bench/_raw.py) in this process, loaded with the same specification as the server's model
(same file, context, threads), on the prompt token ids that `lsp_server.inline.build_prompt`
makes in-process for the same document and cursor (the prompt token count is checked against
the one the server's engine reports in `infill/stats`). The two processes hold a model each
but never compute at the same time: every step waits for the previous one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import local_spec, setup_logging, token_counter, write_json
from bench._lsp import JobLine, ServerClient, mode_at
from bench._raw import RawLlama, RawRun
from engine.completion import CompletionModel
from engine.engine import Engine
from engine.models import load_backend
from engine.specs import ModelSpec
from engine.types import GenerationRequest, Role, SamplingParams, StopConditions
from lsp_server.client import insert_text_of
from lsp_server.documents import DocumentSnapshot
from lsp_server.host import model_specs
from lsp_server.inline.prompt import build_prompt
from lsp_server.settings import Settings, parse_settings

log = logging.getLogger("bench")

#: A pause after each side's turn: llama.cpp's OpenMP threads spin for a while after their
#: work, and one side's spinning threads would compete with the next side's start.
SETTLE_S = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class RawPrompt:
    text: str
    token_ids: tuple[int, ...]


class Raw:
    """The server's prompt, built in this process, and the raw baseline to run it on."""

    def __init__(self, settings: Settings) -> None:
        spec = local_spec(model_specs(settings)[Role.COMPLETION])
        self.settings = settings
        self.llama = RawLlama(spec)
        # Our backend, only to build prompts exactly as the server does (its engine stays idle).
        backend = load_backend(spec)
        self.info = backend.info
        self.engine = Engine(backend, name="raw")
        self.count = token_counter(backend)
        self.model = CompletionModel.of(self.engine, None)
        # What `lsp_server.inline` passes for an automatic (greedy) request.
        self.sampling = SamplingParams(max_tokens=1, temperature=0.0, top_p=1.0)

    def prompt(self, text: str, offset: int) -> RawPrompt:
        """The server's prompt for this cursor: its text and its token ids."""
        snap = DocumentSnapshot.at(text, offset, uri="file:///raw.py")
        prompt = build_prompt(self.model, snap, self.settings)
        assert prompt.token_ids is not None  # a local model's prompt is token ids
        return RawPrompt(text=prompt.text, token_ids=prompt.token_ids)

    def generate(self, ids: Sequence[int], n: int, *, cold: bool = False) -> RawRun:
        """The raw baseline on `ids` until `n` tokens came out (`cold`: empty KV cache)."""
        return self.llama.generate(ids, n, cold=cold)

    def text(self, run: RawRun) -> str:
        return self.llama.detokenize(run.token_ids)

    def close(self) -> None:
        self.engine.close()
        self.llama.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class OursRun:
    seconds: float
    job: JobLine | None
    mode: str  # the server's mode decision for the cursor ("None": nothing to suggest)
    suggestion: str | None


async def ours_once(client: ServerClient, uri: str, offset: int) -> OursRun:
    """One inline request, timed from sending it to its response, and the engine job it ran
    (None when the server answered without the model)."""
    before = await client.job_count()
    mode = mode_at(client.text(uri), offset)
    items, pending = await client.inline(uri, offset)
    jobs = await client.jobs_since(before, at_least=0 if mode == "None" else 1)
    return OursRun(
        seconds=pending.seconds,
        job=jobs[-1] if jobs else None,
        mode=mode,
        suggestion=insert_text_of(items[0]) if items else None,
    )


def bust_cache(client: ServerClient, uri: str) -> None:
    """Make the next request run the model: one blank line more or less at the end of the
    document changes the server's type-ahead cache key but neither the prompt nor the fit."""
    client.edit_many(uri, [client.toggle_tail_edit(uri)])


def server_options(
    model: str | None, extra: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Settings]:
    """A benchmark's language server options (`debounceMs` 0: each request goes out at once;
    then `extra`, and the model where one was named) and the settings they parse to; a bad
    option ends the run."""
    options: dict[str, Any] = {"debounceMs": 0, **(extra or {})}
    if model:
        options["model"] = model
    settings, problems = parse_settings({"infill": options})
    if problems:
        raise SystemExit("; ".join(problems))
    return options, settings


def run_on_raw_engine(
    settings: Settings, body: Callable[[Engine], Coroutine[Any, Any, None]]
) -> None:
    """`body` on our engine in this process, on the server's completion model: a raw baseline
    that runs through the engine (HumanEval, cross-file context). The engine is closed after."""
    engine = Engine(load_backend(local_spec(model_specs(settings)[Role.COMPLETION])), name="raw")
    try:
        asyncio.run(body(engine))
    finally:
        engine.close()


def raw_line_request(prompt: str, settings: Settings) -> GenerationRequest:
    """The raw baseline's request: the prompt alone, greedy, one line (stop at "\\n"), at most
    the server's single-line limit (`maxTokensSingleLine`)."""
    return GenerationRequest(
        prompt=prompt,
        role=Role.COMPLETION,
        sampling=SamplingParams(
            max_tokens=settings.max_tokens_single_line, temperature=0.0, top_p=1.0
        ),
        stops=StopConditions(stop=("\n",)),
    )


#: A part of a comparison: the server and the raw side, ready; returns its part of the JSON.
Body = Callable[[ServerClient, Raw, argparse.Namespace], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """A part of a comparison: its name, its body, and the server settings it needs beside
    `debounceMs` 0 (the raw side builds its prompts with the same)."""

    name: str
    body: Body
    settings: dict[str, Any]


def run_parts(args: argparse.Namespace, parts: Sequence[Part], json_path: Path) -> dict[str, Any]:
    """Load the raw side once; for each part, start the server with the part's settings, run
    it, stop the server. Writes and returns the run's figures: its configuration and each
    part's JSON."""
    setup_logging(quiet_engine=True)
    started = time.perf_counter()
    result = asyncio.run(_run(args, parts))
    result["config"]["wall_s"] = round(time.perf_counter() - started, 1)
    write_json(json_path, result)
    return result


async def _run(args: argparse.Namespace, parts: Sequence[Part]) -> dict[str, Any]:
    log.info("loading the raw side's model")
    raw = Raw(server_options(args.model)[1])
    out: dict[str, Any] = {}
    try:
        for part in parts:
            options, raw.settings = server_options(args.model, part.settings)
            client = ServerClient(options)
            try:
                log.info("%s: starting the server", part.name)
                await client.start()
                out[part.name] = await part.body(client, raw, args)
            finally:
                await client.stop()
    finally:
        raw.close()
    threads, threads_batch = raw.llama.threads
    config = {
        "model": raw.info.name,
        "model_path": raw.info.path,
        "device": raw.info.device,
        "threads": threads,
        "threads_batch": threads_batch,
        **{k: v for k, v in vars(args).items() if k not in ("json", "model")},
    }
    return {"config": config, **out}


def model_paths(model: str | None = None) -> list[Path]:
    """The model files the language server loads with the benchmarks' options, each role's:
    what a record names by sha256."""
    specs = model_specs(server_options(model)[1]).values()
    return [Path(spec.path) for spec in specs if isinstance(spec, ModelSpec)]
