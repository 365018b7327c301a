"""`infill/stats` end to end: the real server with the real default model reports the engine's
figures for the inline completion it just ran (the same figures as its log line)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from lsp_helpers import (
    Session,
    completion_engine,
    ready_session,
    settled_jobs,
    wait_until,
)
from pytest_lsp import client_capabilities

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

FAST = {"infill": {"maxTokensSingleLine": 16, "maxTokensMultiLine": 48, "debounceMs": 0}}
ENGINE_JOB = re.compile(
    r"completion (?P<id>\S+): prompt (?P<prompt>\d+) tokens \((?P<evaluated>\d+) evaluated\), "
    r"generated (?P<generated>\d+), "
    r".* finish (?P<finish>\S+)$"
)
DOCUMENT = (
    "def fibonacci(n: int) -> int:\n"
    '    """Return the n-th Fibonacci number."""\n'
    "    if n < 2:\n"
    "        return n\n"
    "    return "  # the cursor
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[Session]:
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), FAST) as s:
        yield s


async def test_stats_name_the_loaded_completion_engine_and_its_model(session: Session) -> None:
    engine = await completion_engine(session)
    status = await session.status()
    assert engine["model"] == status["model"]
    assert engine["total_jobs"] >= len(engine["jobs"]) >= 0


async def test_an_inline_completions_figures_show_up_in_stats(session: Session) -> None:
    before = (await completion_engine(session))["total_jobs"]
    since = len(session.client.log_messages)
    uri = session.open(DOCUMENT)
    items = await session.inline(uri, session.position(DOCUMENT, 4, 11))
    assert items, "the default model suggests something after `return `"

    (job,) = await settled_jobs(session, uri, 0)
    engine = await completion_engine(session)
    assert engine["total_jobs"] >= before + 1
    assert job["prompt_tokens"] > 0
    assert 1 <= job["prompt_evaluated"] <= job["prompt_tokens"]
    assert job["generated_tokens"] >= 1
    assert job["finish_reasons"] in (["stop"], ["length"], ["cancelled"])
    assert job["total_ms"] >= job["first_token_ms"] > 0

    # The log line is kept, and says the same.
    line = await wait_until(
        lambda: next(
            (
                m
                for message in session.client.log_messages[since:]
                if (m := ENGINE_JOB.search(message.message)) and m["id"] == job["request_id"]
            ),
            None,
        ),
        "the engine's log line for the job",
    )
    assert int(line["prompt"]) == job["prompt_tokens"]
    assert int(line["evaluated"]) == job["prompt_evaluated"]
    assert int(line["generated"]) == job["generated_tokens"]
    assert line["finish"] == ",".join(job["finish_reasons"])
