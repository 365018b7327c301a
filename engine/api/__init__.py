"""The OpenAI-compatible HTTP server over the engine (`infill-lsp engine`, DESIGN §2).

Many editors (many language servers) share one loaded model: `/v1/completions` (with `suffix`
for fill-in-the-middle), `/v1/chat/completions`, `/v1/models`, `/health` and `/stats`. Needs
the `server` extra (starlette, uvicorn); imports nothing of the editor side.
"""
