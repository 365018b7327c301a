"""A GGUF file that llama.cpp refuses gets a cause: where it ends early, or what in it cannot
be. Cut and damaged copies of the real default chat model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.default_models import default_chat_model
from engine.errors import ModelLoadError
from engine.gguf_file import diagnose
from engine.models import load_backend
from engine.specs import ModelSpec

SMOLLM2_BYTES = 98_362_432


@pytest.fixture(scope="module")
def smollm2() -> bytes:
    data = default_chat_model().read_bytes()
    assert len(data) == SMOLLM2_BYTES
    return data


CASES = {
    "cut in the header": (lambda d: d[:12], "ends at byte 12, inside its header"),
    "cut in the metadata": (
        lambda d: d[:2000],
        "ends at byte 2,000, inside its metadata tokenizer.ggml.tokens",
    ),
    "cut in the tensor data": (
        lambda d: d[:20_000_000],
        f"its tensors need {SMOLLM2_BYTES:,} bytes, it has 20,000,000",
    ),
    "one byte short": (
        lambda d: d[:-1],
        f"its tensors need {SMOLLM2_BYTES:,} bytes, it has {SMOLLM2_BYTES - 1:,}",
    ),
    "random bytes after the first 2000": (
        lambda d: d[:2000] + os.urandom(1_000_000),
        "the file is corrupt: its metadata tokenizer.ggml.tokens claims",
    ),
    "an unknown version": (
        lambda d: d[:4] + (7).to_bytes(4, "little") + d[8:100],
        "the file is GGUF version 7; llama.cpp reads versions 2 and 3",
    ),
}


@pytest.mark.parametrize(("damage", "cause"), CASES.values(), ids=CASES.keys())
def test_a_damaged_gguf_is_refused_with_its_cause(
    tmp_path: Path, smollm2: bytes, damage, cause: str
) -> None:
    path = tmp_path / "damaged.gguf"
    path.write_bytes(damage(smollm2))
    assert cause in (diagnose(path) or "")
    with pytest.raises(ModelLoadError) as caught:
        load_backend(ModelSpec(path=path))
    assert str(caught.value).startswith(f"cannot load model {path}: the file ")
    assert cause in str(caught.value)


def test_an_intact_gguf_has_nothing_to_diagnose() -> None:
    assert diagnose(default_chat_model()) is None
