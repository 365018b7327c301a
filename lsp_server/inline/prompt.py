"""The inline prompt: the context window cut to the token budget, in the model's FIM format
(or the prefix alone for a model without FIM tokens), other documents' snippets first
(`neighbors.py` chooses them; only the prompt changes with them); and the text around the
cursor that post-processing looks at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.completion import CompletionModel
from engine.context_window import context_window
from engine.text import line_start
from engine.types import GenerationRequest
from lsp_server.documents import DocumentSnapshot
from lsp_server.neighbors import PromptContext, render_plain
from lsp_server.postprocess import CursorContext
from lsp_server.settings import Settings


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
        model.format.count_tokens,
        prefix_budget=settings.prefix_tokens,
        suffix_budget=settings.suffix_tokens if model.format.fim else 0,
    )
    prefix, indent = _heal(window.prefix)
    lead, lead_tokens = "", 0
    if context is None or not context.snippets:
        prompt = model.format.render(prefix, window.suffix)
    elif model.format.repo_files:
        files = context.files()
        prompt = model.format.render(
            prefix, window.suffix, files=files, path=context.path, repo=context.repo
        )
        lead_tokens = sum(model.format.count_tokens(f.path + "\n" + f.text) for f in files)
    else:
        lead = render_plain(context)
        prompt = model.format.render(lead + prefix, window.suffix)
        lead_tokens = model.format.count_tokens(lead)
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
    indentation itself, and `unheal` takes back what the user already typed.
    """
    start = line_start(prefix)
    tail = prefix[start:]
    if tail and not tail.strip(" \t"):
        return prefix[:start], tail
    return prefix, ""


#: Characters of text around the cursor that post-processing looks at (brackets still open,
#: the next lines): enough for any function, and bounded so a huge file costs no more.
CONTEXT_CHARS = 16_000


def cursor_context(snap: DocumentSnapshot) -> CursorContext:
    """The text around the cursor for post-processing, cut at line boundaries."""
    prefix, suffix = snap.prefix, snap.suffix
    if len(prefix) > CONTEXT_CHARS:
        start = prefix.find("\n", len(prefix) - CONTEXT_CHARS) + 1
        prefix = prefix[start:] if start > 0 else prefix[-CONTEXT_CHARS:]
    if len(suffix) > CONTEXT_CHARS:
        end = suffix.rfind("\n", 0, CONTEXT_CHARS)
        suffix = suffix[: end + 1] if end >= 0 else suffix[:CONTEXT_CHARS]
    return CursorContext(prefix=prefix, suffix=suffix, language_id=snap.language_id)


def unheal(text: str, indent: str) -> str:
    if not indent:
        return text
    if text.startswith(indent):
        return text[len(indent) :]
    # The model indented less than the user did: keep what it wrote after its indentation.
    return text.lstrip(" \t")
