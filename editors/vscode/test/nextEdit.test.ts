import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  endOfInsertion,
  inlinePreview,
  markerText,
  NEXT_EDIT_DEBOUNCE_MS,
  NextEdits,
  parseNextEdits,
  TabOutcome,
  type Cursor,
  type EditCommand,
  type NextEdit,
  type NextEditHost,
  type Position,
} from "../src/nextEdit";

const URI = "file:///work/my%20project/caf%C3%A9.py";

/** An edit as the server sends it: `total` -> `amount` at line `line`, offered as `id`. */
function wire(id: string, line: number, version = 3, text = "amount", character = 11) {
  return {
    text,
    textDocument: { uri: URI, version },
    range: { start: { line, character }, end: { line, character: character + 5 } },
    command: { title: "Accept next edit", command: "infill.acceptNextEdit", arguments: [id] },
  };
}

/** A host that records what the logic asks of VS Code; the editor is a cursor and a version. */
class FakeHost implements NextEditHost {
  on = true;
  place: Cursor | undefined = { uri: URI, version: 3, position: { line: 1, character: 10 } };
  answer: unknown = { edits: [wire("ne-1", 4), wire("ne-2", 6)] };
  readonly requests: Cursor[] = [];
  readonly notified: [string, object][] = [];
  readonly shown: { edit: NextEdit; cursor: Position }[] = [];
  readonly ghosts: NextEdit[] = [];
  readonly jumps: Position[] = [];
  readonly applied: NextEdit[] = [];
  readonly ran: EditCommand[] = [];
  readonly logs: string[] = [];
  hidden = 0;
  applies = true;

  enabled = () => this.on;
  cursor = () => this.place;
  request = async (cursor: Cursor) => {
    this.requests.push(cursor);
    return this.answer;
  };
  notify = (method: string, params: object) => void this.notified.push([method, params]);
  show = (edit: NextEdit, cursor: Position) => void this.shown.push({ edit, cursor });
  hide = () => void this.hidden++;
  showAsGhostText = (edit: NextEdit) => void this.ghosts.push(edit);
  jump = (position: Position) => {
    this.jumps.push(position);
    if (this.place) {
      this.place = { ...this.place, position };
    }
  };
  apply = async (edit: NextEdit) => {
    this.applied.push(edit);
    return this.applies;
  };
  run = async (command: EditCommand) => void this.ran.push(command);
  log = (message: string) => void this.logs.push(message);

  moveTo(line: number, character: number): Cursor {
    this.place = { uri: URI, version: this.place?.version ?? 3, position: { line, character } };
    return this.place;
  }
}

describe("the server's answer", () => {
  it("keeps the edits about this document and version, in the server's order, with their ids", () => {
    const answer = {
      edits: [
        wire("ne-1", 4),
        wire("ne-2", 2, 2), // another version
        { ...wire("ne-3", 5), textDocument: { uri: "file:///other.py", version: 3 } },
        { ...wire("ne-4", 5), range: { start: { line: 5, character: 9 }, end: { line: 5, character: 2 } } },
        { ...wire("ne-5", 5), text: 7 },
        wire("ne-6", 1),
      ],
    };
    const edits = parseNextEdits(answer, URI, 3);
    expect(edits.map((e) => e.id)).toEqual(["ne-1", "ne-6"]);
    expect(edits[0]).toEqual({
      id: "ne-1",
      uri: URI,
      version: 3,
      range: { start: { line: 4, character: 11 }, end: { line: 4, character: 16 } },
      text: "amount",
      command: { title: "Accept next edit", command: "infill.acceptNextEdit", arguments: ["ne-1"] },
    });
    expect(parseNextEdits({ edits: [] }, URI, 3)).toEqual([]);
    expect(parseNextEdits(null, URI, 3)).toEqual([]);
  });

  it("words the marker and the preview", () => {
    const [edit] = parseNextEdits({ edits: [wire("ne-1", 4)] }, URI, 3);
    expect(markerText(edit!, 1)).toBe("⇥ Tab: next edit ↓ line 5");
    expect(markerText(edit!, 9)).toBe("⇥ Tab: next edit ↑ line 5");
    expect(inlinePreview("if x:\n    y()")).toBe("if x: ⏎     y()");
    expect(endOfInsertion({ line: 4, character: 11 }, "amount")).toEqual({ line: 4, character: 17 });
    expect(endOfInsertion({ line: 4, character: 11 }, "a\r\nbc")).toEqual({ line: 5, character: 2 });
  });
});

