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
      `<div onclick="alert(1)">\n${attack}\n</div>`,
      "&#60;script&#62;alert(1)&#60;/script&#62; &lt;img src=x onerror=alert(2)&gt;",
      "[click](javascript:alert(1)) <javascript:alert(1)> ![x](https://example.com/x.png)",
    ];
    for (const source of sources) {
      const html = renderMarkdown(source);
      expect(html, source).not.toMatch(/<script|<img|<a /);
      // Every `<` left is a tag of the renderer's, and the only attribute one can carry is a
      // code block's class, whose value holds no quote or bracket.
      for (const [, name, attributes] of html.matchAll(/<\/?([a-z0-9]+)([^>]*)>/g)) {
        expect(["p", "h1", "ul", "li", "blockquote", "strong", "code", "pre", "br"], source).toContain(name);
        expect(attributes, source).toMatch(/^(| class="language-[\w+#.-]+")$/);
      }
    }
  });

  it.each([
    ["<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"],
    ['<img src=x onerror="alert(1)">', "<p>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</p>\n"],
    ["See <img src=x onerror=alert(1)> here.", "<p>See &lt;img src=x onerror=alert(1)&gt; here.</p>\n"],
    ["<script>\nalert(1)\n</script>", "<p>&lt;script&gt;<br>\nalert(1)<br>\n&lt;/script&gt;</p>\n"],
    ["&#60;script&#62;", "<p>&lt;script&gt;</p>\n"],
  ])("shows raw HTML in the answer as text: %j", (source, html) => {
    expect(renderMarkdown(source)).toBe(html);
  });

  it("leaves links, images and reference definitions as plain text (the panel loads nothing)", () => {
    expect(
      renderMarkdown(
        "[click](javascript:alert(1)), <https://example.com>, ![x](y.png), https://example.com [r]\n\n[r]: https://x",
      ),
    ).toBe(
      "<p>[click](javascript:alert(1)), &lt;https://example.com&gt;, ![x](y.png), https://example.com [r]</p>\n" +
        "<p>[r]: https://x</p>\n",
    );
  });
});

describe("blocks", () => {
  it("renders headings, paragraphs and rules", () => {
    expect(renderMarkdown("## What it does\n\nIt adds.\nTwice.\n\n---")).toBe(
      "<h2>What it does</h2>\n<p>It adds.<br>\nTwice.</p>\n<hr>\n",
    );
  });

  it("renders bullet and numbered lists, with continuation lines", () => {
    // CommonMark: another bullet character starts another list.
    expect(renderMarkdown("- one\n* two\n  more\n\n1. first\n2. second")).toBe(
      "<ul>\n<li>one</li>\n</ul>\n<ul>\n<li>two<br>\nmore</li>\n</ul>\n<ol>\n<li>first</li>\n<li>second</li>\n</ol>\n",
    );
    expect(renderMarkdown("3. third\n4. fourth")).toBe(
      '<ol start="3">\n<li>third</li>\n<li>fourth</li>\n</ol>\n',
    );
  });

  it("renders a fenced code block verbatim, with its language as a class", () => {
    const html = renderMarkdown("Code:\n```python\ndef f(a, b):\n    return a < b and **kw\n```\nAfter.");
    expect(html).toBe(
      '<p>Code:</p>\n<pre><code class="language-python">def f(a, b):\n    return a &lt; b and **kw\n</code></pre>\n<p>After.</p>\n',
    );
  });

  it.each([
    ["c++ title=x", '<pre><code class="language-c++">x\n</code></pre>\n'],
    ['"><script>', '<pre><code class="language-script">x\n</code></pre>\n'],
    ['"<>"', "<pre><code>x\n</code></pre>\n"],
  ])("keeps only a fence language's safe characters in its class: %j", (info, html) => {
    expect(renderMarkdown(`\`\`\`${info}\nx\n\`\`\``)).toBe(html);
  });

  it("shows a code block that is still streaming (no closing fence yet)", () => {
    expect(renderMarkdown("```js\nlet x = 1;")).toBe(
      '<pre><code class="language-js">let x = 1;</code></pre>\n',
    );
  });

  it("renders every prefix of a streaming answer without throwing or letting HTML through", () => {
    const answer =
      "## Summary\n\nIt **memoizes** `fib` with _a dict_:\n\n1. look up\n2. store\n\n" +
      "> <img src=x onerror=alert(1)>\n\n```python\ndef fib(n):\n    return n if n < 2 else fib(n - 1)\n```\n" +
      "| a | b |\n|---|---|\n| 1 | 2 |\n\nSee [docs](javascript:alert(1)) and <script>x</script>.";
    for (let end = 0; end <= answer.length; end++) {
      const html = renderMarkdown(answer.slice(0, end));
      expect(html, answer.slice(0, end)).not.toMatch(/<script|<img|<a /);
    }
    expect(renderMarkdown("It **memo")).toBe("<p>It **memo</p>\n");
    expect(renderMarkdown("It uses `fi")).toBe("<p>It uses `fi</p>\n");
  });

  it("closes a fence only with the same marker, at least as long", () => {
    expect(renderMarkdown("````\n```\n````")).toBe("<pre><code>```\n</code></pre>\n");
    expect(renderMarkdown("~~~\n```\n~~~")).toBe("<pre><code>```\n</code></pre>\n");
  });

  it("renders block quotes", () => {
    expect(renderMarkdown("> note\n> this")).toBe("<blockquote>\n<p>note<br>\nthis</p>\n</blockquote>\n");
  });

  it("renders tables and strikethrough", () => {
    expect(renderMarkdown("| a | b |\n|---|---|\n| 1 | 2 |\n\n~~old~~")).toBe(
      "<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n" +
        "<tbody>\n<tr>\n<td>1</td>\n<td>2</td>\n</tr>\n</tbody>\n</table>\n<p><s>old</s></p>\n",
    );
  });

  it("renders nothing for an empty answer", () => {
    expect(renderMarkdown("")).toBe("");
    expect(renderMarkdown("  \n")).toBe("");
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
