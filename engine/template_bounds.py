"""How much a chat template's values weigh, and how much an operation that makes text or lists
will make, computed from its inputs before it runs.

engine/template_sandbox.py refuses an operation whose bound is over the rendering's budget: one
C call (`str.center`, `json.dumps`, `str.join`), once started, cannot be stopped by a deadline,
so a 200-million-character `center` must be refused before it is called.

A weight counts what str() or JSON would write of a value: the characters of a string, the
items of a container plus their own weights, every reference counted (`[s] * 1000` weighs a
thousand times `s`, though it holds one string), the digits of a number. A bound is the
weights of the inputs plus what the operation's parameters add (a width, an indent, a
separator between items, a count). Escapes are not foreseen (JSON's `\\u0000`, repr's `\\x00`,
HTML's `&amp;`): they make text at most 12 times longer, and the check on the result finds
them. So a bound is never more than 12 times too low, and for plain text it is what the
operation makes: real templates are never refused for what they do not build.
"""

from __future__ import annotations

import re
from _string import formatter_field_name_split, formatter_parser  # type: ignore[import-not-found]
from collections.abc import Callable, Mapping
from typing import Any

from jinja2.utils import Namespace

from engine.errors import ChatTemplateError

#: How deep values may nest (tool schemas nest about ten deep; deeper is a template nesting
#: lists to reach Python's recursion limit).
MAX_DEPTH = 100
#: Nodes a walk visits between two calls of its clock.
_TICK = 4096
#: The characters `str.splitlines` breaks at (indent's lines).
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
_DIGITS = re.compile(r"\d+")


class TemplateLimitError(ChatTemplateError):
    """A chat template went over its time or size limit."""


_VIEWS: tuple[type, ...] = (type({}.keys()), type({}.values()))
_ITEMS: type = type({}.items())
_CONTAINERS: tuple[type, ...] = (list, tuple, dict, set, frozenset, *_VIEWS, _ITEMS)
_CONTAINER_TYPES = frozenset(_CONTAINERS)


class Weigher:
    """The weights of one rendering's values, within `limit`. A container's weight is
    remembered while it is held here, by identity and length (a template cannot change a
    list; the lists a compiled template appends to change length); what is held is let go
    past `limit` items in all. `tick` is called as a long walk goes (the rendering's clock)."""

    def __init__(self, limit: int, tick: Callable[[], None]) -> None:
        self.limit = limit
        self.tick = tick
        self._steps = 0
        self._known: dict[int, tuple[object, int, int, int]] = {}
        self._held = 0
        self._kept: dict[int, tuple[object, int, int, int]] = {}

    def keep(self, value: object) -> int:
        """Weigh a value the rendering holds throughout (its input), and keep its weight."""
        weight = self.weigh(value)
        self._kept.update(self._known)
        self._known.clear()
        self._held = 0
        return weight

    def weigh(self, value: object) -> int:
        """The weight of `value`, or a number over `limit` once the walk passes it (the walk
        stops there). TemplateLimitError for containers nested over MAX_DEPTH deep."""
        return self._walk(value)[0]

    def _walk(self, value: object) -> tuple[int, int]:
        """The weight of `value` and how deep it nests (a container of strings: 1)."""
        kind = type(value)
        if kind is str or kind is bytes:  # most values: first, and fast
            return len(value), 0  # type: ignore[arg-type]
        if kind is int:
            return abs(value).bit_length() * 3 // 10 + 2, 0  # type: ignore[arg-type]
        if kind in _CONTAINER_TYPES:
            key, length = id(value), len(value)  # type: ignore[arg-type]
            known = self._known.get(key) or self._kept.get(key)
            if known is not None and known[0] is value and known[1] == length:
                return known[2], known[3]
            return self._container(value, key, length)
        return self._other(value)

    def _container(self, value: Any, key: int, length: int) -> tuple[int, int]:
        if isinstance(value, dict):
            weight, depth = self._sum_pairs(value.items(), length)
        elif isinstance(value, _ITEMS):
            weight, depth = self._sum_pairs(value, length)
        else:
            weight, depth = self._sum(value, length)
        if weight <= self.limit:
            if self._held > self.limit:
                self._known.clear()
                self._held = 0
            self._known[key] = (value, length, weight, depth)
            self._held += length + 1
        return weight, depth

    def _other(self, value: object) -> tuple[int, int]:
        if isinstance(value, str | bytes | bytearray):  # Markup, and the like
            return len(value), 0
        if isinstance(value, bool) or value is None:
            return 1, 0
        if isinstance(value, int):
            return _digits(value), 0
        if isinstance(value, float):
            return 24, 0  # repr's longest
        if isinstance(value, range):  # lazy: what reads it (a list, a join) is weighed
            return _digits(value.start) + _digits(value.stop) + _digits(value.step) + 9, 0
        if isinstance(value, Namespace):  # it changes as the template sets its attributes
            attributes = object.__getattribute__(value, "_Namespace__attrs")
            return self._sum_pairs(attributes.items(), len(attributes))
        if isinstance(value, _CONTAINERS):  # a subclass of a container
            return self._container(value, id(value), len(value))  # type: ignore[arg-type]
        return 1, 0  # Undefined, a macro, a loop, a generator: a short repr

    def _sum(self, items: Any, length: int) -> tuple[int, int]:
        weight, deepest = length, 0
        for item in items:
            part, depth = self._walk(item)
            weight += part
            if depth > deepest:
                deepest = depth
            self._steps += 1
            if weight > self.limit or self._steps % _TICK == 0:
                self.tick()
                if weight > self.limit:
                    break
        return weight, self._deeper(deepest)

    def _sum_pairs(self, pairs: Any, length: int) -> tuple[int, int]:
        weight, deepest = length, 0
        for key, item in pairs:
            key_weight, key_depth = self._walk(key)
            part, depth = self._walk(item)
            weight += key_weight + part
            deepest = max(deepest, depth, key_depth)
            self._steps += 1
            if weight > self.limit or self._steps % _TICK == 0:
                self.tick()
                if weight > self.limit:
                    break
        return weight, self._deeper(deepest)

    @staticmethod
    def _deeper(depth: int) -> int:
        if depth >= MAX_DEPTH:
            raise TemplateLimitError(
                f"the model's chat template nests values more than {MAX_DEPTH} deep"
            )
        return depth + 1


