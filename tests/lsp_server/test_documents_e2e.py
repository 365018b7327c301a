"""Many warm documents through the real server with the real default completion model.

A user completes in file A, then in file B, then comes back to A: the server answers A from
A's kept KV state (the model evaluates one prompt token, not the whole file) and says so in
`infill/status`; the suggestion is the one A got before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsp_helpers import (
    STATUS,
    Session,
    document_jobs,
    ready_session,
    request_json,
    settled_jobs,
)
from lsprotocol import types
from pytest_lsp import client_capabilities

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
FAST = {"infill": {"maxTokensSingleLine": 12, "debounceMs": 0}}
TAIL = "\n\ndef describe(value):\n    text = str("  # the cursor at the end


def document(path: str, lines: int = 40) -> str:
    """The first lines of a real file of this repository, then a function to complete."""
    head = (REPO / path).read_text(encoding="utf-8").split("\n")[:lines]
    return "\n".join(head) + TAIL


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[Session]:
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), FAST) as s:
        yield s


async def complete(session: Session, uri: str, text: str) -> tuple[str, dict[str, Any]]:
    """An inline request at the end of `text`; its suggestion and the engine job it ran."""
    _, before = await document_jobs(session, uri, lambda running, _: not running, "no job")
    lines = text.split("\n")
    items = await session.inline(uri, session.position(text, len(lines) - 1, len(lines[-1])))
    jobs = await settled_jobs(session, uri, len(before))
    assert len(jobs) == len(before) + 1, "the request ran the model once"
    suggestion = items[0].insert_text if items else ""
    assert isinstance(suggestion, str)
    return suggestion, jobs[-1]


async def test_back_in_a_file_its_kept_state_answers_after_one_prompt_token(
    session: Session,
) -> None:
    text_a, text_b = document("engine/worker.py"), document("engine/stops.py")
    uri_a = session.open(text_a, name="a")
    first, job = await complete(session, uri_a, text_a)
    assert job["prompt_evaluated"] >= job["prompt_tokens"] // 2  # new to the model
    uri_b = session.open(text_b, name="b")
    _, job_b = await complete(session, uri_b, text_b)
    assert job_b["prompt_evaluated"] >= job_b["prompt_tokens"] // 2

    # Back in A. A blank line at the very end changes what follows the cursor, so the server
    # cannot answer from its type-ahead cache, but not the prompt (the prefix).
    session.change(uri_a, 2, [{"range": _end_range(text_a), "text": "\n"}])
    again, job_again = await complete(session, uri_a, text_a)
    assert job_again["prompt_tokens"] == job["prompt_tokens"]
    assert job_again["prompt_evaluated"] == 1
    # The same answer from the kept state as from the evaluated prompt (whatever the
    # post-processing made of it: this file's head decides what the model writes).
    assert again == first
    assert job_again["generated_tokens"] == job["generated_tokens"] >= 1
    kv = (await request_json(session, STATUS, {}))["kv_cache"]
    assert kv["restored"] >= 1
    assert kv["documents"] >= 1  # B is kept while A is live
    assert 0 < kv["bytes"] <= kv["budget_bytes"]


def _end_range(text: str) -> dict[str, Any]:
    lines = text.split("\n")
    end = {"line": len(lines) - 1, "character": len(lines[-1])}
    return {"start": end, "end": end}


async def test_typing_past_the_budget_re_evaluates_the_prompt_rarely() -> None:
    """README "Prompts": the window's first line snaps to a grid, so that while the user types
    at the end of a file longer than `prefixTokens`, request after request starts at the same
    line and the model evaluates only the new tokens: the whole window is evaluated again
    only when the grid moves (once here), not each time a line leaves the budget (every few
    keys here, one line being about 10 tokens)."""
    options = {"infill": {**FAST["infill"], "prefixTokens": 256, "contextTokens": 0}}
    body = "".join(f"value_{i} = compute({i}) + offset\n" for i in range(400))
    typed = "total = alpha + beta * gamma - delta / epsilon + zeta ** eta - theta + iota"
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), options) as s:
        uri = s.open(body)
        line = body.count("\n")
        for n, char in enumerate(typed, start=1):
            at = {"line": line, "character": n - 1}
            s.change(uri, n + 1, [{"range": {"start": at, "end": at}, "text": char}])
            await s.inline(uri, types.Position(line=line, character=n))
        _, jobs = await document_jobs(s, uri, lambda running, _: not running, "the last job")
    assert len(jobs) >= 10, jobs  # enough requests reached the model to tell
    assert max(job["prompt_tokens"] for job in jobs) > 230, jobs  # the budget was full
    whole = [job for job in jobs[1:] if job["prompt_evaluated"] > 48]
    assert len(whole) <= 1, [(j["prompt_tokens"], j["prompt_evaluated"]) for j in jobs]
