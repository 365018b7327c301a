/**
 * Next edits in the editor: the events that feed the logic (nextEdit.ts), the decorations that
 * show an edit, the context key that gates Tab and Esc, and the requests through the language
 * client. Every position crosses with the client's own converters (code2Protocol and
 * protocol2Code), so the encoding the client negotiated is the only one in play.
 *
 * How an edit looks: the text it replaces struck through on a red tint, the new text right
 * after it on a green tint (several lines joined by ⏎, and whole in the hover), a mark in the
 * overview ruler, and, while the cursor is on another line, "⇥ Tab: next edit ↓ line N" at the
 * end of the cursor's line.
 */
import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import { INLINE_EDIT_REQUEST, NEXT_EDIT_CAPABILITY, NEXT_EDIT_VISIBLE } from "./commandIds";
import {
  endOfInsertion,
  inlinePreview,
  isMultiLine,
  isNear,
  markerText,
  NextEdits,
  type Cursor,
  type EditCommand,
  type NextEdit,
  type NextEditHost,
  type Position,
} from "./nextEdit";

const SECTION = "infill";
const HOVER =
  "**Next edit**: Tab jumps to it from another line, and applies it on its own; Esc dismisses it.";

/** Whether next edits are on: suggestions on (`infill.enable`) and `infill.nextEdits.enabled`. */
export function nextEditsWanted(read: (key: string) => unknown): boolean {
  return read("enable") !== false && read("nextEdits.enabled") !== false;
}

/** Whether the server said it offers next edits (its `experimental` capability). */
export function offersNextEdits(client: Pick<LanguageClient, "initializeResult">): boolean {
  const experimental: unknown = client.initializeResult?.capabilities.experimental;
  return typeof experimental === "object" && experimental !== null && NEXT_EDIT_CAPABILITY in experimental;
}

