"""The scripted model, a test double the tests plug into the real server: `python
tests/scripted_cli.py serve --backend scripted --model completion.json --chat-model chat.json`, so
that end-to-end tests know each answer exactly.

The whole server runs as it does with a real model (host, worker, scheduler, stops,
post-processing); only the model is replaced, by `FakeBackend`'s byte-level tokenizer and a
script read from a JSON file. Naming the same file for both roles gives one model serving
both, as with a real model. It is for tests: the shipped `infill-lsp` does not offer it, nor
do the editors' settings; tests/scripted_cli.py registers it (engine/models.py
`register_backend`) and then runs the real command line.

The file holds one object (every key optional):

    {
      "name": "scripted-coder",         what status reports (default: the file's stem)
      "script": [ENTRY, ...],           one entry per call, in order (see below)
      "repeat_last": true,              the last entry left is played again and again
      "step_seconds": 0.0,              a pause before each token (a slow model)
      "eog_ids": [1, 6],                end-of-generation ids (<eos>, <end_of_turn>)
      "fim": false,                     whether the model has FIM tokens (the defaults have none)
      "template": "...",                the chat template (default: a plain one; null: none)
      "context": 4096,                  the context size in tokens
      "record": "calls.jsonl"           where to write what each call saw (relative to the file)
      "load_hold": "loaded"             a file (relative to the script) that must exist before
                                        the load ends: a slow load, over when the test says
    }

An ENTRY is the text the model writes, or a list of token ids and texts, or an object:
`{"text": ..., "match": "...", "step_seconds": 0.05, "hold": "go"}`. A call takes the first
entry whose `match` occurs in its prompt (no `match`: any prompt). `step_seconds` slows only
the call that takes the entry, not its continuation (the rest of its text, played when the
worker resumes a chat job after a completion job went first): a long window for another request
to arrive, and no wait once it has. `hold` names a file (relative to the script) that must
exist before the first token: the test decides when the answer comes.

The record has one JSON line per event: `{"event": "start", "call", "model", "prompt",
"continues", ...}` with every `SamplingParams` field (`max_tokens`, `temperature`, `seed`, `n`,
...) when a call starts (`continues`: the call whose play it resumes, else null) and
`{"event": "end", "call", "model", "yielded", "cancelled"}` when it ends (also when the worker
stops it early).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fake_backend import SPECIAL_TOKENS, FakeBackend, FakeCall, byte_ids

from engine.backend import Backend
from engine.errors import ModelLoadError
from engine.specs import DEFAULT_CONTEXT_SIZE, ModelSpec
from engine.types import SamplingParams

#: The backend's name on the command line (`--backend scripted`) and in status and doctor.
SCRIPTED_BACKEND = "scripted"
#: The chat template a script has unless it names its own (or null): role markers, one line
#: per message, so that a test reads each message back from the recorded prompt.
DEFAULT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: How long a held entry waits for its file before the call fails (a test that never releases
#: it must not hang the server).
HOLD_LIMIT_SECONDS = 120.0
_NAMES = {token_id: text for text, token_id in SPECIAL_TOKENS.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedEntry:
    """One answer of the script, and how it is played."""

    token_ids: tuple[int, ...]
    match: str | None = None
    step_seconds: float | None = None  # None: the script's own
    hold: Path | None = None


@dataclass(slots=True, kw_only=True)
class ScriptedBackend(FakeBackend):
    """`FakeBackend` playing a script file's entries, chosen by prompt, and recording calls."""

    entries: list[ScriptedEntry] = field(default_factory=list)
    record: Path | None = None
    fim: bool = False
    _record_lock: threading.Lock = field(default_factory=threading.Lock)
    _play_calls: list[int] = field(default_factory=list)  # the call of each of `_plays`

    def special_token_id(self, text: str) -> int | None:
        if not self.fim and text.startswith("<fim"):
            return None
        return FakeBackend.special_token_id(self, text)

    def prompt_text(self, token_ids: Sequence[int]) -> str:
        """The prompt as text, special tokens written out by name."""
        parts: list[str] = []
        pending = bytearray()
        for token_id in token_ids:
            if token_id in _NAMES:
                parts.append(pending.decode("utf-8", errors="replace") + _NAMES[token_id])
                pending.clear()
            else:
                pending += self.token_bytes(token_id)
        parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def _take(self, prompt: str) -> ScriptedEntry | None:
        with self._lock:
            for i, entry in enumerate(self.entries):
                if entry.match is None or entry.match in prompt:
                    if len(self.entries) > 1 or not self.repeat_last:
                        del self.entries[i]
                    return entry
        return None

    def _resumed(self, prompt: tuple[int, ...]) -> tuple[int, list[int]] | None:
        """The call whose play `prompt` continues, and the rest of that play."""
        with self._lock:
            for call, (earlier, played) in zip(self._play_calls, self._plays, strict=True):
                tail = list(prompt[len(earlier) :])
                extends = len(prompt) > len(earlier) and prompt[: len(earlier)] == earlier
                if extends and tail == played[: len(tail)]:
                    return call, played[len(tail) :]
        return None

    def _write(self, line: Mapping[str, Any]) -> None:
        if self.record is None:
            return
        with self._record_lock, self.record.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        call = FakeCall(prompt_ids=tuple(prompt_ids), sampling=sampling, cache_key=cache_key)
        with self._lock:
            self.calls.append(call)
            number = len(self.calls) - 1
        prompt = self.prompt_text(call.prompt_ids)
        resumed = self._resumed(call.prompt_ids)
        step, hold = self.step_seconds, None
        if resumed is not None:
            continues, ids = resumed
            step = 0.0
        else:
            continues = None
            entry = self._take(prompt)
            ids = [] if entry is None else list(entry.token_ids)
            if entry is not None:
                step = self.step_seconds if entry.step_seconds is None else entry.step_seconds
                hold = entry.hold
            with self._lock:
                self._plays.append((call.prompt_ids, ids))
                self._play_calls.append(number)
        self._write(
            {
                "event": "start",
                "call": number,
                "model": self.name,
                "prompt": prompt,
                "continues": continues,
                # Every sampling field, so that a test checks what each job was asked for.
                **asdict(sampling),
            }
        )
        try:
            if hold is not None:
                _wait_for(hold, cancelled)
            for token_id in ids:
                if cancelled.is_set():
                    return
                if step:
                    time.sleep(step)
                call.yielded += 1
                yield token_id
        finally:
            self._write(
                {
                    "event": "end",
                    "call": number,
                    "model": self.name,
                    "yielded": call.yielded,
                    "cancelled": cancelled.is_set(),
                }
            )


