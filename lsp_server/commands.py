"""The server's commands and their typed arguments (docs/protocol.md).

pygls structures a command handler's arguments from its annotations with the server's cattrs
converter (as pygls's example servers do), so a handler receives an `ExplainArguments` or a
`RewriteArguments`, never raw JSON. Two shapes are accepted on the wire: one object
(`[{uri, range, instruction?}]`, what the editor plugins send) and the fields in order
(`[uri, range, instruction?]`); `fold_positional` turns the second into the first before pygls
structures it. Bad input becomes an InvalidParams error that names the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cattrs import Converter, transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.protocol import default_converter

EXPLAIN_COMMAND = "infill.explain"
REWRITE_COMMAND = "infill.rewrite"
ACCEPT_NEXT_EDIT_COMMAND = "infill.acceptNextEdit"
ACCEPT_COMPLETION_COMMAND = "infill.acceptCompletion"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainArguments:
    """`infill.explain`: the code at `range` (an empty range: its enclosing block)."""

    uri: str
    range: types.Range


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteArguments:
    """`infill.rewrite`, and a Rewrite/Fix action's `data`: without an instruction the server
    asks for one. `version`: the document's version the range was taken in (an action
    offered by the server always carries it); the rewrite is refused once the document has
    changed since, as the range may then hold other code."""

    uri: str
    range: types.Range
    instruction: str | None = None
    version: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptNextEditArguments:
    """`infill.acceptNextEdit`: the id of the next edit the client applied (the one argument
    of the command each offered edit carries)."""

    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptCompletionArguments:
    """`infill.acceptCompletion`: the id of the inline suggestion the client inserted (the one
    argument of the command each inline item carries while usage is counted)."""

    id: str


#: Each command's argument class; its fields, in order, name the positional arguments.
COMMAND_ARGUMENTS: dict[
    str,
    type[ExplainArguments]
    | type[RewriteArguments]
    | type[AcceptNextEditArguments]
    | type[AcceptCompletionArguments],
] = {
    EXPLAIN_COMMAND: ExplainArguments,
    REWRITE_COMMAND: RewriteArguments,
    ACCEPT_NEXT_EDIT_COMMAND: AcceptNextEditArguments,
    ACCEPT_COMPLETION_COMMAND: AcceptCompletionArguments,
}

_T = TypeVar("_T")


def fold_positional(command: str, arguments: Sequence[Any] | None) -> Sequence[Any] | None:
    """`[uri, range, instruction?]` as the one object `[{uri, range, instruction?}]` that the
    command's handler takes (no arguments: an empty object, which pygls then refuses, naming
    what is missing); other shapes (and other commands) are left as they are."""
    cls = COMMAND_ARGUMENTS.get(command)
    if cls is None:
        return arguments
    if not arguments:
        return [{}]
    if isinstance(arguments[0], dict):
        return arguments
    names = [field.name for field in dataclasses.fields(cls)]
    if len(arguments) > len(names):
        return arguments  # pygls answers: too many arguments
    return [dict(zip(names, arguments, strict=False))]


def make_converter() -> Converter:
    """pygls's converter, whose command argument classes fail with a message that names the
    bad field (`required field missing @ $.range`) instead of cattrs's summary."""
    converter: Converter = default_converter()  # type: ignore[no-untyped-call]
    for cls in COMMAND_ARGUMENTS.values():
        converter.register_structure_hook(cls, _explained(converter.get_structure_hook(cls)))
    return converter


def _explained(hook: Any) -> Any:
    def structure(value: Any, cls: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"the arguments of a command are one object, not {value!r}")
        try:
            return hook(value, cls)
        except ClassValidationError as e:
            raise ValueError("; ".join(transform_error(e))) from None

    return structure


def structure_arguments(converter: Converter, value: Any, cls: type[_T]) -> _T:
    """`value` (JSON) as `cls`, the way a command's arguments are; InvalidParams if it is not."""
    try:
        return converter.structure(value, cls)
    except Exception as e:
        raise JsonRpcInvalidParams(f"{JsonRpcInvalidParams.MESSAGE}: {e}") from None
