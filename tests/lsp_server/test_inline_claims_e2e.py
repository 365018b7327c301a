"""The README's inline-completion claims with the real default completion model (Gemma 3 270M
through llama.cpp) in the real server: what any answer must hold, whatever the model writes.
test_scripted_e2e.py proves the same claims exactly on a scripted model.

- a multi-line suggestion ends where the code leaves the cursor's block: no line of it is less
  indented than the block, none repeats the line before it or the code after the cursor, none
  keeps trailing whitespace; and the model is stopped there, within one token;
- code after the cursor is never written twice: `foo(|)` never becomes `foo(x))`;
- an invoked request gets distinct items: the automatic suggestion, then the others in one job;
- typing the start of a suggestion is answered with the rest of it, without the model;
- one model named for both roles is loaded once, and a completion does not wait for an
  explanation.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsp_helpers import (
    MERGE,
    MERGE_RANGE,
    STATS,
    Session,
    answer,
    client_feature,
    completion_engine,
    plain_json,
    ready_session,
    request_json,
    settled_jobs,
    wait_until,
)
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from engine.default_models import default_chat_model, default_completion_model
from engine.text import indent_width

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

EXPLAIN_CHUNK = "infill/explainChunk"

#: Room for the model to write past the end of a block, had the server not stopped it there.
#: No snippets of the other open documents: each prompt is its own document's, so that what the
#: model writes does not depend on which tests ran before (the suite runs in any order).
OPTIONS = {
    "infill": {
        "maxTokensSingleLine": 16,
        "maxTokensMultiLine": 48,
        "debounceMs": 0,
        "contextTokens": 0,
    }
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[Session]:
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), OPTIONS) as s:
        yield s


#: (document, cursor line, cursor column): an empty line at the start of a block's body, with
#: code after the block that the model may well want to write again.
BLOCKS = {
    "function body": ("def fibonacci(n):\n    \n\n\nprint(fibonacci(10))\n", 1, 4),
    "method body": (
        "class Stack:\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "\n"
        "    def push(self, item):\n"
        "        \n"
        "\n"
        "    def pop(self):\n"
        "        return self.items.pop()\n",
        5,
        8,
    ),
    "loop body": ("total = 0\nfor i in range(10):\n    \nprint(total)\n", 2, 4),
}


def next_code_line(text: str, line: int) -> str:
    """The first non-blank line after the cursor's, stripped: what the model must not write
    again."""
    return next((code.strip() for code in text.split("\n")[line + 1 :] if code.strip()), "")


async def test_multi_line_suggestions_end_where_the_block_does(session: Session) -> None:
    multi_line = 0
    for text, line, column in BLOCKS.values():
        uri = session.open(text)
        items = await answer(session.inline(uri, session.position(text, line, column)))
        for item in items:
            assert isinstance(item.insert_text, str)
            first, *rest = item.insert_text.split("\n")
            assert first.strip(), item.insert_text  # the cursor's line gets code
            for later in rest:
                assert not later.strip() or indent_width(later) >= column, item.insert_text
            lines = item.insert_text.split("\n")
            assert all(code == code.rstrip() for code in lines), item.insert_text
            assert lines[-1].strip(), item.insert_text  # no trailing blank line
            code = [code for code in lines if code.strip()]
            # No exact repeat of the line before (a loop small models fall into).
            repeats = [a for a, b in itertools.pairwise(code) if a == b and re.search(r"\w", a)]
            assert not repeats, item.insert_text
            assert next_code_line(text, line) not in (c.strip() for c in code), item.insert_text
            multi_line += bool(rest)
    assert multi_line, "no block got a suggestion of more than one line"


async def test_the_model_is_stopped_where_the_block_ends_within_one_token(
    session: Session,
) -> None:
    """A job the server ended early (the code had left the block) is `cancelled`, well short of
    its token limit, and the model gave at most one token after the stop; a job that ran to
    its own end or its limit never left the block. These prompts have code after the block
    that the model writes on into, so at least one of them is stopped."""
    stopped = 0
    for text, line, column in BLOCKS.values():
        uri = session.open(text)
        await answer(session.inline(uri, session.position(text, line, column)))
        (job,) = await settled_jobs(session, uri, 0)
        if job["finish_reasons"] == ["cancelled"]:
            stopped += 1
            assert job["generated_tokens"] < OPTIONS["infill"]["maxTokensMultiLine"], job
            assert job["tokens_after_cancel"] in (0, 1), job
        else:
            assert job["finish_reasons"] in (["stop"], ["length"]), job
    assert stopped, "no block's job was stopped where its block ended"


#: (line, cursor column, the code after the cursor that must stay exactly once): a call's
#: arguments, a subscript, a string, each with its closer (or more) after the cursor.
AFTER_CURSOR = {
    "call": ("    result = compute()\n", len("    result = compute("), ")"),
    "keyword argument": (
        "    response = fetch(, timeout=10)\n",
        len("    response = fetch("),
        ", timeout=10)",
    ),
    "nested call": ("    total = sum(len())\n", len("    total = sum(len("), "))"),
    "subscript": ("    first = items[]\n", len("    first = items["), "]"),
    "string": ('    name = config.get("")\n', len('    name = config.get("'), '")'),
}
CLOSERS = {")": "(", "]": "[", "}": "{"}


def closers_beyond_openers(line: str) -> bool:
    """Whether a closing bracket in `line` has no opener before it (outside strings)."""
    depth = {opener: 0 for opener in CLOSERS.values()}
    quote = None
    for char in line:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in depth:
            depth[char] += 1
        elif char in CLOSERS:
            depth[CLOSERS[char]] -= 1
            if depth[CLOSERS[char]] < 0:
                return True
    return False


@pytest.mark.parametrize("case", AFTER_CURSOR)
async def test_code_after_the_cursor_is_never_written_twice(session: Session, case: str) -> None:
    """Whatever the model writes, the line the item leaves closes no bracket it never opened
    (the closers after the cursor are merged, not repeated), and code after the cursor stays
    once, at the line's end."""
    cursor_line, column, after = AFTER_CURSOR[case]
    assert cursor_line[column:].rstrip("\n") == after
    text = "def handler(config, items, fetch, compute):\n" + cursor_line + "    return None\n"
    uri = session.open(text)
    items = await answer(session.inline(uri, session.position(text, 1, column)))
    assert items, "each of these lines has an obvious completion"
    for item in items:
        assert isinstance(item.insert_text, str)
        assert item.range is not None
        start, end = item.range.start.character, item.range.end.character
        assert item.range.start.line == item.range.end.line == 1
        assert start == column  # the range starts at the cursor (UTF-16 = code points here)
        assert "\n" not in item.insert_text  # code after the cursor: one line
        line = cursor_line.rstrip("\n")
        result = line[:start] + item.insert_text + line[end:]
        assert not closers_beyond_openers(result), (item.insert_text, result)
        if after.strip(")]}\"'"):  # code, not only closers: it stays as it was, once
            assert result.endswith(after), (item.insert_text, result)
            assert result.count(after) == 1, (item.insert_text, result)


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("def add(a, b):\n    return a + b\n", 1, 7),  # ret|urn
        ("total = compute(price, count)\n", 0, 11),  # comp|ute
        ("név = 'Zoë'\n", 0, 1),  # n|év: a non-ASCII identifier
    ],
    ids=["keyword", "call", "non-ascii name"],
)
async def test_inside_a_word_there_is_nothing_to_suggest_and_no_model_call(
    session: Session, text: str, line: int, column: int
) -> None:
    uri = session.open(text)
    assert await answer(session.inline(uri, session.position(text, line, column))) == []
    engine = await completion_engine(session)
    mine = [j for j in [*engine["jobs"], *engine.get("running", [])] if j["document"] == uri]
    assert mine == []  # the answer came without a job: none was submitted for the document


