"""Real chat templates render within the limits exactly as Jinja renders them without limits
(engine/template_sandbox.py): the bounds refuse what a template would build past them, never
what real templates build. The corpus is every chat template found here: the default chat
model's (from its GGUF file), llama-cpp-python's chat formats, the processors of
transformers that carry one, and those the tests use; each is rendered on a short dialogue,
on one beginning with the user, on long messages of code full of what formats and escapes
act on, and on a conversation of 401 messages.
"""

from __future__ import annotations

import ast
import datetime
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from scripted_servers import CHAT_TEMPLATE
from test_prompts import GEMMA_TEMPLATE, SMOLLM2_TEMPLATE

from engine.chat_template import render_chat_template
from engine.errors import ChatTemplateError
from engine.types import ChatMessage

#: Files of installed packages that hold chat templates in their source, by package.
SOURCES = {
    "llama_cpp": ["llama_chat_format.py"],
    "transformers": [
        "models/llama4/processing_llama4.py",
        "models/smolvlm/processing_smolvlm.py",
        "models/qwen2_audio/processing_qwen2_audio.py",
    ],
}


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _templates_in(path: Path) -> list[str]:
    """The string constants of a Python file that are chat templates (Jinja that loops over
    or indexes `messages`, not a docstring about them)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if "messages" in text and "{%" in text and "end" in text and "Args:" not in text:
                found.append(text)
    return found


def _gguf_template(path: Path) -> str | None:
    from gguf import GGUFReader

    field = GGUFReader(path).fields.get("tokenizer.chat_template")
    return None if field is None else bytes(field.parts[field.data[0]]).decode("utf-8")


def _corpus() -> dict[str, str]:
    corpus: dict[str, str] = {}
    for package, files in SOURCES.items():
        root = _package_dir(package)
        for file in files:
            if root is not None and (root / file).is_file():
                for i, text in enumerate(_templates_in(root / file)):
                    corpus[f"{package}/{Path(file).stem}#{i}"] = text
    if importlib.util.find_spec("gguf") is not None:
        from engine.default_models import default_chat_model
        from engine.errors import ModelLoadError

        try:
            chat_model = default_chat_model()
        except ModelLoadError:
            pass
        else:
            template = _gguf_template(chat_model)
            if template:
                corpus[f"gguf/{chat_model.name}"] = template
    corpus |= {
        "tests/gemma": GEMMA_TEMPLATE,
        "tests/smollm2": SMOLLM2_TEMPLATE,
        "tests/scripted": CHAT_TEMPLATE,
    }
    return corpus


CORPUS = _corpus()
print(f"chat template corpus: {len(CORPUS)} templates: {', '.join(CORPUS)}")

CODE = (
    "def f(x):\n\treturn {'a': x % 2, \"b\": '%s' % x}  # <tag> & é 😀 {0} {{x}} \\n\n" * 100
)  # 6.5 KB
CONVERSATIONS = {
    "a short dialogue": [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Explain this."),
        ChatMessage("assistant", "It adds."),
        ChatMessage("user", "And this?"),
    ],
    "the user first": [
        ChatMessage("user", "Explain this."),
        ChatMessage("assistant", "It adds."),
        ChatMessage("user", "And this?"),
    ],
    "long messages of code": [
        ChatMessage("user" if i % 2 == 0 else "assistant", CODE) for i in range(11)
    ],
    "401 messages": [
        ChatMessage("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(401)
    ],
}


def _reference(source: str, messages: list[ChatMessage]) -> str:
    """The template rendered by Jinja's own sandbox, without limits, with the globals and
    filters chat templates expect (as engine/chat_template.py gives them)."""

    def raise_exception(message: str) -> None:
        raise ChatTemplateError(message)

    def tojson(
        value: Any, indent: Any = None, separators: Any = None, sort_keys: Any = False
    ) -> str:
        return json.dumps(
            value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    env.filters["tojson"] = tojson
    return env.from_string(source).render(
        messages=[{"role": m.role, "content": m.content} for m in messages],
        bos_token="<s>",
        eos_token="</s>",
        add_generation_prompt=True,
    )


def test_the_corpus_holds_the_default_chat_models_template_and_real_ones() -> None:
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("the gguf package is not installed: the default model's template is not read")
    assert any(name.startswith("gguf/") for name in CORPUS), CORPUS.keys()
    assert sum(name.startswith("llama_cpp/") for name in CORPUS) >= 5


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("name", CORPUS)
def test_a_real_template_renders_within_the_limits_as_jinja_renders_it(
    name: str, conversation: str
) -> None:
    source, messages = CORPUS[name], CONVERSATIONS[conversation]
    try:
        expected = _reference(source, messages)
    except Exception as e:  # the template's own refusal (roles that must alternate, ...)
        expected = f"refused: {e}"
    try:
        got = render_chat_template(source, messages, bos_token="<s>", eos_token="</s>")
    except ChatTemplateError as e:
        got = f"refused: {e}"
    if expected.startswith("refused: ") and got.startswith("refused: "):
        assert expected.removeprefix("refused: ") in got  # ours says what refused it
    else:
        assert got == expected
