"""The model's answer to one request of a plan: candidate lines ranked by the code after
them, an invoked request's greedy answers written together, or the generated choices, a
multi-line one stopped as soon as its code leaves the cursor's block. Raw texts: fitting them
to the document is `suggest`'s."""

from __future__ import annotations

import contextlib

from engine.completion import CompletionModel
from engine.errors import GenerationError
from engine.types import FinishReason, GenerationRequest
from lsp_server.inline.plan import Plan, RawText, RawTexts
from lsp_server.inline.prompt import unheal
from lsp_server.postprocess import CompletionMode, CursorContext, block_ended
from lsp_server.rerank import best_lines
from lsp_server.starts import starts


async def answer(model: CompletionModel, plan: Plan, request: GenerationRequest) -> RawTexts:
    """What the model answers `request` of `plan` with: candidate lines ranked by the code
    after them, most likely first (the plan's first request, when it ranks); the greedy
    answers after the next most likely first tokens (the second request, when an invoked
    request's items are written together); else its generated choices."""
    scorer, ids = model.scorer, plan.prompt.token_ids
    if plan.together > 1 and request is not plan.requests[0] and scorer and ids:
        ctx, healed = plan.ctx, plan.prompt.healed_indent
        found = await starts(
            scorer,
            ids,
            request,
            count=plan.together - 1,
            cache_key=request.cache_key,
            # Each answer ends where a streamed one is stopped (`_generate`'s `stop_early`).
            ends=(
                (lambda text: block_ended(unheal(text, healed), ctx))
                if plan.mode is CompletionMode.MULTI_LINE
                else None
            ),
            others=True,
        )
        # None found (cancelled, or no other first token): the greedy answer is all there is.
        return [RawText(text=start.text, finish=start.finish) for start in found]
    if plan.ranking is not None and request is plan.requests[0] and scorer and ids:
        ranked = await best_lines(scorer, ids, plan.ranking, request)
        if ranked:
            return [
                RawText(
                    text=line.text,
                    finish=FinishReason.STOP,
                    logprobs=line.token_logprobs[: line.line_tokens] or None,
                    ranking=line.logprob / max(1, len(line.token_logprobs)),
                )
                for line in ranked
            ]
    return await _generate(
        model,
        request,
        plan.ctx,
        plan.mode,
        plan.prompt.healed_indent,
        stop_early=request.sampling.n == 1,
    )


async def _generate(
    model: CompletionModel,
    request: GenerationRequest,
    ctx: CursorContext,
    mode: CompletionMode,
    healed_indent: str,
    *,
    stop_early: bool,
) -> RawTexts:
    """Each choice's raw text, how it ended and its tokens' log-probabilities (None unless
    every token came with one). With `stop_early`, a multi-line choice ends the model's work
    as soon as its code has left the cursor's block (judged on the text `fit_completion` will
    see: with the healed indentation taken back)."""
    n = request.sampling.n
    texts = [""] * n
    finishes: list[FinishReason | None] = [None] * n
    logprobs: list[list[float] | None] = [[] for _ in range(n)]
    async with contextlib.aclosing(model.engine.generate(request)) as deltas:
        async for delta in deltas:
            if delta.finish_reason is FinishReason.ERROR:
                raise GenerationError(f"the completion model failed: {delta.error}")
            texts[delta.index] += delta.text
            finishes[delta.index] = delta.finish_reason
            known = logprobs[delta.index]
            if delta.logprobs is not None and known is not None:
                known.extend(delta.logprobs)
            elif delta.token_ids:
                logprobs[delta.index] = None  # a token without one: the choice is not known
            if (
                stop_early
                and mode is CompletionMode.MULTI_LINE
                and "\n" in delta.text
                and block_ended(unheal(texts[delta.index], healed_indent), ctx)
            ):
                break
    return [
        RawText(text=text, finish=finish, logprobs=tuple(known) if known else None)
        for text, finish, known in zip(texts, finishes, logprobs, strict=True)
    ]
