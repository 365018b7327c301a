"""Greedy answers after the model's most likely first tokens, written together: the
alternatives an invoked request shows (`inline/answer.py`) and the candidate lines a ranking
scores (`rerank.py`).

One scoring of the prompt gives the most likely next tokens; each is then continued greedily
by one `BranchRequest` (the llama.cpp backend writes the branches together, the prompt evaluated
once). The first start is the greedy answer itself in exact arithmetic: its first token is the most
likely one. Written beside other rows, llama.cpp may round it otherwise than plain decoding
(docs/how-it-works.md, "Many sequences per pass"), so an invoked request takes its first item from
plain decoding, exactly the automatic suggestion, and only the others from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.completion import Scorer
from engine.types import (
    BranchRequest,
    FinishReason,
    GenerationRequest,
    SamplingParams,
    ScoreRequest,
)

#: Tokens scored beyond the answers wanted: some of the most likely are no start (an end
#: token, part of a character), and reading a few more of the logits costs nothing.
SPARE = 2
#: Whitespace tokens taken into the stem before branching (a newline and an indentation, or an
#: indentation in two pieces): more is no longer where an answer's choices lie.
STEM_TOKENS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """One answer: everything written after the prompt (the whitespace the model writes first
    included) and how it ended."""

    text: str
    finish: FinishReason


async def starts(
    scorer: Scorer,
    prompt_ids: Sequence[int],
    request: GenerationRequest,
    *,
    count: int,
    cache_key: str | None,
    blank_lines: bool = True,
    ends: Callable[[str], bool] | None = None,
    others: bool = False,
) -> list[Start]:
    """Up to `count` answers after `prompt_ids`, one per most likely first token, each
    continued greedily with `request`'s token limit and stops; most likely first token first.
    Empty if cancelled.

    The branch point is the first token that is not whitespace: branching on the indentation
    gives other indentations, which are no real alternatives. A first token that is part of a
    character, an end token, or empty is no start; nor one that begins with a line break,
    unless `blank_lines`. A first token that holds a stop string is a whole answer (cut at it).
    `ends`: an answer is also whole once this holds of its text, asked when a line break came
    (as a streamed answer is judged when its delta brings one). `others`: the most likely
    first token is left out, for a caller that has the greedy answer from plain decoding.
    """
    engine = scorer.engine
    stops = request.stops
    stem = list(prompt_ids)
    written = ""
    top: tuple[tuple[int, float], ...] = ()
    for _ in range(STEM_TOKENS + 1):
        scores = await engine.score(
            ScoreRequest(prompt_token_ids=tuple(stem), top=count + SPARE, cache_key=cache_key)
        )
        if scores is None or not scores.top:
            return []
        top = scores.top
        first = top[0][0]
        piece = scorer.detokenize([first])
        blank = piece.strip(None if blank_lines else " \t") == ""
        if not piece or not blank or _stop_in(piece, stops.stop) or first in stops.stop_token_ids:
            break
        if len(stem) - len(prompt_ids) == STEM_TOKENS:
            break
        stem.append(first)
        written += piece
    # The answer's token limit counts the stem's tokens and the first one, as a stream's does:
    # an answer cut by it is then cut where the streamed one would be.
    room = request.sampling.max_tokens - (len(stem) - len(prompt_ids)) - 1
    found: list[Start | int] = []  # a whole answer, or a first token to branch on
    for token, _ in top[1:] if others else top:
        if len(found) == count:
            break
        piece = scorer.detokenize([token])
        if not piece or "\ufffd" in piece or token in stops.stop_token_ids:
            continue  # an end token, or part of a character
        if not blank_lines and piece.startswith("\n"):
            continue  # an empty line
        cut = _stop_in(piece, stops.stop)
        if cut is not None:
            if (written + piece[:cut]).strip():
                found.append(Start(text=written + piece[:cut], finish=FinishReason.STOP))
            continue
        if room < 1:
            found.append(Start(text=written + piece, finish=FinishReason.LENGTH))
            continue
        found.append(token)
    firsts = tuple(t for t in found if isinstance(t, int))
    # Each branch's text before what the engine writes: the stem's and its first token's.
    heads = [written + scorer.detokenize([token]) for token in firsts]
    texts: tuple[str, ...] = ()
    finishes: tuple[FinishReason, ...] = ()
    if firsts:
        judged = [0] * len(firsts)

        def whole(index: int, text: str) -> bool:
            assert ends is not None
            fresh, judged[index] = text[judged[index] :], len(text)
            return "\n" in fresh and ends(heads[index] + text)

        branches = await engine.branch(
            BranchRequest(
                prompt_token_ids=tuple(stem),
                first_tokens=firsts,
                sampling=SamplingParams(max_tokens=room),
                stops=stops,
                cache_key=cache_key,
                ends=None if ends is None else whole,
            )
        )
        if branches is None:
            return []
        texts, finishes = branches.texts, branches.finish_reasons
    branched = iter(zip(heads, texts, finishes, strict=True))
    answers: list[Start] = []
    for item in found:
        if isinstance(item, Start):
            answers.append(item)
            continue
        head, text, finish = next(branched)
        if finish in (FinishReason.CANCELLED, FinishReason.ERROR):
            continue
        answers.append(Start(text=head + text, finish=finish))
    return answers


def _stop_in(piece: str, stop: Sequence[str]) -> int | None:
    """Where the first of the stop strings begins in `piece`; None if none is in it."""
    found = [at for at in (piece.find(s) for s in stop if s) if at >= 0]
    return min(found) if found else None
