"""A `Backend` over a Hugging Face `tokenizers.Tokenizer` built in memory, for prompt tests.

The tokenizer is byte-level BPE over GPT-2's 256-symbol byte alphabet plus a few merges, so any
text tokenizes and decodes back exactly; a model family's special tokens are added with
`add_special_tokens`, as a real tokenizer.json has them. Nothing is downloaded and there is no
model: the tokenizer side of `Backend` works, `iter_token_ids` does not.

Plain text (`special=False`) goes through a second copy of the tokenizer with
`encode_special_tokens` set: special-token text in it is then split like any other text, as
transformers' `split_special_tokens=True` does. Two copies, so that no call flips shared state.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from engine.backend import Backend, ModelInfo, Vocabulary
from engine.detokenizer import DecodeStreamDetokenizer, Detokenizer
from engine.specs import DEFAULT_CONTEXT_SIZE
from engine.types import SamplingParams

#: Words that get their own BPE token, so that plain text is not all single bytes.
MERGED_WORDS: tuple[str, ...] = ("def", "return", "self", "fim", "ĠĠĠ")


def _merges(words: Iterable[str]) -> list[tuple[str, str]]:
    """Left-to-right merges that build each word from its symbols."""
    merges: list[tuple[str, str]] = []
    for word in words:
        piece = word[0]
        for symbol in word[1:]:
            if (piece, symbol) not in merges:
                merges.append((piece, symbol))
            piece += symbol
    return merges


def build_tokenizer(
    special_tokens: Sequence[str], *, merged_words: Iterable[str] = MERGED_WORDS
) -> Tokenizer:
    """A byte-level BPE tokenizer with `special_tokens` added as special tokens, in order."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    merges = _merges(merged_words)
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(special_tokens))
    return tokenizer


class HFTokenizerBackend(Backend):
    """The tokenizer half of a backend, over an in-memory `tokenizers.Tokenizer`."""

    def __init__(
        self,
        special_tokens: Sequence[str],
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        adds_bos: bool = False,
        chat_template: str | None = None,
        name: str = "hf-test",
    ) -> None:
        self.tokenizer = build_tokenizer(special_tokens)
        self._plain = Tokenizer.from_str(self.tokenizer.to_str())
        self._plain.encode_special_tokens = True
        self._special = {
            token.content: token_id
            for token_id, token in self.tokenizer.get_added_tokens_decoder().items()
            if token.special
        }
        for token in (bos_token, eos_token):
            if token is not None and token not in self._special:
                raise ValueError(f"{token!r} is not one of the special tokens")
        self._bos_token = bos_token
        super().__init__(
            info=ModelInfo(
                name=name,
                path="<memory>",
                backend="hf-test",
                device="cpu",
                context_size=DEFAULT_CONTEXT_SIZE,
                vocab_size=self.tokenizer.get_vocab_size(),
                eog_tokens=((self._special[eos_token], eos_token),)
                if eos_token is not None
                else (),
                has_chat_template=chat_template is not None,
                load_seconds=0.0,
            ),
            vocab=Vocabulary(
                bos_token=bos_token,
                eos_token=eos_token,
                adds_bos=adds_bos,
                chat_template=chat_template,
            ),
        )

    @property
    def special_token_texts(self) -> tuple[str, ...]:
        return tuple(self._special)

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        tokenizer = self.tokenizer if special else self._plain
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if add_bos:
            if self._bos_token is None:
                raise ValueError("this tokenizer has no BOS token")
            ids.insert(0, self._special[self._bos_token])
        return ids

    def special_token_id(self, text: str) -> int | None:
        return self._special.get(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, special tokens written out (what a prompt's `text` shows)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def new_detokenizer(self) -> Detokenizer:
        return DecodeStreamDetokenizer(self.tokenizer)

    def iter_token_ids(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        cancelled: threading.Event,
        *,
        cache_key: str | None = None,
    ) -> Generator[int, None, None]:
        raise NotImplementedError("a tokenizer-only backend cannot generate")
