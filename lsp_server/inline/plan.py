"""What a request for a snapshot asks of the model, before it is asked: the mode, the prompt,
the greedy request and the sampled ones, whether candidate lines are ranked by the code after
the cursor, and whether an invoked request's items are written together."""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.completion import CompletionModel
from engine.types import (
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    StopConditions,
)
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.prompt import Prompt, build_prompt, cursor_context
from lsp_server.neighbors import PromptContext
from lsp_server.postprocess import CompletionMode, CursorContext, decide_mode
from lsp_server.rerank import Ranking, following_code, hint_prompt
from lsp_server.settings import Settings

#: Sampled choices for invoked completions need some spread to differ from the greedy one.
INVOKED_TEMPERATURE = 0.7


def _sampling(
    settings: Settings, mode: CompletionMode, *, n: int, temperature: float
) -> SamplingParams:
    max_tokens = (
        settings.max_tokens_single_line
        if mode is CompletionMode.SINGLE_LINE
        else settings.max_tokens_multi_line
    )
    return SamplingParams(
        max_tokens=max_tokens, temperature=temperature, top_p=0.95 if temperature else 1.0, n=n
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What a request for a snapshot asks of the model, before it is asked."""

    ctx: CursorContext
    mode: CompletionMode
    prompt: Prompt
    requests: tuple[GenerationRequest, ...]  # the greedy one, then the sampled ones
    #: Set when the first request's answer is candidate lines ranked by the code after them.
    ranking: Ranking | None = None
    #: More than 1: after the greedy request, the second's answer is the greedy answers after
    #: the next `together - 1` most likely first tokens, written together (`starts.py`),
    #: instead of sampled choices.
    together: int = 1


#: What identifies a model answer: the same prompt, sampling and stops get the same raw texts
#: (and the same indentation taken back, which decides where a multi-line one was stopped;
#: the same ranking, which decides which lines come first; and the same number of answers
#: written together).
AnswerKey = tuple[str, SamplingParams, StopConditions, str, Ranking | None, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class RawText:
    """One choice of the model's answer before it is fitted: its text, how it ended, and what
    the confidence gate reads of it (`inline/confidence.py`)."""

    text: str
    finish: FinishReason | None
    #: Its tokens' log-probabilities; None where the engine does not say (a remote server).
    logprobs: tuple[float, ...] | None = None
    #: The ranking score per scored token, where lines were ranked (`rerank.best_lines`).
    ranking: float | None = None


#: Each choice of an answer.
RawTexts = list[RawText]


def answer_key(plan: Plan, request: GenerationRequest) -> AnswerKey:
    first = request is plan.requests[0]
    ranking = plan.ranking if first else None
    together = 1 if first else plan.together
    return (
        plan.prompt.text,
        request.sampling,
        request.stops,
        plan.prompt.healed_indent,
        ranking,
        together,
    )


def ranks_lines(model: CompletionModel, settings: Settings) -> bool:
    """Whether single-line suggestions are chosen by the code after the cursor (rerank.py):
    for a model without FIM tokens that can score text, where the setting allows."""
    if model.format.fim is not None or model.scorer is None or settings.suffix_ranking == "off":
        return False
    return settings.suffix_ranking == "on" or not model.engine.info.device.startswith("cpu")


def writes_together(model: CompletionModel, settings: Settings, prompt: Prompt) -> bool:
    """Whether an invoked request's items can be greedy answers written together: the model
    can score (its most likely first tokens are known) and the user asked for greedy answers
    (temperature 0; a user who set a temperature gets sampled ones, as asked)."""
    return model.scorer is not None and settings.temperature == 0 and prompt.token_ids is not None


def _ranking(
    model: CompletionModel, snap: DocumentSnapshot, ctx: CursorContext, prompt: Prompt
) -> Ranking | None:
    following = following_code(ctx.prefix, ctx.suffix)
    if following is None or prompt.token_ids is None:
        return None
    hint = hint_prompt(prompt.prefix, following, snap.language_id)
    return Ranking(
        following=following,
        # After the other files' snippets too, so that its candidates know what they know.
        hint_ids=None if hint is None else model.format.render(prompt.lead + hint, "").token_ids,
        language_id=snap.language_id,
    )


def plan_for(
    model: CompletionModel,
    snap: DocumentSnapshot,
    settings: Settings,
    *,
    invoked: bool,
    context: PromptContext | None = None,
) -> Plan | None:
    """The mode, prompt and requests for the cursor in `snap`; None: nothing to suggest."""
    ctx = cursor_context(snap)
    mode = decide_mode(ctx)
    if mode is None:
        return None
    prompt = build_prompt(model, snap, settings, context)
    stops = StopConditions(
        stop=("\n",) if mode is CompletionMode.SINGLE_LINE else (),
        stop_token_ids=prompt.stop_token_ids,
    )
    wanted = settings.invoked_suggestions if invoked else 1
    base = prompt.request(
        role=Role.COMPLETION,
        # The user's temperature as it is (0: greedy); only the extra choices of an invoked
        # request are given a spread of at least INVOKED_TEMPERATURE.
        sampling=_sampling(settings, mode, n=1, temperature=settings.temperature),
        stops=stops,
        cache_key=snap.uri,  # the document's KV state is kept when the user goes elsewhere
    )
    ranking = None
    if mode is CompletionMode.SINGLE_LINE and ranks_lines(model, settings):
        ranking = _ranking(model, snap, ctx, prompt)
    requests = [base]
    together = 1
    if wanted > 1 and ranking is None and writes_together(model, settings, prompt):
        # The greedy answer as the automatic request has it, then one job for the answers
        # after the next most likely first tokens, the prompt evaluated once (sampled choices
        # would each be a job of their own).
        together = wanted
        requests.append(replace(base, request_id=base.request_id + "-others"))
    elif wanted > 1:
        spread = max(settings.temperature, INVOKED_TEMPERATURE)
        sampled = _sampling(settings, mode, n=wanted, temperature=spread)
        requests.append(replace(base, sampling=sampled, request_id=base.request_id + "-n"))
    return Plan(
        ctx=ctx,
        mode=mode,
        prompt=prompt,
        requests=tuple(requests),
        ranking=ranking,
        together=together,
    )
