"""Answers written before they are asked for: once a suggestion is shown and the model is idle,
the document as it will be once the suggestion is accepted is answered ahead."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from engine.completion import CompletionModel
from engine.text import TAB_WIDTH, leading_whitespace, line_start, newline_of, opens_block
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.answer import answer
from lsp_server.inline.plan import AnswerKey, RawTexts, answer_key, plan_for
from lsp_server.inline.result import InlineResult
from lsp_server.neighbors import PromptContext
from lsp_server.postprocess import CompletionMode, Fitted
from lsp_server.settings import Settings

log = logging.getLogger(__name__)


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
    """Answers computed before they are asked for.

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
        upcoming = [accepted(snap, first, next_line=False)]
        if settings.speculative_suggestions > 1 and result.mode is CompletionMode.SINGLE_LINE:
            upcoming.append(accepted(snap, first, next_line=True))
        self._task = asyncio.ensure_future(self._run(model, upcoming, settings, context))

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
        upcoming: list[DocumentSnapshot],
        settings: Settings,
        context: PromptContext | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        for snap in upcoming:
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
                texts = await answer(model, plan, request)
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
