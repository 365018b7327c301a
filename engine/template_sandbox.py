"""The sandbox chat templates run in, with a bound on their time and on the size of what they
build.

A chat template is code from the model file. Jinja's sandbox keeps it away from Python's
internals, but not from running long or building huge strings: `range()` stops at 100 000
items, yet loops nest and macros recurse, `'x' * 10**10` is a single operation, and so is
`'x'|center(10**9)`. So a template is compiled and rendered under a budget:

- time: a deadline, checked on every line of the template and of the library code it calls
  (a trace function; Jinja's own code at each of its calls), and on every call and operator
  the template uses; the compiling counts too;
- size: every value weighs what str() or JSON would write of it (engine/template_bounds.py:
  `[s] * 1000` weighs a thousand `s`). An operation that makes more than its inputs weigh
  (repetition `*`, `+`, `%`, `~`, powers, the filters `center`, `indent`, `format`,
  `replace`, `join`, `tojson`, `wordwrap`, ..., str's `center`, `replace`, `join`, `format`,
  ..., a macro's or a block's joined output) is bounded before it runs: one C call cannot be
  stopped by the deadline. The result of every call, filter and operator and every list,
  tuple or dict the template writes out are checked after, and every piece of output (into
  the result, a macro's or a block's) is counted.

Exceeding either raises TemplateLimitError, a ChatTemplateError naming the limit.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

import jinja2
from jinja2 import Template, Undefined, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Macro, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine import template_bounds as bounds
from engine.template_bounds import TemplateLimitError as TemplateLimitError
from engine.template_bounds import Weigher

#: Our own code, which the trace function leaves alone (it checks the clock itself), and
#: Jinja's, which it checks at each call.
_OWN_FILES = frozenset({__file__, bounds.__file__})
_JINJA = os.path.dirname(jinja2.__file__) + os.sep
#: The largest integer a template may compute, in bits (a chat template needs small ones).
MAX_INT_BITS = 1 << 16
#: Values that weigh little whatever they hold (integers are bounded by MAX_INT_BITS).
_SMALL = frozenset({int, float, bool, type(None)})
#: Output a rendering may write in all, macros' and blocks' included, in limits of a value: a
#: real template writes each message once, or twice when a macro or a block renders it.
OUTPUT_FACTOR = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateLimits:
    """What one rendering may cost. Real chat templates render in a millisecond and add a
    few hundred characters to the messages."""

    seconds: float = 2.0
    #: Seconds added for each character of input: a template that reads a message character
    #: by character (llama-cpp-python's LLaVA formats test `content is iterable`, which a
    #: string is) takes 14 us a character under these limits, 4 without them.
    seconds_per_input_char: float = 20e-6
    #: Characters a rendering may hold beyond twice those of its input (the messages).
    extra_chars: int = 1_000_000
    #: Characters of a template's source: the largest of the templates tested, Llama 4's with its
    #: tools, has 4,926.
    source_chars: int = 256 * 1024


DEFAULT_LIMITS = TemplateLimits()


class _Budget:
    """The limits of one rendering, checked from the sandbox and the trace function."""

    def __init__(self, limits: TemplateLimits, *, input_chars: int) -> None:
        self.limits = limits
        self.max_chars = 2 * input_chars + limits.extra_chars
        self.seconds = limits.seconds + input_chars * limits.seconds_per_input_char
        self.deadline = time.monotonic() + self.seconds
        self.weigher = Weigher(self.max_chars, self.check_time)
        self.written = 0  # characters of output, in all

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(
                f"the model's chat template ran longer than {self.seconds:.3g} s "
                "(an endless loop or recursion?)"
            )

    def check_size(self, value: object) -> None:
        """Refuse a value that weighs over the limit (it was built: what it holds is checked
        for what str() of it would build)."""
        kind = type(value)
        if kind is str or kind is bytes:
            if len(value) > self.max_chars:  # type: ignore[arg-type]
                self.refuse_size(len(value))  # type: ignore[arg-type]
        elif kind in _SMALL or isinstance(value, Undefined):
            return
        elif self.weigher.weigh(value) > self.max_chars:
            raise TemplateLimitError(
                f"the model's chat template builds more than {self.max_chars:,} characters "
                f"or items, over the limit of {self.max_chars:,}"
            )

    def refuse_size(self, size: int) -> None:
        raise TemplateLimitError(
            f"the model's chat template builds {size:,} characters or items, over the limit "
            f"of {self.max_chars:,}"
        )

    def check_bound(self, size: int, what: str) -> None:
        """Refuse an operation whose bound (engine/template_bounds.py) is over the limit,
        before it runs."""
        if size > self.max_chars:
            raise TemplateLimitError(
                f"the model's chat template builds up to {size:,} characters or items with "
                f"{what}, over the limit of {self.max_chars:,}"
            )

    def check_operands(self, operator: str, left: Any, right: Any) -> None:
        """Refuse an operator whose result would be too large, before it is made."""
        weigh = self.weigher.weigh
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if not (isinstance(sequence, str | bytes | list | tuple) and type(count) is int):
                    continue
                if (size := weigh(sequence) * count) > self.max_chars:
                    self.refuse_size(size)
        elif operator == "+":
            sequences = isinstance(left, str | bytes | list | tuple) and type(left) is type(right)
            if sequences and (size := weigh(left) + weigh(right)) > self.max_chars:
                self.refuse_size(size)
        elif operator == "%":
            if isinstance(left, str):
                self.check_bound(bounds.percent_bound(self.weigher, left, right), "`%`")
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

    def count_output(self, text: str) -> str:
        """Count a piece of output (into the result, or into a macro's or a block's)."""
        self.written += len(text)
        if self.written > OUTPUT_FACTOR * self.max_chars:
            raise TemplateLimitError(
                f"the model's chat template writes {self.written:,} characters in all (its "
                f"macros' and blocks' output included), over the limit of "
                f"{OUTPUT_FACTOR * self.max_chars:,}"
            )
        return text

    def tracer(self) -> Callable[[FrameType, str, Any], Any]:
        """sys.settrace's function, for the deadline: the template's frames and those of the
        library it calls line by line; Jinja's own at each call (its loops run over the
        template's source or values already bounded, and tracing their lines made a
        template that reads a message character by character 30% slower); ours not at all.
        It runs on every line: a closure over the clock, the cheapest check."""
        deadline, clock, check = self.deadline, time.monotonic, self.check_time

        def each_line(frame: FrameType, event: str, arg: Any) -> Any:
            if clock() > deadline:
                check()
            return each_line

        def each_frame(frame: FrameType, event: str, arg: Any) -> Any:
            filename = frame.f_code.co_filename
            if filename.startswith(_JINJA):
                if clock() > deadline:
                    check()
                return None
            return None if filename in _OWN_FILES else each_line

        return each_frame


_current = threading.local()


def _budget() -> _Budget | None:
    budget: _Budget | None = getattr(_current, "budget", None)
    return budget


def _bounded(
    name: str, function: Callable[..., Any], bound: bounds.Bound | None
) -> Callable[..., Any]:
    """`function` (a filter or a global named `name`), refused when its bound is over the
    budget of the rendering in progress, and its result checked."""
    skip = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0  # the context
    listed_first = name in bounds.LISTED_FIRST

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        if budget is None:
            # Jinja folds constant filters while it compiles: outside a rendering's budget,
            # they are left to the rendering (an error here means "not a constant").
            raise TemplateLimitError(f"`{name}` runs only within a rendering's limits")
        budget.check_time()
        if listed_first and len(args) > skip and not isinstance(args[skip], list | tuple | str):
            args = (*args[:skip], list(args[skip]), *args[skip + 1 :])
        if bound is not None:
            try:
                size = bound(budget.weigher, *args[skip:], **kwargs)
            except TypeError:
                size = 0  # arguments the function refuses too, with its own message
            budget.check_bound(size, f"`{name}`")
        result = function(*args, **kwargs)
        budget.check_size(result)
        return result

    return checked


class _BoundedFilters(dict[str, Any]):
    """The environment's filters, each with its bound (engine/template_bounds.py; none for a
    filter that makes no more than its input) and its result checked, wherever the compiled
    template looks it up, those set after the environment was made included."""

    def __getitem__(self, name: str) -> Any:
        return _bounded(name, super().__getitem__(name), bounds.FILTERS.get(name))

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default  # noqa: SIM401 (through __getitem__)


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with what a template makes out of the sandbox's sight brought
    into it: `a ~ b ~ c` joined by the environment (which bounds it first), list, tuple and
    dict displays checked, every piece of output counted."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # Escaping is known here, unless it may change while the template runs (`volatile`).
        escape = None if frame.eval_ctx.volatile else bool(frame.eval_ctx.autoescape)
        self.write(f"environment.join_parts(context, {escape!r}, (")
        for part in node.nodes:
            self.visit(part, frame)
            self.write(", ")
        self.write("))")

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self.write("environment.checked_value(")
        super().visit_List(node, frame)
        self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self.write("environment.checked_value(")
        super().visit_Dict(node, frame)
        self.write(")")

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx != "load":  # a target: `{% for a, b in pairs %}`
            super().visit_Tuple(node, frame)
            return
        self.write("environment.checked_value(")
        super().visit_Tuple(node, frame)
        self.write(")")

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        self.write("environment.count_output(")
        super()._output_child_pre(node, frame, finalize)

    def _output_child_post(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        super()._output_child_post(node, frame, finalize)
        self.write(")")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with every call, filter and arithmetic operator checked
    against the budget of the rendering in progress (none outside `render_bounded`)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = _BoundedFilters(self.filters)
        for name, bound in bounds.GLOBALS.items():
            function: Callable[..., Any] = self.globals[name]  # type: ignore[assignment]
            self.globals[name] = _bounded(name, function, bound)

    def join_parts(self, context: Any, escape: bool | None, parts: tuple[Any, ...]) -> str:
        """`a ~ b ~ c`, bounded before it is joined, then joined as Jinja joins it."""
        if (budget := _budget()) is not None:
            budget.check_time()
            budget.check_bound(bounds.parts_bound(budget.weigher, parts), "`~`")
        if escape is None:
            escape = context.eval_ctx.autoescape
        return markup_join(parts) if escape else str_join(parts)

    def checked_value(self, value: Any) -> Any:
        """A list, tuple or dict the template wrote out (`[a, a, a]`), checked."""
        if (budget := _budget()) is not None:
            budget.check_size(value)
        return value

    def count_output(self, text: str) -> str:
        """A piece of output, counted (with those of macros and blocks)."""
        budget = _budget()
        return text if budget is None else budget.count_output(text)

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
            args = _check_call(budget, obj, args, kwargs)
        result = super().call(context, obj, *args, **kwargs)
        if budget is not None:
            budget.check_size(result)
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text: str = value.__self__
        mapped = value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> str:
            if (budget := _budget()) is not None:
                given: Mapping[str, object] = args[0] if mapped and args else kwargs
                size = bounds.format_bound(budget.weigher, text, () if mapped else args, given)
                budget.check_bound(size, f"`{value.__name__}`")
            return wrapped(*args, **kwargs)

        return checked

    def concat(self, parts: Iterable[str]) -> str:
        """The output of a macro or a `{% set %}` block, bounded before it is joined."""
        listed = parts if isinstance(parts, list) else list(parts)
        if (budget := _budget()) is not None:
            budget.check_bound(sum(map(len, listed)), "a block's output")
        return "".join(listed)


def _check_call(
    budget: _Budget, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """Refuse a call whose bound is over the budget: a str or bytes method that makes more
    than its inputs, a macro that gathers its extra arguments (`varargs`, `kwargs`: a tuple
    of them weighs them all). Returns the arguments to call it with (an iterable to join
    read into a list once)."""
    if isinstance(function, Macro):
        if function.catch_varargs or function.catch_kwargs:
            named = set(function.arguments)
            extra = (
                *args[len(function.arguments) :],
                *(v for k, v in kwargs.items() if k not in named),
            )
            budget.check_bound(sum(map(budget.weigher.weigh, extra)), "a macro's extra arguments")
        return args
    if not isinstance(function, types.BuiltinMethodType):
        return args
    owner = function.__self__
    bound = bounds.METHODS.get(function.__name__)
    if bound is None or not isinstance(owner, str | bytes | bytearray):
        return args
    if function.__name__ == "join" and args and not isinstance(args[0], list | tuple | str):
        args = (list(args[0]), *args[1:])
    try:
        size = bound(budget.weigher, owner, *args, **kwargs)
    except TypeError:
        size = 0  # arguments the method refuses too, with its own message
    budget.check_bound(size, f"`{function.__name__}`")
    return args


def render_bounded(
    source: str,
    compile_template: Callable[[str], Template],
    variables: Mapping[str, Any],
    *,
    input_chars: int,
    limits: TemplateLimits,
) -> str:
    """Compile `source` with `compile_template` (a BoundedSandbox's) and render it within
    `limits`: at most `limits.seconds` for both (and `seconds_per_input_char` for each
    character of input), a source of at most `limits.source_chars`,
    and at most twice `input_chars` plus `limits.extra_chars` characters in any value it
    builds, the output included. Raises TemplateLimitError past any of them."""
    if len(source) > limits.source_chars:
        raise TemplateLimitError(
            f"the model's chat template has {len(source):,} characters, over the limit of "
            f"{limits.source_chars:,}"
        )
    budget = _Budget(limits, input_chars=input_chars)
    previous = sys.gettrace()  # a debugger's or coverage's: given back afterwards
    _current.budget = budget
    sys.settrace(budget.tracer())
    try:
        for value in variables.values():
            budget.weigher.keep(value)
        template = compile_template(source)
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
