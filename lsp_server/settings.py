"""The `infill` settings: one fully defaulted tree, parsed once from the client's options.

Clients send camelCase keys, in `initializationOptions` and in
`workspace/didChangeConfiguration` (either the `infill` section itself or an object holding
it). Unknown keys are ignored; a bad value falls back to its default with one message.

Each setting is one field: its default, and beside it the check a client's value must pass
(`_setting`). The client's key is the field's name in camelCase.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from engine.specs import (
    BACKENDS,
    DECODE_PATHS,
    ModelOptions,
    check_device,
    check_fim_family,
    check_model_name,
    check_next_edit_format,
)

T = TypeVar("T")

#: Takes a client's value and returns it as the setting's; raises ValueError naming what it
#: must be ("an integer from 1 to 10").
Check = Callable[[Any], T]

_MODEL = ModelOptions()  # the model options' defaults are the engine's


def _setting(default: T, check: Check[T], *, secret: bool = False) -> T:
    """A setting's field: its default, and the check a client's value must pass. A secret's
    value is never shown (not in the dataclass's repr, not in a message about a bad value)."""
    return dataclasses.field(
        default=default, repr=not secret, metadata={"check": check, "secret": secret}
    )


def _text(what: str = "a string") -> Check[str | None]:
    """A string setting; empty (or null) for none."""

    def check(value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise ValueError(what)
        return value

    return check


def _int(low: int, high: int) -> Check[int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"an integer from {low} to {high}")
        return value

    return check


def _optional(check: Check[T]) -> Check[T | None]:
    def optional(value: Any) -> T | None:
        return None if value is None else check(value)

    return optional


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


def _float(low: float, high: float) -> Check[float]:
    def check(value: Any) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise ValueError(f"a number from {low} to {high}")
        return float(value)

    return check


def _choice(*options: str) -> Check[str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError("one of " + ", ".join(options))
        return str(value)

    return check


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the user can set. Defaults suit the default models on a laptop CPU."""

    # How the models are loaded (`model_options()`): a field of the same name each.
    # A GGUF file, a Hugging Face folder, or hf:ORG/REPO/FILE.gguf / hf:ORG/REPO (downloaded
    # once: engine/hub.py).
    model: str | None = _setting(_MODEL.model, check_model_name)
    chat_model: str | None = _setting(_MODEL.chat_model, check_model_name)
    backend: str = _setting(_MODEL.backend, _choice(*BACKENDS))
    device: str = _setting(_MODEL.device, check_device)  # transformers: auto, cpu, cuda, cuda:N
    decode: str = _setting(_MODEL.decode, _choice(*DECODE_PATHS))  # transformers' decode loop
    gpu_layers: int = _setting(_MODEL.gpu_layers, _int(-1, 10_000))  # llama.cpp; -1: all
    context_size: int = _setting(_MODEL.context_size, _int(256, 1_048_576))
    threads: int | None = _setting(_MODEL.threads, _optional(_int(1, 512)))
    kv_cache_mb: int | None = _setting(_MODEL.kv_cache_mb, _optional(_int(0, 1 << 20)))
    fim_family: str | None = _setting(_MODEL.fim_family, check_fim_family)  # None: detected
    # Next edits from a model (engine/next_edit_model.py); without one, only propagation.
    next_edit_model: str | None = _setting(
        _MODEL.next_edit_model, check_model_name
    )  # None: completion's
    next_edit_format: str | None = _setting(_MODEL.next_edit_format, check_next_edit_format)
    # The remote backend (backend "openai"): an OpenAI-compatible server and its models.
    endpoint: str | None = _setting(_MODEL.endpoint, _text())  # e.g. http://127.0.0.1:8012/v1
    api_key: str | None = _setting(_MODEL.api_key, _text(), secret=True)  # else $INFILL_API_KEY
    remote_model: str | None = _setting(_MODEL.remote_model, _text())  # None: the server's
    remote_chat_model: str | None = _setting(_MODEL.remote_chat_model, _text())  # None: as above
    remote_next_edit_model: str | None = _setting(_MODEL.remote_next_edit_model, _text())

    max_tokens_single_line: int = _setting(48, _int(1, 4096))
    max_tokens_multi_line: int = _setting(96, _int(1, 8192))  # bounds the wait on a CPU
    debounce_ms: int = _setting(20, _int(0, 10_000))
    invoked_suggestions: int = _setting(3, _int(1, 10))  # distinct items when asked for
    temperature: float = _setting(0.0, _float(0.0, 2.0))  # for automatic suggestions; 0: greedy
    # Answers computed while the model is idle (inline.Speculator): 0 none; 1 the document
    # once the shown suggestion is accepted; 2 also the next line after a single-line one.
    speculative_suggestions: int = _setting(2, _int(0, 2))
    # The code after the cursor chooses among candidate lines (lsp_server/rerank.py), for a
    # model without FIM tokens: "auto" where the model runs on a GPU (several times a plain
    # suggestion's work: too slow for every keystroke on a laptop CPU).
    suffix_ranking: str = _setting("auto", _choice("auto", "on", "off"))
    # The confidence gate (inline/confidence.py): an automatic suggestion whose confidence is
    # below this is not shown; 0 shows everything. Invoked requests are never gated. The
    # default: bench/confidence.py's choice on its tuning cases (README, "Confidence gate").
    min_confidence: float = _setting(0.15, _float(0.0, 1.0))
    prefix_tokens: int = _setting(1536, _int(16, 1_000_000))  # context budget before the cursor
    suffix_tokens: int = _setting(512, _int(0, 1_000_000))  # and after it (FIM models)
    # Other open documents' snippets, first in the prompt (neighbors.py), on top of the two
    # budgets above; 0: none.
    context_tokens: int = _setting(512, _int(0, 1_000_000))

    # Bounds: what one document or request may cost.
    max_document_bytes: int = _setting(4 << 20, _int(1, 1 << 40))  # UTF-8; larger: no completion
    max_selection_chars: int = _setting(16_000, _int(1, 100_000_000))  # Explain and Rewrite
    type_ahead_documents: int = _setting(32, _int(1, 100_000))  # documents whose answer is kept

    # Counts of what happens to inline suggestions, per language, kept on this machine only
    # (lsp_server/usage.py, usage_file.py); false: nothing counted, nothing written.
    usage_counts: bool = _setting(True, _bool)

    def model_options(self) -> ModelOptions:
        """The values that decide which models are loaded and how."""
        return ModelOptions(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(ModelOptions)}
        )


def _camel_case(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


#: The client's key of each setting.
_FIELDS = {_camel_case(f.name): f for f in dataclasses.fields(Settings)}
#: Every key of the `infill` section, as clients send it (the editor plugins declare these).
CLIENT_KEYS = tuple(_FIELDS)


def parse_settings(raw: object, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a client's options, over `base`; and a message per value not taken.

    `raw` may be the `infill` section or an object with an `infill` key. A key the client
    leaves out keeps its value in `base`; a bad value gets its default.
    """
    base = base or Settings()
    if raw is None:
        return base, []
    if isinstance(raw, Mapping) and isinstance(raw.get("infill"), Mapping):
        raw = raw["infill"]
    if not isinstance(raw, Mapping):
        return base, [f"infill settings must be an object, got {type(raw).__name__}: ignored"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        setting = _FIELDS.get(key)
        if setting is None:
            continue  # unknown keys are someone else's (or a newer version's)
        try:
            changes[setting.name] = setting.metadata["check"](value)
        except ValueError as e:
            changes[setting.name] = setting.default
            shown = "a value that is not shown" if setting.metadata["secret"] else repr(value)
            problems.append(f"infill.{key} must be {e}, got {shown}: using {setting.default!r}")
    return replace(base, **changes), problems
