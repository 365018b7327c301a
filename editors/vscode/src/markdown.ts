/**
 * The Explain panel's markdown, rendered by markdown-it (CommonMark, plus its default tables and
 * strikethrough). The model's answer can never inject markup into the webview: raw HTML is off,
 * so a `<script>` or `<img onerror>` in the answer is shown as text; links, images and reference
 * definitions stay plain text (the panel loads nothing, and its CSP would refuse it anyway); a
 * code fence's language becomes a class name only through characters that cannot leave the
 * attribute. It renders partial input too: an open fence is a code block so far.
 */
import MarkdownIt from "markdown-it";

const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/** Text made safe for an HTML element or a quoted attribute (the panel's title and error). */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

const markdown = new MarkdownIt("default", {
  html: false,
  linkify: false,
  typographer: false,
  // A chat model's single line breaks are meant: show them, as the panel always has.
  breaks: true,
});
markdown.disable(["link", "image", "autolink", "reference"]);
// The fence's first word becomes `class="language-..."`: keep only characters that cannot
// leave the attribute (markdown-it would escape the rest, but a class has no use for them).
markdown.core.ruler.after("block", "safe_fence_language", (state) => {
  for (const token of state.tokens) {
    if (token.type === "fence") {
      token.info = (token.info.trim().split(/\s/, 1)[0] ?? "").replace(/[^\w+#.-]/g, "");
    }
  }
});

/** Inline markdown (code spans, emphasis), without a surrounding paragraph. */
export function renderInline(text: string): string {
  return markdown.renderInline(text);
}

/** The HTML for a markdown text (complete or still streaming); empty for an empty text. */
export function renderMarkdown(source: string): string {
  return markdown.render(source);
}
