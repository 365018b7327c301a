/**
 * The Explain panel's content: the page (strict CSP, one nonce for its style and script) and
 * the view it shows, both plain data so that tests can read exactly what the user sees.
 *
 * DOM: `#title` (file and lines), `#state` (generating / done / stopped / error, also as
 * `body[data-state]`, where waiting counts as generating), `#stop` (the Stop button),
 * `#error` (the failure, hidden otherwise), `#content.markdown` (the rendered answer).
 */
import { randomBytes } from "node:crypto";
import { escapeHtml, renderMarkdown } from "./markdown";
import type { ExplainSession, ExplainState } from "./explainSession";

export interface ExplainView {
  readonly title: string;
  readonly state: ExplainState;
  /** What `#state` says. */
  readonly label: string;
  readonly html: string;
  readonly error: string;
  readonly canStop: boolean;
}

/** From the webview: the page is ready for updates, or the user pressed Stop. */
export type WebviewMessage = { readonly type: "ready" } | { readonly type: "stop" };

export function isWebviewMessage(value: unknown): value is WebviewMessage {
  const type = (value as { type?: unknown } | null)?.type;
  return type === "ready" || type === "stop";
}

const LABELS: Record<ExplainState, string> = {
  waiting: "generating",
  generating: "generating",
  done: "done",
  stopped: "stopped",
  error: "error",
};

export function explainView(session: ExplainSession): ExplainView {
  const placeholder =
    session.running && !session.text ? '<p class="placeholder">Waiting for the model…</p>' : "";
  return {
    title: session.title,
    state: session.state,
    label: LABELS[session.state],
    html: renderMarkdown(session.text) || placeholder,
    error: session.error ?? "",
    canStop: session.running,
  };
}

/** The panel's tab title. */
export function panelTitle(target: string): string {
  return `Explain ${target}`;
}

/** A fresh nonce for each page: 128 random bits, hex (a valid CSP nonce). */
export function makeNonce(): string {
  return randomBytes(16).toString("hex");
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size);
  color: var(--vscode-foreground); padding: 0 16px 24px; line-height: 1.5; }
header { position: sticky; top: 0; display: flex; align-items: center; gap: 12px;
  padding: 8px 0; background: var(--vscode-editor-background);
  border-bottom: 1px solid var(--vscode-panel-border, transparent); }
h1#title { font-size: 1.1em; margin: 0; flex: 1; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
#state { font-size: 0.9em; opacity: 0.8; }
body[data-state="waiting"] #state::after, body[data-state="generating"] #state::after { content: "…"; }
#stop { color: var(--vscode-button-foreground); background: var(--vscode-button-background);
  border: none; padding: 4px 12px; cursor: pointer; }
#stop:hover { background: var(--vscode-button-hoverBackground); }
#stop[disabled] { display: none; }
#error { color: var(--vscode-errorForeground); margin: 12px 0; white-space: pre-wrap; }
.placeholder { opacity: 0.7; font-style: italic; }
pre { background: var(--vscode-textCodeBlock-background); padding: 8px 12px; overflow-x: auto; }
code { font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); }
:not(pre) > code { background: var(--vscode-textCodeBlock-background); padding: 1px 4px; border-radius: 3px; }
blockquote { margin: 0; padding-left: 12px; border-left: 3px solid var(--vscode-textBlockQuote-border); }
table { border-collapse: collapse; }
th, td { border: 1px solid var(--vscode-panel-border, currentColor); padding: 2px 8px; }
`;

// The page's only script: it renders what the extension sends (HTML that markdown-it built
// with raw HTML off, so the model's text holds no markup of its own) and reports the Stop button.
const SCRIPT = `
const vscode = acquireVsCodeApi();
const title = document.getElementById("title");
const state = document.getElementById("state");
const stop = document.getElementById("stop");
const error = document.getElementById("error");
const content = document.getElementById("content");
stop.addEventListener("click", () => { stop.disabled = true; vscode.postMessage({ type: "stop" }); });
window.addEventListener("message", (event) => {
  const message = event.data;
  if (!message || message.type !== "update") { return; }
  const view = message.view;
  const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 24;
  title.textContent = view.title;
  document.title = view.title;
  state.textContent = view.label;
  document.body.dataset.state = view.state;
  stop.disabled = !view.canStop;
  error.textContent = view.error;
  error.hidden = !view.error;
  content.innerHTML = view.html;
  if (atBottom && view.canStop) { window.scrollTo(0, document.body.scrollHeight); }
});
vscode.postMessage({ type: "ready" });
`;

/** The whole page, showing `view` from the start (updates then come as messages). */
export function explainPage(view: ExplainView, nonce: string): string {
  const csp = ["default-src 'none'", `style-src 'nonce-${nonce}'`, `script-src 'nonce-${nonce}'`].join("; ");
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(view.title)}</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body data-state="${view.state}">
<header>
<h1 id="title">${escapeHtml(view.title)}</h1>
<span id="state" class="state">${view.label}</span>
<button id="stop" type="button"${view.canStop ? "" : " disabled"}>Stop</button>
</header>
<div id="error" class="error"${view.error ? "" : " hidden"}>${escapeHtml(view.error)}</div>
<main id="content" class="markdown">${view.html}</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>`;
}