async def test_an_invoked_request_gets_distinct_items(session: Session) -> None:
    text = "def add(a, b):\n    return \n"
    uri = session.open(text)
    position = session.position(text, 1, 11)
    items = await answer(session.inline(uri, position, invoked=True))
    texts = [item.insert_text for item in items]
    assert 1 <= len(texts) <= 3  # infill.invokedSuggestions
    assert len(set(texts)) == len(texts), texts
    assert all(isinstance(t, str) and t.strip() for t in texts), texts
    assert all(item.range is not None and item.range.start == position for item in items)


async def test_invoked_items_are_the_automatic_suggestion_then_one_job_of_others(
    session: Session,
) -> None:
    """At temperature 0 an invoked request's first item is the automatic suggestion (plain
    decoding, whether or not the model's rows go together on this machine), and the others
    are the greedy answers after the next most likely first tokens, written in one job: no
    sampled generation runs."""
    single_line = ("def area(width, height):\n    return \n", 1, 11)
    for text, line, column in (single_line, BLOCKS["function body"]):
        shown = session.open(text)
        (automatic,) = await answer(session.inline(shown, session.position(text, line, column)))
        asked = session.open(text)  # another document: nothing of the first is reused
        position = session.position(text, line, column)
        items = await answer(session.inline(asked, position, invoked=True))
        texts = [item.insert_text for item in items]
        assert texts[0] == automatic.insert_text, texts
        assert len(set(texts)) == len(texts), texts
        jobs = await settled_jobs(session, asked, 2)
        generations = [job for job in jobs if job["finish_reasons"]]
        writing = [job for job in jobs if not job["finish_reasons"] and job["generated_tokens"]]
        assert len(generations) == 1, jobs  # the greedy answer alone
        assert len(writing) == 1, jobs  # the others: one branching job,
        scorings = [
            job for job in jobs if not job["finish_reasons"] and not job["generated_tokens"]
        ]
        assert scorings, jobs  # after the scorings that chose their first tokens


