/** Entry point: the controller, and the commands the extension contributes. */
import * as vscode from "vscode";
import {
  DISMISS_NEXT_EDIT,
  EXPLAIN_SELECTION,
  JUMP_OR_APPLY_NEXT_EDIT,
  RESTART,
  REWRITE_SELECTION,
  SHOW_OUTPUT,
  SHOW_STATUS,
  TOGGLE,
} from "./commandIds";
import { Controller } from "./controller";
import { commandTarget } from "./editorTarget";
import { SETUP_URL } from "./serverPath";
import { statusMenu, type MenuAction } from "./status";
import { toggleMessage, toggleSuggestions } from "./toggle";

let controller: Controller | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const app = new Controller();
  controller = app;
  // The controller is disposed by deactivate(), whose promise VS Code waits for: the server
  // gets its shutdown.
  context.subscriptions.push(
    vscode.commands.registerCommand(EXPLAIN_SELECTION, async (argument?: unknown) => {
      const selected = commandTarget(argument);
      if (!selected) {
        void vscode.window.showInformationMessage("infill: open a file and select the code to explain.");
        return;
      }
      await app.settled();
      const target = await app.expandTarget(selected);
      if (!target) {
        void vscode.window.showInformationMessage(
          "infill: there is no code around the cursor: select some to explain.",
        );
        return;
      }
      await app.explainPanel.explain(target);
    }),
    vscode.commands.registerCommand(REWRITE_SELECTION, async (argument?: unknown) => {
      const target = commandTarget(argument);
      if (!target) {
        void vscode.window.showInformationMessage("infill: open a file and select the code to rewrite.");
        return;
      }
      await app.settled();
      await app.rewrite(target);
    }),
    vscode.commands.registerCommand(TOGGLE, async () => {
      const outcome = await toggleSuggestions({
        get: (key) => vscode.workspace.getConfiguration("infill").get<boolean>(key),
        update: (key, value) =>
          vscode.workspace.getConfiguration("infill").update(key, value, vscode.ConfigurationTarget.Global),
      });
      app.status.render();
      vscode.window.setStatusBarMessage(toggleMessage(outcome), 3000);
    }),
    vscode.commands.registerCommand(JUMP_OR_APPLY_NEXT_EDIT, () => app.nextEdits.edits.tab()),
    vscode.commands.registerCommand(DISMISS_NEXT_EDIT, () => app.nextEdits.edits.reject()),
    vscode.commands.registerCommand(RESTART, () => app.restart()),
    vscode.commands.registerCommand(SHOW_OUTPUT, () => app.log.show()),
    vscode.commands.registerCommand(SHOW_STATUS, () => showMenu(app)),
  );
  // Not awaited: activation need not wait for the server's handshake.
  void app.start();
}

async function showMenu(app: Controller): Promise<void> {
  const items = statusMenu(app.status.input);
  const choice = await vscode.window.showQuickPick(items, {
    title: "infill",
    placeHolder: "infill: status and actions",
  });
  const actions: Record<MenuAction, () => Thenable<unknown> | Promise<unknown>> = {
    toggle: () => vscode.commands.executeCommand(TOGGLE),
    restart: () => app.restart(),
    log: async () => app.log.show(),
    settings: () => vscode.commands.executeCommand("workbench.action.openSettings", "@ext:infill-lsp.infill"),
    setup: () => vscode.env.openExternal(vscode.Uri.parse(SETUP_URL)),
  };
  if (choice?.action) {
    await actions[choice.action]();
  }
}

export async function deactivate(): Promise<void> {
  await controller?.dispose();
  controller = undefined;
}
