"""The model's answer to one request of a plan: candidate lines ranked by the code after
them, or the generated choices, a multi-line one stopped as soon as its code leaves the
cursor's block. Raw texts: fitting them to the document is `suggest`'s."""

from __future__ import annotations

import contextlib

from engine.completion import CompletionModel
from engine.errors import GenerationError
from engine.types import FinishReason, GenerationRequest
from lsp_server.inline.plan import Plan, RawTexts
from lsp_server.inline.prompt import unheal
from lsp_server.postprocess import CompletionMode, CursorContext, block_ended
from lsp_server.rerank import best_lines


async def answer(model: CompletionModel, plan: Plan, request: GenerationRequest) -> RawTexts:
    """What the model answers `request` of `plan` with: candidate lines ranked by the code
    after them, most likely first (the plan's first request, when it ranks); else its
    generated choices."""
    scorer, ids = model.scorer, plan.prompt.token_ids
    if plan.ranking is not None and request is plan.requests[0] and scorer and ids:
        ranked = await best_lines(scorer, ids, plan.ranking, request)
        if ranked:
            return [(line.text, FinishReason.STOP) for line in ranked]
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
) -> list[tuple[str, FinishReason | None]]:
    """Each choice's raw text and how it ended. With `stop_early`, a multi-line choice ends
    the model's work as soon as its code has left the cursor's block (judged on the text
    `fit_completion` will see: with the healed indentation taken back)."""
    texts = [""] * request.sampling.n
    finishes: list[FinishReason | None] = [None] * request.sampling.n
    async with contextlib.aclosing(model.engine.generate(request)) as deltas:
        async for delta in deltas:
            if delta.finish_reason is FinishReason.ERROR:
                raise GenerationError(f"the completion model failed: {delta.error}")
            texts[delta.index] += delta.text
            finishes[delta.index] = delta.finish_reason
            if (
                stop_early
                and mode is CompletionMode.MULTI_LINE
                and "\n" in delta.text
                and block_ended(unheal(texts[delta.index], healed_indent), ctx)
            ):
                break
    return list(zip(texts, finishes, strict=True))
