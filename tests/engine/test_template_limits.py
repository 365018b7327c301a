"""Chat templates run with a cap on time and on the size of what they build: a template that
loops without end or builds a huge string is stopped with a message naming the limit, quickly,
and the real templates render as they do without the limits."""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from fake_backend import FakeBackend

from engine import models
from engine.chat_template import render_chat_template
from engine.errors import ChatTemplateError, ModelLoadError
from engine.models import ModelSet
from engine.specs import ModelSpec
from engine.template_sandbox import (
    BoundedSandbox,
    TemplateLimitError,
    TemplateLimits,
    render_bounded,
)
from engine.types import ChatMessage, Role

HI = (ChatMessage(role="user", content="hi"),)
LIMITS = TemplateLimits(seconds=1.0, extra_chars=100_000)
#: The default bounds of size with a minute to run: for what only a size bound may refuse.
UNHURRIED = TemplateLimits(seconds=60.0)
TOO_LONG = "ran longer than 1 s"
TOO_BIG = "over the limit of 100,012"  # 100 000, and twice "user" and "hi"

RUNAWAYS = {
    "a 10 MB string, output": ("{{ 'x' * 10000000 }}", TOO_BIG),
    "a 10 MB string, kept": ("{% set s = 'x' * 10000000 %}ok", TOO_BIG),
    "a huge repetition": ("{{ 'xy' * 10 ** 12 }}", "over the limit"),
    "a string doubled with ~": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s|length }}",
        TOO_BIG,
    ),
    "a list doubled with +": (
        "{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}",
        TOO_BIG,
    ),
    "output that grows in a loop": (
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        TOO_BIG,
    ),
    "nested loops without output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        TOO_LONG,
    ),
    "nested loops over a kept range, no call inside": (
        "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% for k in r %}"
        "{% endfor %}{% endfor %}{% endfor %}",
        TOO_LONG,
    ),
    "a macro that calls itself twice": (
        "{% macro f(n) %}{{ f(n + 1) }}{{ f(n + 1) if n < 40 }}{% endmacro %}{{ f(0) }}",
        "",  # too deep (Python's recursion limit) or too long: refused either way
    ),
    "a macro fanning out": (
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
        "{{ f(60) }}",
        TOO_LONG,
    ),
    "a huge power": ("{{ 10 ** 100000000 }}", "a number over 65536 bits"),
}


@pytest.mark.parametrize(("source", "message"), RUNAWAYS.values(), ids=RUNAWAYS.keys())
def test_a_runaway_template_is_stopped_quickly_naming_the_limit(source: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(ChatTemplateError) as caught:
        render_chat_template(source, HI, bos_token=None, eos_token=None, limits=LIMITS)
    assert time.monotonic() - started < LIMITS.seconds + 2
    assert message in str(caught.value)
    if message:
        assert isinstance(caught.value, TemplateLimitError)


def test_the_limits_leave_room_for_large_messages() -> None:
    source = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ m.content }}{% endfor %}"
    messages = (ChatMessage(role="user", content="y" * 500_000),)
    rendered = render_chat_template(source, messages, bos_token=None, eos_token=None, limits=LIMITS)
    assert len(rendered) == 1_000_006


def test_a_template_within_its_limits_renders_with_the_tracer_given_back() -> None:
    before = sys.gettrace()
    assert render_chat_template(
        "{{ 'ab' * 3 }}{{ 2 ** 10 }}", HI, bos_token=None, eos_token=None
    ) == ("ababab1024")
    assert sys.gettrace() is before


def test_a_chat_model_whose_template_runs_away_is_refused_when_it_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template = "{{ 'x' * 10000000 }}"  # 10 MB: over the default limit
    monkeypatch.setattr(
        models, "load_backend", lambda spec, progress=None: FakeBackend(template=template)
    )
    spec = ModelSpec(path=Path("runaway.gguf"))
    model_set = ModelSet({Role.COMPLETION: spec, Role.CHAT: spec})
    try:
        assert model_set.engine(Role.COMPLETION)  # completion never renders the template
        with pytest.raises(ModelLoadError) as caught:
            model_set.engine(Role.CHAT)
    finally:
        model_set.close()
    assert str(caught.value) == (
        "the chat template of runaway.gguf is refused: the model's chat template builds "
        "10,000,000 characters or items, over the limit of 1,000,044"
    )


