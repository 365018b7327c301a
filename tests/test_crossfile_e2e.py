"""Other open documents reach the suggestion, through the real server with the real default
completion model (greedy): a name defined only in another open file is completed."""

from __future__ import annotations

import pytest
from lsp_helpers import ready_session
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
