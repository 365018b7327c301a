"""Other open documents reach the suggestion, through the real server with the real default
completion model (greedy): a name defined only in another open file is completed."""

from __future__ import annotations

import pytest
from lsp_helpers import document_jobs, ready_session
from lsprotocol import types
from pytest_lsp import client_capabilities

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

BILLING = (
    "import math\n\n\n"
    "def compute_invoice_total_with_discount(items, discount_rate):\n"
    '    """The total of `items` after the discount, rounded up."""\n'
    "    subtotal = sum(item.price * item.quantity for item in items)\n"
    "    return math.ceil(subtotal * (1 - discount_rate))\n"
)
#: The cursor after `compute_invoice_total_`: the rest of the name is in billing.py only.
CART = (
    "def checkout(cart, discount_rate):\n    items = cart.items\n    total = compute_invoice_total_"
)


@pytest.mark.parametrize(("budget", "reaches"), [(512, True), (0, False)])
async def test_a_name_defined_only_in_another_open_document_is_completed(
    budget: int, reaches: bool
) -> None:
    options = {"infill": {"debounceMs": 0, "contextTokens": budget}}
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), options) as s:
        s.open(BILLING, uri="file:///e2e/shop/billing.py")
        uri = s.open(CART, uri="file:///e2e/shop/cart.py")
        lines = CART.split("\n")
        items = await s.inline(uri, s.position(CART, len(lines) - 1, len(lines[-1])))
    suggestion = str(items[0].insert_text) if items else ""
    # What the user would check: the accepted line names the function of billing.py.
    assert ("total = compute_invoice_total_" + suggestion).startswith(
        "total = compute_invoice_total_with_discount"
    ) is reaches, suggestion


async def test_typing_keeps_the_other_files_context_so_the_model_reuses_its_state() -> None:
    """README "Prompts": context goes first in the prompt and the selection is kept while the
    user types, so the prompt's leading part stays byte-identical: keystroke after keystroke
    the model evaluates a few new tokens, not the other file's snippet again."""
    options = {"infill": {"debounceMs": 0, "contextTokens": 512, "maxTokensSingleLine": 8}}
    typed = "(cart.items, discount_rate) + shipping_cost(cart)"
    async with ready_session(client_capabilities("visual_studio_code@v1.65.2"), options) as s:
        s.open(BILLING, uri="file:///e2e/shop/billing.py")
        uri = s.open(CART, uri="file:///e2e/shop/cart.py")
        line = CART.count("\n")
        start = len(CART.split("\n")[-1])
        await s.inline(uri, types.Position(line=line, character=start))
        for n, char in enumerate(typed, start=1):
            at = {"line": line, "character": start + n - 1}
            s.change(uri, n + 1, [{"range": {"start": at, "end": at}, "text": char}])
            await s.inline(uri, types.Position(line=line, character=start + n))
        _, jobs = await document_jobs(s, uri, lambda running, _: not running, "the last job")
    first, *rest = jobs
    # The snippet of billing.py made the first prompt long; every later one reused it.
    assert first["prompt_tokens"] > 100, first
    assert len(rest) >= 5, jobs  # enough keystrokes reached the model to tell
    assert all(job["prompt_tokens"] > 100 for job in rest), jobs  # the context stayed in
    assert all(job["prompt_evaluated"] <= 16 for job in rest), [
        (job["prompt_tokens"], job["prompt_evaluated"]) for job in jobs
    ]
