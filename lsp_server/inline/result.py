"""What an inline request answers: the fitted suggestions and how they were made."""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.inline.confidence import Judgement
from lsp_server.postprocess import CompletionMode, Fitted


@dataclass(frozen=True, slots=True, kw_only=True)
class InlineResult:
    suggestions: tuple[Fitted, ...]
    mode: CompletionMode | None
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    cached: bool = False  # answered from the type-ahead cache, without the model
    #: Answered with what the model wrote before it was asked (`Speculator`).
    written_ahead: bool = False
    #: The confidence gate's word on the first fitted suggestion of an automatic request
    #: (None for an invoked one, or when there was none).
    gate: Judgement | None = None
