"""The next-edit protocol's shapes, as Copilot's clients send them."""

from __future__ import annotations

from collections import namedtuple

import pytest
from pygls.exceptions import JsonRpcInvalidParams

from lsp_server.next_edit.requests import focused_uri, mentioned_ids, parse_inline_edit


def test_params_parse_as_plain_json_or_as_pygls_hands_them_over() -> None:
    json = {
        "textDocument": {"uri": "file:///a.py", "version": 3},
        "position": {"line": 1, "character": 2},
    }
    Position = namedtuple("Position", "line character")
    Document = namedtuple("Document", "uri version")
    Params = namedtuple("Params", "textDocument position")
    tupled = Params(Document("file:///a.py", 3), Position(1, 2))
    for params in (json, tupled):
        parsed = parse_inline_edit(params)
        assert (parsed.uri, parsed.version, parsed.position.line, parsed.position.character) == (
            "file:///a.py",
            3,
            1,
            2,
        )
    unversioned = parse_inline_edit(
        {"textDocument": {"uri": "u"}, "position": {"line": 0, "character": 0}}
    )
    assert unversioned.version is None


@pytest.mark.parametrize(
    "params",
    [
        None,
        [],
        {"position": {"line": 0, "character": 0}},
        {"textDocument": {"uri": 7}, "position": {"line": 0, "character": 0}},
        {"textDocument": {"uri": "u", "version": True}, "position": {"line": 0, "character": 0}},
        {"textDocument": {"uri": "u"}, "position": {"line": 0}},
        {"textDocument": {"uri": "u"}, "position": {"line": 0, "character": -1}},
        {"textDocument": {"uri": "u"}, "position": {"line": False, "character": 0}},
    ],
)
def test_bad_params_name_what_is_wrong(params: object) -> None:
    with pytest.raises(JsonRpcInvalidParams, match="copilotInlineEdit"):
        parse_inline_edit(params)


def test_focus_is_read_in_each_shape_clients_send() -> None:
    assert focused_uri({"textDocument": {"uri": "file:///a.py"}}) == "file:///a.py"
    assert focused_uri({"uri": "file:///b.py"}) == "file:///b.py"
    assert focused_uri({}) is None
    assert focused_uri(None) is None


def test_an_offer_id_is_found_wherever_the_client_put_it() -> None:
    edit = {"text": "x", "command": {"command": "infill.acceptNextEdit", "arguments": ["ne-7"]}}
    assert "ne-7" in set(mentioned_ids({"item": edit}))
    assert "ne-7" in set(mentioned_ids({"id": "ne-7"}))
    deep: object = "ne-9"
    for _ in range(50):  # a hostile nesting is read to a bounded depth, without recursion errors
        deep = [deep]
    assert "ne-9" not in set(mentioned_ids({"x": deep}))