# --- one call that would build too much: refused before it runs ----------------------------------
#
# One C call (`str.center`, `json.dumps`, `str.join`) cannot be stopped by the deadline once it
# runs, so each operation that makes more than its inputs is bounded before it runs
# (engine/template_bounds.py). Each probe below asks for 100 MB or more; it is refused naming
# the operation, and what the rendering allocates stays small. `python -m bench template_limits`
# times them (each is refused in milliseconds).

BIG = "{% set s = 'x' * 900000 %}"  # under the limit of 1,000,012 characters, alone

BEFORE_BUILDING = {
    "center": ("{{ 'x'|center(200000000) }}", "with `center`"),
    "format, a width": ("{{ '%0200000000d'|format(1) }}", "with `format`"),
    "format, a width from its values": ("{{ '%*d'|format(200000000, 1) }}", "with `format`"),
    "format, a precision": ("{{ '%.200000000f'|format(1.0) }}", "with `format`"),
    "%, a width": ("{{ '%0200000000d' % 1 }}", "with `%`"),
    "%, a width after a key in parentheses": (
        "{{ '%((a))200000000s' % {'(a)': 1} }}",
        "with `%`",
    ),
    "indent, a width": ("{{ 'a\nb'|indent(200000000) }}", "with `indent`"),
    "indent, many lines": ("{{ ('a\n' * 100000)|indent(1000) }}", "with `indent`"),
    "indent, a string": ("{{ ('a\n' * 100000)|indent('-' * 1000) }}", "with `indent`"),
    "tojson, an indent": ("{{ messages|tojson(indent=100000000) }}", "with `tojson`"),
    "tojson, separators": (
        "{{ (range(100000)|list)|tojson(separators=('x' * 1000, ':')) }}",
        "with `tojson`",
    ),
    "replace, the empty string": (
        "{{ ('x' * 100000)|replace('', 'y' * 1000) }}",
        "with `replace`",
    ),
    "replace, a longer string": ("{{ ('x' * 900000)|replace('x', 'y' * 1000) }}", "`replace`"),
    "join, a separator": ("{{ range(100000)|join('x' * 100000) }}", "with `join`"),
    "join, one string many times": (BIG + "{{ [s, s, s, s, s]|join }}", "over the limit"),
    "wordwrap, a wrap string": (
        "{{ ('x ' * 400000)|wordwrap(1, wrapstring='y' * 1000) }}",
        "with `wordwrap`",
    ),
    "urlize, a target": (
        "{{ ('http://a ' * 100000)|urlize(target='t' * 10000) }}",
        "with `urlize`",
    ),
    "batch, filled": ("{{ [1]|batch(200000000, 'x')|list }}", "with `batch`"),
    "slice, many": ("{{ [1]|slice(1000000000)|list|length }}", "with `slice`"),
    "sum of lists": ("{{ ([[1]] * 200000)|sum(start=[]) }}", "with `sum`"),
    "lipsum": ("{{ lipsum(1000000, false, 1000, 1000) }}", "with `lipsum`"),
    "a list of one string, repeated": (BIG + "{{ ([s] * 1000)|length }}", "900,001,000"),
    "str.center": ("{{ 'x'.center(200000000) }}", "with `center`"),
    "str.zfill": ("{{ '1'.zfill(200000000) }}", "with `zfill`"),
    "str.expandtabs": ("{{ ('\t' * 1000).expandtabs(1000000) }}", "with `expandtabs`"),
    "str.replace": ("{{ ('x' * 100000).replace('', 'y' * 1000) }}", "with `replace`"),
    "str.join": ("{{ ('y' * 100000).join(range(10000)|map('string')) }}", "with `join`"),
    "str.translate": ("{{ ('x' * 100000).translate({120: 'y' * 10000}) }}", "`translate`"),
    "str.format, a width": ("{{ '{:>200000000}'.format(1) }}", "with `format`"),
    "str.format, a nested width": ("{{ '{0:{1}}'.format(1, 200000000) }}", "with `format`"),
    "str.format, a field repeated": (BIG + "{{ ('{0}' * 1000).format(s) }}", "with `format`"),
    "str.format_map": ("{{ '{a:>200000000}'.format_map({'a': 1}) }}", "with `format_map`"),
    "~": (BIG + "{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}", "with `~`"),
    "a list written out": (BIG + "{{ [s, s, s, s, s, s, s, s] }}", "over the limit"),
    "a namespace written out": (
        BIG + "{% set ns = namespace(a=s, b=s, c=s, d=s) %}{{ ns }}",
        "over the limit",
    ),
    "a macro's extra arguments": (
        BIG + "{% macro f() %}{{ varargs }}{% endmacro %}{{ f(s, s, s, s) }}",
        "with a macro's extra arguments",
    ),
    "a macro's output": (
        BIG + "{% macro f() %}{% for i in range(100000) %}{{ s }}{% endfor %}{% endmacro %}"
        "{{ f()|length }}",
        "writes",
    ),
    "a block's output": (
        BIG + "{% set l = [s] %}{% set b %}{% for i in range(1000) %}{{ l }}{{ l }}{{ l }}"
        "{% endfor %}{% endset %}{{ b|length }}",
        "writes",
    ),
    "lists nested deep": (
        "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set ns.l = [ns.l] %}"
        "{% endfor %}{{ ns.l }}",
        "nests values more than 100 deep",
    ),
    "a source too long": ("{# " + "x" * 300_000 + " #}", "has 300,006 characters"),
}


