import { describe, expect, it } from "vitest";
import {
  endOf,
  itemsOf,
  SuggestionNotices,
  type AnsweredItem,
  type Point,
  type TextChange,
} from "../src/suggestionNotices";

const URI = "file:///work/app.ts";
const AT: Point = { line: 3, character: 8 };

/** An item as the language client hands it to VS Code: the server's accept command and id. */
function item(insertText: string, id = "ic-1"): AnsweredItem {
  return {
    insertText,
    command: { title: "Accept suggestion", command: "infill.acceptCompletion", arguments: [id] },
  };
}

function insert(at: Point, text: string): TextChange {
  return { range: { start: at, end: at }, text };
}

function recorder(): { notices: SuggestionNotices; sent: [string, unknown][] } {
  const sent: [string, unknown][] = [];
  return { notices: new SuggestionNotices((method, params) => void sent.push([method, params])), sent };
}

const WIRE = {
  insertText: "total + tax;",
  command: { title: "Accept suggestion", command: "infill.acceptCompletion", arguments: ["ic-1"] },
};

describe("SuggestionNotices", () => {
  it("says the first item of an answer was shown, as Copilot's clients do", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [item("total + tax;"), item("other", "ic-2")]);
    expect(sent).toEqual([["textDocument/didShowCompletion", { item: WIRE }]]);
  });

  it("says nothing of items the server does not count", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [{ insertText: "total" }]); // counting is off: no command
    notices.answered(URI, AT, [
      {
        insertText: "x",
        command: { title: "Accept next edit", command: "infill.acceptNextEdit", arguments: ["ne-1"] },
      },
    ]);
    notices.answered(URI, AT, []);
    notices.changed(URI, [insert(AT, "to")]);
    expect(sent).toEqual([]);
  });

  it("reports a word then a line accepted, counted from the item's start in UTF-16 units", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [item("total + tax;")]);
    notices.changed(URI, [insert(AT, "total")]);
    notices.changed(URI, [insert({ line: 3, character: 13 }, " + ")]);
    expect(sent.slice(1)).toEqual([
      ["textDocument/didPartiallyAcceptCompletion", { item: WIRE, acceptedLength: 5 }],
      ["textDocument/didPartiallyAcceptCompletion", { item: WIRE, acceptedLength: 8 }],
    ]);
  });

  it("counts an astral character as two units", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [item("'👩‍💻' + name")]);
    notices.changed(URI, [insert(AT, "'👩‍💻'")]);
    expect(sent[1]).toEqual([
      "textDocument/didPartiallyAcceptCompletion",
      expect.objectContaining({ acceptedLength: 7 }),
    ]);
  });

  it("takes one typed character along, and does not call it accepted", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [item("total + tax;")]);
    notices.changed(URI, [insert(AT, "t")]);
    notices.changed(URI, [insert({ line: 3, character: 9 }, "otal")]);
    expect(sent.slice(1)).toEqual([
      ["textDocument/didPartiallyAcceptCompletion", { item: WIRE, acceptedLength: 5 }],
    ]);
  });

  it("leaves the whole suggestion to the item's command, and forgets it after", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [item("total + tax;")]);
    notices.changed(URI, [insert(AT, "total + tax;")]);
    notices.changed(URI, [insert(endOf(AT, "total + tax;"), "  ")]);
    expect(sent).toHaveLength(1);
  });

  it("forgets a suggestion typed over, moved away from, or in another document", () => {
    for (const change of [
      insert(AT, "tx"), // diverges: the server counts it rejected
      insert({ line: 0, character: 0 }, "to"), // elsewhere
      { range: { start: { line: 3, character: 6 }, end: AT }, text: "" }, // erased back
    ]) {
      const { notices, sent } = recorder();
      notices.answered(URI, AT, [item("total + tax;")]);
      notices.changed("file:///work/other.ts", [insert(AT, "to")]);
      notices.changed(URI, [change]);
      notices.changed(URI, [insert(AT, "total")]);
      expect(sent).toHaveLength(1);
    }
  });

  it("follows a part that ends on a later line", () => {
    const { notices, sent } = recorder();
    notices.answered(URI, AT, [item("if (x) {\n  return 1;\n}")]);
    notices.changed(URI, [insert(AT, "if (x) {\n")]);
    notices.changed(URI, [insert({ line: 4, character: 0 }, "  return 1;")]);
    expect(sent.slice(1).map(([, params]) => (params as { acceptedLength: number }).acceptedLength)).toEqual([
      9, 20,
    ]);
  });
});

describe("itemsOf", () => {
  it("reads an array, a list or nothing", () => {
    expect(itemsOf([item("a")])).toHaveLength(1);
    expect(itemsOf({ items: [item("a"), item("b")] })).toHaveLength(2);
    expect(itemsOf(undefined)).toEqual([]);
    expect(itemsOf(null)).toEqual([]);
  });
});