def _digits(number: int) -> int:
    return abs(number).bit_length() * 3 // 10 + 2  # log10(2) < 0.302, and a sign


def _count(value: object) -> int:
    """A width or a count as Python takes it (anything else fails in the call itself)."""
    return max(value, 0) if isinstance(value, int) else 0


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _counts(text: object, marks: tuple[str, ...]) -> int:
    return sum(text.count(mark) for mark in marks) if isinstance(text, str) else 0


# --- filters and methods: each bound takes the call's own arguments ----------------------------


def _center(w: Weigher, value: object = "", width: object = 80, *_: object) -> int:
    return max(w.weigh(value), _count(width))


def _zfill(w: Weigher, value: object, width: object = 0) -> int:
    return max(w.weigh(value), _count(width))


def _indent(
    w: Weigher, s: object, width: object = 4, first: object = False, blank: object = False
) -> int:
    each = len(width) if isinstance(width, str) else _count(width)
    return w.weigh(s) + (1 + _counts(s, _LINE_BREAKS)) * each


def _replace(w: Weigher, s: object, old: object, new: object, count: object = None) -> int:
    # Jinja's filter makes its arguments text; str.replace takes text only.
    text, old, new = (str(x) if not isinstance(x, str | bytes) else x for x in (s, old, new))
    if type(old) is not type(text) or type(new) is not type(text):
        return len(text)
    found = len(text) + 1 if not old else text.count(old)  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(len(new) - len(old), 0)


def _str_replace(
    w: Weigher, s: object, old: object = "", new: object = "", count: object = -1
) -> int:
    return _replace(w, s, old, new, count)


def _expandtabs(w: Weigher, s: object, tabsize: object = 8) -> int:
    tabs = s.count("\t") if isinstance(s, str) else s.count(b"\t") if isinstance(s, bytes) else 0
    return w.weigh(s) + tabs * _count(tabsize)


def _join(w: Weigher, value: object, d: object = "", attribute: object = None) -> int:
    if isinstance(value, str):  # its characters
        return len(value) + w.weigh(d) * max(len(value) - 1, 0)
    items = value if isinstance(value, list | tuple) else ()
    # A list weighs its length and its items: the items' weight (the list's is remembered).
    weight = w.weigh(items)
    if weight > w.limit:
        return weight
    return weight - len(items) + w.weigh(d) * max(len(items) - 1, 0)


