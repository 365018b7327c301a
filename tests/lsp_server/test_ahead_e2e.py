"""Suggestions written ahead of time (`speculativeSuggestions`) through the
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
    document_jobs,
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


#: A list of long lines: the line written ahead (the next one) takes the model a while.
LONG_LINES = (
    "QUOTES = [\n"
    '    "The quick brown fox jumps over the lazy dog while the farmer watches from the hill",\n'
    '    "A journey of a thousand miles begins with a single step taken in the morning light",\n'
    '    "'
)


def dropped_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs whose cancel came while they ran (they say how many tokens came after it)."""
    return [job for job in jobs if job["tokens_after_cancel"] is not None]


async def test_work_ahead_is_dropped_within_a_token_the_moment_the_model_is_needed() -> None:
    """README "Inline completion": the work ahead stops the moment a request needs the model:
    a request in another document while it is being written cancels its engine job, which
    hands over at most one more token."""
    settings = {**SETTINGS, "contextTokens": 0}  # each document's prompt its own
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), settings) as s:
        for attempt in range(6):  # the work ahead may be done before the other request comes
            uri = s.open(LONG_LINES + f"Attempt {attempt}: ")
            text = LONG_LINES + f"Attempt {attempt}: "
            await s.inline(uri, s.position(text, 3, len(text.split("\n")[-1])))
            other = s.open(TEXT)  # at once: the model is needed elsewhere
            await s.inline(other, s.position(TEXT, 5, len("    return ")))
            await ahead_settled(s)
            _, jobs = await document_jobs(s, uri, lambda r, _: not r, "the document's jobs")
            if dropped := dropped_jobs(jobs[1:]):
                assert all(job["tokens_after_cancel"] in (0, 1) for job in dropped), dropped
                return
    pytest.fail("the work ahead was done before another request each time")
