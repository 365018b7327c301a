"""JSON as it was on the wire: pygls hands the params and results of custom methods (ours and
Copilot's) over as named tuples, and `plain` turns them back into dicts and lists."""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """`value` with every named tuple a dict and every tuple a list, recursively (within dicts
    too)."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
