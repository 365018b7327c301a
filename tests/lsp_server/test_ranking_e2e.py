"""Single-line suggestions ranked by the code after the cursor (`suffixRanking`) through the real
server with the real default model, which has no FIM tokens: the plain suggestion ignores the code
below the cursor; the ranked one fits it."""

from __future__ import annotations

from typing import Any

import pytest
from lsp_helpers import completion_engine, ready_session, without_work_ahead
from pytest_lsp import client_capabilities

pytestmark = pytest.mark.slow

# The cursor on the empty line; the line after it uses a name nothing before it defines.
TEXT = (
    'def mean(values):\n    """The mean of a list of numbers."""\n\n    return acc / len(values)\n'
)
LINE, COLUMN = 2, 0


async def suggestion(ranking: str) -> tuple[str, dict[str, Any]]:
    settings = without_work_ahead({"debounceMs": 0, "suffixRanking": ranking})
    async with ready_session(client_capabilities("neovim@v0.11.0"), settings) as s:
        uri = s.open(TEXT)
        items = await s.inline(uri, s.position(TEXT, LINE, COLUMN))
        assert items, "the model suggests a line in the function's body"
        text = items[0].insert_text
        assert isinstance(text, str)
        await s.wait_for_messages()
        return text, await completion_engine(s)


async def test_the_ranked_suggestion_defines_what_the_code_after_the_cursor_uses() -> None:
    plain, plain_engine = await suggestion("off")
    ranked, ranked_engine = await suggestion("on")
    # Without ranking the model writes its own return, and `acc` stays undefined.
    assert "acc" not in plain
    # Ranked: the line that makes `return acc / len(values)` likely is the one that sets acc.
    assert ranked.strip().startswith("acc =")
    assert ranked_engine["total_jobs"] > plain_engine["total_jobs"]  # it costs model work


async def test_an_invoked_request_gets_the_best_ranked_line_first_then_the_next_best() -> None:
    """README "Settings": ranked, an invoked request's first item is the automatic one's (the
    line the code after the cursor makes most likely) and its other items are the next best
    candidates: distinct lines, each a line of the function's body."""
    automatic, _ = await suggestion("on")
    settings = without_work_ahead({"debounceMs": 0, "suffixRanking": "on"})
    async with ready_session(client_capabilities("neovim@v0.11.0"), settings) as s:
        uri = s.open(TEXT)
        items = await s.inline(uri, s.position(TEXT, LINE, COLUMN), invoked=True)
    texts = [item.insert_text for item in items]
    assert 2 <= len(texts) <= 3, texts  # infill.invokedSuggestions
    assert texts[0] == automatic, texts
    assert len(set(texts)) == len(texts), texts
    assert all(isinstance(t, str) and t.strip() and "\n" not in t.strip() for t in texts), texts
