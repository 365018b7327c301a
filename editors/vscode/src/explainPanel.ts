/**
 * The Explain panel: a webview beside the editor that fills as the server streams its answer
 * (`infill/explainChunk`), with a Stop button that cancels the stream's progress token.
 * One panel, one explanation at a time: a new Explain waits for the previous request to
 * settle (after stopping it), then reuses the panel.
 */
import * as vscode from "vscode";
import { ExplainRouter, type ExplainChunk, type ExplainSession, type ProgressToken } from "./explainSession";
import { explainPage, explainView, isWebviewMessage, makeNonce, panelTitle } from "./explainView";
import { describeTarget, type CommandTarget } from "./targets";

export const PANEL_VIEW_TYPE = "infill.explain";

/** What the panel needs from the language client. */
export interface ExplainConnection {
  /** `workspace/executeCommand` `infill.explain`; resolves with the whole answer. */
  explain(target: CommandTarget, token: vscode.CancellationToken): Promise<unknown>;
  /** `window/workDoneProgress/cancel`: the server stops and the command returns what came. */
  cancelProgress(token: ProgressToken): void;
}

/** Milliseconds between two repaints while text streams in. */
const REPAINT_MS = 50;
/** How long a new Explain waits for a stopped one to settle before going ahead anyway. */
const SETTLE_MS = 5000;

interface Running {
  readonly session: ExplainSession;
  readonly cancel: vscode.CancellationTokenSource;
  readonly settled: Promise<void>;
}

export class ExplainPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private readonly router = new ExplainRouter();
  private running: Running | undefined;
  private repaint: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly connection: () => ExplainConnection | undefined,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  /** An `infill/explainChunk` notification. */
  onChunk(chunk: ExplainChunk): void {
    if (this.router.accept(chunk)) {
      this.scheduleRepaint();
    }
  }

  /** Opens (or reuses) the panel and streams an explanation of the target into it. */
  async explain(target: CommandTarget): Promise<void> {
    const connection = this.connection();
    if (!connection) {
      void vscode.window.showErrorMessage("infill: the language server is not running.");
      return;
    }
    const previous = this.running;
    if (previous) {
      this.stop(previous);
      await Promise.race([previous.settled, new Promise((resolve) => setTimeout(resolve, SETTLE_MS))]);
    }
    const session = this.router.start(panelTitle(describeTarget(target)));
    this.show(session);
    const cancel = new vscode.CancellationTokenSource();
    const settled = connection.explain(target, cancel.token).then(
      (result) => this.router.finish(session, result),
      (error: unknown) => {
        const message = error instanceof Error ? error.message : String(error);
        if (!session.stopRequested) {
          this.log.error(`infill.explain failed: ${message}`);
        }
        this.router.fail(session, message);
      },
    );
    const running: Running = { session, cancel, settled };
    this.running = running;
    await settled;
    cancel.dispose();
    if (this.running === running) {
      this.running = undefined;
    }
    this.paint();
  }

  private stop(running: Running): void {
    if (running.session.stopRequested) {
      return; // one cancel is enough: the stream stops within a token
    }
    const token = this.router.stop(running.session);
    if (token !== undefined) {
      this.connection()?.cancelProgress(token);
    } else {
      // No chunk yet (the model may still be loading): cancel the request itself.
      running.cancel.cancel();
    }
    this.paint();
  }

  private show(session: ExplainSession): void {
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(
        PANEL_VIEW_TYPE,
        session.title,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, enableFindWidget: true, localResourceRoots: [] },
      );
      this.panel.webview.onDidReceiveMessage((message: unknown) => this.onMessage(message));
      this.panel.onDidDispose(() => {
        this.panel = undefined;
        if (this.running) {
          this.stop(this.running); // nobody is reading: stop the model
        }
      });
    } else {
      this.panel.reveal(vscode.ViewColumn.Beside, true);
    }
    this.panel.title = session.title;
    this.panel.webview.html = explainPage(explainView(session), makeNonce());
  }

  private onMessage(message: unknown): void {
    if (!isWebviewMessage(message)) {
      return;
    }
    if (message.type === "stop" && this.running) {
      this.stop(this.running);
    } else if (message.type === "ready") {
      this.paint(); // the page (re)loaded, e.g. after being hidden: bring it up to date
    }
  }

  private scheduleRepaint(): void {
    if (this.repaint === undefined) {
      this.repaint = setTimeout(() => {
        this.repaint = undefined;
        this.paint();
      }, REPAINT_MS);
    }
  }

  private paint(): void {
    const session = this.router.session;
    if (this.panel && session) {
      void this.panel.webview.postMessage({ type: "update", view: explainView(session) });
    }
  }

  dispose(): void {
    if (this.repaint !== undefined) {
      clearTimeout(this.repaint);
    }
    if (this.running) {
      this.stop(this.running);
    }
    this.panel?.dispose();
  }
}
