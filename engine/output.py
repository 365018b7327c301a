"""From a backend's token stream to text deltas, for all choices of one request.

The decoder loop of a serving backend: one detokenizer and one stop checker per choice, and
the rules for how a stream ends (the ones OpenAI-compatible servers such as vLLM follow, so
that a client reads the same text from us as from them):

- a choice that meets a stop condition gets its last delta with `finish_reason` at once, and
  later tokens for it are ignored;
- the engine may end a choice itself (`finish`): withheld text is flushed into that last delta;
- the stream may end with choices unfinished (`end`): each gets a last delta, `STOP`, carrying
  whatever it still withheld;
- after an error (a token that cannot be decoded, or a request-level failure) the affected
  choices end with `ERROR`: nothing withheld is flushed and no synthetic `STOP` follows;
- a cancelled request ends its open choices with `CANCELLED`, without flushing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from engine.detokenizer import Detokenizer
from engine.errors import DetokenizeError
from engine.stops import StopChecker, StopKind, StopRules
from engine.types import FinishReason, StopConditions, TextDelta

#: The token id of a piece of text that came without one (`on_text`): no stop id matches it.
NO_TOKEN = -1


class _Choice:
    __slots__ = ("checker", "detokenizer", "reason")

    def __init__(self, detokenizer: Detokenizer, checker: StopChecker) -> None:
        self.detokenizer = detokenizer
        self.checker = checker
        self.reason: FinishReason | None = None

    @property
    def finished(self) -> bool:
        return self.reason is not None


class OutputProcessor:
    """Per-request output state. Each method returns the deltas to hand to the consumer."""

    def __init__(
        self,
        *,
        n: int,
        stops: StopConditions,
        max_tokens: int,
        min_tokens: int,
        new_detokenizer: Callable[[], Detokenizer],
    ) -> None:
        # Compiled once: every choice reads the same stop strings and ids.
        rules = StopRules.of(stops)
        self._choices = [
            _Choice(
                new_detokenizer(),
                StopChecker(rules, max_tokens=max_tokens, min_tokens=min_tokens),
            )
            for _ in range(n)
        ]

    @property
    def all_finished(self) -> bool:
        return all(c.finished for c in self._choices)

    def is_finished(self, index: int) -> bool:
        return self._choices[index].finished

    def finish_reason(self, index: int) -> FinishReason | None:
        return self._choices[index].reason

    def generated_tokens(self, index: int) -> int:
        return self._choices[index].checker.generated_tokens

    def on_tokens(
        self,
        index: int,
        token_ids: Iterable[int],
        logprobs: Sequence[float] | None = None,
    ) -> list[TextDelta]:
        """New tokens of choice `index` (with each one's log-probability, where the backend
        knows it); tokens after its stop are dropped."""
        choice = self._choice(index)
        if choice is None or choice.finished:
            return []
        texts: list[str] = []
        consumed: list[int] = []
        ids = list(token_ids)
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"{len(logprobs)} log-probabilities for {len(ids)} tokens")
        known = None if logprobs is None else tuple(logprobs)
        for token_id in ids:
            try:
                piece = choice.detokenizer.step(token_id)
            except DetokenizeError as e:
                choice.reason = FinishReason.ERROR
                failed = len(consumed)
                return [
                    *self._text_delta(index, texts, consumed, known),
                    TextDelta(
                        index=index,
                        text="",
                        token_ids=(token_id,),
                        logprobs=None if known is None else known[failed : failed + 1],
                        finish_reason=FinishReason.ERROR,
                        error=f"decode error: {e}",
                    ),
                ]
            consumed.append(token_id)
            result = choice.checker.step(token_id, piece)
            texts.append(result.text)
            if result.trigger is not None:
                choice.reason = result.trigger.finish_reason
                texts.append(self._pending_characters(choice, result.trigger.kind))
                return [
                    TextDelta(
                        index=index,
                        text="".join(texts),
                        token_ids=tuple(consumed),
                        logprobs=None if known is None else known[: len(consumed)],
                        finish_reason=result.trigger.finish_reason,
                        stop_reason=result.trigger.stop_reason,
                    )
                ]
        return self._text_delta(index, texts, consumed, known)

    def on_text(
        self, index: int, text: str, logprobs: tuple[float, ...] | None = None
    ) -> list[TextDelta]:
        """New text of choice `index` from an engine that streams text, not token ids (a
        remote server), with the log-probabilities of the tokens it came in where the server
        sent them: one piece counts as one token; only the stop strings, `min_tokens` and
        `max_tokens` apply (the server applies its own end-of-generation tokens). A piece
        without text but with log-probabilities is a token whose text is not out yet; the
        piece that completes a stop string keeps its log-probabilities, as the token that does
        with a local model."""
        choice = self._choice(index)
        if choice is None or choice.finished or not (text or logprobs):
            return []
        result = choice.checker.step(NO_TOKEN, text)
        if result.trigger is None:
            if not (result.text or logprobs):
                return []  # withheld, nothing to tell yet
            return [TextDelta(index=index, text=result.text, logprobs=logprobs)]
        choice.reason = result.trigger.finish_reason
        return [
            TextDelta(
                index=index,
                text=result.text,
                logprobs=logprobs,
                finish_reason=result.trigger.finish_reason,
                stop_reason=result.trigger.stop_reason,
            )
        ]

    def finish(
        self, index: int, reason: FinishReason, *, stop_reason: str | int | None = None
    ) -> list[TextDelta]:
        """The engine ended choice `index` itself (for example, the context is full, or a
        remote server stopped it at `stop_reason`)."""
        choice = self._choice(index)
        if choice is None or choice.finished:
            return []
        choice.reason = reason
        text = choice.checker.flush() + choice.detokenizer.finish()
        return [TextDelta(index=index, text=text, finish_reason=reason, stop_reason=stop_reason)]

    def end(self, index: int | None = None) -> list[TextDelta]:
        """The token stream ended (for one choice, or all) without a stop: flush, finish STOP."""
        return [delta for i in self._indices(index) for delta in self.finish(i, FinishReason.STOP)]

    def error(self, message: str, index: int | None = None) -> list[TextDelta]:
        """A failure ends the open choices (or one): no flush, no synthetic STOP afterwards."""
        return self._close(index, FinishReason.ERROR, message)

    def cancel(self) -> list[TextDelta]:
        """The request was cancelled: open choices end with CANCELLED and nothing is flushed."""
        return self._close(None, FinishReason.CANCELLED, None)

    def _close(self, index: int | None, reason: FinishReason, error: str | None) -> list[TextDelta]:
        deltas = []
        for i in self._indices(index):
            choice = self._choices[i]
            if not choice.finished:
                choice.reason = reason
                deltas.append(TextDelta(index=i, text="", finish_reason=reason, error=error))
        return deltas

    def _indices(self, index: int | None) -> range:
        if index is None:
            return range(len(self._choices))
        return range(index, index + 1) if 0 <= index < len(self._choices) else range(0)

    def _choice(self, index: int) -> _Choice | None:
        return self._choices[index] if 0 <= index < len(self._choices) else None

    @staticmethod
    def _pending_characters(choice: _Choice, kind: StopKind) -> str:
        # Bytes of an unfinished character left when a stop ends the choice: the full decode
        # shows them as U+FFFD, so the deltas do too. Not after a stop string: they come after
        # the cut, and what follows a cut is not output.
        pending = choice.detokenizer.finish()
        return "" if kind in (StopKind.HIDDEN_STRING, StopKind.VISIBLE_STRING) else pending

    @staticmethod
    def _text_delta(
        index: int, texts: list[str], consumed: list[int], logprobs: tuple[float, ...] | None
    ) -> list[TextDelta]:
        text = "".join(texts)
        if not text and not consumed:
            return []
        known = None if logprobs is None else logprobs[: len(consumed)]
        return [TextDelta(index=index, text=text, token_ids=tuple(consumed), logprobs=known)]
