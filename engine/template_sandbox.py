"""The sandbox chat templates run in, with a bound on their time and on the size of what they
build.

A chat template is code from the model file. Jinja's sandbox keeps it away from Python's
internals, but not from running long or building huge strings: `range()` stops at 100 000
items, yet loops nest and macros recurse, and `'x' * 10**10` is a single operation. So a
template renders under a budget:

- time: a deadline, checked on every line the compiled template runs (a trace function set on
  template frames only) and on every call and operator it uses;
- size: the output, counted as it streams; repetition (`*`) and powers (`**`), checked before
  they are computed; the result of every call and operator, and the template's variables,
  checked after.

Exceeding either raises TemplateLimitError, a ChatTemplateError naming the limit.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from jinja2 import Template
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import ChatTemplateError

#: The file name Jinja compiles a template from a string under: the frames we watch.
_TEMPLATE_FILE = "<template>"
#: The largest integer a template may compute, in bits (a chat template needs small ones).
MAX_INT_BITS = 1 << 16


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateLimits:
    """What one rendering may cost. Real chat templates render in a millisecond and add a
    few hundred characters to the messages."""

    seconds: float = 2.0
    #: Characters a rendering may hold beyond twice those of its input (the messages).
    extra_chars: int = 1_000_000


DEFAULT_LIMITS = TemplateLimits()


class TemplateLimitError(ChatTemplateError):
    """A chat template went over its time or size limit."""


class _Budget:
    """The limits of one rendering, checked from the sandbox and the trace function."""

    def __init__(self, limits: TemplateLimits, max_chars: int) -> None:
        self.limits = limits
        self.max_chars = max_chars
        self.deadline = time.monotonic() + limits.seconds

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(
                f"the model's chat template ran longer than {self.limits.seconds:g} s "
                "(an endless loop or recursion?)"
            )

    def check_size(self, value: object) -> None:
        if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > self.max_chars:
            self.refuse_size(len(value))

    def refuse_size(self, size: int) -> None:
        raise TemplateLimitError(
            f"the model's chat template builds {size:,} characters or items, over the limit "
            f"of {self.max_chars:,}"
        )

    def check_operands(self, operator: str, left: Any, right: Any) -> None:
        """Refuse a repetition or a power whose result would be too large, before it is made."""
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if (
                    isinstance(sequence, (str, bytes, list, tuple))
                    and isinstance(count, int)
                    and len(sequence) * count > self.max_chars
                ):
                    self.refuse_size(len(sequence) * count)
        elif (
            operator == "**"
            and isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and right * abs(left).bit_length() > MAX_INT_BITS
        ):
            raise TemplateLimitError(
                f"the model's chat template computes {left} ** {right}, a number over "
                f"{MAX_INT_BITS} bits"
            )

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        """sys.settrace's function: watch the template's own frames, line by line."""
        return self._trace_line if frame.f_code.co_filename == _TEMPLATE_FILE else None

    def _trace_line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.check_time()
            for value in frame.f_locals.values():  # `~` joins strings out of our sight
                self.check_size(value)
        return self._trace_line


_current = threading.local()


def _budget() -> _Budget | None:
    budget: _Budget | None = getattr(_current, "budget", None)
    return budget


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with every call and arithmetic operator checked against the
    budget of the rendering in progress (none outside `render_bounded`)."""

    intercepted_binops = frozenset({"*", "**", "+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if budget is not None:
            budget.check_time()
            budget.check_operands(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        if budget is not None:
            budget.check_size(result)
        return result

    def getattr(self, obj: Any, attribute: str) -> Any:
        value = super().getattr(obj, attribute)
        if (budget := _budget()) is not None:
            budget.check_size(value)  # `ns.s`: kept in a namespace, out of the tracer's sight
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        if (budget := _budget()) is not None:
            budget.check_size(value)
        return value

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        if budget is not None:
            budget.check_time()
        result = super().call(context, obj, *args, **kwargs)
        if budget is not None:
            budget.check_size(result)
        return result


def render_bounded(
    template: Template,
    variables: Mapping[str, Any],
    *,
    input_chars: int,
    limits: TemplateLimits,
) -> str:
    """Render `template` (compiled by a BoundedSandbox) within `limits`: at most
    `limits.seconds`, and at most twice `input_chars` plus `limits.extra_chars` characters in
    any value it builds, the output included. Raises TemplateLimitError past either."""
    budget = _Budget(limits, max_chars=2 * input_chars + limits.extra_chars)
    previous = sys.gettrace()  # a debugger's or coverage's: given back afterwards
    _current.budget = budget
    sys.settrace(budget.trace)
    try:
        parts: list[str] = []
        size = 0
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > budget.max_chars:
                budget.refuse_size(size)
            parts.append(chunk)
        return "".join(parts)
    finally:
        sys.settrace(previous)
        _current.budget = None
