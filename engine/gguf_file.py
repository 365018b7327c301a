"""Why a GGUF file cannot be loaded, when llama.cpp only says that it cannot.

llama.cpp refuses a truncated or corrupt file with "Failed to load model from file" (its own
log says more, but it goes to stderr, and only when verbose). After such a failure we walk the
file's header ourselves (GGUF: header, key-value metadata, tensor descriptions, then the
aligned tensor data; github.com/ggml-org/ggml/blob/master/docs/gguf.md) and name what is
wrong: where it ends early, or what it holds that cannot be.

The file may be hostile: the walk keeps nothing it reads (a value is skipped, its size checked
against the file's; an array's items are never gathered), refuses names over 64 KiB and arrays
nested over 8 deep, shows at most 80 characters of a name, and gives up after 0.5 s.
"""

from __future__ import annotations

import os
import stat
import struct
import time
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
_LENGTH = struct.Struct("<Q")
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
#: A metadata key or a tensor name longer than this is corruption (llama.cpp's tensor names
#: hold 64 bytes; keys are dotted words).
_MAX_NAME = 1 << 16
#: Arrays of arrays nested deeper than this: no real file has one inside another.
_MAX_NESTING = 8
#: Characters of a key or a name shown in a message.
_SHOWN = 80
#: Seconds the walk may take: a file that holds millions of strings is not walked to its end
#: (its cause stays unknown, and llama.cpp's message is shown). The default models' headers
#: take 0.016 s (SmolLM2) and 0.04 s (Gemma 3: 262,144 tokens, their scores and types).
DIAGNOSE_SECONDS = 0.5


class _Corrupt(Exception):
    pass


class _OutOfTime(Exception):
    pass


def _shown(name: str) -> str:
    return name if len(name) <= _SHOWN else name[:_SHOWN] + "…"


class _Reader:
    """Reads the header's structure without keeping its values: a value is skipped (its size
    checked against the file's), an array's items never gathered."""

    def __init__(self, file: BinaryIO, size: int, deadline: float) -> None:
        self.file = file
        self.size = size
        self.deadline = deadline

    def truncated(self, what: str) -> _Corrupt:
        return _Corrupt(f"the file is truncated: it ends at byte {self.size:,}, inside its {what}")

    def read(self, n: int, what: str) -> bytes:
        data = self.file.read(n)
        if len(data) < n:
            raise self.truncated(what)
        return data

    def skip(self, n: int, what: str) -> None:
        if self.file.tell() + n > self.size:
            raise self.truncated(what)
        self.file.seek(n, os.SEEK_CUR)

    def scalar(self, fmt: str, what: str) -> int | float | bool:
        data = self.read(struct.calcsize(fmt), what)
        value: int | float | bool = struct.unpack("<" + fmt, data)[0]
        return value

    def count(self, what: str, things: str, limit: int = _MAX_COUNT) -> int:
        value = int(self.scalar("Q", what))
        if value > limit:
            raise _Corrupt(f"the file is corrupt: its {what} claims {value:,} {things}")
        return value

    def name(self, what: str) -> str:
        """A key or a tensor's name (short in any real file)."""
        size = self.count(what, "bytes in a name", _MAX_NAME)
        return self.read(size, what).decode("utf-8", "replace")

    def skip_value(self, kind: int, what: str, depth: int = 0) -> None:
        if kind in _SCALARS:
            self.skip(struct.calcsize(_SCALARS[kind]), what)
        elif kind == _STRING:
            self.skip(self.count(what, "bytes in a string", _MAX_STRING), what)
        elif kind == _ARRAY:
            if depth >= _MAX_NESTING:
                raise _Corrupt(
                    f"the file is corrupt: its {what} nests arrays more than {_MAX_NESTING} deep"
                )
            item_kind = int(self.scalar("I", what))
            items = self.count(what, "items")
            if item_kind in _SCALARS:
                self.skip(items * struct.calcsize(_SCALARS[item_kind]), what)
            elif item_kind == _STRING:
                self.skip_strings(items, what)
            else:
                self.skip_arrays(item_kind, items, what, depth)
        else:
            raise _Corrupt(f"the file is corrupt: its {what} has an unknown type {kind}")

    def skip_strings(self, items: int, what: str) -> None:
        """An array's strings, each skipped."""
        read, seek, unpack, tell = self.file.read, self.file.seek, _LENGTH.unpack, self.file.tell
        if tell() + 8 * items > self.size:
            raise self.truncated(what)
        for done in range(items):
            if done % 4096 == 0 and time.monotonic() > self.deadline:
                raise _OutOfTime
            data = read(8)
            if len(data) < 8:
                raise self.truncated(what)
            (length,) = unpack(data)
            if length > _MAX_STRING:
                raise _Corrupt(
                    f"the file is corrupt: its {what} claims {length:,} bytes in a string"
                )
            seek(length, os.SEEK_CUR)
        if tell() > self.size:
            raise self.truncated(what)

    def skip_arrays(self, kind: int, items: int, what: str, depth: int) -> None:
        for done in range(items):
            if done % 4096 == 0 and time.monotonic() > self.deadline:
                raise _OutOfTime
            self.skip_value(kind, what, depth + 1)


def diagnose(path: Path) -> str | None:
    """What makes the GGUF file at `path` unloadable, if its structure shows it; else None
    (None too when it is not a regular file, or when the walk takes over DIAGNOSE_SECONDS).
    Memory stays small whatever the file claims: nothing it holds is gathered."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return None  # a FIFO or a device would block or never end
        with path.open("rb") as file:
            deadline = time.monotonic() + DIAGNOSE_SECONDS
            return _walk(_Reader(file, info.st_size, deadline), info.st_size)
    except _Corrupt as e:
        return str(e)
    except (OSError, _OutOfTime):
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
        key = reader.name("metadata")
        what = f"metadata {_shown(key)}"
        kind = int(reader.scalar("I", what))
        if key == "general.alignment" and kind in _SCALARS and kind not in (6, 12):
            value = reader.scalar(_SCALARS[kind], what)
            if isinstance(value, int) and value > 0:
                alignment = value
        else:
            reader.skip_value(kind, what)
    end = 0
    for _ in range(tensors):
        name = _shown(reader.name("tensor descriptions"))
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
