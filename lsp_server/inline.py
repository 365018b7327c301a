"""Inline completion: from a document snapshot to fitted suggestions (DESIGN §5).

1. Decide the mode from the cursor's surroundings (nothing to suggest: no model call).
2. Cut the context window to the token budget and build the FIM prompt (or the documented
   prefix-only fallback for models without FIM tokens), other documents' snippets first
   (`neighbors.py`: chosen by the adapter, only the prompt changes with them).
3. Stream from the engine; a multi-line suggestion stops the model as soon as the code
   leaves the cursor's block.
4. Fit each choice to the text around the cursor; drop empty and duplicate ones.

Also here: `LatestWins`, which makes a new request for a document supersede the older one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import GenerationError
from engine.prompts import context_window
from engine.text import TAB_WIDTH, leading_whitespace, line_start, newline_of, opens_block
from engine.types import (
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    StopConditions,
)
from lsp_server.documents import DocumentSnapshot
from lsp_server.host import CompletionModel
from lsp_server.neighbors import PromptContext, render_plain
from lsp_server.postprocess import (
    CompletionMode,
    CursorContext,
    Fitted,
    block_ended,
    decide_mode,
    fit_completion,
)
from lsp_server.rerank import Ranking, best_lines, following_code, hint_prompt
from lsp_server.settings import Settings

log = logging.getLogger(__name__)

#: Sampled choices for invoked completions need some spread to differ from the greedy one.
INVOKED_TEMPERATURE = 0.7


@dataclass(frozen=True, slots=True, kw_only=True)
class InlineResult:
    suggestions: tuple[Fitted, ...]
    mode: CompletionMode | None
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    cached: bool = False  # answered from the type-ahead cache, without the model
    ahead: bool = False  # answered with what the model wrote before it was asked (`Speculator`)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    #: The prompt's token ids; None for a remote model, which takes the text.
    token_ids: tuple[int, ...] | None
    text: str  # the prompt as text, special tokens written out (for logs and benchmarks)
    tokens: int  # how many tokens it has (estimated for a remote model)
    stop_token_ids: tuple[int, ...]
    healed_indent: str  # cursor-line indentation left out of the prompt (see `_heal`)
    prefix: str  # the code before the cursor that the prompt holds (healed)
    lead: str = ""  # plain text before `prefix` (other files' snippets, for a model without FIM)

    def request(self, **fields: Any) -> GenerationRequest:
        """A request with this prompt: its ids, or its text where the engine tokenizes it."""
        if self.token_ids is None:
            return GenerationRequest(prompt=self.text, **fields)
        return GenerationRequest(prompt_token_ids=self.token_ids, **fields)


def build_prompt(
    model: CompletionModel,
    snap: DocumentSnapshot,
    settings: Settings,
    context: PromptContext | None = None,
) -> Prompt:
    """The token prompt for the snapshot: budgeted window, then the family's FIM format.

    `context`: other documents' snippets, put first: in the family's repository format where
    it has one (the current file labelled with its path), else as plain text in front of the
    prefix. Their budget (`contextTokens`) comes on top of the prefix and suffix budgets, so
    the current file's window is the same with or without them.
    """
    window = context_window(
        snap.prefix,
        snap.suffix,
        model.count_tokens,
        prefix_budget=settings.prefix_tokens,
        suffix_budget=settings.suffix_tokens if model.fim else 0,
    )
    prefix, indent = _heal(window.prefix)
    lead, lead_tokens = "", 0
    if context is None or not context.snippets:
        prompt = model.render(prefix, window.suffix)
    elif model.repo_files:
        files = context.files()
        prompt = model.render(
            prefix, window.suffix, files=files, path=context.path, repo=context.repo
        )
        lead_tokens = sum(model.count_tokens(f.path + "\n" + f.text) for f in files)
    else:
        lead = render_plain(context)
        prompt = model.render(lead + prefix, window.suffix)
        lead_tokens = model.count_tokens(lead)
    return Prompt(
        token_ids=prompt.token_ids,
        text=prompt.text,
        tokens=(
            len(prompt.token_ids)
            if prompt.token_ids is not None
            else lead_tokens + window.prefix_tokens + window.suffix_tokens
        ),
        stop_token_ids=prompt.stop_token_ids,
        healed_indent=indent,
        prefix=prefix,
        lead=lead,
    )


def _heal(prefix: str) -> tuple[str, str]:
    """Leave the cursor line's indentation out of the prompt when the line holds nothing else.

    A prompt that ends in spaces splits the model's usual "indentation + keyword" tokens at an
    unusual place, and the continuation suffers; without the spaces the model writes the
    indentation itself, and `_unheal` takes back what the user already typed.
    """
    start = line_start(prefix)
    tail = prefix[start:]
    if tail and not tail.strip(" \t"):
        return prefix[:start], tail
    return prefix, ""


#: Characters of text around the cursor that post-processing looks at (brackets still open,
#: the next lines): enough for any function, and bounded so a huge file costs no more.
CONTEXT_CHARS = 16_000


def _cursor_context(snap: DocumentSnapshot) -> CursorContext:
    """The text around the cursor for post-processing, cut at line boundaries."""
    prefix, suffix = snap.prefix, snap.suffix
    if len(prefix) > CONTEXT_CHARS:
        start = prefix.find("\n", len(prefix) - CONTEXT_CHARS) + 1
        prefix = prefix[start:] if start > 0 else prefix[-CONTEXT_CHARS:]
    if len(suffix) > CONTEXT_CHARS:
        end = suffix.rfind("\n", 0, CONTEXT_CHARS)
        suffix = suffix[: end + 1] if end >= 0 else suffix[:CONTEXT_CHARS]
    return CursorContext(prefix=prefix, suffix=suffix)


def _unheal(text: str, indent: str) -> str:
    if not indent:
        return text
    if text.startswith(indent):
        return text[len(indent) :]
    # The model indented less than the user did: keep what it wrote after its indentation.
    return text.lstrip(" \t")


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


#: What identifies a model answer: the same prompt, sampling and stops get the same raw texts
#: (and the same indentation taken back, which decides where a multi-line one was stopped;
#: and the same ranking, which decides which lines come first).
AnswerKey = tuple[str, SamplingParams, StopConditions, str, Ranking | None]
#: The raw text of each choice and how it ended.
RawTexts = list[tuple[str, FinishReason | None]]


def answer_key(plan: Plan, request: GenerationRequest) -> AnswerKey:
    ranking = plan.ranking if request is plan.requests[0] else None
    return (plan.prompt.text, request.sampling, request.stops, plan.prompt.healed_indent, ranking)


def ranks_lines(model: CompletionModel, settings: Settings) -> bool:
    """Whether single-line suggestions are chosen by the code after the cursor (rerank.py):
    for a model without FIM tokens that can score text, where the setting allows."""
    if model.fim is not None or model.scorer is None or settings.suffix_ranking == "off":
        return False
    return settings.suffix_ranking == "on" or not model.engine.info.device.startswith("cpu")


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
        hint_ids=None if hint is None else model.render(prompt.lead + hint, "").token_ids,
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
    ctx = _cursor_context(snap)
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
    requests = [base]
    if wanted > 1:
        spread = max(settings.temperature, INVOKED_TEMPERATURE)
        sampled = _sampling(settings, mode, n=wanted, temperature=spread)
        requests.append(replace(base, sampling=sampled, request_id=base.request_id + "-n"))
    ranking = None
    if mode is CompletionMode.SINGLE_LINE and ranks_lines(model, settings):
        ranking = _ranking(model, snap, ctx, prompt)
    return Plan(ctx=ctx, mode=mode, prompt=prompt, requests=tuple(requests), ranking=ranking)


async def suggest(
    model: CompletionModel,
    snap: DocumentSnapshot,
    settings: Settings,
    *,
    invoked: bool,
    ahead: Speculator | None = None,
    context: PromptContext | None = None,
) -> InlineResult:
    """Suggestions for the cursor in `snap`: one for automatic triggers, up to
    `settings.invoked_suggestions` distinct ones when the user asked. `ahead`: answers
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
    ahead_of_time = False
    for request in plan.requests:
        texts = None
        if ahead is not None:
            texts = await ahead.take(model, answer_key(plan, request))
            ahead_of_time = texts is not None
            if texts is None:
                ahead.interrupt()  # the model is needed here
        if texts is None:
            texts = await _answer(model, plan, request)
        for raw, finish in texts:
            generated += 1
            if mode is CompletionMode.MULTI_LINE and finish is FinishReason.LENGTH:
                raw = _complete_lines(raw)
            fitted = fit_completion(_unheal(raw, prompt.healed_indent), ctx, mode)
            if fitted is not None and fitted not in suggestions:
                suggestions.append(fitted)
        if len(suggestions) >= wanted:
            break
    return InlineResult(
        suggestions=tuple(suggestions[:wanted]),
        mode=mode,
        prompt_tokens=prompt.tokens,
        generated_tokens=generated,
        seconds=time.perf_counter() - started,
        ahead=ahead_of_time,
    )


