/**
 * The code action middleware. The server's "Explain" runs its command straight away and its
 * "Rewrite" is resolved with a fixed instruction; in VS Code both go through the extension's
 * commands instead, so that Explain opens the panel and Rewrite asks for the instruction.
 * "Fix" (and anything else) stays as the server sent it.
 */
import * as vscode from "vscode";
import {
  EXPLAIN_KIND,
  EXPLAIN_SELECTION,
  REWRITE_KIND,
  REWRITE_SELECTION,
  SERVER_EXPLAIN,
  SERVER_REWRITE,
} from "./commandIds";
import { parseTarget, type CommandTarget } from "./targets";

export const REWRITE_TITLE = "Rewrite...";

type Item = vscode.Command | vscode.CodeAction;

function isCommand(item: Item): item is vscode.Command {
  return typeof (item as vscode.Command).command === "string";
}

function kindIs(action: vscode.CodeAction, kind: string): boolean {
  return action.kind?.value === kind;
}

/** The uri and range the server put on an action: in its command's arguments or its data. */
function actionTarget(action: vscode.CodeAction): CommandTarget | undefined {
  return parseTarget(action.command?.arguments?.[0]) ?? parseTarget((action as { data?: unknown }).data);
}

/** The server's actions, with Explain and Rewrite routed through the extension's commands. */
export function adaptCodeActions(items: readonly Item[] | null | undefined): Item[] | undefined {
  if (!items) {
    return undefined;
  }
  return items.map((item) => {
    if (isCommand(item)) {
      return item;
    }
    const target = actionTarget(item);
    if (!target) {
      return item;
    }
    if (kindIs(item, EXPLAIN_KIND) || item.command?.command === SERVER_EXPLAIN) {
      item.command = { title: item.title, command: EXPLAIN_SELECTION, arguments: [target] };
      return item;
    }
    if (kindIs(item, REWRITE_KIND) || item.command?.command === SERVER_REWRITE) {
      // A new action: the server's one carries `data`, and VS Code would resolve it (running
      // the model with the default instruction) before running our command.
      const action = new vscode.CodeAction(REWRITE_TITLE, vscode.CodeActionKind.RefactorRewrite);
      action.command = { title: REWRITE_TITLE, command: REWRITE_SELECTION, arguments: [target] };
      return action;
    }
    return item;
  });
}