def parts_bound(w: Weigher, parts: tuple[object, ...]) -> int:
    """What `a ~ b ~ c` makes: each part as text."""
    return _join(w, parts)


def _str_join(w: Weigher, separator: object, iterable: object = ()) -> int:
    return _join(w, iterable, separator)


def _translate(w: Weigher, s: object, table: object = None) -> int:
    longest = 1
    if isinstance(table, dict):
        longest = max((len(v) for v in table.values() if isinstance(v, str | bytes)), default=1)
    return w.weigh(s) * max(longest, 1)


def _json(
    w: Weigher,
    value: object,
    indent: object = None,
    separators: object = None,
    sort_keys: object = False,
) -> int:
    each = len(indent) if isinstance(indent, str) else _count(indent)
    between = 3  # ", " and ": ", one of them an item
    if isinstance(separators, tuple | list) and len(separators) == 2:
        between = sum(len(_text(s)) for s in separators)
    if w.weigh(value) > w.limit:
        return w.weigh(value)
    return _json_walk(w, value, each, between, 1)


def _json_walk(w: Weigher, value: object, indent: int, between: int, level: int) -> int:
    """JSON's size without escapes: each item on its line with its indent, the separators, the
    quotes. Stops past the weigher's limit, as a weight does."""
    if not isinstance(value, list | tuple | dict):
        return w.weigh(value) + 2
    pairs = value.items() if isinstance(value, dict) else ((None, v) for v in value)
    total = 2 + indent * (level - 1) + 1
    for key, item in pairs:
        total += 1 + indent * level + between
        if key is not None:
            total += w.weigh(key) + 2
        total += _json_walk(w, item, indent, between, level + 1)
        if total > w.limit:
            break
    return total


def _wordwrap(
    w: Weigher,
    s: object,
    width: object = 79,
    break_long_words: object = True,
    wrapstring: object = None,
    break_on_hyphens: object = True,
) -> int:
    # A line ends at a space, a hyphen or a full width: a wrap string (a newline: two
    # characters at most) after each.
    size = w.weigh(s)
    lines = size // max(_count(width), 1) + _counts(s, (" ", "\t", "\n", "\r", "\x0b", "\x0c", "-"))
    return size + (lines + 1) * max(len(_text(wrapstring)), 2)


def _urlize(
    w: Weigher,
    value: object,
    trim_url_limit: object = None,
    nofollow: object = False,
    target: object = None,
    rel: object = None,
    extra_schemes: object = None,
) -> int:
    # A link starts at a scheme, `www.`, an address's `@` or ends in .com, .net, .org; each
    # is written twice in its tag, with `rel` and `target`.
    schemes = (
        tuple(_text(s) for s in extra_schemes or () if _text(s))
        if isinstance(extra_schemes, list | tuple)
        else ()
    )
    links = _counts(value, ("://", "www.", "@", ".com", ".net", ".org", *schemes))
    return 2 * w.weigh(value) + links * (64 + len(_text(target)) + len(_text(rel)))


def _batch(w: Weigher, value: object, linecount: object = 1, fill_with: object = None) -> int:
    return w.weigh(value) + (
        0 if fill_with is None else _count(linecount) * (w.weigh(fill_with) + 1)
    )


def _slice(w: Weigher, value: object, slices: object = 1, fill_with: object = None) -> int:
    each = 2 + (0 if fill_with is None else w.weigh(fill_with))  # a list each, filled once
    return w.weigh(value) + _count(slices) * each


def _sum(w: Weigher, iterable: object, attribute: object = None, start: object = 0) -> int:
    items = iterable if isinstance(iterable, list | tuple) else ()
    if isinstance(start, int | float) and all(isinstance(i, int | float) for i in items):
        return 1
    # Sequences: each step copies what came before (Python's `sum` is quadratic).
    total = w.weigh(start) + _join(w, items)
    return total * max(len(items), 1)


def _format(w: Weigher, value: object, *args: object, **kwargs: object) -> int:
    if w.weigh(value) > w.limit:
        return w.weigh(value)
    return percent_bound(w, value if isinstance(value, str) else str(value), kwargs or args)


def _lipsum(
    w: Weigher, n: object = 5, html: object = True, min: object = 20, max: object = 100
) -> int:
    return _count(n) * (_count(max) + 1) * 16  # words of at most 14 letters, and the HTML


Bound = Callable[..., int]