async def test_typing_into_a_suggestion_is_answered_with_its_rest_without_the_model(
    session: Session,
) -> None:
    text = "def add(a, b):\n    return \n"
    uri = session.open(text)
    (item,) = await answer(session.inline(uri, session.position(text, 1, 11)))
    suggestion = item.insert_text
    assert isinstance(suggestion, str)
    assert len(suggestion) >= 2, suggestion
    jobs = (await completion_engine(session))["total_jobs"]

    typed = suggestion[0]
    position = {"line": 1, "character": 11}
    session.change(uri, 2, [{"range": {"start": position, "end": position}, "text": typed}])
    now = text.replace("return ", "return " + typed)
    items = await answer(session.inline(uri, session.position(now, 1, 12)))
    assert [i.insert_text for i in items] == [suggestion[1:]]
    assert (await completion_engine(session))["total_jobs"] == jobs


@pytest.mark.parametrize("marker", ["<start_of_turn>", "<eos>"])
async def test_special_token_text_in_the_code_is_plain_text_to_the_model(
    session: Session, marker: str
) -> None:
    """README "Prompts": code that spells out one of the model's special tokens is tokenized as
    plain text. The model's own tokenizer says how many tokens the marker adds either way;
    the server's prompts grow by the plain-text count."""
    import llama_cpp

    vocab = llama_cpp.Llama(
        model_path=str(default_completion_model()), vocab_only=True, verbose=False
    )
    texts = [f"TEMPLATE = '{spelled}user'\nvalue = \n" for spelled in (marker, "")]

    def tokens(text: str, special: bool) -> int:
        return len(vocab.tokenize(text.encode(), add_bos=True, special=special))

    as_text = tokens(texts[0], False) - tokens(texts[1], False)
    as_token = tokens(texts[0], True) - tokens(texts[1], True)
    assert as_text != as_token  # the tokenizer does tell the two apart here
    counts = []
    for text in texts:
        uri = session.open(text)
        await answer(session.inline(uri, session.position(text, 1, len("value = "))))
        (job,) = await settled_jobs(session, uri, 0)
        counts.append(job["prompt_tokens"])
    assert counts[0] - counts[1] == as_text, (marker, counts, as_text, as_token)


# --- one model serving both roles -------------------------------------------------------------


async def test_one_real_model_serves_a_completion_while_it_explains(tmp_path: Path) -> None:
    """SmolLM2 named for both roles is loaded once; a completion asked for while it explains
    is answered before the explanation ends (the explanation yields to it between two
    tokens)."""
    chat_model = str(default_chat_model())
    options = {"infill": {**OPTIONS["infill"], "model": chat_model, "chatModel": chat_model}}
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    async with ready_session(capabilities, options) as shared:
        chunks: list[dict[str, Any]] = []

        @client_feature(shared.client, EXPLAIN_CHUNK)
        def explain_chunk(_: LanguageClient, params: Any) -> None:
            chunks.append(plain_json(params))

        uri = shared.open(MERGE)
        explain = asyncio.ensure_future(
            request_json(
                shared,
                types.WORKSPACE_EXECUTE_COMMAND,
                {"command": "infill.explain", "arguments": [{"uri": uri, "range": MERGE_RANGE}]},
            )
        )
        await wait_until(lambda: chunks, "the first explanation chunk")
        text = "def add(a, b):\n    return \n"
        items = await answer(shared.inline(shared.open(text), shared.position(text, 1, 11)))
        assert not any(c["done"] for c in chunks), "the completion waited for the explanation"
        assert all(isinstance(i.insert_text, str) and i.insert_text for i in items)

        # The rest of the explanation is not waited for (the scripted model's test sees it
        # resume whole): stopped from its progress, it ends with the text so far.
        shared.client.protocol.notify(
            types.WINDOW_WORK_DONE_PROGRESS_CANCEL,
            types.WorkDoneProgressCancelParams(token=chunks[0]["token"]),
        )
        result = await answer(explain)
        assert chunks[-1]["done"] is True
        assert result == "".join(c["text"] for c in chunks)
        report = await request_json(shared, STATS, None)
        (engine,) = report["engines"]
        assert sorted(engine["roles"]) == ["chat", "completion"]
