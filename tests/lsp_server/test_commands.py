"""Commands' arguments: both shapes on the wire become one typed object (`commands.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types

from lsp_server.commands import (
    EXPLAIN_COMMAND,
    REWRITE_COMMAND,
    ExplainArguments,
    RewriteArguments,
    fold_positional,
    make_converter,
)

URI = "file:///tmp/a%20b.py"
RANGE = {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 4}}


@pytest.mark.parametrize(
    ("command", "arguments", "folded"),
    [
        pytest.param(EXPLAIN_COMMAND, [URI, RANGE], [{"uri": URI, "range": RANGE}], id="in order"),
        pytest.param(
            REWRITE_COMMAND,
            [URI, RANGE, "Add type hints."],
            [{"uri": URI, "range": RANGE, "instruction": "Add type hints."}],
            id="in order, with an instruction",
        ),
        pytest.param(
            REWRITE_COMMAND,
            [{"uri": URI, "range": RANGE}],
            [{"uri": URI, "range": RANGE}],
            id="one object: as it is",
        ),
        pytest.param(EXPLAIN_COMMAND, None, [{}], id="none: an empty object"),
        pytest.param(EXPLAIN_COMMAND, [], [{}], id="empty: an empty object"),
        pytest.param(
            EXPLAIN_COMMAND, [URI, RANGE, "x"], [URI, RANGE, "x"], id="too many: left to pygls"
        ),
        pytest.param("other.command", [URI, RANGE], [URI, RANGE], id="another command"),
    ],
)
def test_fold_positional(command: str, arguments: Any, folded: Any) -> None:
    assert fold_positional(command, arguments) == folded


def test_arguments_are_structured_into_their_classes() -> None:
    converter = make_converter()
    rng = types.Range(
        start=types.Position(line=1, character=0), end=types.Position(line=2, character=4)
    )
    explain = converter.structure({"uri": URI, "range": RANGE, "version": 3}, ExplainArguments)
    assert explain == ExplainArguments(uri=URI, range=rng)
    rewrite = converter.structure({"uri": URI, "range": RANGE}, RewriteArguments)
    assert rewrite == RewriteArguments(uri=URI, range=rng, instruction=None)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param({"uri": URI}, "required field missing @ $.range", id="no range"),
        pytest.param(
            {"uri": URI, "range": {"start": {"line": 1}, "end": RANGE["end"]}},
            "required field missing @ $.range.start.character",
            id="half a position",
        ),
        pytest.param(URI, "one object", id="not an object"),
    ],
)
def test_bad_arguments_name_what_is_wrong(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):
        make_converter().structure(value, ExplainArguments)
