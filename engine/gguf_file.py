"""Why a GGUF file cannot be loaded, when llama.cpp only says that it cannot.

llama.cpp refuses a truncated or corrupt file with "Failed to load model from file" (its own
log says more, but it goes to stderr, and only when verbose). After such a failure we walk the
file's header ourselves (GGUF: header, key-value metadata, tensor descriptions, then the
aligned tensor data; github.com/ggml-org/ggml/blob/master/docs/gguf.md) and name what is
wrong: where it ends early, or what it holds that cannot be.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

#: Scalar value types of the metadata: GGUF type -> struct format.
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9
#: Bytes per block and values per block of the common tensor types (ggml's type traits).
_TENSOR_BLOCKS = {
    0: (4, 1),  # F32
    1: (2, 1),  # F16
    2: (18, 32),  # Q4_0
    3: (20, 32),  # Q4_1
    6: (22, 32),  # Q5_0
    7: (24, 32),  # Q5_1
    8: (34, 32),  # Q8_0
    10: (84, 256),  # Q2_K
    11: (110, 256),  # Q3_K
    12: (144, 256),  # Q4_K
    13: (176, 256),  # Q5_K
    14: (210, 256),  # Q6_K
    15: (292, 256),  # Q8_K
    30: (2, 1),  # BF16
}
#: Bounds no real file comes near: a count past them means a corrupt header, not a big model.
_MAX_COUNT = 1 << 24
_MAX_STRING = 1 << 26


class _Corrupt(Exception):
    pass


class _Reader:
    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file = file
        self.size = size

    def read(self, n: int, what: str) -> bytes:
        data = self.file.read(n)
        if len(data) < n:
            raise _Corrupt(
                f"the file is truncated: it ends at byte {self.size:,}, inside its {what}"
            )
        return data

    def scalar(self, fmt: str, what: str) -> int | float | bool:
        value: int | float | bool = struct.unpack("<" + fmt, self.read(struct.calcsize(fmt), what))[
            0
        ]
        return value

    def count(self, what: str, things: str, limit: int = _MAX_COUNT) -> int:
        value = int(self.scalar("Q", what))
        if value > limit:
            raise _Corrupt(f"the file is corrupt: its {what} claims {value:,} {things}")
        return value

    def string(self, what: str) -> str:
        size = self.count(what, "bytes in a string", _MAX_STRING)
        return self.read(size, what).decode("utf-8", "replace")

    def value(self, kind: int, what: str) -> object:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], what)
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            item_kind = int(self.scalar("I", what))
            return [self.value(item_kind, what) for _ in range(self.count(what, "items"))]
        raise _Corrupt(f"the file is corrupt: metadata {what} has an unknown type {kind}")


def diagnose(path: Path) -> str | None:
    """What makes the GGUF file at `path` unloadable, if its structure shows it; else None."""
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            return _walk(_Reader(file, size), size)
    except _Corrupt as e:
        return str(e)
    except OSError:
        return None


def _walk(reader: _Reader, size: int) -> str | None:
    reader.read(4, "header")  # the magic, checked before loading
    version = int(reader.scalar("I", "header"))
    if version not in (2, 3):
        return f"the file is GGUF version {version}; llama.cpp reads versions 2 and 3"
    tensors = reader.count("header", "tensors")
    entries = reader.count("header", "metadata entries")
    alignment = 32
    for _ in range(entries):
        key = reader.string("metadata")
        value = reader.value(int(reader.scalar("I", f"metadata {key}")), f"metadata {key}")
        if key == "general.alignment" and isinstance(value, int) and value > 0:
            alignment = value
    end = 0
    for _ in range(tensors):
        name = reader.string("tensor descriptions")
        dims = int(reader.scalar("I", f"tensor {name}"))
        if dims > 8:
            raise _Corrupt(f"the file is corrupt: tensor {name} has {dims} dimensions")
        elements = 1
        for _ in range(dims):
            elements *= int(reader.scalar("Q", f"tensor {name}"))
        kind = int(reader.scalar("I", f"tensor {name}"))
        offset = int(reader.scalar("Q", f"tensor {name}"))
        block_bytes, block_values = _TENSOR_BLOCKS.get(kind, (0, 1))
        end = max(end, offset + -(-elements // block_values) * block_bytes)
    data_start = -(-reader.file.tell() // alignment) * alignment
    if data_start + end > size:
        return (
            f"the file is truncated: its tensors need {data_start + end:,} bytes, it has {size:,}"
        )
    return None
