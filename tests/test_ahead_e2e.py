"""Suggestions written ahead of time (`speculativeSuggestions`, issue 12 part 3) through the
real server with the real default model: after a suggestion is shown, the model writes what
comes once it is accepted and the line ending typed; accepting and going on is then answered
without a model call."""

from __future__ import annotations

from typing import Any

import pytest
from lsp_helpers import (
    STATS,
    Session,
    completion_engine,
    poll_until,
    ready_session,
    request_json,
)
from pytest_lsp import client_capabilities

pytestmark = pytest.mark.slow

SETTINGS = {"debounceMs": 0, "speculativeSuggestions": 2}
TEXT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return "


async def ahead_settled(session: Session) -> dict[str, Any]:
    """The server's work ahead, once it has finished writing."""

    async def ahead() -> dict[str, Any]:
        return dict((await request_json(session, STATS, None))["ahead"])

    return await poll_until(ahead, lambda a: not a["running"], "the work ahead to finish")


async def test_accepting_a_suggestion_and_going_on_needs_no_model_call() -> None:
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), SETTINGS) as s:
        uri = s.open(TEXT)
        items = await s.inline(uri, s.position(TEXT, 5, len("    return ")))
        assert items, "the model completes `return` in a function like the one above it"
        shown = items[0].insert_text
        assert isinstance(shown, str)
        assert "\n" not in shown  # a single-line suggestion: the next line is written ahead
        ahead = await ahead_settled(s)
        assert ahead["ready"] >= 1
        # Accept it and press Enter; the editor keeps the line's indentation.
        typed = shown + "\n    "
        end = {"line": 5, "character": len("    return ")}
        s.change(uri, 2, [{"range": {"start": end, "end": end}, "text": typed}])
        accepted = TEXT + typed
        jobs = (await completion_engine(s))["total_jobs"]
        await s.inline(uri, s.position(accepted, 6, 4))
        await s.wait_for_messages()
        assert (await completion_engine(s))["total_jobs"] == jobs  # no model call for it


async def test_with_the_setting_off_nothing_is_written_ahead() -> None:
    settings = {**SETTINGS, "speculativeSuggestions": 0}
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), settings) as s:
        uri = s.open(TEXT)
        await s.inline(uri, s.position(TEXT, 5, len("    return ")))
        assert await ahead_settled(s) == {"ready": 0, "running": 0}