def _wait_for(
    path: Path, cancelled: threading.Event, held: str = "the scripted answer was held"
) -> None:
    deadline = time.monotonic() + HOLD_LIMIT_SECONDS
    while not path.exists():
        if cancelled.wait(0.01):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{held}, and {path} never appeared")


def _entry(raw: object, base: Path, where: str) -> ScriptedEntry:
    options: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {"text": raw}
    text = options.get("text", "")
    items = [text] if isinstance(text, str) else text
    if not isinstance(items, list) or not all(isinstance(i, int | str) for i in items):
        raise ModelLoadError(f"{where}: an entry's text is a string or a list of ids and strings")
    step = options.get("step_seconds")
    match, hold = options.get("match"), options.get("hold")
    if step is not None and not isinstance(step, int | float):
        raise ModelLoadError(f"{where}: step_seconds is a number")
    if match is not None and not isinstance(match, str):
        raise ModelLoadError(f"{where}: match is a string")
    if hold is not None and not isinstance(hold, str):
        raise ModelLoadError(f"{where}: hold is a file name")
    return ScriptedEntry(
        token_ids=tuple(
            i for item in items for i in (byte_ids(item) if isinstance(item, str) else [item])
        ),
        match=match,
        step_seconds=None if step is None else float(step),
        hold=None if hold is None else base / hold,
    )


def load_scripted_model(spec: ModelSpec) -> Backend:
    """The loader of `--backend scripted` (engine/models.py `LOADERS`): the script the spec's
    path names."""
    return load_script(spec.path)


def load_script(path: Path) -> Backend:
    """The scripted model the JSON file at `path` describes. ModelLoadError naming the file
    when it cannot be read or is not a script."""
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelLoadError(f"cannot read the script {path}: {e}") from e
    if not isinstance(spec, dict):
        raise ModelLoadError(f"the script {path} is not a JSON object")
    known = {"name", "script", "repeat_last", "step_seconds", "eog_ids", "fim", "template"}
    known |= {"context", "record", "load_hold"}
    if unknown := sorted(set(spec) - known):
        raise ModelLoadError(f"the script {path} has unknown keys: {', '.join(unknown)}")
    base = path.parent
    raw_entries = spec.get("script", [])
    if not isinstance(raw_entries, list):
        raise ModelLoadError(f"the script {path}: `script` is a list of entries")
    entries = [_entry(raw, base, f"{path}, entry {i}") for i, raw in enumerate(raw_entries)]
    record = spec.get("record")
    try:
        backend = ScriptedBackend(
            entries=entries,
            repeat_last=bool(spec.get("repeat_last", True)),
            step_seconds=float(spec.get("step_seconds", 0.0)),
            eog_ids=tuple(int(i) for i in spec.get("eog_ids", (1, 6))),
            template=spec.get("template", DEFAULT_TEMPLATE),
            context=int(spec.get("context", DEFAULT_CONTEXT_SIZE)),
            fim=bool(spec.get("fim", False)),
            name=str(spec.get("name", path.stem)),
            record=None if record is None else base / str(record),
        )
    except (TypeError, ValueError) as e:
        raise ModelLoadError(f"the script {path} has a bad value: {e}") from e
    if (load_hold := spec.get("load_hold")) is not None:
        try:
            _wait_for(base / str(load_hold), threading.Event(), "the load was held")
        except RuntimeError as e:
            raise ModelLoadError(f"the script {path}: {e}") from e
    # What status and doctor report: this backend and this file.
    Backend.__init__(
        backend,
        info=replace(backend.info, backend=SCRIPTED_BACKEND, path=str(path)),
        vocab=backend.vocab,
    )
    return backend
