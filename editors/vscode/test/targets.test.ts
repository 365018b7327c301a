import { describe, expect, it } from "vitest";
import { CUSTOM_DESCRIPTION, instructionItems, PRESET_INSTRUCTIONS } from "../src/instructions";
import { describeTarget, explainTargetIn, fileName, isEmptyRange, parseTarget } from "../src/targets";
import { isCancellation, rewriteOutcome } from "../src/rewrite";

const range = (a: number, b: number, c: number, d: number) => ({
  start: { line: a, character: b },
  end: { line: c, character: d },
});

describe("command targets", () => {
  it("takes {uri, range, version} as the server's actions carry it", () => {
    expect(parseTarget({ uri: "file:///a.py", range: range(1, 0, 3, 4), version: 2 })).toEqual({
      uri: "file:///a.py",
      range: range(1, 0, 3, 4),
      version: 2,
    });
  });

  it("keeps no version that is not a whole number (the server then checks after the rewrite)", () => {
    for (const version of [undefined, "2", 1.5, null]) {
      expect(parseTarget({ uri: "file:///a.py", range: range(1, 0, 3, 4), version })).toEqual({
        uri: "file:///a.py",
        range: range(1, 0, 3, 4),
      });
    }
  });

  it("treats anything else (nothing from the palette, a Uri from the context menu) as no target", () => {
    expect(parseTarget(undefined)).toBeUndefined();
    expect(parseTarget({ scheme: "file", path: "/a.py" })).toBeUndefined();
    expect(
      parseTarget({
        uri: "file:///a.py",
        range: { start: { line: -1, character: 0 }, end: { line: 0, character: 0 } },
      }),
    ).toBeUndefined();
  });

  it("names the file and the lines people count", () => {
    expect(describeTarget({ uri: "file:///w/fib.py", range: range(4, 0, 8, 12) })).toBe("fib.py:5-9");
    expect(describeTarget({ uri: "file:///w/fib.py", range: range(4, 3, 4, 3) })).toBe("fib.py:5");
    // A selection of whole lines ends at the start of the next one, which it does not hold.
    expect(describeTarget({ uri: "file:///w/fib.py", range: range(4, 0, 9, 0) })).toBe("fib.py:5-9");
  });

  it("names untitled and escaped files readably", () => {
    expect(fileName("untitled:Untitled-1")).toBe("Untitled-1");
    expect(fileName("file:///w/my%20file.py")).toBe("my file.py");
  });
});

describe("rewrite instructions", () => {
  it("offers the server's presets, the clearer-code one first", () => {
    expect(instructionItems("").map((i) => i.label)).toEqual([...PRESET_INSTRUCTIONS]);
    expect(PRESET_INSTRUCTIONS[0]).toBe("Make it clearer and more idiomatic without changing what it does.");
  });

  it("puts the user's own words first, always shown", () => {
    const items = instructionItems("  Use a dict comprehension. ");
    expect(items[0]).toEqual({
      label: "Use a dict comprehension.",
      description: CUSTOM_DESCRIPTION,
      alwaysShow: true,
    });
    expect(items).toHaveLength(PRESET_INSTRUCTIONS.length + 1);
  });

  it("does not repeat a preset the user typed out", () => {
    expect(instructionItems("Add type hints.")).toHaveLength(PRESET_INSTRUCTIONS.length);
  });
});

describe("the rewrite's outcome", () => {
  it("says nothing when the edit was applied, and why not otherwise", () => {
    expect(rewriteOutcome({ applied: true, reason: null })).toBeUndefined();
    expect(
      rewriteOutcome({ applied: false, reason: "the document changed while the rewrite was being written" }),
    ).toBe("infill: the rewrite was not applied: the document changed while the rewrite was being written");
    expect(rewriteOutcome(null)).toBe("infill: the rewrite was not applied: nothing was changed");
  });

  it("recognises a cancelled request", () => {
    expect(isCancellation({ code: -32800, message: "Request cancelled" })).toBe(true);
    expect(isCancellation({ code: -32803, message: "model not loaded" })).toBe(false);
    expect(isCancellation(undefined)).toBe(false);
  });
});

describe("the block around the cursor", () => {
  it("is the range of the server's Explain action", () => {
    const actions = [
      { title: "Rewrite", kind: "refactor.rewrite", data: { uri: "file:///a.py", range: range(0, 0, 9, 9) } },
      {
        title: "Explain",
        kind: "refactor.explain",
        command: {
          command: "infill.explain",
          arguments: [{ uri: "file:///a.py", range: range(0, 0, 3, 46) }],
        },
      },
    ];
    expect(explainTargetIn(actions, "refactor.explain")).toEqual({
      uri: "file:///a.py",
      range: range(0, 0, 3, 46),
    });
  });

  it("is missing when the server offers no Explain (no code there)", () => {
    expect(explainTargetIn([], "refactor.explain")).toBeUndefined();
    expect(explainTargetIn(null, "refactor.explain")).toBeUndefined();
  });

  it("is only looked for when nothing is selected", () => {
    expect(isEmptyRange(range(3, 4, 3, 4))).toBe(true);
    expect(isEmptyRange(range(3, 4, 3, 5))).toBe(false);
    expect(isEmptyRange(range(3, 4, 4, 4))).toBe(false);
  });
});
