"""Chat templates run with a cap on time and on the size of what they build: a template that
loops without end or builds a huge string is stopped with a message naming the limit, quickly,
and the real templates render as before."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fake_backend import FakeBackend

from engine import models
from engine.chat_template import render_chat_template
from engine.errors import ChatTemplateError, ModelLoadError
from engine.models import ModelSet
from engine.specs import ModelSpec
from engine.template_sandbox import TemplateLimitError, TemplateLimits
from engine.types import ChatMessage, Role

HI = (ChatMessage(role="user", content="hi"),)
LIMITS = TemplateLimits(seconds=1.0, extra_chars=100_000)
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
    monkeypatch.setattr(models, "load_backend", lambda spec: FakeBackend(template=template))
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
