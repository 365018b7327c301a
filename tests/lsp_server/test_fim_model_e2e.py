"""A model with FIM tokens through the real server: the default models have none, so the
server runs here on the transformers backend with a tiny random Llama whose tokenizer has
StarCoder's `<fim_prefix>`, `<fim_suffix>` and `<fim_middle>` (built in
tests/engine/test_transformers_backend.py, nothing downloaded).

Its answers are noise; what the README claims about a FIM model is about the prompt, and the
server says what the prompt was (`infill/status`, `infill/stats`): the family found in the
tokenizer, the code after the cursor in the prompt, the `fimFamily` setting over the model's
own, and the code's special-token text kept as plain text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsp_helpers import Session, answer, ready_session, settled_jobs
from pytest_lsp import client_capabilities

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_transformers_backend import build_model_folder
from tokenizers import Tokenizer

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\n\nprint(add(1, 2))\nprint(add(3, 4))\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("tiny-fim-llama"))


def options(model_dir: Path, **more: Any) -> dict[str, Any]:
    return {
        "infill": {
            "backend": "transformers",
            "model": str(model_dir),
            "device": "cpu",
            "debounceMs": 0,
            "contextTokens": 0,
            "maxTokensSingleLine": 4,
            **more,
        }
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(model_dir: Path) -> AsyncIterator[Session]:
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    async with ready_session(capabilities, options(model_dir)) as s:
        yield s


def plain_tokens(model_dir: Path, text: str) -> int:
    """How many tokens `text` is to the model's tokenizer, special-token text as plain text."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.encode_special_tokens = True
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


async def prompt_tokens(session: Session, text: str, cursor: int) -> int:
    """The prompt size of the engine job for a request at `cursor` of a new document."""
    uri = session.open(text)
    before = text[:cursor]
    line = before.count("\n")
    column = len(before) - (before.rfind("\n") + 1)
    await answer(session.inline(uri, session.position(text, line, column)))
    (job,) = await settled_jobs(session, uri, 0)
    return int(job["prompt_tokens"])


async def test_the_family_is_found_in_the_tokenizer(session: Session, model_dir: Path) -> None:
    """README "Inline completion": a model with FIM tokens gets its family's prompt format,
    found in its tokenizer."""
    status = await session.status()
    assert (status["backend"], status["model_path"]) == ("transformers", str(model_dir))
    assert status["fim_family"] == "starcoder", status


async def test_the_prompt_holds_the_code_after_the_cursor_in_the_familys_format(
    session: Session, model_dir: Path
) -> None:
    """README "Prompts": with FIM tokens the code after the cursor is in the prompt: exactly
    its tokens and the format's three markers on top of the prefix's (and the model's BOS)."""
    text = PREFIX + SUFFIX
    with_suffix = await prompt_tokens(session, text, len(PREFIX))
    expected = 1 + 3 + plain_tokens(model_dir, PREFIX) + plain_tokens(model_dir, SUFFIX)
    assert with_suffix == expected


async def test_special_token_text_in_the_code_stays_text_in_a_fim_prompt(
    session: Session, model_dir: Path
) -> None:
    """README "Prompts": code that spells `<fim_suffix>` is tokenized as plain text, so the
    FIM prompt has its own markers only: its size grows by the spelling's plain-text count."""
    spelled = PREFIX.replace("return ", "MARK = '<fim_suffix>'\n    return ")
    grown = await prompt_tokens(session, spelled + SUFFIX, len(spelled))
    plain = await prompt_tokens(session, PREFIX + SUFFIX, len(PREFIX))
    assert grown - plain == plain_tokens(model_dir, spelled) - plain_tokens(model_dir, PREFIX)
    assert plain_tokens(model_dir, "<fim_suffix>") > 1  # as text it is several tokens


async def test_fim_family_none_sends_the_prefix_alone(model_dir: Path) -> None:
    """README "Settings": `fimFamily: "none"` overrides the model's own family: the prompt is
    the prefix alone, the code after the cursor left out."""
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    async with ready_session(capabilities, options(model_dir, fimFamily="none")) as s:
        assert (await s.status())["fim_family"] is None
        alone = await prompt_tokens(s, PREFIX + SUFFIX, len(PREFIX))
    assert alone == 1 + plain_tokens(model_dir, PREFIX)
