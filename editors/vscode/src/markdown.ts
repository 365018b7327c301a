/**
 * A small markdown renderer for the Explain panel: the subset a chat model writes (headings,
 * paragraphs, bullet and numbered lists, block quotes, rules, fenced code, inline code, bold,
 * italic). Every piece of source text is HTML-escaped before any tag is added, so the model's
 * answer can never inject markup into the webview; links stay plain text (the panel loads
 * nothing). It renders partial input too: an open fence is a code block so far.
 */

const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

/** Bold and italic on text that is already escaped (it holds no `<`, so tags are ours). */
function emphasis(escaped: string): string {
  return escaped
    .replace(/\*\*(?=\S)(.+?)(?<=\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(?<![\w_])__(?=\S)(.+?)(?<=\S)__(?![\w_])/g, "<strong>$1</strong>")
    .replace(/(?<![\w*])\*(?=[^\s*])([^*]+?)(?<=[^\s*])\*(?![\w*])/g, "<em>$1</em>")
    .replace(/(?<![\w_])_(?=[^\s_])([^_]+?)(?<=[^\s_])_(?![\w_])/g, "<em>$1</em>");
}

/** Inline markdown: code spans first (nothing inside them is formatted), then emphasis. */
export function renderInline(text: string): string {
  let html = "";
  let last = 0;
  for (const match of text.matchAll(/(`+)(.+?)\1(?!`)/g)) {
    const at = match.index ?? 0;
    html += emphasis(escapeHtml(text.slice(last, at)));
    html += `<code>${escapeHtml(trimCodeSpan(match[2] ?? ""))}</code>`;
    last = at + match[0].length;
  }
  return html + emphasis(escapeHtml(text.slice(last)));
}

/** CommonMark strips one space on each side of a code span that has both (`` ` `` x `` ` ``). */
function trimCodeSpan(code: string): string {
  return code.length > 2 && code.startsWith(" ") && code.endsWith(" ") ? code.slice(1, -1) : code;
}

type Block =
  | { kind: "paragraph"; lines: string[] }
  | { kind: "quote"; lines: string[] }
  | { kind: "list"; ordered: boolean; start: number; items: string[] };

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

function renderBlock(block: Block): string {
  switch (block.kind) {
    case "paragraph":
      return `<p>${block.lines.map(renderInline).join("<br>\n")}</p>`;
    case "quote":
      return `<blockquote><p>${block.lines.map(renderInline).join("<br>\n")}</p></blockquote>`;
    case "list": {
      const items = block.items.map((item) => `<li>${renderInline(item)}</li>`).join("");
      if (!block.ordered) {
        return `<ul>${items}</ul>`;
      }
      return block.start === 1 ? `<ol>${items}</ol>` : `<ol start="${block.start}">${items}</ol>`;
    }
  }
}

function renderCode(lines: string[], language: string): string {
  // The language becomes a class name: keep only characters that cannot leave the attribute.
  const safe = language.replace(/[^\w+#.-]/g, "");
  const attribute = safe ? ` class="language-${safe}"` : "";
  const body = lines.map((line) => `${escapeHtml(line)}\n`).join("");
  return `<pre><code${attribute}>${body}</code></pre>`;
}

/** The HTML for a markdown text (complete or still streaming). */
export function renderMarkdown(source: string): string {
  const out: string[] = [];
  let block: Block | undefined;
  const flush = () => {
    if (block) {
      out.push(renderBlock(block));
      block = undefined;
    }
  };
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const marker = fence[1] ?? "```";
      const code: string[] = [];
      for (i++; i < lines.length; i++) {
        const inner = lines[i] ?? "";
        const closing = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(inner);
        if (closing?.[1] && closing[1][0] === marker[0] && closing[1].length >= marker.length) {
          break;
        }
        code.push(inner);
      }
      out.push(renderCode(code, fence[2] ?? ""));
      continue;
    }
    if (!line.trim()) {
      flush();
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flush();
      const level = heading[1]?.length ?? 1;
      out.push(`<h${level}>${renderInline(heading[2] ?? "")}</h${level}>`);
      continue;
    }
    if (RULE.test(line)) {
      flush();
      out.push("<hr>");
      continue;
    }
    const bullet = BULLET.exec(line);
    const numbered = bullet ? null : NUMBERED.exec(line);
    if (bullet || numbered) {
      const ordered = numbered !== null;
      const text = (bullet ? bullet[1] : numbered?.[2]) ?? "";
      if (block?.kind !== "list" || block.ordered !== ordered) {
        flush();
        block = { kind: "list", ordered, start: ordered ? Number(numbered?.[1]) : 1, items: [] };
      }
      block.items.push(text);
      continue;
    }
    const quote = QUOTE.exec(line);
    if (quote) {
      if (block?.kind !== "quote") {
        flush();
        block = { kind: "quote", lines: [] };
      }
      block.lines.push(quote[1] ?? "");
      continue;
    }
    if (block?.kind === "list" && /^\s/.test(line)) {
      // An indented line after an item continues it.
      const last = block.items.length - 1;
      block.items[last] = `${block.items[last] ?? ""} ${line.trim()}`;
      continue;
    }
    if (block?.kind !== "paragraph") {
      flush();
      block = { kind: "paragraph", lines: [] };
    }
    block.lines.push(line.trim());
  }
  flush();
  return out.join("\n");
}
