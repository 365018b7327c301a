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
/** Tab and Esc on a shown next edit (package.json binds them under NEXT_EDIT_VISIBLE). */
export const JUMP_OR_APPLY_NEXT_EDIT = "infill.jumpOrApplyNextEdit";
export const DISMISS_NEXT_EDIT = "infill.dismissNextEdit";
/** The context key that is true while a next edit shows (as decorations). */
export const NEXT_EDIT_VISIBLE = "infill.nextEditVisible";

/** Server protocol extensions (lsp_server/server.py, lsp_server/code_actions.py). */
export const STATUS_REQUEST = "infill/status";
export const EXPLAIN_CHUNK = "infill/explainChunk";
/** Next edits, in GitHub Copilot language server's shapes (lsp_server/next_edit/requests.py). */
export const INLINE_EDIT_REQUEST = "textDocument/copilotInlineEdit";
export const DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit";
export const DID_REJECT_NEXT_EDIT = "infill/didRejectNextEdit";
/**
 * Inline suggestions' outcomes, counted per language on the user's machine (lsp_server/usage.py):
 * the accept command each item carries (run by VS Code itself) and Copilot's two notifications.
 */
export const SERVER_ACCEPT_COMPLETION = "infill.acceptCompletion";
export const DID_SHOW_COMPLETION = "textDocument/didShowCompletion";
export const DID_PARTIALLY_ACCEPT_COMPLETION = "textDocument/didPartiallyAcceptCompletion";
/** The `experimental` capability by which the server says it offers next edits. */
export const NEXT_EDIT_CAPABILITY = "nextEditSuggestions";

export const EXPLAIN_KIND = "refactor.explain";
export const REWRITE_KIND = "refactor.rewrite";
