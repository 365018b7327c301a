"""The `infill` settings: one fully defaulted tree, parsed once from the client's options.

Clients send camelCase keys, in `initializationOptions` and in
`workspace/didChangeConfiguration` (either the `infill` section itself or an object holding
it). Unknown keys are ignored; a bad value falls back to its default with one message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine.models import BACKENDS


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the user can set. Defaults suit the default models on a laptop CPU."""

    model: str | None = None  # completion model: GGUF file or Hugging Face folder
    chat_model: str | None = None
    backend: str = "auto"
    device: str = "auto"  # transformers: auto, cpu, cuda, cuda:N
    gpu_layers: int = 0  # llama.cpp: layers offloaded to the GPU, -1 for all
    context_size: int = 4096
    threads: int | None = None
    max_tokens_single_line: int = 48
    max_tokens_multi_line: int = 96  # a block ends earlier; this bounds the wait on a CPU
    debounce_ms: int = 20
    invoked_suggestions: int = 3  # distinct items when the user asks for completions
    temperature: float = 0.0  # for automatic suggestions; 0 is greedy
    prefix_tokens: int = 1536  # context budget before the cursor
    suffix_tokens: int = 512  # and after it (for models with FIM tokens)

    def model_options(self) -> tuple[object, ...]:
        """The values that decide which models are loaded and how."""
        return (
            self.model,
            self.chat_model,
            self.backend,
            self.device,
            self.gpu_layers,
            self.context_size,
            self.threads,
        )


_KEYS = {
    "model": "model",
    "chatModel": "chat_model",
    "backend": "backend",
    "device": "device",
    "gpuLayers": "gpu_layers",
    "contextSize": "context_size",
    "threads": "threads",
    "maxTokensSingleLine": "max_tokens_single_line",
    "maxTokensMultiLine": "max_tokens_multi_line",
    "debounceMs": "debounce_ms",
    "invokedSuggestions": "invoked_suggestions",
    "temperature": "temperature",
    "prefixTokens": "prefix_tokens",
    "suffixTokens": "suffix_tokens",
}


def _path(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("a path string")
    return value


def _int(low: int, high: int, *, allow_none: bool = False) -> Callable[[Any], int | None]:
    def check(value: Any) -> int | None:
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"an integer from {low} to {high}")
        return value

    return check


def _float(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise ValueError(f"a number from {low} to {high}")
        return float(value)

    return check


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError("one of " + ", ".join(options))
        return str(value)

    return check


def _device(value: Any) -> str:
    if not isinstance(value, str) or not (
        value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit())
    ):
        raise ValueError("auto, cpu, cuda or cuda:N")
    return value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "model": _path,
    "chat_model": _path,
    "backend": _choice(*BACKENDS),
    "device": _device,
    "gpu_layers": _int(-1, 10_000),
    "context_size": _int(256, 1_048_576),
    "threads": _int(1, 512, allow_none=True),
    "max_tokens_single_line": _int(1, 4096),
    "max_tokens_multi_line": _int(1, 8192),
    "debounce_ms": _int(0, 10_000),
    "invoked_suggestions": _int(1, 10),
    "temperature": _float(0.0, 2.0),
    "prefix_tokens": _int(16, 1_000_000),
    "suffix_tokens": _int(0, 1_000_000),
}
assert set(_CHECKS) == {f.name for f in dataclasses.fields(Settings)}


def parse_settings(raw: object, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a client's options, over `base`; and a message per value not taken.

    `raw` may be the `infill` section or an object with an `infill` key. A key the client
    leaves out keeps its value in `base`; a bad value gets its default.
    """
    base = base or Settings()
    defaults = Settings()
    if raw is None:
        return base, []
    if isinstance(raw, Mapping) and isinstance(raw.get("infill"), Mapping):
        raw = raw["infill"]
    if not isinstance(raw, Mapping):
        return base, [f"infill settings must be an object, got {type(raw).__name__}: ignored"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = _KEYS.get(key)
        if name is None:
            continue  # unknown keys are someone else's (or a newer version's)
        try:
            changes[name] = _CHECKS[name](value)
        except ValueError as e:
            default = getattr(defaults, name)
            changes[name] = default
            problems.append(f"infill.{key} must be {e}, got {value!r}: using {default!r}")
    return replace(base, **changes), problems