describe("next edits (nextEdit.ts)", () => {
  let host: FakeHost;
  let edits: NextEdits;

  beforeEach(() => {
    vi.useFakeTimers();
    host = new FakeHost();
    edits = new NextEdits(host);
  });
  afterEach(() => {
    edits.dispose();
    vi.useRealTimers();
  });

  /** Lets the debounce run out and the (fake) server answer. */
  async function settle(): Promise<void> {
    await vi.advanceTimersByTimeAsync(NEXT_EDIT_DEBOUNCE_MS);
  }

  it("asks once the editor held still, once for a burst of changes and moves", async () => {
    edits.changed(URI);
    await vi.advanceTimersByTimeAsync(NEXT_EDIT_DEBOUNCE_MS - 50);
    edits.moved(host.moveTo(1, 11));
    edits.changed(URI);
    await vi.advanceTimersByTimeAsync(NEXT_EDIT_DEBOUNCE_MS - 50);
    expect(host.requests).toEqual([]);
    await vi.advanceTimersByTimeAsync(50);
    expect(host.requests).toEqual([{ uri: URI, version: 3, position: { line: 1, character: 11 } }]);
  });

  it("asks nothing while next edits are off or the server does not offer them", async () => {
    host.on = false;
    edits.changed(URI);
    await settle();
    expect(host.requests).toEqual([]);
    expect(host.shown).toEqual([]);
  });

  it("shows the first edit and tells the server once", async () => {
    edits.changed(URI);
    await settle();
    expect(host.shown.map((s) => s.edit.id)).toEqual(["ne-1"]);
    expect(host.shown[0]?.cursor).toEqual({ line: 1, character: 10 });
    expect(edits.current?.id).toBe("ne-1");
    expect(host.notified).toEqual([["textDocument/didShowInlineEdit", { id: "ne-1" }]]);
  });

  it("Tab jumps to an edit away from the cursor, then Tab applies it with one edit and runs its command", async () => {
    edits.changed(URI);
    await settle();
    expect(await edits.tab()).toBe(TabOutcome.Jumped);
    expect(host.jumps).toEqual([{ line: 4, character: 11 }]);
    expect(host.applied).toEqual([]);
    edits.moved(host.place); // VS Code reports the jump: the edit stays
    expect(edits.current?.id).toBe("ne-1");

    expect(await edits.tab()).toBe(TabOutcome.Applied);
    expect(host.applied.map((e) => [e.id, e.text, e.range])).toEqual([
      ["ne-1", "amount", { start: { line: 4, character: 11 }, end: { line: 4, character: 16 } }],
    ]);
    expect(host.ran).toEqual([
      { title: "Accept next edit", command: "infill.acceptNextEdit", arguments: ["ne-1"] },
    ]);
    expect(edits.current).toBeUndefined();
    expect(host.hidden).toBe(1);
    expect(await edits.tab()).toBe(TabOutcome.Nothing);
    expect(host.applied).toHaveLength(1);
  });

  it("Tab applies at once when the cursor is on the edit's line", async () => {
    host.moveTo(4, 0);
    edits.changed(URI);
    await settle();
    expect(await edits.tab()).toBe(TabOutcome.Applied);
    expect(host.jumps).toEqual([]);
    expect(host.applied.map((e) => e.id)).toEqual(["ne-1"]);
  });

  it("drops an edit whose document version moved on, applying nothing", async () => {
    host.moveTo(4, 0);
    edits.changed(URI);
    await settle();
    host.place = { uri: URI, version: 4, position: { line: 4, character: 0 } }; // no event yet
    expect(await edits.tab()).toBe(TabOutcome.Stale);
    expect(host.applied).toEqual([]);
    expect(host.ran).toEqual([]);
    expect(edits.current).toBeUndefined();
  });

  it("runs no command when the editor refused the edit", async () => {
    host.moveTo(4, 0);
    host.applies = false;
    edits.changed(URI);
    await settle();
    expect(await edits.tab()).toBe(TabOutcome.Stale);
    expect(host.ran).toEqual([]);
  });

  it("Esc rejects: the server hears of it, and the same edit is not shown again for this version", async () => {
    edits.changed(URI);
    await settle();
    expect(edits.reject()).toBe(true);
    expect(host.notified.at(-1)).toEqual(["infill/didRejectNextEdit", { id: "ne-1" }]);
    expect(edits.current).toBeUndefined();
    expect(host.hidden).toBe(1);
    expect(edits.reject()).toBe(false);

    // The cursor moves and the server offers the same edits again, under new ids.
    host.answer = { edits: [wire("ne-3", 4), wire("ne-4", 6)] };
    edits.moved(host.moveTo(2, 0));
    await settle();
    expect(edits.current?.id).toBe("ne-4");
    expect(host.shown.map((s) => s.edit.range.start.line)).toEqual([4, 6]);
  });

  it("a change of the document clears the edit; a move elsewhere clears it and asks again", async () => {
    edits.changed(URI);
    await settle();
    edits.changed("file:///another.py"); // another document: this one's edit still holds
    expect(edits.current?.id).toBe("ne-1");
    edits.changed(URI);
    expect(edits.current).toBeUndefined();
    await settle();
    expect(edits.current?.id).toBe("ne-1");
    const before = host.requests.length;
    edits.moved(host.moveTo(1, 10)); // where it was asked for: it stays, nothing is asked
    expect(edits.current?.id).toBe("ne-1");
    edits.moved(host.moveTo(2, 3));
    expect(edits.current).toBeUndefined();
    await settle();
    expect(host.requests.slice(before)).toEqual([
      { uri: URI, version: 3, position: { line: 2, character: 3 } },
    ]);
  });

  it("the same edit offered again keeps its first offer: shown once, accepted under its first id", async () => {
    edits.changed(URI);
    await settle();
    host.answer = { edits: [wire("ne-7", 4)] };
    edits.moved(host.moveTo(2, 0));
    await settle();
    expect(host.notified).toEqual([["textDocument/didShowInlineEdit", { id: "ne-1" }]]);
    expect(await edits.tab()).toBe(TabOutcome.Jumped);
    expect(await edits.tab()).toBe(TabOutcome.Applied);
    expect(host.ran.map((c) => c.arguments)).toEqual([["ne-1"]]);
    // A new version of the document: a new offer.
    edits.changed(URI);
    host.place = { uri: URI, version: 4, position: { line: 4, character: 12 } };
    host.answer = { edits: [wire("ne-8", 4, 4)] };
    await settle();
    expect(await edits.tab()).toBe(TabOutcome.Applied);
    expect(host.ran.map((c) => c.arguments)).toEqual([["ne-1"], ["ne-8"]]);
  });

  it("drops an answer that comes after the cursor moved on", async () => {
    let answer!: (value: unknown) => void;
    host.request = (cursor) => {
      host.requests.push(cursor);
      return new Promise((resolve) => (answer = resolve));
    };
    edits.changed(URI);
    await settle();
    host.moveTo(3, 0);
    answer({ edits: [wire("ne-1", 4)] });
    await vi.advanceTimersByTimeAsync(0);
    expect(host.shown).toEqual([]);
    expect(host.notified).toEqual([]);
  });

  it("an insertion at the cursor goes to ghost text, and counts as shown when VS Code shows it", async () => {
    const insertion = {
      ...wire("ne-9", 1, 3, "await "),
      range: { start: { line: 1, character: 10 }, end: { line: 1, character: 10 } },
    };
    host.answer = { edits: [insertion] };
    edits.changed(URI);
    await settle();
    expect(host.shown).toEqual([]);
    expect(host.ghosts.map((e) => e.id)).toEqual(["ne-9"]);
    expect(edits.current).toBeUndefined();
    expect(host.notified).toEqual([]);
    const here = { uri: URI, version: 3, position: { line: 1, character: 10 } };
    expect(edits.ghostAt({ ...here, position: { line: 1, character: 9 } })).toBeUndefined();
    expect(edits.ghostAt(here)?.text).toBe("await ");
    expect(edits.ghostAt(here)?.id).toBe("ne-9");
    expect(host.notified).toEqual([["textDocument/didShowInlineEdit", { id: "ne-9" }]]);
    edits.changed(URI);
    expect(edits.ghostAt(here)).toBeUndefined();
  });

  it("logs a failed request and shows nothing", async () => {
    host.request = async () => {
      throw new Error("server stopped");
    };
    edits.changed(URI);
    await settle();
    expect(host.logs).toEqual(["next edits: server stopped"]);
    expect(host.shown).toEqual([]);
  });
});