export class NextEditFeature implements vscode.Disposable {
  readonly edits: NextEdits;
  private readonly removed: vscode.TextEditorDecorationType;
  private readonly inserted: vscode.TextEditorDecorationType;
  private readonly marker: vscode.TextEditorDecorationType;
  /** The editor the shown edit is drawn in. */
  private drawnIn: vscode.TextEditor | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  /**
   * `client`: the running language client, if any; `served`: whether the client syncs this
   * document (its document selector).
   */
  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly served: (document: vscode.TextDocument) => boolean,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.removed = vscode.window.createTextEditorDecorationType({
      textDecoration: "line-through",
      backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
      overviewRulerColor: new vscode.ThemeColor("editorOverviewRuler.modifiedForeground"),
      overviewRulerLane: vscode.OverviewRulerLane.Center,
      rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
    });
    this.inserted = vscode.window.createTextEditorDecorationType({
      after: {
        backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
        border: "1px solid",
        borderColor: new vscode.ThemeColor("diffEditor.insertedLineBackground"),
      },
      overviewRulerColor: new vscode.ThemeColor("editorOverviewRuler.modifiedForeground"),
      overviewRulerLane: vscode.OverviewRulerLane.Center,
    });
    this.marker = vscode.window.createTextEditorDecorationType({
      after: {
        color: new vscode.ThemeColor("editorGhostText.foreground"),
        fontStyle: "italic",
        margin: "0 0 0 2em",
      },
    });
    this.edits = new NextEdits(this.host());
    this.disposables.push(
      this.removed,
      this.inserted,
      this.marker,
      vscode.workspace.onDidChangeTextDocument((event) => {
        if (event.contentChanges.length > 0 && this.served(event.document)) {
          this.edits.changed(this.uriOf(event.document));
        }
      }),
      vscode.window.onDidChangeTextEditorSelection((event) => {
        if (event.textEditor === vscode.window.activeTextEditor) {
          this.edits.moved(this.cursor());
        }
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.edits.moved(this.cursor())),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (
          event.affectsConfiguration(`${SECTION}.enable`) ||
          event.affectsConfiguration(`${SECTION}.nextEdits`)
        ) {
          this.edits.dismiss();
          this.edits.schedule();
        }
      }),
    );
  }

  /** Whether an edit shows as decorations: then it is the suggestion, and no ghost text is. */
  get showing(): boolean {
    return this.edits.current !== undefined;
  }

  /**
   * For the inline completion middleware: the next edit waiting as ghost text at `position`
   * (an insertion at the cursor), as the item VS Code shows; its command is the server's accept
   * command, which VS Code runs when the user takes it. Undefined when there is none.
   */
  ghostItems(
    document: vscode.TextDocument,
    position: vscode.Position,
  ): vscode.InlineCompletionItem[] | undefined {
    const client = this.client();
    if (!client) {
      return undefined;
    }
    const c2p = client.code2ProtocolConverter;
    const edit = this.edits.ghostAt({
      uri: c2p.asUri(document.uri),
      version: document.version,
      position: c2p.asPosition(position),
    });
    if (!edit) {
      return undefined;
    }
    const range = client.protocol2CodeConverter.asRange(edit.range);
    const command = edit.command && { ...edit.command, arguments: edit.command.arguments ?? [] };
    return [new vscode.InlineCompletionItem(edit.text, range, command)];
  }

  private uriOf(document: vscode.TextDocument): string {
    return this.client()?.code2ProtocolConverter.asUri(document.uri) ?? document.uri.toString();
  }

  private cursor(): Cursor | undefined {
    const editor = vscode.window.activeTextEditor;
    const client = this.client();
    if (!editor || !client || !this.served(editor.document)) {
      return undefined;
    }
    const c2p = client.code2ProtocolConverter;
    return {
      uri: c2p.asUri(editor.document.uri),
      version: editor.document.version,
      position: c2p.asPosition(editor.selection.active),
    };
  }

  /** The active editor, if it shows the document `uri`. */
  private editorFor(uri: string): vscode.TextEditor | undefined {
    const editor = vscode.window.activeTextEditor;
    return editor && this.uriOf(editor.document) === uri ? editor : undefined;
  }

  private host(): NextEditHost {
    return {
      enabled: () => {
        const client = this.client();
        const section = vscode.workspace.getConfiguration(SECTION);
        return !!client && nextEditsWanted((key) => section.get(key)) && offersNextEdits(client);
      },
      cursor: () => this.cursor(),
      request: async (cursor) => {
        const client = this.client();
        if (!client) {
          return undefined;
        }
        return client.sendRequest(INLINE_EDIT_REQUEST, {
          textDocument: { uri: cursor.uri, version: cursor.version },
          position: cursor.position,
        });
      },
      notify: (method, params) => {
        void this.client()
          ?.sendNotification(method, params)
          .catch((error: unknown) => this.log.debug(`next edits: ${method}: ${String(error)}`));
      },
      show: (edit, cursor) => this.draw(edit, cursor),
      hide: () => this.erase(),
      showAsGhostText: () => {
        void vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
      },
      jump: (position) => this.jump(position),
      apply: (edit) => this.apply(edit),
      run: (command: EditCommand) =>
        vscode.commands.executeCommand(command.command, ...(command.arguments ?? [])),
      log: (message) => this.log.warn(message),
    };
  }

  private draw(edit: NextEdit, cursor: Position): void {
    const editor = this.editorFor(edit.uri);
    const client = this.client();
    if (!editor || !client) {
      return;
    }
    const p2c = client.protocol2CodeConverter;
    const range = p2c.asRange(edit.range);
    const hover = new vscode.MarkdownString(HOVER);
    if (isMultiLine(edit.text)) {
      hover.appendCodeblock(edit.text, editor.document.languageId);
    }
    editor.setDecorations(this.removed, range.isEmpty ? [] : [{ range, hoverMessage: hover }]);
    const end = new vscode.Range(range.end, range.end);
    editor.setDecorations(
      this.inserted,
      edit.text === ""
        ? []
        : [
            {
              range: end,
              hoverMessage: hover,
              renderOptions: { after: { contentText: inlinePreview(edit.text) } },
            },
          ],
    );
    this.drawMarker(editor, edit, cursor);
    this.drawnIn = editor;
    void vscode.commands.executeCommand("setContext", NEXT_EDIT_VISIBLE, true);
    // One suggestion at a time: the next edit replaces any ghost text (the middleware keeps
    // new ghost text away while it shows).
    void vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
  }

  /** The marker at the end of the cursor's line, while the edit is on other lines. */
  private drawMarker(editor: vscode.TextEditor, edit: NextEdit, cursor: Position): void {
    if (isNear(edit.range, cursor)) {
      editor.setDecorations(this.marker, []);
      return;
    }
    const line = this.client()?.protocol2CodeConverter.asPosition(cursor).line ?? cursor.line;
    const end = editor.document.lineAt(Math.min(line, editor.document.lineCount - 1)).range.end;
    editor.setDecorations(this.marker, [
      {
        range: new vscode.Range(end, end),
        renderOptions: { after: { contentText: markerText(edit, cursor.line) } },
      },
    ]);
  }

  private erase(): void {
    const editor = this.drawnIn;
    this.drawnIn = undefined;
    for (const type of [this.removed, this.inserted, this.marker]) {
      editor?.setDecorations(type, []);
    }
    void vscode.commands.executeCommand("setContext", NEXT_EDIT_VISIBLE, false);
  }

  private jump(position: Position): void {
    const editor = vscode.window.activeTextEditor;
    const client = this.client();
    if (!editor || !client) {
      return;
    }
    const at = client.protocol2CodeConverter.asPosition(position);
    editor.selection = new vscode.Selection(at, at);
    editor.revealRange(new vscode.Range(at, at), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
    editor.setDecorations(this.marker, []); // the cursor is at the edit now
  }

  private async apply(edit: NextEdit): Promise<boolean> {
    const editor = this.editorFor(edit.uri);
    const client = this.client();
    if (!editor || !client || editor.document.version !== edit.version) {
      return false;
    }
    const p2c = client.protocol2CodeConverter;
    const range = p2c.asRange(edit.range);
    // One edit with undo stops around it: one Ctrl+Z takes it back.
    const applied = await editor.edit((builder) => builder.replace(range, edit.text));
    if (applied) {
      const end = p2c.asPosition(endOfInsertion(edit.range.start, edit.text));
      editor.selection = new vscode.Selection(end, end);
    }
    return applied;
  }

  dispose(): void {
    this.edits.dispose();
    for (const disposable of this.disposables) {
      disposable.dispose();
    }
  }
}
