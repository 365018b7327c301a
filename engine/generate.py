"""`infill-lsp generate`: one request to one model, its output streamed as JSON lines.

`GenerateArgs` is the command line as parsed; its `request()` is the request it asks for (the
role's sampling defaults, the flags over them, the prompt read). `stream_json_lines` loads the
role's model and prints one JSON object per delta, stable for scripts:
`{"index", "text", "finish_reason", "stop_reason"}` (plus `"error"` on an error delta, and
the exit status is then 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.models import ModelSet, model_spec
from engine.specs import ModelOptions
from engine.types import (
    CHAT_SAMPLING,
    COMPLETION_SAMPLING,
    ChatMessage,
    GenerationRequest,
    Role,
    SamplingParams,
    StopConditions,
)

#: The `SamplingParams` fields a flag of the same name sets (`--max-tokens`: `max_tokens`).
SAMPLING_FLAGS = (
    "max_tokens",
    "min_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "seed",
    "n",
)


class UsageError(Exception):
    """A bad flag value or a prompt file that cannot be read: one line for the user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateArgs:
    """The `generate` command line as parsed, a field per flag of the same name; a sampling
    flag left out (None) keeps the role's default."""

    prompt: str | None = None
    prompt_file: str | None = None
    chat: bool = False
    max_tokens: int | None = None
    min_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    n: int | None = None
    stop: Sequence[str] = ()
    stop_json: Sequence[str] = ()
    stop_token_id: Sequence[int] = ()
    include_stop_str: bool = False
    ignore_eos: bool = False

    @property
    def role(self) -> Role:
        """The role whose model answers: chat with `--chat`, else completion."""
        return Role.CHAT if self.chat else Role.COMPLETION

    def sampling(self) -> SamplingParams:
        """The role's sampling defaults, with each sampling flag given over its own field.
        Raises ValueError for a value out of range."""
        base = CHAT_SAMPLING if self.chat else COMPLETION_SAMPLING
        given = {name: getattr(self, name) for name in SAMPLING_FLAGS}
        return replace(base, **{k: v for k, v in given.items() if v is not None})

    def stop_strings(self) -> tuple[str, ...]:
        """`--stop` strings as given, then those of each `--stop-json`."""
        stops = list(self.stop)
        for raw in self.stop_json:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as e:
                raise UsageError(f"--stop-json is not JSON: {e}") from e
            items = value if isinstance(value, list) else [value]
            if not all(isinstance(s, str) for s in items):
                raise UsageError("--stop-json takes a string or a list of strings")
            stops.extend(items)
        return tuple(stops)

    def read_prompt(self) -> str:
        """`--prompt`, else the text of `--prompt-file`, else all of stdin."""
        if self.prompt is not None:
            return self.prompt
        if self.prompt_file is not None:
            try:
                with open(self.prompt_file, encoding="utf-8") as f:
                    return f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise UsageError(f"cannot read {self.prompt_file}: {e}") from e
        return sys.stdin.read()

    def request(self) -> GenerationRequest:
        """The request these flags ask for; the prompt is read last, once every flag is known
        to be good. Raises UsageError."""
        try:
            sampling = self.sampling()
            stops = StopConditions(
                stop=self.stop_strings(),
                stop_token_ids=tuple(self.stop_token_id),
                include_stop_str_in_output=self.include_stop_str,
                ignore_eos=self.ignore_eos,
            )
        except ValueError as e:
            raise UsageError(str(e)) from e
        prompt = self.read_prompt()
        return GenerationRequest(
            prompt=None if self.chat else prompt,
            messages=(ChatMessage("user", prompt),) if self.chat else None,
            role=self.role,
            sampling=sampling,
            stops=stops,
        )


async def stream_json_lines(request: GenerationRequest, options: ModelOptions) -> int:
    """Load the model of `request`'s role, print its deltas as JSON lines, and free it; the
    exit status (1 when the stream ended with an error)."""
    models = ModelSet({request.role: model_spec(request.role, options)})
    engine = await asyncio.to_thread(models.engine, request.role)
    loop = asyncio.get_running_loop()
    # Ctrl-C cancels the request: the stream ends with "cancelled" deltas, then we exit.
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, engine.cancel, request.request_id)
    status = 0
    try:
        async with contextlib.aclosing(engine.generate(request)) as deltas:
            async for delta in deltas:
                if not delta.text and delta.finish_reason is None:
                    continue
                line: dict[str, Any] = {
                    "index": delta.index,
                    "text": delta.text,
                    "finish_reason": delta.finish_reason,
                    "stop_reason": delta.stop_reason,
                }
                if delta.error:
                    line["error"] = delta.error
                    status = 1
                print(json.dumps(line, ensure_ascii=False), flush=True)
    finally:
        models.close()
    return status
