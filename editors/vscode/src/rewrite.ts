/**
 * Rewrite: ask for the instruction, then run the server's `infill.rewrite`, which computes the
 * edit and sends it back with `workspace/applyEdit` (one WorkspaceEdit: one undo step).
 */
import * as vscode from "vscode";
import { instructionItems } from "./instructions";
import type { CommandTarget } from "./targets";

/** `infill.rewrite`'s answer. */
export interface RewriteResult {
  readonly applied: boolean;
  readonly reason?: string | null;
}

export interface RewriteConnection {
  rewrite(target: CommandTarget, instruction: string, token: vscode.CancellationToken): Promise<unknown>;
}

/** A quick pick of the presets that also takes the user's own words; undefined if dismissed. */
export function pickInstruction(): Promise<string | undefined> {
  return new Promise((resolve) => {
    const pick = vscode.window.createQuickPick<vscode.QuickPickItem>();
    pick.title = "infill: Rewrite";
    pick.placeholder = "How should the code change? Pick one or type your own instruction";
    pick.items = instructionItems("");
    pick.matchOnDescription = false;
    let chosen: string | undefined;
    pick.onDidChangeValue((value) => {
      pick.items = instructionItems(value);
    });
    pick.onDidAccept(() => {
      chosen = pick.selectedItems[0]?.label ?? (pick.value.trim() || undefined);
      pick.hide();
    });
    pick.onDidHide(() => {
      pick.dispose();
      resolve(chosen);
    });
    pick.show();
  });
}

/** What to tell the user about the server's answer (undefined: it was applied). */
export function rewriteOutcome(result: unknown): string | undefined {
  const answer = result as RewriteResult | null;
  if (answer && answer.applied === true) {
    return undefined;
  }
  const reason =
    answer && typeof answer.reason === "string" && answer.reason ? answer.reason : "nothing was changed";
  return `infill: the rewrite was not applied: ${reason}`;
}

/** Asks for the instruction, rewrites with progress, and reports an edit that did not land. */
export async function runRewrite(
  target: CommandTarget,
  connection: RewriteConnection,
  log: vscode.LogOutputChannel,
): Promise<void> {
  const instruction = await pickInstruction();
  if (!instruction) {
    return;
  }
  try {
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "infill: rewriting...", cancellable: true },
      (_progress, token) => connection.rewrite(target, instruction, token),
    );
    const problem = rewriteOutcome(result);
    if (problem) {
      // The server has already shown its reason as a message; the status bar keeps it a
      // while longer without a second notification.
      log.warn(problem);
      vscode.window.setStatusBarMessage(`$(warning) ${problem}`, 10_000);
    }
  } catch (error) {
    if (isCancellation(error)) {
      return; // the user cancelled the progress notification
    }
    const message = error instanceof Error ? error.message : String(error);
    log.error(`infill.rewrite failed: ${message}`);
    void vscode.window.showErrorMessage(`infill: rewrite failed: ${message}`);
  }
}

/** LSP's RequestCancelled (-32800): how a request the user cancelled comes back. */
export function isCancellation(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === -32800;
}
