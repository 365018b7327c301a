import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { NEXT_EDIT_DEBOUNCE_MS, TabOutcome } from "../src/nextEdit";
import { NextEditFeature, nextEditsWanted, offersNextEdits } from "../src/nextEditView";
import { silentLog } from "./fakes";
import { events, Position, Range, recorded, reset, Selection, window } from "./vscode-mock";

const URI = "file:///work/my%20project/caf%C3%A9.py";
const LINES = [
  "def total_of(prices):",
  "    total = 0",
  "    for p in prices:",
  "        total += p",
  "    return total",
];

/** An edit the server sends: `total` -> `amount` on `line`, at `character`. */
function wire(id: string, line: number, character: number, version = 5) {
  return {
    text: "amount",
    textDocument: { uri: URI, version },
    range: { start: { line, character }, end: { line, character: character + 5 } },
    command: { title: "Accept next edit", command: "infill.acceptNextEdit", arguments: [id] },
  };
}

/** The language client as the feature uses it; its converters map positions one to one. */
function fakeClient(answer: unknown, experimental: unknown = { nextEditSuggestions: {} }) {
  const toCode = (p: { line: number; character: number }) => new Position(p.line, p.character);
  return {
    requests: [] as unknown[],
    notifications: [] as [string, unknown][],
    initializeResult: { capabilities: { experimental } },
    code2ProtocolConverter: {
      asUri: (uri: { toString(): string }) => uri.toString(),
      asPosition: (p: Position) => ({ line: p.line, character: p.character }),
    },
    protocol2CodeConverter: {
      asPosition: toCode,
      asRange: (r: { start: Position; end: Position }) => new Range(toCode(r.start), toCode(r.end)),
    },
    async sendRequest(method: string, params: unknown) {
      this.requests.push([method, params]);
      return answer;
    },
    async sendNotification(method: string, params: unknown) {
      this.notifications.push([method, params]);
    },
  };
}

/** The active editor: its document, selection, decorations, and each `edit` call's replaces. */
function fakeEditor(version = 5) {
  const editor = {
    document: {
      uri: { scheme: "file", toString: () => URI },
      version,
      languageId: "python",
      lineCount: LINES.length,
      lineAt: (line: number) => ({ range: { end: new Position(line, LINES[line]!.length) } }),
    },
    selection: new Selection(new Position(1, 9), new Position(1, 9)),
    decorations: new Map<unknown, unknown[]>(),
    edits: [] as [Range, string][][],
    revealed: [] as Range[],
    setDecorations(type: unknown, options: unknown[]) {
      this.decorations.set(type, options);
    },
    async edit(build: (builder: { replace(range: Range, text: string): void }) => void) {
      const replaces: [Range, string][] = [];
      build({ replace: (range, text) => replaces.push([range, text]) });
      this.edits.push(replaces);
      return true;
    },
    revealRange(range: Range) {
      this.revealed.push(range);
    },
  };
  return editor;
}

function contexts(): unknown[] {
  return recorded.commands.filter((c) => c[0] === "setContext").map((c) => c[2]);
}

