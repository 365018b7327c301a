"""The default models loaded in this process, as the llama.cpp backends the tests read."""

from __future__ import annotations

from collections.abc import Mapping

from engine.backends.llama_cpp import LlamaCppBackend
from engine.models import load_backend, model_spec
from engine.specs import ModelOptions, ModelSpec
from engine.types import Role


def load_llama(
    role: Role, options: ModelOptions | None = None, environ: Mapping[str, str] | None = None
) -> LlamaCppBackend:
    """`role`'s model, loaded on llama.cpp: the default one unless `environ` names another
    (empty by default, so that the user's INFILL_MODEL is never what a test loads). Its spec
    is a local file's: `model_spec` gives a server's only for the openai backend."""
    options = ModelOptions() if options is None else options
    spec = model_spec(role, options, environ={} if environ is None else environ)
    assert isinstance(spec, ModelSpec), spec
    backend = load_backend(spec)
    assert isinstance(backend, LlamaCppBackend), backend
    return backend