#: Bounds of Jinja's filters that make more than their inputs weigh, by name (the others make
#: at most that, escapes aside).
FILTERS: dict[str, Bound] = {
    "center": _center,
    "indent": _indent,
    "format": _format,
    "replace": _replace,
    "join": _join,
    "tojson": _json,
    "wordwrap": _wordwrap,
    "urlize": _urlize,
    "batch": _batch,
    "slice": _slice,
    "sum": _sum,
}
#: Filters whose first argument is read into a list before the bound (a generator would be
#: used up by the bound, and the filter reads it once).
LISTED_FIRST = frozenset({"join", "sum"})
#: Bounds of the globals that make text.
GLOBALS: dict[str, Bound] = {"lipsum": _lipsum}
#: Bounds of the methods of str and bytes that make more than their inputs.
METHODS: dict[str, Bound] = {
    "center": _center,
    "ljust": _center,
    "rjust": _center,
    "zfill": _zfill,
    "expandtabs": _expandtabs,
    "replace": _str_replace,
    "join": _str_join,
    "translate": _translate,
}


# --- formatting --------------------------------------------------------------------------------


def percent_bound(w: Weigher, fmt: str, values: object) -> int:
    """What `fmt % values` makes, without escapes: the format, and for each conversion its
    width, its precision and the weight of its value. Conversions are read as CPython reads
    them: a key in balanced parentheses, flags, `*` or digits, `.` and `*` or digits, a
    length, a type."""
    mapping = values if isinstance(values, Mapping) else None
    positional = list(values) if isinstance(values, tuple) else [values]
    end, index, steps = len(fmt), 0, 0
    total = end

    def next_value() -> object:
        nonlocal index
        index += 1
        return positional[index - 1] if index <= len(positional) else None

    def number(j: int) -> tuple[int, int]:
        if j < end and fmt[j] == "*":
            value = next_value()
            return (abs(value) if isinstance(value, int) else 0), j + 1
        k = j
        while k < end and fmt[k].isdigit():
            k += 1
        return _number(fmt[j:k]), k

    at = fmt.find("%")
    while at >= 0:
        steps += 1
        if steps % _TICK == 0:
            w.tick()
        j = at + 1
        if j < end and fmt[j] == "%":
            at = fmt.find("%", j + 1)
            continue
        key = None
        if j < end and fmt[j] == "(":
            depth, start = 1, j + 1
            j += 1
            while j < end and depth:
                depth += {"(": 1, ")": -1}.get(fmt[j], 0)
                j += 1
            key = fmt[start : j - 1]
        while j < end and fmt[j] in "-+ #0":
            j += 1
        width, j = number(j)
        precision = 0
        if j < end and fmt[j] == ".":
            precision, j = number(j + 1)
        while j < end and fmt[j] in "hlL":
            j += 1
        value = mapping.get(key) if mapping is not None and key is not None else next_value()
        total += width + precision + w.weigh(value)
        if total > w.limit:
            return total
        at = fmt.find("%", j + 1)
    return total


def _number(digits: str) -> int:
    # Python refuses widths past its C int; more than 18 digits would fail there anyway.
    return (int(digits) if len(digits) <= 18 else 10**18) if digits else 0


def format_bound(
    w: Weigher, fmt: str, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> int:
    """What `fmt.format(*args, **kwargs)` makes, without escapes: the literal text, and for
    each field the weight of its value (of the whole argument, for `{0.attr}` or `{0[key]}`)
    and the numbers of its spec (width, precision, a nested field's value)."""
    total, auto, steps = 0, 0, 0

    def argument(name: str) -> object:
        nonlocal auto
        first, _ = formatter_field_name_split(name)
        if first == "":
            first, auto = auto, auto + 1
        if isinstance(first, int):
            return args[first] if first < len(args) else None
        return kwargs.get(first)

    for literal, field, spec, _conversion in formatter_parser(fmt):
        steps += 1
        if steps % _TICK == 0:
            w.tick()
        total += len(literal)
        if field is None:
            continue
        total += w.weigh(argument(field))
        for spec_literal, nested, _, _ in formatter_parser(spec or ""):
            total += sum(_number(d) for d in _DIGITS.findall(spec_literal))
            if nested is not None:
                value = argument(nested)
                total += abs(value) if isinstance(value, int) else w.weigh(value)
        if total > w.limit:
            return total
    return total
