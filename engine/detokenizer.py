"""Token ids to text, one token at a time, exactly.

Two invariants, whatever the tokenizer does with multi-byte characters:
- `"".join(deltas) + finish()` equals the full decode of the same ids;
- no delta ends inside a character: a token piece that carries only part of a UTF-8 sequence
  (an emoji often comes in 2 to 4 pieces) is held until the character is complete.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from engine.errors import DetokenizeError

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class Detokenizer(Protocol):
    """Turns one choice's generated ids into text deltas."""

    def step(self, token_id: int) -> str:
        """Text completed by this token (may be empty while a character is incomplete)."""
        ...

    def finish(self) -> str:
        """Whatever is still pending when the choice ends (replacement characters, if any)."""
        ...


class ByteDetokenizer:
    """For tokenizers that give each token as raw bytes (llama.cpp's token pieces).

    An incremental UTF-8 decoder joins the pieces; invalid bytes become U+FFFD exactly as
    `bytes.decode("utf-8", errors="replace")` of the whole output would make them.
    """

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token_id: int) -> str:
        try:
            piece = self._token_bytes(token_id)
        except (KeyError, IndexError, ValueError) as e:
            raise DetokenizeError(f"cannot decode token id {token_id}: {e}") from e
        return self._decoder.decode(piece)

    def finish(self) -> str:
        return self._decoder.decode(b"", final=True)


class DecodeStreamDetokenizer:
    """For Hugging Face `tokenizers`: their `DecodeStream` applies the tokenizer's own decoder
    (byte fallback, metaspace, cleanup) incrementally and withholds incomplete characters."""

    def __init__(self, tokenizer: Tokenizer, *, skip_special_tokens: bool = True) -> None:
        from tokenizers.decoders import DecodeStream

        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._ids: list[int] = []
        self._emitted = 0

    def step(self, token_id: int) -> str:
        try:
            text = self._stream.step(self._tokenizer, token_id) or ""
        except Exception as e:  # the Rust side raises plain exceptions for bad ids
            raise DetokenizeError(f"cannot decode token id {token_id}: {e}") from e
        self._ids.append(token_id)
        self._emitted += len(text)
        return text

    def finish(self) -> str:
        # The stream never releases an unfinished character; the full decode shows it as
        # U+FFFD. Decoding everything once here keeps the joined deltas equal to it.
        full = self._tokenizer.decode(self._ids, skip_special_tokens=self._skip_special_tokens)
        return full[self._emitted :] if len(full) > self._emitted else ""
