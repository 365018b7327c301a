"""A single line chosen by the code after the cursor, for a model without FIM tokens.

Such a model only continues the prefix: the code after the cursor cannot steer what it writes.
It can still judge it: a line that fits the code after it makes that code more likely. So:

1. Candidates: after the prompt, the most likely first tokens of code (past the indentation
   the model writes first), each continued greedily to the end of its line (`starts.py`:
   one `BranchRequest`, which the llama.cpp backend writes together); and the same
   after a second prompt that shows the code after the cursor first, as a comment block (it
   suggests lines the plain prompt does not rank high).
2. Each candidate line that holds code is scored after the plain prompt, together with the
   first tokens of the code after the cursor: the sum of the log-probabilities of the line
   and of that code (one scoring request over the cached prompt; llama.cpp evaluates up to 8
   candidates together).
3. The most likely first. docs/decisions/suffix-ranking.md measured the variants (prefix
   alone, either prompt
   reranked, ranked by the line's or by the following code's probability alone) on HumanEval.

The model's work is several times a plain suggestion's (about ten short lines and a scoring),
so `Settings.suffix_ranking` turns it on by default only where the model runs on a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.completion import Scorer
from engine.types import GenerationRequest, ScoreRequest
from lsp_server.neighbors import LINE_COMMENTS
from lsp_server.starts import starts

#: Candidate lines written after each of the two prompts, and tokens of the code after the
#: cursor scored after each line. Chosen in docs/decisions/suffix-ranking.md on 100 HumanEval
#: tasks other than
#: the ones reported (--offset 5): of 3, 5 or 8 candidates and windows of 8 to 64 tokens, 8
#: and 64 ranked best (46 passed; 5 and 32: 42; the prefix alone: 35), and the joint score
#: beat the code's probability alone at every size.
CANDIDATES = 8
WINDOW_TOKENS = 64
#: Lines of the code after the cursor shown in the second prompt.
HINT_LINES = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranked:
    """A candidate line as the model wrote it (its indentation included) and its score."""

    text: str
    logprob: float
    #: Each scored token's log-probability: the line's `line_tokens` (with its line ending),
    #: then the following code's (for benchmarks that compare ways of ranking).
    token_logprobs: tuple[float, ...] = ()
    line_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranking:
    """What ranking a suggestion's lines needs besides the plain prompt."""

    following: str  # the code after the cursor's line (`following_code`)
    hint_ids: tuple[int, ...] | None  # the second prompt (`hint_prompt`), if there is one
    language_id: str


async def best_lines(
    scorer: Scorer,
    prompt_ids: Sequence[int],
    ranking: Ranking,
    request: GenerationRequest,
) -> list[Ranked]:
    """The candidate lines of both prompts, most likely first (empty if cancelled)."""
    key = request.cache_key
    lines = await candidate_lines(scorer, prompt_ids, request, cache_key=key)
    if ranking.hint_ids is not None:
        # Its own cache key: the two prompts differ from their start, and each keeps its state.
        hint_key = None if key is None else f"{key}#ranking"
        lines += await candidate_lines(scorer, ranking.hint_ids, request, cache_key=hint_key)
    pool = [line for line in lines if holds_code(line, ranking.language_id)] or lines
    return await rank_lines(scorer, prompt_ids, pool, ranking.following, cache_key=key)


def following_code(prefix: str, suffix: str) -> str | None:
    """The code a line written at the cursor is followed by: what comes after the cursor's
    line when the rest of that line is blank, all of the suffix when the cursor is at a line's
    start; None when code follows the cursor on its line (the line is then not the model's
    alone to write) or nothing follows at all."""
    first, newline, rest = suffix.partition("\n")
    if not first.strip():
        code = rest if newline else ""
    elif not prefix or prefix.endswith("\n"):
        code = suffix
    else:
        return None
    return code if code.strip() else None


def hint_prompt(prefix: str, following: str, language_id: str) -> str | None:
    """The prefix after a comment block that shows the code after the cursor; None for a
    language whose line comment is not known (a hint in the wrong syntax is no hint)."""
    mark = LINE_COMMENTS.get(language_id)
    if mark is None:
        return None
    shown = following.splitlines()[:HINT_LINES]
    block = "".join(f"{mark} {line}\n".replace(f"{mark} \n", f"{mark}\n") for line in shown)
    return f"{mark} The code after the missing line:\n{block}\n{prefix}"


def holds_code(line: str, language_id: str) -> bool:
    """Not blank, and not a comment alone."""
    text = line.strip()
    mark = LINE_COMMENTS.get(language_id)
    return bool(text) and not (mark is not None and text.startswith(mark))


async def candidate_lines(
    scorer: Scorer,
    prompt_ids: Sequence[int],
    request: GenerationRequest,
    *,
    cache_key: str | None,
    count: int | None = None,
) -> list[str]:
    """Up to `count` (`CANDIDATES`) lines after `prompt_ids`, one per most likely first token
    of code, each continued greedily (`request`'s token limit and stops) to its line's end."""
    count = CANDIDATES if count is None else count
    found = await starts(
        scorer, prompt_ids, request, count=count, cache_key=cache_key, blank_lines=False
    )
    return [start.text.split("\n", 1)[0] for start in found]


async def rank_lines(
    scorer: Scorer,
    prompt_ids: Sequence[int],
    lines: Sequence[str],
    following: str,
    *,
    cache_key: str | None,
    window_tokens: int | None = None,
) -> list[Ranked]:
    """`lines` (distinct) by the joint log-probability of the line and of the first
    `window_tokens` (`WINDOW_TOKENS`) tokens of `following` after it, given `prompt_ids`; most
    likely first."""
    window = scorer.tokenize(following)[: window_tokens or WINDOW_TOKENS]
    distinct = list(dict.fromkeys(lines))
    line_ids = [scorer.tokenize(line + "\n") for line in distinct]
    continuations = tuple((*ids, *window) for ids in line_ids)
    if not continuations:
        return []
    scores = await scorer.engine.score(
        ScoreRequest(
            prompt_token_ids=tuple(prompt_ids), continuations=continuations, cache_key=cache_key
        )
    )
    if scores is None:
        return []
    ranked = [
        Ranked(text=line, logprob=sum(each), token_logprobs=each, line_tokens=len(ids))
        for line, ids, each in zip(distinct, line_ids, scores.continuations, strict=True)
    ]
    return sorted(ranked, key=lambda r: -r.logprob)