def accepted(snap: DocumentSnapshot, suggestion: Fitted, *, next_line: bool) -> DocumentSnapshot:
    """The document once `suggestion` is accepted, the cursor after it; with `next_line`,
    also the line ending typed after it, the new line indented as an editor indents it (as the
    line before, one level deeper after a line that opens a block)."""
    prefix = snap.prefix + suggestion.text
    suffix = snap.suffix[suggestion.replace_chars :]
    if next_line:
        line = prefix[line_start(prefix) :]
        indent = leading_whitespace(line)
        if opens_block(line):
            indent += "\t" if indent.startswith("\t") else " " * TAB_WIDTH
        prefix += newline_of(snap.text) + indent
    return DocumentSnapshot.at(
        prefix + suffix,
        len(prefix),
        uri=snap.uri,
        version=snap.version or 0,
        language_id=snap.language_id,
    )


class Speculator:
    """Answers computed before they are asked for (issue 12, part 3).

    When a suggestion has been shown and the model is idle, the model already writes the
    suggestion for the document as it will be once this one is accepted (and, for a
    single-line one, once the line ending is typed after it). Accepting and going on is then
    answered without waiting for the model. Answers are keyed by what the model was asked
    (`AnswerKey`), so an answer is only ever used for the very prompt it was made for. The
    work is dropped the moment the model is needed for anything else (`interrupt`).
    """

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._answers: OrderedDict[AnswerKey, RawTexts] = OrderedDict()
        self._running: dict[AnswerKey, asyncio.Future[RawTexts]] = {}
        self._task: asyncio.Task[None] | None = None
        self._model: CompletionModel | None = None  # whose answers are kept

    def anticipate(
        self,
        model: CompletionModel,
        snap: DocumentSnapshot,
        result: InlineResult,
        settings: Settings,
        context: PromptContext | None = None,
    ) -> None:
        """Start on what follows `result`'s first suggestion (after what runs is dropped),
        with the request's `context`: the next request in the region keeps the same one."""
        self.interrupt()
        if model is not self._model:  # reloaded: the old model's answers are not this one's
            self._answers.clear()
            self._model = model
        if not result.suggestions or settings.speculative_suggestions == 0:
            return
        first = result.suggestions[0]
        ahead = [accepted(snap, first, next_line=False)]
        if settings.speculative_suggestions > 1 and result.mode is CompletionMode.SINGLE_LINE:
            ahead.append(accepted(snap, first, next_line=True))
        self._task = asyncio.ensure_future(self._run(model, ahead, settings, context))

    async def take(self, model: CompletionModel, key: AnswerKey) -> RawTexts | None:
        """`model`'s answer for `key`: made already, or awaited while it is being made."""
        if model is not self._model:
            return None
        if key in self._answers:
            self._answers.move_to_end(key)
            return self._answers[key]
        future = self._running.get(key)
        if future is None:
            return None
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():  # dropped for other work: not this request's cancel
                return None
            raise

    def status(self) -> dict[str, int]:
        """How many answers are ready ahead of time, and how many are being written."""
        running = self._task is not None and not self._task.done()
        return {"ready": len(self._answers), "running": int(running)}

    async def idle(self) -> None:
        """Until the work in progress is done or dropped (what tests and benchmarks wait on)."""
        if self._task is not None:
            await asyncio.wait({self._task})

    def interrupt(self) -> None:
        """Drop the work in progress: the model is needed (the engine stops within a token)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        for future in self._running.values():
            future.cancel()
        self._running.clear()

    async def _run(
        self,
        model: CompletionModel,
        ahead: list[DocumentSnapshot],
        settings: Settings,
        context: PromptContext | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        for snap in ahead:
            plan = plan_for(model, snap, settings, invoked=False, context=context)
            if plan is None:
                continue
            request = plan.requests[0]
            key = answer_key(plan, request)
            if key in self._answers:
                continue
            future: asyncio.Future[RawTexts] = loop.create_future()
            self._running[key] = future
            try:
                texts = await _answer(model, plan, request)
            except asyncio.CancelledError:
                future.cancel()
                raise
            except Exception as e:  # a failure here is the next real request's to report
                log.debug("an answer ahead of time failed: %s", e)
                future.cancel()
                return
            finally:
                self._running.pop(key, None)
            future.set_result(texts)
            self._answers[key] = texts
            while len(self._answers) > self._keep:
                self._answers.popitem(last=False)


async def _answer(model: CompletionModel, plan: Plan, request: GenerationRequest) -> RawTexts:
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
                and block_ended(_unheal(texts[delta.index], healed_indent), ctx)
            ):
                break
    return list(zip(texts, finishes, strict=True))


def _complete_lines(text: str) -> str:
    """A multi-line text cut off by the token limit, without its unfinished last line (it
    would end mid-expression); a single unfinished line is all there is, and stays."""
    start = line_start(text)
    return text[:start] if start > 1 else text


class TypeAheadCache:
    """The last answer per document, reused while the user types into it.

    When the new cursor text extends the old one by exactly what the user typed, and the
    typed text is the start of a suggestion, the rest of that suggestion is the answer: no
    model call, no wait (what Copilot does while you type along its ghost text).
    """

    def __init__(self) -> None:
        # Least recently answered first: the first to go when there are too many.
        self._last: OrderedDict[str, tuple[DocumentSnapshot, bool, InlineResult]] = OrderedDict()

    def remember(
        self, snap: DocumentSnapshot, invoked: bool, result: InlineResult, *, documents: int
    ) -> None:
        """Keep `result` as the document's last answer, and the last answers of at most
        `documents` documents in all (each holds a snapshot: a copy of its text)."""
        self._last.pop(snap.uri, None)
        if result.suggestions:
            self._last[snap.uri] = (snap, invoked, result)
        while len(self._last) > documents:
            self._last.popitem(last=False)

    def __len__(self) -> int:
        return len(self._last)

    def lookup(self, snap: DocumentSnapshot, invoked: bool) -> InlineResult | None:
        entry = self._last.get(snap.uri)
        if entry is None:
            return None
        old, old_invoked, result = entry
        if invoked and not old_invoked:  # the user asks for several: make them
            return None
        prefix = snap.prefix
        if old.suffix != snap.suffix or not prefix.startswith(old.prefix):
            return None
        typed = prefix[len(old.prefix) :]
        rest = tuple(
            Fitted(text=s.text[len(typed) :], replace_chars=s.replace_chars)
            for s in result.suggestions
            if s.text.startswith(typed) and len(s.text) > len(typed)
        )
        if not rest:
            return None
        return InlineResult(suggestions=rest, mode=result.mode, cached=True)

    def forget(self, uri: str) -> None:
        self._last.pop(uri, None)


class LatestWins:
    """One live inline request per document: a new one supersedes the one before it."""

    def __init__(self) -> None:
        self._live: dict[str, asyncio.Event] = {}

    def claim(self, uri: str) -> asyncio.Event:
        """Supersede the document's live request; the returned event is set when this one is."""
        previous = self._live.get(uri)
        if previous is not None:
            previous.set()
        event = asyncio.Event()
        self._live[uri] = event
        return event

    def release(self, uri: str, event: asyncio.Event) -> None:
        if self._live.get(uri) is event:
            del self._live[uri]

    def forget(self, uri: str) -> None:
        """The document was closed: its live request is superseded (it answers nothing)."""
        live = self._live.pop(uri, None)
        if live is not None:
            live.set()

    def __len__(self) -> int:
        return len(self._live)


