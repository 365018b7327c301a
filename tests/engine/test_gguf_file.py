"""A GGUF file that llama.cpp refuses gets a cause: where it ends early, or what in it cannot
be. Cut and damaged copies of the real default chat model."""

from __future__ import annotations

import os
import struct
import threading
import tracemalloc
from collections.abc import Callable
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
    tmp_path: Path, smollm2: bytes, damage: Callable[[bytes], bytes], cause: str
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


# --- hostile files: what the header claims costs nothing ----------------------------------------
#
# The walk skips values without keeping them, so a header claiming 16 million items costs a
# seek (a list of them would take 24 s and 212 MB). bench/ is where its speed is timed;
# here, what it says and how little it allocates (under 100 MB whatever the file claims).


def _gguf(*entries: bytes, tensors: int = 0, tail: bytes = b"") -> bytes:
    """A GGUF version 3 file: its header, metadata entries, `tail` (tensor descriptions),
    padded to the data's alignment (32)."""
    data = b"GGUF" + struct.pack("<IQQ", 3, tensors, len(entries)) + b"".join(entries) + tail
    return data + bytes(-len(data) % 32)


def _entry(key: bytes, kind: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", kind) + payload


UINT8, STRING, ARRAY = 0, 8, 9
MILLIONS = 16 * 1024 * 1024

HOSTILE = {
    "an array claiming 16 million items it does not hold": (
        lambda: _gguf(_entry(b"big", ARRAY, struct.pack("<IQ", UINT8, MILLIONS) + b"x" * 100)),
        "the file is truncated: it ends at byte {size:,}, inside its metadata big",
    ),
    "an array of 16 million items it holds": (
        lambda: _gguf(_entry(b"big", ARRAY, struct.pack("<IQ", UINT8, MILLIONS) + bytes(MILLIONS))),
        None,
    ),
    "16 million strings claimed": (
        lambda: _gguf(_entry(b"words", ARRAY, struct.pack("<IQ", STRING, MILLIONS))),
        "the file is truncated: it ends at byte {size:,}, inside its metadata words",
    ),
    "2 million empty strings held": (
        lambda: _gguf(
            _entry(b"words", ARRAY, struct.pack("<IQ", STRING, 1 << 21) + bytes(8 << 21))
        ),
        None,
    ),
    "arrays nested 10,000 deep": (
        lambda: _gguf(_entry(b"deep", ARRAY, struct.pack("<IQ", ARRAY, 1) * 10_000)),
        "the file is corrupt: its metadata deep nests arrays more than 8 deep",
    ),
    "a key claiming 64 MiB": (
        lambda: _gguf(struct.pack("<Q", 1 << 26) + b"k" * 1000),
        "the file is corrupt: its metadata claims 67,108,864 bytes in a name",
    ),
    "a key of 60 KB, then an unknown type": (
        lambda: _gguf(_entry(b"k" * 60_000, 99, b"")),
        f"the file is corrupt: its metadata {'k' * 80}… has an unknown type 99",
    ),
    "a tensor's name claiming 1 MiB": (
        lambda: _gguf(tensors=1, tail=struct.pack("<Q", 1 << 20) + b"t" * 1000),
        "the file is corrupt: its tensor descriptions claims 1,048,576 bytes in a name",
    ),
}


@pytest.mark.parametrize(("make", "cause"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_header_is_walked_keeping_nothing_it_claims(
    tmp_path: Path, make: Callable[[], bytes], cause: str | None
) -> None:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(make())
    cause = cause and cause.format(size=path.stat().st_size)
    tracemalloc.start()
    try:
        found = diagnose(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == cause
    assert peak < 100 << 20, f"{peak:,} bytes"
    assert len(found or "") < 200  # a long name is shortened


def test_a_fifo_as_the_model_is_refused_without_being_opened(tmp_path: Path) -> None:
    """A named pipe would hold the loader until something writes to it."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_backend(ModelSpec(path=fifo))
        except BaseException as e:
            outcome.append(e)
        else:
            outcome.append(None)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(30)  # far above the refusal's time: a regression fails here instead of hanging
    if worker.is_alive():  # unblock it: open the other end
        with open(fifo, "wb"):
            pass
        pytest.fail("loading a FIFO blocked")
    assert isinstance(outcome[0], ModelLoadError)
    assert str(outcome[0]) == f"{fifo} is not a model file or folder (a pipe or a device?)"
    assert diagnose(fifo) is None  # not opened either
