import { describe, expect, it } from "vitest";
import { ExplainRouter, isChunk } from "../src/explainSession";
import { explainPage, explainView, panelTitle } from "../src/explainView";

const chunk = (token: string, text: string, done = false) => ({ token, text, done });

describe("assembling an explanation from chunks", () => {
  it("gives the first chunk with an unknown token to the waiting explanation, then follows that token", () => {
    const router = new ExplainRouter();
    const session = router.start("Explain fib.py:1-3");
    expect(session.state).toBe("waiting");
    expect(router.accept(chunk("t1", "It "))).toBe(session);
    expect(router.accept(chunk("t2", "noise"))).toBeUndefined();
    router.accept(chunk("t1", "adds."));
    expect(session.text).toBe("It adds.");
    expect(session.state).toBe("generating");
  });

  it("ends done with the command's result as the whole answer", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    router.accept(chunk("t1", "It a"));
    router.accept(chunk("t1", "", true));
    router.finish(session, "It adds two numbers.");
    expect(session).toMatchObject({ state: "done", text: "It adds two numbers." });
  });

  it("ends stopped after Stop, keeping what came", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    router.accept(chunk("t1", "It adds"));
    expect(router.stop(session)).toBe("t1");
    router.finish(session, "It adds");
    expect(session).toMatchObject({ state: "stopped", text: "It adds" });
  });

  it("has no token to cancel before the first chunk; a cancelled request then reads as stopped", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    expect(router.stop(session)).toBeUndefined();
    router.fail(session, "Request cancelled");
    expect(session.state).toBe("stopped");
    expect(session.error).toBeUndefined();
  });

  it("shows a failure that nobody asked for as an error", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    router.fail(session, "there is no code in that range");
    expect(session).toMatchObject({ state: "error", error: "there is no code in that range" });
  });

  it("does not give a new explanation the late chunks of the one before", () => {
    const router = new ExplainRouter();
    const first = router.start("first");
    router.accept(chunk("old", "first answer"));
    router.stop(first);
    router.finish(first, "first answer");
    const second = router.start("second");
    expect(router.accept(chunk("old", " more of the first"))).toBeUndefined();
    router.accept(chunk("new", "second answer"));
    expect(second.text).toBe("second answer");
    expect(first.text).toBe("first answer");
  });

  it("does not claim the empty closing chunk of a stream that never started", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    expect(router.accept(chunk("cancelled-before-text", "", true))).toBeUndefined();
    router.accept(chunk("real", "Text"));
    expect(session.token).toBe("real");
  });

  it("ignores chunks after the explanation ended", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    router.accept(chunk("t1", "All."));
    router.finish(session, "All.");
    expect(router.accept(chunk("t1", " extra"))).toBeUndefined();
    expect(session.text).toBe("All.");
  });

  it("recognises chunk notifications", () => {
    expect(isChunk({ token: "a", text: "x", done: false })).toBe(true);
    expect(isChunk({ token: 3, text: "", done: true })).toBe(true);
    expect(isChunk({ token: "a", text: 1, done: false })).toBe(false);
    expect(isChunk(null)).toBe(false);
  });
});

describe("the panel's view", () => {
  it("says generating with a Stop button while the answer streams, rendered as markdown", () => {
    const router = new ExplainRouter();
    const session = router.start(panelTitle("fib.py:5-9"));
    const waiting = explainView(session);
    expect(waiting).toMatchObject({ title: "Explain fib.py:5-9", label: "generating", canStop: true });
    expect(waiting.html).toContain("Waiting for the model");
    router.accept(chunk("t", "It uses `memo`."));
    expect(explainView(session)).toMatchObject({
      state: "generating",
      label: "generating",
      html: "<p>It uses <code>memo</code>.</p>\n",
    });
  });

  it("says done or stopped at the end, without the Stop button", () => {
    const router = new ExplainRouter();
    const session = router.start("t");
    router.accept(chunk("t", "x"));
    router.finish(session, "x");
    expect(explainView(session)).toMatchObject({ label: "done", canStop: false });
  });
});

describe("the panel's page", () => {
  const router = new ExplainRouter();
  const session = router.start(panelTitle('<b>"odd".py:1'));
  router.accept(chunk("t", "# Title\n<script>bad()</script>"));
  const page = explainPage(explainView(session), "abc123");

  it("allows only its own nonced style and script: no remote content", () => {
    const csp = /http-equiv="Content-Security-Policy" content="([^"]+)"/.exec(page)?.[1];
    expect(csp).toBe("default-src 'none'; style-src 'nonce-abc123'; script-src 'nonce-abc123'");
    expect(page.match(/<script/g)).toHaveLength(1);
    expect(page).toContain('<script nonce="abc123">');
    expect(page).not.toMatch(/https?:\/\//);
  });

  it("holds the elements the user sees: title, state, Stop, content", () => {
    expect(page).toContain('<h1 id="title">Explain &lt;b&gt;&quot;odd&quot;.py:1</h1>');
    expect(page).toContain('<span id="state" class="state">generating</span>');
    expect(page).toContain('<button id="stop" type="button">Stop</button>');
    expect(page).toContain(
      '<main id="content" class="markdown"><h1>Title</h1>\n<p>&lt;script&gt;bad()&lt;/script&gt;</p>\n</main>',
    );
    expect(page).toContain('<body data-state="generating">');
  });
});
