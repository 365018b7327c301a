"""A next-edit model: the engine that rewrites an editable region, with its format; and
`rewrite`, the one place a rewrite is generated.

This is to next edits what `completion.py` is to inline completion: the language server asks
for a `NextEditModel` and never asks which backend runs. A local model's prompt is its
tokenizer's ids (markers it has as special tokens by id); a remote server gets the prompt as
text. The format is the `nextEditFormat` setting, else the one the tokenizer's special tokens
name (`next_edit.next_edit_format`); a model with neither is no next-edit model (`of` gives
None) and only propagation runs.

A rewrite copies most of its region, which makes it the case drafts from the document speed
up most (the model checks a copied run of tokens in one forward pass instead of writing it a
token at a time). That is why generation is here and only here: drafts plug into `rewrite`,
and its figures (`Rewrite.seconds`, tokens) are the baseline they are measured against.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.backend import Tokenizer
from engine.engine import BaseEngine
from engine.next_edit import (
    NextEditFormat,
    NextEditInput,
    NextEditPrompt,
    RegionEdit,
    build_next_edit_prompt,
    next_edit_format,
    no_special_token,
    parse_rewrite,
    region_edits,
    render_next_edit_text,
)
from engine.types import (
    FinishReason,
    GenerationRequest,
    Role,
    SamplingParams,
    next_request_id,
)

#: Tokens a rewrite may take beyond a copy of its region: room for what the edit adds (a new
#: argument, a line) and for the markers the format writes around the region. An answer
#: longer than that is not the small edit a next edit is, and it is cut (no edit).
REWRITE_SLACK_TOKENS = 64

#: A rewrite's output is at most this many times its region's tokens (plus the slack): a
#: model that repeats a line until the limit is stopped there, not at the context's end.
REWRITE_GROWTH = 2


class RewriteOutcome(enum.StrEnum):
    """How a rewrite ended."""

    #: The region as rewritten differs from it: `edits` hold the change.
    EDITED = "edited"
    #: The model wrote the region back as it was: no edit to offer.
    UNCHANGED = "unchanged"
    #: The answer is no valid rewrite (markers missing or doubled, cut at the token limit).
    INVALID = "invalid"
    #: The model failed (an error from the engine); `error` says what.
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rewrite:
    """A rewrite's result: the region rewritten and its edits (offsets into the region), or
    why there is none; and its figures, for logs and benchmarks."""

    outcome: RewriteOutcome
    region: str | None
    edits: tuple[RegionEdit, ...]
    prompt_tokens: int
    output_tokens: int
    seconds: float
    first_token_seconds: float | None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NextEditModel:
    """The engine that rewrites regions and its next-edit format. `backend` is the local
    model's tokenizer (None for a remote server); `count_tokens` counts a text's tokens (an
    estimate for a remote server)."""

    engine: BaseEngine
    format: NextEditFormat
    backend: Tokenizer | None
    count_tokens: Callable[[str], int]

    @classmethod
    def of(cls, engine: BaseEngine, setting: str | None) -> NextEditModel | None:
        """`engine` with its next-edit format: the one `setting` names ("none": none), else
        the one its tokenizer's special tokens name; None when it has none. ValueError for a
        setting that names no format. A remote server's tokens are not known here: its
        format must be named."""
        # A completion prompt format without FIM is what every engine makes without a
        # question about its tokens: its tokenizer and its token counter are what is needed.
        plain = engine.prompt_format("none")
        backend = plain.backend
        special = backend.special_token_id if backend is not None else no_special_token
        fmt = next_edit_format(setting, special)
        if fmt is None:
            return None
        return cls(engine=engine, format=fmt, backend=backend, count_tokens=plain.count_tokens)

    def prompt(self, given: NextEditInput) -> NextEditPrompt:
        """The prompt for `given`: ids for a local model, text for a remote server."""
        if self.backend is None:
            return render_next_edit_text(self.format, given)
        return build_next_edit_prompt(self.backend, self.format, given)

    def max_tokens(self, given: NextEditInput) -> int:
        """What a rewrite of `given`'s region may take: a copy of it, grown, plus the slack."""
        return REWRITE_GROWTH * self.count_tokens(given.region) + REWRITE_SLACK_TOKENS

    def request(
        self, given: NextEditInput, *, request_id: str | None = None, cache_key: str | None = None
    ) -> tuple[GenerationRequest, NextEditPrompt]:
        """The generation request for `given`: greedy (a rewrite is judged exactly, and the
        same history should give the same suggestion), ending at the format's end marker."""
        prompt = self.prompt(given)
        request = GenerationRequest(
            prompt=prompt.text if prompt.token_ids is None else None,
            prompt_token_ids=prompt.token_ids,
            # A background job: an inline completion on the same model goes first.
            role=Role.NEXT_EDIT,
            sampling=SamplingParams(max_tokens=self.max_tokens(given), temperature=0.0),
            stops=prompt.stops,
            request_id=request_id or next_request_id(),
            cache_key=cache_key,
        )
        return request, prompt

    async def rewrite(
        self, given: NextEditInput, *, request_id: str | None = None, cache_key: str | None = None
    ) -> Rewrite:
        """Generate the rewrite of `given`'s region and read it back as edits. Cancelling the
        awaiting task stops the model's work within a token."""
        request, prompt = self.request(given, request_id=request_id, cache_key=cache_key)
        prompt_tokens = (
            len(prompt.token_ids)
            if prompt.token_ids is not None
            else self.count_tokens(prompt.text)
        )
        started = time.perf_counter()
        first: float | None = None
        parts: list[str] = []
        output_tokens = 0
        finish: FinishReason | None = None
        stop_reason: str | int | None = None
        error: str | None = None
        async with contextlib.aclosing(self.engine.generate(request)) as deltas:
            async for delta in deltas:
                if first is None:
                    first = time.perf_counter() - started
                parts.append(delta.text)
                output_tokens += len(delta.token_ids)
                if delta.finish_reason is not None:
                    finish, stop_reason, error = delta.finish_reason, delta.stop_reason, delta.error
        seconds = time.perf_counter() - started

        def result(
            outcome: RewriteOutcome,
            region: str | None = None,
            edits: tuple[RegionEdit, ...] = (),
        ) -> Rewrite:
            return Rewrite(
                outcome=outcome,
                region=region,
                edits=edits,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                seconds=seconds,
                first_token_seconds=first,
                error=error,
            )

        if finish is FinishReason.ERROR:
            return result(RewriteOutcome.FAILED)
        answer = "".join(parts)
        ends = self.format.ends
        if finish is FinishReason.STOP and not answer.endswith(ends):
            if isinstance(stop_reason, str) and stop_reason in ends:
                # A server that keeps no stop string in its output (include_stop_str_in_output
                # is vLLM's, not every server's) still said the answer ended at an end marker.
                answer += stop_reason
            elif stop_reason is None and self.format.ends_at_eos:
                # The model's own end of generation, hidden: where this format's rewrite ends.
                answer += self.format.end
        region = parse_rewrite(self.format, answer, given)
        if region is None:
            return result(RewriteOutcome.INVALID)
        edits = region_edits(given.region, region)
        return result(RewriteOutcome.EDITED if edits else RewriteOutcome.UNCHANGED, region, edits)
