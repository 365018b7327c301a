"""The model flags several commands share, and the `ModelOptions` a parsed command line makes.

`generate`, `doctor` and `engine` take a flag per `LoadOptions` field (`--context-size` sets
`context_size`); `serve` takes the FIM family and the remote backend's flags, and leaves the
rest to the client's settings.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from engine.fim import FIM_FAMILIES
from engine.models import backend_choices
from engine.next_edit import NEXT_EDIT_FORMAT_SETTINGS
from engine.specs import (
    API_KEY_ENV,
    DECODE_PATHS,
    DEVICES,
    LoadOptions,
    ModelOptions,
    check_fim_family,
    check_next_edit_format,
    parse_hub_model,
)

#: The numeric model flags, each setting the `LoadOptions` field of its name: (flag, metavar,

#: The numeric model flags, each setting the `LoadOptions` field of its name: (flag, metavar,
#: help).
_NUMBERS = (
    ("--context-size", "N", None),
    (
        "--threads",
        "N",
        "llama.cpp threads (default: every core other processes leave free, at most 8)",
    ),
    (
        "--kv-cache-mb",
        "MB",
        "memory for the KV states of recently used documents (default: sized from the model "
        "and the machine; 0: keep only the current one)",
    ),
    ("--gpu-layers", "N", "layers offloaded to the GPU (llama.cpp with CUDA; -1: all)"),
)


def model_flags(*, remote: bool = True) -> argparse.ArgumentParser:
    """The flags of `LoadOptions`, one each (`--context-size` sets `context_size`); without
    `remote`, only those of a local model (the engine server has no remote backend)."""
    defaults = LoadOptions()
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("model")
    group.add_argument(
        "--backend",
        choices=backend_choices(),
        default=defaults.backend,
        help="auto: llama.cpp for a .gguf file, transformers for a folder",
    )
    for flag, metavar, text in _NUMBERS:
        default = getattr(defaults, flag[2:].replace("-", "_"))
        group.add_argument(flag, type=int, default=default, metavar=metavar, help=text)
    group.add_argument("--device", default=defaults.device, help=f"transformers: {DEVICES}")
    group.add_argument(
        "--decode",
        default=defaults.decode,
        choices=DECODE_PATHS,
        help="transformers: the decode loop (auto: compiled on CUDA, dynamic on the CPU; "
        "static: a preallocated KV cache; compiled: that cache under torch.compile, with "
        "CUDA graphs on a GPU)",
    )
    if remote:
        remote_flags(group, with_backend=False)
    group.add_argument("-v", "--verbose", action="store_true", help="log at INFO to stderr")
    return parent


def remote_flags(group: Any, *, with_backend: bool) -> None:
    """The FIM family and the remote backend's flags (`--backend openai --endpoint URL`)."""
    if with_backend:
        group.add_argument(
            "--backend",
            choices=backend_choices(),
            default=None,
            help="openai: use the OpenAI-compatible server at --endpoint instead of a local model",
        )
    group.add_argument(
        "--fim-family",
        default=None,
        metavar="NAME",
        help=f"FIM prompt format: {', '.join(FIM_FAMILIES)} or none (default: the model's own)",
    )
    group.add_argument(
        "--endpoint",
        metavar="URL",
        help="with --backend openai: the server's API, e.g. http://127.0.0.1:8012/v1",
    )
    group.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"with --backend openai: the server's API key (default: ${API_KEY_ENV})",
    )
    group.add_argument(
        "--remote-model", metavar="NAME", help="with --backend openai: the model to ask for"
    )


def next_edit_flags(parser: Any) -> None:
    """The next-edit model's flags (`serve` and `doctor`)."""
    parser.add_argument(
        "--next-edit-model",
        type=model_name,
        metavar="PATH",
        help="next-edit model, GGUF file or Hugging Face folder (default: the completion model)",
    )
    parser.add_argument(
        "--next-edit-format",
        type=_next_edit_format,
        metavar="NAME",
        help=f"its prompt format: {', '.join(NEXT_EDIT_FORMAT_SETTINGS)} (default: from its "
        "special tokens)",
    )
    parser.add_argument(
        "--remote-next-edit-model",
        metavar="NAME",
        help="with --backend openai: the next-edit model to ask for",
    )


def model_name(value: str) -> str | None:
    """A model flag's value: a path, or a hub model name that `parse_hub_model` takes."""
    try:
        parse_hub_model(value)
        return value or None
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _next_edit_format(value: str) -> str | None:
    try:
        return check_next_edit_format(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"must be {e}") from e


def model_options(args: argparse.Namespace, **roles: str | None) -> ModelOptions:
    """The model options of the command line: each field from the flag of its name
    (`--context-size`: `context_size`), else its default; `roles` names a role's model
    instead (`generate`'s `--model` is the model of the role in use)."""
    given: dict[str, Any] = {
        f.name: getattr(args, f.name, f.default) for f in fields(ModelOptions)
    } | roles
    try:
        given["fim_family"] = check_fim_family(given["fim_family"])
    except ValueError as e:
        raise SystemExit(f"infill-lsp: error: --fim-family must be {e}") from e
    return ModelOptions(**given)
