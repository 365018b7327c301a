"""Inline completion for one snapshot, from plan to fitted suggestions.

1. Decide the mode from the cursor's surroundings (nothing to suggest: no model call).
2. Build the prompt and the requests (`plan.py`, `prompt.py`).
3. Take an answer written ahead (`speculator.py`), else ask the model (`answer.py`).
4. Fit each choice to the text around the cursor; drop empty and duplicate ones, and, for an
   automatic request, those the confidence gate holds back (`confidence.py`).
"""

from __future__ import annotations

import time

from engine.completion import CompletionModel
from engine.text import line_start
from engine.types import FinishReason
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.answer import answer
from lsp_server.inline.confidence import Judgement, judge
from lsp_server.inline.plan import answer_key, plan_for
from lsp_server.inline.prompt import unheal
from lsp_server.inline.result import InlineResult
from lsp_server.inline.speculator import Speculator
from lsp_server.neighbors import PromptContext
from lsp_server.postprocess import CompletionMode, Fitted, fit_completion
from lsp_server.settings import Settings


async def suggest(
    model: CompletionModel,
    snap: DocumentSnapshot,
    settings: Settings,
    *,
    invoked: bool,
    speculator: Speculator | None = None,
    context: PromptContext | None = None,
) -> InlineResult:
    """Suggestions for the cursor in `snap`: one for automatic triggers, up to
    `settings.invoked_suggestions` distinct ones when the user asked. `speculator`: answers
    computed before they were asked for (its work stops when the model is needed here).
    `context`: other documents' snippets for the prompt (`build_prompt`)."""
    started = time.perf_counter()
    plan = plan_for(model, snap, settings, invoked=invoked, context=context)
    if plan is None:
        return InlineResult(suggestions=(), mode=None)
    ctx, mode, prompt = plan.ctx, plan.mode, plan.prompt
    wanted = settings.invoked_suggestions if invoked else 1

    suggestions: list[Fitted] = []
    generated = 0
    written_ahead = False
    gate: Judgement | None = None
    for request in plan.requests:
        texts = None
        if speculator is not None:
            texts = await speculator.take(model, answer_key(plan, request))
            written_ahead = texts is not None
            if texts is None:
                speculator.interrupt()  # the model is needed here
        if texts is None:
            texts = await answer(model, plan, request)
        for choice in texts:
            generated += 1
            raw = choice.text
            if mode is CompletionMode.MULTI_LINE and choice.finish is FinishReason.LENGTH:
                raw = _complete_lines(raw)
            fitted = fit_completion(unheal(raw, prompt.healed_indent), ctx, mode)
            if fitted is None or fitted in suggestions:
                continue
            if not invoked:  # what the user asked for is never held back
                judgement = judge(
                    choice.logprobs, ctx, mode, settings.min_confidence, ranking=choice.ranking
                )
                gate = gate or judgement
                if not judgement.shown:
                    continue
            suggestions.append(fitted)
        if len(suggestions) >= wanted:
            break
    return InlineResult(
        suggestions=tuple(suggestions[:wanted]),
        mode=mode,
        prompt_tokens=prompt.tokens,
        generated_tokens=generated,
        seconds=time.perf_counter() - started,
        written_ahead=written_ahead,
        gate=gate,
    )


def _complete_lines(text: str) -> str:
    """A multi-line text cut off by the token limit, without its unfinished last line (it
    would end mid-expression); a single unfinished line is all there is, and stays."""
    start = line_start(text)
    return text[:start] if start > 1 else text