async def complete_latest(
    slots: LatestWins,
    cache: TypeAheadCache,
    snap: DocumentSnapshot,
    settings: Settings,
    get_model: Callable[[], Awaitable[CompletionModel]],
    *,
    invoked: bool,
    ahead: Speculator | None = None,
    context: Callable[[CompletionModel], PromptContext | None] | None = None,
) -> InlineResult | None:
    """`suggest`, after the debounce, unless a newer request for the document supersedes this
    one first (then None, at once: the engine is told to stop within one token). With
    `ahead`, an automatic suggestion is followed by the answers that come after it.
    `context`: other documents' snippets for the model, chosen once the model is known (their
    budget is counted in its tokens)."""
    superseded = slots.claim(snap.uri)
    cached = cache.lookup(snap, invoked)
    if cached is not None:
        slots.release(snap.uri, superseded)
        return cached
    work: asyncio.Task[InlineResult] | None = None
    try:
        if settings.debounce_ms > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(superseded.wait(), settings.debounce_ms / 1000)
        if superseded.is_set():
            return None
        model = await get_model()
        if superseded.is_set():
            return None
        lead = None if context is None else context(model)
        work = asyncio.ensure_future(
            suggest(model, snap, settings, invoked=invoked, ahead=ahead, context=lead)
        )
        waiter = asyncio.ensure_future(superseded.wait())
        try:
            await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not work.done():
            return None
        result = work.result()
        cache.remember(snap, invoked, result, documents=settings.type_ahead_documents)
        if ahead is not None and not invoked:
            ahead.anticipate(model, snap, result, settings, lead)
        return result
    finally:
        slots.release(snap.uri, superseded)
        if work is not None and not work.done():
            work.cancel()  # closing its stream aborts the engine job
