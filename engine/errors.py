"""The engine's own exceptions: callers catch these, never a backend's."""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""


class ModelLoadError(EngineError):
    """A model could not be found, read or loaded. The message names the path."""


class PromptTooLongError(EngineError):
    """The prompt does not fit the model's context window."""

    def __init__(self, prompt_tokens: int, context_size: int) -> None:
        super().__init__(
            f"the prompt has {prompt_tokens} tokens but the model's context holds "
            f"{context_size}; shorten the prompt or raise the context size"
        )
        self.prompt_tokens = prompt_tokens
        self.context_size = context_size


class DetokenizeError(EngineError):
    """A token id could not be turned into text (for example, it is outside the vocabulary)."""


class ChatTemplateError(EngineError):
    """The model has no chat template, or rendering it failed."""


class BackendUnavailableError(EngineError):
    """The backend's library is not installed."""


class EngineClosedError(EngineError):
    """The engine was stopped (its model is being replaced, or the server shuts down): its
    running jobs end with this error and new ones are refused. The message says why."""


class GenerationError(EngineError):
    """The model failed while it generated; the message names the backend's error."""