describe("next edits in the editor (nextEditView.ts)", () => {
  let feature: NextEditFeature | undefined;

  beforeEach(() => {
    reset();
    vi.useFakeTimers();
  });
  afterEach(() => {
    feature?.dispose();
    vi.useRealTimers();
  });

  function start(answer: unknown, editor = fakeEditor()) {
    const client = fakeClient(answer);
    window.activeTextEditor = editor;
    feature = new NextEditFeature(
      () => client as never,
      (document) => document.uri.scheme === "file",
      silentLog(),
    );
    return { client, editor, feature };
  }

  it("asks for the cursor's document and version, and draws the edit: struck through, the new text after it, the marker", async () => {
    const { client, editor } = start({ edits: [wire("ne-1", 3, 8)] });
    events.selectionChanged.fire({ textEditor: editor });
    await vi.advanceTimersByTimeAsync(NEXT_EDIT_DEBOUNCE_MS);
    expect(client.requests).toEqual([
      [
        "textDocument/copilotInlineEdit",
        { textDocument: { uri: URI, version: 5 }, position: { line: 1, character: 9 } },
      ],
    ]);
    const [removed, inserted, marker] = recorded.decorationTypes;
    expect(removed?.options.textDecoration).toBe("line-through");
    const struck = editor.decorations.get(removed) as { range: Range }[];
    expect(struck.map((d) => [d.range.start, d.range.end])).toEqual([
      [new Position(3, 8), new Position(3, 13)],
    ]);
    const after = editor.decorations.get(inserted) as { range: Range; renderOptions: unknown }[];
    expect(after[0]?.range.start).toEqual(new Position(3, 13));
    expect(after[0]?.renderOptions).toEqual({ after: { contentText: "amount" } });
    const mark = editor.decorations.get(marker) as { range: Range; renderOptions: unknown }[];
    expect(mark[0]?.range.start).toEqual(new Position(1, LINES[1]!.length)); // the cursor's line
    expect(mark[0]?.renderOptions).toEqual({ after: { contentText: "⇥ Tab: next edit ↓ line 4" } });
    expect(contexts()).toEqual([true]);
    expect(client.notifications).toEqual([["textDocument/didShowInlineEdit", { id: "ne-1" }]]);
  });

  it("Tab, Tab: the cursor goes to the edit, then one editor edit replaces it and the accept command runs", async () => {
    const { editor, feature: f } = start({ edits: [wire("ne-1", 3, 8)] });
    await f.edits.requestNow();
    expect(await f.edits.tab()).toBe(TabOutcome.Jumped);
    expect(editor.selection.active).toEqual(new Position(3, 8));
    expect(editor.revealed).toHaveLength(1);
    expect(editor.decorations.get(recorded.decorationTypes[2])).toEqual([]); // no marker now
    events.selectionChanged.fire({ textEditor: editor }); // VS Code reports the jump
    expect(await f.edits.tab()).toBe(TabOutcome.Applied);
    expect(editor.edits).toEqual([[[new Range(new Position(3, 8), new Position(3, 13)), "amount"]]]);
    expect(editor.selection.active).toEqual(new Position(3, 14));
    expect(recorded.commands).toContainEqual(["infill.acceptNextEdit", "ne-1"]);
    expect(contexts()).toEqual([true, false]);
    for (const type of recorded.decorationTypes) {
      expect(editor.decorations.get(type)).toEqual([]);
    }
  });

  it("applies nothing to a document that changed since", async () => {
    const editor = fakeEditor();
    const { feature: f } = start({ edits: [wire("ne-1", 1, 4)] }, editor);
    await f.edits.requestNow();
    editor.document.version = 6;
    expect(await f.edits.tab()).toBe(TabOutcome.Stale);
    expect(editor.edits).toEqual([]);
    expect(recorded.commands.some((c) => c[0] === "infill.acceptNextEdit")).toBe(false);
  });

  it("Esc tells the server the edit was rejected and removes it", async () => {
    const { client, editor, feature: f } = start({ edits: [wire("ne-1", 3, 8)] });
    await f.edits.requestNow();
    expect(f.edits.reject()).toBe(true);
    expect(client.notifications.at(-1)).toEqual(["infill/didRejectNextEdit", { id: "ne-1" }]);
    expect(editor.decorations.get(recorded.decorationTypes[0])).toEqual([]);
    expect(contexts()).toEqual([true, false]);
  });

  it("an insertion at the cursor is handed to VS Code as ghost text, with the accept command", async () => {
    const insertion = {
      ...wire("ne-2", 1, 9),
      text: "_sum",
      range: { start: { line: 1, character: 9 }, end: { line: 1, character: 9 } },
    };
    const { editor, feature: f } = start({ edits: [insertion] });
    await f.edits.requestNow();
    expect(recorded.commands).toContainEqual(["editor.action.inlineSuggest.trigger"]);
    expect(f.showing).toBe(false);
    const items = f.ghostItems(editor.document as never, new Position(1, 9) as never);
    expect(items).toHaveLength(1);
    expect(items?.[0]).toMatchObject({
      insertText: "_sum",
      range: new Range(new Position(1, 9), new Position(1, 9)),
      command: { command: "infill.acceptNextEdit", arguments: ["ne-2"] },
    });
    expect(f.ghostItems(editor.document as never, new Position(1, 8) as never)).toBeUndefined();
  });

  it("asks nothing when the server does not offer next edits, or the settings turn them off", async () => {
    expect(offersNextEdits({ initializeResult: { capabilities: {} } } as never)).toBe(false);
    expect(offersNextEdits({ initializeResult: undefined } as never)).toBe(false);
    expect(offersNextEdits(fakeClient({}) as never)).toBe(true);
    expect(nextEditsWanted(() => undefined)).toBe(true);
    expect(nextEditsWanted((key) => (key === "enable" ? false : undefined))).toBe(false);
    expect(nextEditsWanted((key) => (key === "nextEdits.enabled" ? false : undefined))).toBe(false);

    recorded.settings.set("infill.nextEdits.enabled", false);
    const { client, feature: f } = start({ edits: [wire("ne-1", 3, 8)] });
    await f.edits.requestNow();
    expect(client.requests).toEqual([]);
  });
});
