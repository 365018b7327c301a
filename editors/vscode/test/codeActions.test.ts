import { describe, expect, it } from "vitest";
import * as vscode from "vscode";
import { adaptCodeActions, REWRITE_TITLE } from "../src/codeActions";

const range = { start: { line: 2, character: 0 }, end: { line: 6, character: 14 } };
const uri = "file:///work/fib.py";

/** The actions as the language client hands them over from the server (lsp_server/code_actions.py). */
function serverActions() {
  const explain = new vscode.CodeAction("Explain", vscode.CodeActionKind.Refactor.append("explain"));
  explain.command = { title: "Explain", command: "infill.explain", arguments: [{ uri, range }] };
  const rewrite = Object.assign(new vscode.CodeAction("Rewrite", vscode.CodeActionKind.RefactorRewrite), {
    data: {
      uri,
      range,
      version: 4,
      instruction: "Make it clearer and more idiomatic without changing what it does.",
    },
  });
  const fix = Object.assign(new vscode.CodeAction("Fix", vscode.CodeActionKind.QuickFix), {
    data: { uri, range, version: 4, instruction: "Fix: line 3: undefined name" },
  });
  return { explain, rewrite, fix };
}

describe("the lightbulb's actions", () => {
  it("Explain opens the panel: the extension's command with the action's uri and range", () => {
    const { explain } = serverActions();
    const [adapted] = adaptCodeActions([explain] as never) as vscode.CodeAction[];
    expect(adapted?.title).toBe("Explain");
    expect(adapted?.command).toEqual({
      title: "Explain",
      command: "infill.explainSelection",
      arguments: [{ uri, range }],
    });
  });

  it("Rewrite asks for the instruction: a new action, without the data that VS Code would resolve, its version kept", () => {
    const { rewrite } = serverActions();
    const [adapted] = adaptCodeActions([rewrite] as never) as vscode.CodeAction[];
    expect(adapted).not.toBe(rewrite);
    expect(adapted).not.toHaveProperty("data");
    expect(adapted?.title).toBe(REWRITE_TITLE);
    expect(adapted?.kind?.value).toBe("refactor.rewrite");
    expect(adapted?.command).toEqual({
      title: REWRITE_TITLE,
      command: "infill.rewriteSelection",
      arguments: [{ uri, range, version: 4 }],
    });
  });

  it("Rewrite from a server that sends a command (no resolve support) is routed the same way", () => {
    const legacy = new vscode.CodeAction("Rewrite...", vscode.CodeActionKind.RefactorRewrite);
    legacy.command = { title: "Rewrite...", command: "infill.rewrite", arguments: [{ uri, range }] };
    const [adapted] = adaptCodeActions([legacy] as never) as vscode.CodeAction[];
    expect(adapted?.command?.command).toBe("infill.rewriteSelection");
  });

  it("keeps Fix exactly as the server sent it, in order", () => {
    const { explain, rewrite, fix } = serverActions();
    const adapted = adaptCodeActions([explain, rewrite, fix] as never) as vscode.CodeAction[];
    expect(adapted.map((a) => a.title)).toEqual(["Explain", REWRITE_TITLE, "Fix"]);
    expect(adapted[2]).toBe(fix);
    expect(adapted[2]).toHaveProperty("data.instruction", "Fix: line 3: undefined name");
  });

  it("passes other servers' commands and an empty answer through", () => {
    const command = { title: "Other", command: "other.run" };
    expect(adaptCodeActions([command] as never)).toEqual([command]);
    expect(adaptCodeActions(undefined)).toBeUndefined();
    expect(adaptCodeActions(null)).toBeUndefined();
  });
});
