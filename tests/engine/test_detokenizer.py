"""Incremental detokenizing with the real default models' tokenizers, over Unicode test data.

For every string: the joined deltas equal the full decode, and no delta holds a broken
character (a U+FFFD that the full decode does not have at that place).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.backends.llama_cpp import LlamaCppBackend
from engine.detokenizer import ByteDetokenizer


def unicode_samples(data: Path) -> list[str]:
    unicode = data / "unicode"
    naughty = json.loads((unicode / "blns.json").read_text(encoding="utf-8"))
    emoji = []
    for line in (unicode / "emoji-test.txt").read_text(encoding="utf-8").splitlines():
        if "; fully-qualified" in line:
            emoji.append("".join(chr(int(cp, 16)) for cp in line.split(";")[0].split()))
    graphemes = []
    for line in (unicode / "GraphemeBreakTest.txt").read_text(encoding="utf-8").splitlines():
        body = line.split("#")[0].strip()
        if body:
            graphemes.append("".join(chr(int(cp, 16)) for cp in re.findall(r"[0-9A-F]{4,6}", body)))
    # Every naughty string; emoji and grapheme vectors joined in code-like lines, so the test
    # also covers them mid-line, next to ASCII, as they appear in real source files.
    lines = [
        f'label = "{"".join(emoji[i : i + 12])}"  # 絵文字 ✓\n' for i in range(0, len(emoji), 12)
    ]
    lines += [
        "s = '" + "".join(graphemes[i : i + 40]) + "'\n" for i in range(0, len(graphemes), 40)
    ]
    return [s for s in naughty if s] + lines


def stream(backend: LlamaCppBackend, ids: list[int]) -> list[str]:
    detokenizer = backend.new_detokenizer()
    return [detokenizer.step(i) for i in ids] + [detokenizer.finish()]


@pytest.fixture(scope="module")
def samples(third_party_data: Path) -> list[str]:
    found = unicode_samples(third_party_data)
    assert len(found) > 500
    return found


@pytest.mark.parametrize("model", ["completion_backend", "chat_backend"])
def test_joined_deltas_equal_the_full_decode_and_no_delta_breaks_a_character(
    model: str, samples: list[str], request: pytest.FixtureRequest
) -> None:
    backend: LlamaCppBackend = request.getfixturevalue(model)
    split_characters = 0
    for text in samples:
        ids = backend.tokenize(text, add_bos=False, special=False)
        deltas = stream(backend, ids)
        full = b"".join(backend.token_bytes(i) for i in ids).decode("utf-8", errors="replace")
        assert "".join(deltas) == full, text
        if "\ufffd" not in text:
            assert full == text, text  # the tokenizer round-trips it, so the deltas do too
            assert not any("\ufffd" in d for d in deltas), text
        split_characters += sum(1 for i in ids if _is_partial(backend.token_bytes(i)))
    # The data must exercise characters that arrive in several pieces.
    assert split_characters > 100


def _is_partial(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_an_emoji_in_several_pieces_comes_out_whole(completion_backend: LlamaCppBackend) -> None:
    text = "👩🏽‍💻"
    ids = completion_backend.tokenize(text, add_bos=False, special=False)
    deltas = stream(completion_backend, ids)
    assert len(ids) >= 2
    assert "".join(deltas) == text
    for delta in deltas:
        delta.encode("utf-8")  # never a lone surrogate or part of a character
        assert "\ufffd" not in delta


@pytest.mark.parametrize(
    ("pieces", "deltas"),
    [
        ([b"a", b"\xf0\x9f", b"\x98", b"\x80", b"b"], ["a", "", "", "😀", "b", ""]),
        ([b"\xe6\x97", b"\xa5\xe6\x9c\xac"], ["", "日本", ""]),
        ([b"e", b"\xcc\x81"], ["e", "\u0301", ""]),  # a combining mark is its own character
        ([b"\xff", b"ok"], ["\ufffd", "ok", ""]),  # invalid bytes as the full decode shows them
        ([b"x", b"\xf0\x9f\x98"], ["x", "", "\ufffd"]),  # an unfinished character at the end
    ],
)
def test_byte_pieces_are_joined_into_whole_characters(
    pieces: list[bytes], deltas: list[str]
) -> None:
    detokenizer = ByteDetokenizer(lambda i: pieces[i])
    out = [detokenizer.step(i) for i in range(len(pieces))] + [detokenizer.finish()]
    assert out == deltas
    assert "".join(out) == b"".join(pieces).decode("utf-8", errors="replace")


@pytest.mark.parametrize("text", ["é🙂", "日本語 ok", "a\u0301b", "👩🏽‍💻 done"])
@pytest.mark.parametrize("drop_last", [0, 1])
def test_hugging_face_decode_stream_joins_to_the_full_decode(text: str, drop_last: int) -> None:
    from hf_tokenizer import build_tokenizer

    from engine.detokenizer import DecodeStreamDetokenizer

    tokenizer = build_tokenizer(["<s>"])
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    ids = ids[: len(ids) - drop_last]  # cut inside the last character, as max_tokens can
    detokenizer = DecodeStreamDetokenizer(tokenizer)
    deltas = [detokenizer.step(i) for i in ids] + [detokenizer.finish()]
    assert "".join(deltas) == tokenizer.decode(ids)
    assert all("\ufffd" not in d for d in deltas[:-1])
