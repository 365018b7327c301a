"""The `infill` settings: one fully defaulted tree, parsed once from the client's options.

Clients send camelCase keys, in `initializationOptions` and in
`workspace/didChangeConfiguration` (either the `infill` section itself or an object holding
it). Unknown keys are ignored; a bad value falls back to its default with one message.

Each setting is one field: its default, and beside it the check a client's value must pass
and what it does (`_setting`). The client's key is the field's name in camelCase.
`python docs/generate.py` writes the settings reference, docs/settings.md, from these fields.
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


def _setting(default: T, check: Check[T], doc: str, *, secret: bool = False) -> T:
    """A setting's field: its default, the check a client's value must pass, and what it does
    (the settings reference, docs/settings.md, is generated from these). A secret's value is
    never shown (not in the dataclass's repr, not in a message about a bad value)."""
    return dataclasses.field(
        default=default,
        repr=not secret,
        metadata={"check": check, "secret": secret, "doc": doc},
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


def check_engine(value: Any) -> str:
    """`auto`, `here`, or an http(s) URL."""
    if value in ("auto", "here"):
        return str(value)
    if isinstance(value, str) and value.strip().lower().startswith(("http://", "https://")):
        return value.strip()
    raise ValueError("auto, here, or an engine server's http:// or https:// URL")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the user can set. Defaults suit the default models on a laptop CPU."""

    # How the models are loaded (`model_options()`): a field of the same name each.
    model: str | None = _setting(
        _MODEL.model,
        check_model_name,
        "The completion model: a GGUF file (llama.cpp), a Hugging Face model folder "
        "(transformers), or a hub model `hf:ORG/REPO/FILE.gguf` / `hf:ORG/REPO`, downloaded once "
        "(engine/hub.py). Null: `$INFILL_MODEL`, else the default model.",
    )
    chat_model: str | None = _setting(
        _MODEL.chat_model,
        check_model_name,
        "The chat model for Explain, Rewrite and Fix, named as `model` is. Null: "
        "`$INFILL_CHAT_MODEL`, else the default chat model.",
    )
    backend: str = _setting(
        _MODEL.backend,
        _choice(*BACKENDS),
        "Which library runs the models: `auto` (llama.cpp for a file, transformers for a folder) "
        "or `openai` (an OpenAI-compatible server at `endpoint`).",
    )
    device: str = _setting(
        _MODEL.device, check_device, "transformers: the device the model runs on."
    )
    decode: str = _setting(
        _MODEL.decode,
        _choice(*DECODE_PATHS),
        "transformers' decode loop: `dynamic` (a growing KV cache), `static` (preallocated), "
        "`compiled` (static under `torch.compile`, CUDA graphs on a GPU); `auto` is `compiled` "
        "on CUDA, `dynamic` on the CPU.",
    )
    gpu_layers: int = _setting(
        _MODEL.gpu_layers,
        _int(-1, 10_000),
        "llama.cpp: layers offloaded to the GPU, -1 for all (needs a CUDA build of "
        "llama-cpp-python).",
    )
    context_size: int = _setting(
        _MODEL.context_size, _int(256, 1_048_576), "The model's context, in tokens."
    )
    threads: int | None = _setting(
        _MODEL.threads,
        _optional(_int(1, 512)),
        "llama.cpp threads. Null: every core other processes leave free, at most 8, looked at "
        "before each step (a thread that loses its core to another process holds the others "
        "back: a 600-token prompt took 1.2 s on 2 threads idle, 3.2 s with one core taken).",
    )
    kv_cache_mb: int | None = _setting(
        _MODEL.kv_cache_mb,
        _optional(_int(0, 1 << 20)),
        "Memory for the KV states of recently used documents, so that coming back to a file "
        "evaluates one token; 0 keeps only the current one. Null: 16 full contexts of the "
        "model, at most an eighth of the machine's memory.",
    )
    fim_family: str | None = _setting(
        _MODEL.fim_family,
        check_fim_family,
        "The fill-in-the-middle prompt format, or `none`. Null: found from the model's own "
        "special tokens (engine/fim.py).",
    )
    # Next edits from a model (engine/next_edit_model.py); without one, only propagation.
    next_edit_model: str | None = _setting(
        _MODEL.next_edit_model,
        check_model_name,
        "A model trained for next edits, named as `model` is. Null: `$INFILL_NEXT_EDIT_MODEL`, "
        "else the completion model.",
    )
    next_edit_format: str | None = _setting(
        _MODEL.next_edit_format,
        check_next_edit_format,
        "The next-edit prompt format: `zeta1` (Zed's Zeta), `zeta2` (Zeta 2) or `none`. Null: "
        "found from the tokenizer where the format's markers are special tokens; the published "
        "Zeta models write theirs as text, so name it for them.",
    )
    # The remote backend (backend "openai"): an OpenAI-compatible server and its models.
    endpoint: str | None = _setting(
        _MODEL.endpoint,
        _text(),
        "With `backend` `openai`: the server's API, e.g. `http://127.0.0.1:8012/v1`.",
    )
    api_key: str | None = _setting(
        _MODEL.api_key,
        _text(),
        "With `backend` `openai`: sent as `Authorization: Bearer`; never logged. Null: "
        "`$INFILL_API_KEY`.",
        secret=True,
    )
    remote_model: str | None = _setting(
        _MODEL.remote_model,
        _text(),
        "With `backend` `openai`: the completion model to ask for. Null: what the server lists "
        "for the role, else its first.",
    )
    remote_chat_model: str | None = _setting(
        _MODEL.remote_chat_model,
        _text(),
        "With `backend` `openai`: the chat model to ask for. Null: as `remoteModel`.",
    )
    remote_next_edit_model: str | None = _setting(
        _MODEL.remote_next_edit_model,
        _text(),
        "With `backend` `openai`: the next-edit model to ask for (a remote server's tokens are "
        "not known here: name its `nextEditFormat`). Null: `remoteModel`.",
    )
    # Where the models run (lsp_server/engine_place.py).
    engine: str = _setting(
        "auto",
        check_engine,
        "Where a local model runs: `auto`, the user's shared engine (found or started on a Unix "
        "socket: one copy of the models for every editor window, exiting `engineIdleExit` "
        "seconds after the last one closed; `$INFILL_ENGINE` may say `here` or a URL instead); "
        "`here`, in this language server's process; or an engine server's URL "
        "(`http://127.0.0.1:8012`).",
    )
    engine_idle_exit: int = _setting(
        300,
        _int(1, 604_800),
        "Seconds the shared engine stays after its last editor window closed: a window opened "
        "again within them finds its models loaded.",
    )

    max_tokens_single_line: int = _setting(
        48, _int(1, 4096), "Token limit of a single-line suggestion."
    )
    max_tokens_multi_line: int = _setting(
        96,
        _int(1, 8192),
        "Token limit of a multi-line suggestion, which bounds the wait on a CPU; one stops "
        "earlier where its block ends.",
    )
    debounce_ms: int = _setting(
        20, _int(0, 10_000), "Milliseconds to wait after a keystroke before asking the model."
    )
    invoked_suggestions: int = _setting(
        3, _int(1, 10), "Distinct items for an explicitly invoked request."
    )
    temperature: float = _setting(
        0.0,
        _float(0.0, 2.0),
        "Sampling temperature of automatic suggestions; 0 is greedy. An invoked request's "
        "extra items are, at 0, the greedy answers after the next most likely first tokens; "
        "above 0, sampled at 0.7 or more, to differ from the first.",
    )
    speculative_suggestions: int = _setting(
        2,
        _int(0, 2),
        "Answers the idle model writes ahead (inline.Speculator), so that accepting and typing "
        "on needs no model call: 0 none; 1 the document once the shown suggestion is accepted; "
        "2 also the next line after a single-line one.",
    )
    suffix_ranking: str = _setting(
        "auto",
        _choice("auto", "on", "off"),
        "For a model without FIM tokens, a single-line suggestion is chosen among candidate "
        "lines by the code after the cursor (lsp_server/rerank.py). `auto`: on where the model "
        "runs on a GPU, in this process or in our engine server (it lists each model's device); "
        "on a CPU it took a median 8.5 s a request against 0.98 s without, for "
        "47 HumanEval single lines of 100 against 31.",
    )
    min_confidence: float = _setting(
        0.15,
        _float(0.0, 1.0),
        "The confidence gate (inline/confidence.py): an automatic suggestion less sure than "
        "this (0 to 1) is not shown; 0 shows everything; invoked requests are never gated. "
        "At 0.15, held-out Python cases showed 47% fewer wrong suggestions and 3% fewer right "
        "ones than with the gate off (bench/confidence.py).",
    )
    prefix_tokens: int = _setting(
        1536,
        _int(16, 1_000_000),
        "Context budget before the cursor, in tokens; a cursor line over it is clipped.",
    )
    suffix_tokens: int = _setting(
        512, _int(0, 1_000_000), "Context budget after the cursor, in tokens (FIM models)."
    )
    context_tokens: int = _setting(
        512,
        _int(0, 1_000_000),
        "Snippets of the other open documents and recently edited places, first in the prompt "
        "(neighbors.py), on top of `prefixTokens` and `suffixTokens`; 0 turns it off.",
    )

    # The completion menu (lsp_server/menu/): suggestions as `textDocument/completion` items.
    completion_menu: str = _setting(
        "auto",
        _choice("auto", "on", "off"),
        "Suggestions as items of the completion menu, for clients without inline completion "
        "(Emacs, Helix, Kakoune, Sublime, Neovim's own completion, nvim-cmp, blink.cmp): `auto` "
        "serves the menu to clients that do not declare inline completion, so that nobody sees "
        "a suggestion twice; `on` to every client; `off` to none.",
    )
    completion_menu_wait_ms: int = _setting(
        500,
        _int(0, 10_000),
        "How long a menu request waits for a suggestion. What is not ready by then comes at the "
        "client's next request (the list is marked incomplete, so clients ask again as the "
        "user types), the generation going on meanwhile. A client that asks once the user "
        "pauses (company in Emacs after 0.5 s, Helix after 0.25 s) asks nothing more until the "
        "next key, so the wait covers a warm single-line suggestion on a laptop CPU (0.4 s with "
        "the default model); it is nvim-cmp's own wait for a source, under blink.cmp's 2 s, "
        "and eglot and lsp-mode give it up at the user's next key. Lower it where other "
        "servers' items must not wait (Helix up to 25.01 and Sublime show the menu once every "
        "server answered). A request where no word is typed (the user asked) waits up to 8 s.",
    )
    completion_menu_place: str = _setting(
        "first",
        _choice("first", "last"),
        "Where the suggestion sorts among the other servers' items: `first` (the user asked "
        "for it by typing) or `last`. It is never preselected: Enter then still ends the line.",
    )

    # Bounds: what one document or request may cost.
    max_document_bytes: int = _setting(
        4 << 20,
        _int(1, 1 << 40),
        "Larger documents (UTF-8) get no completions, next edits or code actions: an empty "
        "answer, one log line.",
    )
    max_selection_chars: int = _setting(
        16_000,
        _int(1, 100_000_000),
        "Explain and Rewrite refuse more code than this, before any model work.",
    )
    type_ahead_documents: int = _setting(
        32, _int(1, 100_000), "Documents whose last suggestion is kept for typing ahead."
    )

    # Counts of what happens to inline suggestions (lsp_server/usage.py, usage_file.py).
    usage_counts: bool = _setting(
        True,
        _bool,
        "Count what becomes of inline suggestions, per language, on this machine only; "
        "false: nothing is counted or written.",
    )

    def model_options(self) -> ModelOptions:
        """The values that decide which models are loaded and how."""
        return ModelOptions(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(ModelOptions)}
        )


def camel_case(name: str) -> str:
    """A field's name as clients send it: `max_tokens_single_line` -> `maxTokensSingleLine`."""
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


#: The client's key of each setting.
_FIELDS = {camel_case(f.name): f for f in dataclasses.fields(Settings)}
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
