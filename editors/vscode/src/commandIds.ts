/**
 * Command ids. The server's own commands (`infill.explain`, `infill.rewrite`) are registered
 * in VS Code by the language client itself, so the extension's commands need other ids.
 */
export const SERVER_EXPLAIN = "infill.explain";
export const SERVER_REWRITE = "infill.rewrite";

export const EXPLAIN_SELECTION = "infill.explainSelection";
export const REWRITE_SELECTION = "infill.rewriteSelection";
export const TOGGLE = "infill.toggle";
export const SHOW_STATUS = "infill.showStatus";
export const RESTART = "infill.restart";
export const SHOW_OUTPUT = "infill.showOutput";

/** Server protocol extensions (lsp_server/server.py, lsp_server/code_actions.py). */
export const STATUS_REQUEST = "infill/status";
export const EXPLAIN_CHUNK = "infill/explainChunk";

export const EXPLAIN_KIND = "refactor.explain";
export const REWRITE_KIND = "refactor.rewrite";
