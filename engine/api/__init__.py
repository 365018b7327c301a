"""The OpenAI-compatible HTTP server over the engine (`infill-lsp engine`).

Many editors (many language servers) share one loaded model: `/v1/completions` (with `suffix`
for fill-in-the-middle), `/v1/chat/completions`, `/v1/models`, `/health` and `/stats`. Needs
starlette and uvicorn (dependencies of the package); imports nothing of the editor side.
"""

import importlib.util

from engine.errors import BackendUnavailableError

# Checked here, before any module of the package imports them, so that the command says what
# to install instead of showing an ImportError's traceback.
_MISSING = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
if _MISSING:
    raise BackendUnavailableError(
        f"infill-lsp engine needs {' and '.join(_MISSING)}: pip install {' '.join(_MISSING)}"
    )
