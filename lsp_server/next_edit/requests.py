"""The next-edit protocol, in GitHub Copilot language server's shapes, so that the clients
written for it (copilot.vim, sidekick.nvim, copilot-lsp) work unmodified:

- request `textDocument/copilotInlineEdit` `{textDocument: {uri, version}, position}`, answered
  `{edits: [{text, textDocument: {uri, version}, range, command}]}`;
- the accept command (`infill.acceptNextEdit`, its one argument the edit's id), run by the
  client after it applied the edit;
- notifications that an edit was shown or rejected, and `textDocument/didFocus`;
- about inline completions, `textDocument/didShowCompletion` `{item}` and
  `textDocument/didPartiallyAcceptCompletion` `{item, acceptedLength}`, the item as the server
  sent it (its accept command's one argument is its id; `acceptedLength` counts UTF-16 units
  from the start of its insert text).

Params arrive as pygls hands custom methods over (named tuples) or as plain JSON:
`json_values.plain` turns either into JSON first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from lsp_server.commands import ACCEPT_NEXT_EDIT_COMMAND
from lsp_server.json_values import plain
from lsp_server.usage import PartialAccept

INLINE_EDIT_REQUEST = "textDocument/copilotInlineEdit"
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
DID_FOCUS = "textDocument/didFocus"
DID_REJECT = "infill/didRejectNextEdit"
#: Copilot's clients send these about inline completions.
DID_SHOW_COMPLETION = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT_COMPLETION = "textDocument/didPartiallyAcceptCompletion"
#: The `experimental` capability entry that tells a client the server offers next edits.
CAPABILITY = "nextEditSuggestions"


@dataclass(frozen=True, slots=True, kw_only=True)
class InlineEditParams:
    uri: str
    #: The document version the client asks about; None when it did not say.
    version: int | None
    position: types.Position


def parse_inline_edit(params: Any) -> InlineEditParams:
    """The request's params; InvalidParams naming what is wrong."""
    value = plain(params)
    document = value.get("textDocument") if isinstance(value, dict) else None
    uri = document.get("uri") if isinstance(document, dict) else None
    if not isinstance(uri, str):
        raise _invalid("textDocument.uri is required (a string)")
    version = document.get("version") if isinstance(document, dict) else None
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise _invalid("textDocument.version must be an integer")
    position = value.get("position")
    line = _count(position.get("line") if isinstance(position, dict) else None)
    character = _count(position.get("character") if isinstance(position, dict) else None)
    if line is None or character is None:
        raise _invalid("position must be {line, character}, two integers from 0")
    return InlineEditParams(
        uri=uri, version=version, position=types.Position(line=line, character=character)
    )


def _count(value: Any) -> int | None:
    """`value` if it is a whole number from 0 (a JSON `true` is no number)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def focused_uri(params: Any) -> str | None:
    """The document of a `textDocument/didFocus`, sent as `{textDocument: {uri}}`, as `{uri}`
    or as `{}` (no document has the focus)."""
    value = plain(params)
    if not isinstance(value, dict):
        return None
    document = value.get("textDocument")
    uri = document.get("uri") if isinstance(document, dict) else value.get("uri")
    return uri if isinstance(uri, str) else None


#: How deep `mentioned_ids` looks into a notification's params.
_MAX_DEPTH = 8


def mentioned_ids(params: Any) -> Iterator[str]:
    """The strings in a notification's params, where an offer's id may be: clients send it as
    `{id}`, as the edit's command arguments, or inside the whole edit they showed."""

    def walk(value: Any, depth: int) -> Iterator[str]:
        if depth > _MAX_DEPTH:
            return
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                yield from walk(item, depth + 1)

    yield from walk(plain(params), 0)


def completion_id(params: Any) -> str | None:
    """The id in a completion notice's `item`: its command's first argument."""
    value = plain(params)
    item = value.get("item") if isinstance(value, dict) else None
    command = item.get("command") if isinstance(item, dict) else None
    arguments = command.get("arguments") if isinstance(command, dict) else None
    first = arguments[0] if isinstance(arguments, list) and arguments else None
    return first if isinstance(first, str) else None


def partial_accept(params: Any) -> PartialAccept | None:
    """A `didPartiallyAcceptCompletion`; None without an id or a length from 0."""
    suggestion_id = completion_id(params)
    value = plain(params)
    length = _count(value.get("acceptedLength") if isinstance(value, dict) else None)
    if suggestion_id is None or length is None:
        return None
    text = value["item"].get("insertText")
    if isinstance(text, dict):  # a snippet string: {kind: "snippet", value}
        text = text.get("value")
    return PartialAccept(
        id=suggestion_id, accepted_length=length, item_text=text if isinstance(text, str) else None
    )


def edit_json(
    *, uri: str, version: int, range_: types.Range, text: str, offer_id: str
) -> dict[str, Any]:
    """One edit of the answer, the accept command carrying its id."""
    return {
        "text": text,
        "textDocument": {"uri": uri, "version": version},
        "range": _range_json(range_),
        "command": {
            "title": "Accept next edit",
            "command": ACCEPT_NEXT_EDIT_COMMAND,
            "arguments": [offer_id],
        },
    }


def answer_json(edits: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"edits": list(edits)}


def _range_json(range_: types.Range) -> dict[str, Any]:
    return {
        "start": {"line": range_.start.line, "character": range_.start.character},
        "end": {"line": range_.end.line, "character": range_.end.character},
    }


def _invalid(message: str) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(f"{JsonRpcInvalidParams.MESSAGE}: {INLINE_EDIT_REQUEST}: {message}")
