"""Chat prompts: messages rendered with the model's own Jinja chat template, in the bounded
sandbox (`template_sandbox.py`), and the check that a model's template renders at all."""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.errors import ChatTemplateError
from engine.template_sandbox import DEFAULT_LIMITS, TemplateLimits, render_bounded
from engine.types import ChatMessage

if TYPE_CHECKING:
    from engine.backend import Backend


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Templates expect non-ASCII kept as is (Jinja's own filter escapes it for HTML).
    return json.dumps(
        value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> Any:
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols

    from engine.template_sandbox import BoundedSandbox

    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(source)
    except TemplateError as e:
        raise ChatTemplateError(f"the model's chat template does not compile: {e}") from e


def render_chat_template(
    source: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str | None,
    eos_token: str | None,
    add_generation_prompt: bool = True,
    limits: TemplateLimits = DEFAULT_LIMITS,
) -> str:
    """Render a Jinja chat template in a sandbox, as transformers' `apply_chat_template` does,
    within `limits` of time and size (engine/template_sandbox.py)."""
    variables = {
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "bos_token": bos_token or "",
        "eos_token": eos_token or "",
        "add_generation_prompt": add_generation_prompt,
    }
    input_chars = sum(len(m.content) + len(m.role) for m in messages)
    try:
        return render_bounded(source, _compile, variables, input_chars=input_chars, limits=limits)
    except ChatTemplateError:
        raise  # raise_exception(): the template's own refusal; or a limit
    except Exception as e:
        # The template is the model's code, run in the sandbox: besides Jinja's own errors
        # (unsafe access, undefined names) it fails with plain Python ones (`1/0`, `'a' + 1`,
        # a `range` over the sandbox's limit), and callers catch only the engine's errors.
        raise ChatTemplateError(f"the model's chat template failed: {e}") from e


def render_chat(backend: Backend, messages: Sequence[ChatMessage]) -> str:
    """The chat prompt for `messages`, with the model's own template."""
    source = backend.vocab.chat_template
    if not source:
        raise ChatTemplateError(
            f"model {backend.info.name} has no chat template; use it for completion, or pick a "
            "chat model (--chat-model)"
        )
    return render_chat_template(
        source, messages, bos_token=backend.vocab.bos_token, eos_token=backend.vocab.eos_token
    )


#: The conversation a chat template is tried on when its model loads.
PROBE_MESSAGES = ("Explain this code.",)


def check_chat_template(backend: Backend) -> None:
    """Render the model's chat template (if it has one) on a probe conversation, so that a
    template that fails or runs past its limits is refused when the model loads rather than
    at the first Explain. Raises ChatTemplateError naming the cause."""
    source = backend.vocab.chat_template
    if source:
        render_chat_template(
            source,
            [ChatMessage(role="user", content=text) for text in PROBE_MESSAGES],
            bos_token=backend.vocab.bos_token,
            eos_token=backend.vocab.eos_token,
        )
