import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import { ExplainPanel, type ExplainConnection } from "../src/explainPanel";
import { deferred, silentLog } from "./fakes";

const mock = vscode as unknown as typeof import("./vscode-mock");
const target = {
  uri: "file:///work/fib.py",
  range: { start: { line: 4, character: 0 }, end: { line: 8, character: 20 } },
};

/** A server that answers `infill.explain` when the test says so, and records cancels. */
function fakeServer() {
  const answers: ReturnType<typeof deferred<unknown>>[] = [];
  const tokens: vscode.CancellationToken[] = [];
  const cancelled: (string | number)[] = [];
  const connection: ExplainConnection = {
    explain: (_target, token) => {
      const answer = deferred<unknown>();
      answers.push(answer);
      tokens.push(token);
      return answer.promise;
    },
    cancelProgress: (token) => void cancelled.push(token),
  };
  return { connection, answers, tokens, cancelled };
}

async function flush(): Promise<void> {
  await vi.advanceTimersByTimeAsync(100);
}

describe("the Explain panel", () => {
  beforeEach(() => {
    mock.reset();
    vi.useFakeTimers();
  });
  afterEach(() => vi.useRealTimers());

  it("opens beside the editor, keeping the focus there, titled with the file and lines", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    void panel.explain(target);
    await flush();
    const [page] = mock.recorded.panels;
    expect(page?.title).toBe("Explain fib.py:5-9");
    expect(page?.showOptions).toEqual({ viewColumn: vscode.ViewColumn.Beside, preserveFocus: true });
    expect(page?.options).toMatchObject({ enableScripts: true, localResourceRoots: [] });
    expect(page?.webview.html).toContain('<span id="state" class="state">generating</span>');
  });

  it("fills live from the chunks, then shows the whole answer as done", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const done = panel.explain(target);
    await flush();
    const page = mock.recorded.panels[0]!;
    panel.onChunk({ token: "tok", text: "It computes **Fibonacci**", done: false });
    await flush();
    expect(page.lastView).toMatchObject({
      label: "generating",
      html: "<p>It computes <strong>Fibonacci</strong></p>\n",
    });
    panel.onChunk({ token: "tok", text: " numbers.", done: false });
    panel.onChunk({ token: "tok", text: "", done: true });
    server.answers[0]!.resolve("It computes **Fibonacci** numbers.");
    await done;
    expect(page.lastView).toMatchObject({
      label: "done",
      canStop: false,
      html: "<p>It computes <strong>Fibonacci</strong> numbers.</p>\n",
    });
  });

  it("Stop cancels the stream's progress token, and the panel ends stopped with what came", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const done = panel.explain(target);
    await flush();
    const page = mock.recorded.panels[0]!;
    panel.onChunk({ token: "tok-7", text: "It adds", done: false });
    page.sendFromPage({ type: "stop" });
    expect(server.cancelled).toEqual(["tok-7"]);
    expect(server.tokens[0]?.isCancellationRequested).toBe(false); // the stream stops, the request answers
    server.answers[0]!.resolve("It adds");
    await done;
    expect(page.lastView).toMatchObject({ label: "stopped", html: "<p>It adds</p>\n", canStop: false });
  });

  it("Stop before the first chunk cancels the request itself", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const done = panel.explain(target);
    await flush();
    mock.recorded.panels[0]!.sendFromPage({ type: "stop" });
    expect(server.tokens[0]?.isCancellationRequested).toBe(true);
    server.answers[0]!.reject(Object.assign(new Error("Request cancelled"), { code: -32800 }));
    await done;
    expect(mock.recorded.panels[0]!.lastView).toMatchObject({ label: "stopped", error: "" });
  });

  it("shows a failed request's message", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const done = panel.explain(target);
    await flush();
    server.answers[0]!.reject(new Error("there is no code in that range"));
    await done;
    expect(mock.recorded.panels[0]!.lastView).toMatchObject({
      label: "error",
      error: "there is no code in that range",
    });
  });

  it("a new Explain stops the running one and reuses the panel", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const first = panel.explain(target);
    await flush();
    panel.onChunk({ token: "one", text: "First", done: false });
    const other = { ...target, range: { start: { line: 0, character: 0 }, end: { line: 1, character: 3 } } };
    const second = panel.explain(other);
    expect(server.cancelled).toEqual(["one"]);
    server.answers[0]!.resolve("First");
    await first;
    await flush();
    expect(mock.recorded.panels).toHaveLength(1);
    const page = mock.recorded.panels[0]!;
    expect(page.title).toBe("Explain fib.py:1-2");
    expect(page.revealed).toBe(1);
    panel.onChunk({ token: "one", text: " late", done: false });
    panel.onChunk({ token: "two", text: "Second", done: false });
    server.answers[1]!.resolve("Second");
    await second;
    expect(page.lastView).toMatchObject({
      title: "Explain fib.py:1-2",
      label: "done",
      html: "<p>Second</p>\n",
    });
  });

  it("closing the panel stops the model", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    void panel.explain(target);
    await flush();
    panel.onChunk({ token: "tok", text: "Some", done: false });
    mock.recorded.panels[0]!.dispose();
    expect(server.cancelled).toEqual(["tok"]);
  });

  it("brings a reloaded page up to date when it says it is ready", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    void panel.explain(target);
    await flush();
    const page = mock.recorded.panels[0]!;
    panel.onChunk({ token: "tok", text: "Text", done: false });
    await flush();
    const before = page.posted.length;
    page.sendFromPage({ type: "ready" });
    expect(page.posted.length).toBe(before + 1);
    expect(page.lastView).toMatchObject({ html: "<p>Text</p>\n" });
  });

  it("tells the user when there is no server", async () => {
    const panel = new ExplainPanel(() => undefined, silentLog());
    await panel.explain(target);
    expect(mock.recorded.errors).toEqual(["infill: the language server is not running."]);
    expect(mock.recorded.panels).toHaveLength(0);
  });
});

describe("stopping", () => {
  beforeEach(() => {
    mock.reset();
    vi.useFakeTimers();
  });
  afterEach(() => vi.useRealTimers());

  it("cancels a stream once, however many chunks are still on their way", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const done = panel.explain(target);
    await flush();
    panel.onChunk({ token: "tok", text: "One", done: false });
    mock.recorded.panels[0]!.sendFromPage({ type: "stop" });
    mock.recorded.panels[0]!.sendFromPage({ type: "stop" });
    panel.onChunk({ token: "tok", text: " two", done: false });
    panel.onChunk({ token: "tok", text: "", done: true });
    server.answers[0]!.resolve("One two");
    await done;
    expect(server.cancelled).toEqual(["tok"]);
  });

  it("after cancelling the request before any chunk, sends no progress cancel for its late chunks", async () => {
    const server = fakeServer();
    const panel = new ExplainPanel(() => server.connection, silentLog());
    const done = panel.explain(target);
    await flush();
    mock.recorded.panels[0]!.sendFromPage({ type: "stop" });
    panel.onChunk({ token: "late", text: "x", done: false });
    server.answers[0]!.reject(Object.assign(new Error("cancelled"), { code: -32800 }));
    await done;
    expect(server.cancelled).toEqual([]);
    expect(server.tokens[0]?.isCancellationRequested).toBe(true);
  });
});
