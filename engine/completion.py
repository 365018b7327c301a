"""A completion model: the engine that completes code, with what building its prompts needs.

This is the one answer to "what is a completion model, and who builds its prompt?": each
engine makes its own prompt format (`BaseEngine.prompt_format`: a local model renders token
ids with its tokenizer, a remote server gets text and its tokens are estimated), and this
object adds what ranking needs where the model can score text. The language server, the
engine server's routes and `doctor` all use it; none of them asks which backend runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.engine import BaseEngine
from engine.fim import PromptFormat

#: What a completion model without fill-in-the-middle tokens costs, with what this project
#: measured (`bench/humaneval.py` on the default model, Gemma 3 270M): what
#: `doctor` and the language server's status say of such a model.
NO_FIM_NOTE = (
    "no fill-in-the-middle tokens: suggestions continue the code before the cursor, and the "
    "code after it cannot steer them. With the default model on HumanEval: 31 of 100 single "
    "lines right from the prefix alone, 47 with suffixRanking choosing among candidates by "
    "the code after the cursor (about 9 times the time on a CPU), and 0 of 50 spans in the "
    "middle of code (1 with suffixRanking). A model with FIM tokens takes both sides (README: "
    "Choosing a model)"
)


#: What the language server does only with a `Scorer` (lsp_server/rerank.py, starts.py).
SCORED_FEATURES = "ranking and invoked alternatives"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scorer:
    """What ranking candidate lines needs of a local model: its engine and its plain-text
    tokenizer (no BOS, special-token text kept as text)."""

    engine: BaseEngine
    tokenize: Callable[[str], list[int]]
    detokenize: Callable[[Sequence[int]], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionModel:
    """The completion engine and its prompt format; `scorer` where the model can score text
    and its tokenizer is here (a local model, or our own engine server with its model's
    tokenizer loaded here; None for any other remote server)."""

    engine: BaseEngine
    format: PromptFormat
    scorer: Scorer | None = None
    #: The features off for want of a `scorer`, each with why (what the status reports).
    features_off: tuple[str, ...] = ()

    @classmethod
    def of(cls, engine: BaseEngine, fim_family: str | None) -> CompletionModel:
        """`engine` with its FIM format: the configured family (`fim_family`, "none" for
        none), else the one its tokenizer's special tokens (or the remote server) name.
        Raises ModelLoadError when the model lacks the named family's tokens."""
        prompt_format = engine.prompt_format(fim_family)
        backend = prompt_format.backend
        scorer = None
        why_not = engine.cannot_score
        if why_not is None and backend is None:
            why_not = "the model's tokenizer is not loaded here (prompts go as text)"
        if why_not is None and backend is not None:
            scorer = Scorer(
                engine=engine,
                tokenize=functools.partial(backend.tokenize, add_bos=False, special=False),
                detokenize=backend.detokenize,
            )
        off = () if why_not is None else (f"{SCORED_FEATURES}: off, {why_not}",)
        return cls(engine=engine, format=prompt_format, scorer=scorer, features_off=off)

    @property
    def fim_note(self) -> str | None:
        """What the model's missing FIM tokens cost (`NO_FIM_NOTE`); None for a FIM model."""
        return None if self.format.fim is not None else NO_FIM_NOTE
