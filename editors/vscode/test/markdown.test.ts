import { describe, expect, it } from "vitest";
import { escapeHtml, renderInline, renderMarkdown } from "../src/markdown";

describe("escaping", () => {
  it("escapes every character that could open markup", () => {
    expect(escapeHtml(`<a href="x" onclick='y'>&</a>`)).toBe(
      "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;",
    );
  });

  it("never lets the model's HTML through, wherever it appears", () => {
    const attack = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    const sources = [
      attack,
      `# ${attack}`,
      `- ${attack}`,
      `> ${attack}`,
      `**${attack}**`,
      `\`${attack}\``,
      `\`\`\`\n${attack}\n\`\`\``,
      `\`\`\`"><script>\ncode\n\`\`\``,
    ];
    for (const source of sources) {
      const html = renderMarkdown(source);
      expect(html, source).not.toMatch(/<script|<img|<a /);
      // Every `<` left is a tag of the renderer's, and the only attribute one can carry is a
      // code block's class, whose value holds no quote or bracket.
      for (const [, name, attributes] of html.matchAll(/<\/?([a-z0-9]+)([^>]*)>/g)) {
        expect(["p", "h1", "ul", "li", "blockquote", "strong", "code", "pre"], source).toContain(name);
        expect(attributes, source).toMatch(/^(| class="language-[\w+#.-]+")$/);
      }
    }
  });
});

describe("blocks", () => {
  it("renders headings, paragraphs and rules", () => {
    expect(renderMarkdown("## What it does\n\nIt adds.\nTwice.\n\n---")).toBe(
      "<h2>What it does</h2>\n<p>It adds.<br>\nTwice.</p>\n<hr>",
    );
  });

  it("renders bullet and numbered lists, with continuation lines", () => {
    expect(renderMarkdown("- one\n* two\n  more\n\n1. first\n2. second")).toBe(
      "<ul><li>one</li><li>two more</li></ul>\n<ol><li>first</li><li>second</li></ol>",
    );
    expect(renderMarkdown("3. third\n4. fourth")).toBe('<ol start="3"><li>third</li><li>fourth</li></ol>');
  });

  it("renders a fenced code block verbatim, with its language as a class", () => {
    const html = renderMarkdown("Code:\n```python\ndef f(a, b):\n    return a < b and **kw\n```\nAfter.");
    expect(html).toBe(
      '<p>Code:</p>\n<pre><code class="language-python">def f(a, b):\n    return a &lt; b and **kw\n</code></pre>\n<p>After.</p>',
    );
  });

  it("shows a code block that is still streaming (no closing fence yet)", () => {
    expect(renderMarkdown("```js\nlet x = 1;")).toBe(
      '<pre><code class="language-js">let x = 1;\n</code></pre>',
    );
  });

  it("closes a fence only with the same marker, at least as long", () => {
    expect(renderMarkdown("````\n```\n````")).toBe("<pre><code>```\n</code></pre>");
    expect(renderMarkdown("~~~\n```\n~~~")).toBe("<pre><code>```\n</code></pre>");
  });

  it("renders block quotes", () => {
    expect(renderMarkdown("> note\n> this")).toBe("<blockquote><p>note<br>\nthis</p></blockquote>");
  });

  it("renders nothing for an empty answer", () => {
    expect(renderMarkdown("")).toBe("");
  });
});

describe("inline", () => {
  it("renders code spans without formatting inside them", () => {
    expect(renderInline("call `f(**kw)` then `a<b`")).toBe(
      "call <code>f(**kw)</code> then <code>a&lt;b</code>",
    );
  });

  it("renders bold and italic", () => {
    expect(renderInline("**bold**, __also__, *it*, _too_")).toBe(
      "<strong>bold</strong>, <strong>also</strong>, <em>it</em>, <em>too</em>",
    );
  });

  it("leaves snake_case names and lone stars alone", () => {
    expect(renderInline("fib_memo_cache and a * b * c")).toBe("fib_memo_cache and a * b * c");
  });
});