@pytest.mark.parametrize(("source", "message"), BEFORE_BUILDING.values(), ids=BEFORE_BUILDING)
def test_one_call_that_would_build_too_much_is_refused_before_it_runs(
    source: str, message: str
) -> None:
    """Each would build 100 MB or more (a 1 GB string, some); refused naming the operation,
    the rendering allocating under 50 MB."""
    tracemalloc.start()
    try:
        with pytest.raises(TemplateLimitError) as caught:
            # Time enough that only the size bound can refuse it: tracing every allocation
            # slows the rendering several times over, past the 2 s limit on a busy machine.
            render_chat_template(source, HI, bos_token=None, eos_token=None, limits=UNHURRIED)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message in str(caught.value)
    assert peak < 50 << 20, f"{peak:,} bytes"


def test_a_constant_filter_is_not_run_while_the_template_compiles() -> None:
    """Jinja runs a filter on constants as it compiles; outside a rendering's limits ours are
    left for the rendering, which refuses them."""
    tracemalloc.start()
    try:
        template = BoundedSandbox().from_string("{{ 'x'|center(200000000) }}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, f"{peak:,} bytes"
    with pytest.raises(TemplateLimitError, match="with `center`"):
        render_bounded(
            "{{ 'x'|center(200000000) }}",
            lambda source: template,
            {},
            input_chars=0,
            limits=TemplateLimits(),
        )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "{{ 'ab'|center(6) }}|{{ '%05.1f'|format(2.25) }}|{{ '%s-%s' % (1, 2) }}",
            "  ab  |002.2|1-2",
        ),
        ("{{ 'a\nb'|indent(2, first=true) }}", "  a\n  b"),
        ("{{ [1, 'x']|tojson(indent=1) }}", '[\n 1,\n "x"\n]'),
        ("{{ 'a-b'|replace('-', '--') }}|{{ [1, 2]|join(', ') }}", "a--b|1, 2"),
        ("{{ '{:>4}|{a}'.format('x', a=[1]) }}|{{ 'ab' ~ 1 }}", "   x|[1]|ab1"),
        (
            "{{ [[1], [2]]|sum(start=[]) }}|{{ [1, 2, 3]|batch(2, 0)|list }}",
            "[1, 2]|[[1, 2], [3, 0]]",
        ),
    ],
)
def test_the_bounded_operations_make_what_jinja_makes(source: str, expected: str) -> None:
    assert render_chat_template(source, HI, bos_token=None, eos_token=None) == expected
