/**
 * The extension's one object: it starts the language client, restarts it when the server's
 * path or arguments change, and connects the status bar, the Explain panel and the commands.
 */
import * as readline from "node:readline";
import type { Readable } from "node:stream";
import * as vscode from "vscode";
import {
  CodeActionRequest,
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  State,
  TransportKind,
  WorkDoneProgressCancelNotification,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import { adaptCodeActions } from "./codeActions";
import { EXPLAIN_CHUNK, EXPLAIN_KIND, SERVER_EXPLAIN, SERVER_REWRITE, STATUS_REQUEST } from "./commandIds";
import { ExplainPanel, type ExplainConnection } from "./explainPanel";
import { isChunk } from "./explainSession";
import { gateInline } from "./inline";
import { NextEditFeature } from "./nextEditView";
import { runRewrite, type RewriteConnection } from "./rewrite";
import { hostEnvironment, resolveServerPath, SETUP_URL } from "./serverPath";
import { logStderrLine } from "./serverLog";
import { needsRestart, serverSection } from "./settings";
import { StatusBar, StatusPoller } from "./statusBar";
import { itemsOf, SuggestionNotices } from "./suggestionNotices";
import type { ServerStatus } from "./status";
import { explainTargetIn, isEmptyRange, type CommandTarget } from "./targets";

const SECTION = "infill";
/** The documents the client syncs: every language, file or not yet saved. */
const DOCUMENT_SELECTOR = [{ scheme: "file" }, { scheme: "untitled" }];
/** How long a stopping server gets to exit after `shutdown` before it is killed. */
const STOP_TIMEOUT_MS = 3000;

function eachLine(input: Readable, handle: (line: string) => void): void {
  readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on("line", handle);
}

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration(SECTION);
}

export class Controller implements vscode.Disposable {
  readonly log: vscode.LogOutputChannel;
  readonly status: StatusBar;
  readonly explainPanel: ExplainPanel;
  readonly nextEdits: NextEditFeature;
  /** Tells the server which of its inline suggestions showed and which parts were taken. */
  private readonly notices: SuggestionNotices;
  private readonly poller: StatusPoller;
  private client: LanguageClient | undefined;
  /** Set while the extension itself stops the client: that stop is no failure. */
  private stopping = false;
  /** What the server was last sent: a change of an extension-only key sends nothing. */
  private lastSent: string | undefined;
  /** Starts and stops run one after the other: two quick setting changes make one server. */
  private lifecycle: Promise<void> = Promise.resolve();
  private readonly disposables: vscode.Disposable[] = [];

  constructor() {
    this.log = vscode.window.createOutputChannel("infill", { log: true });
    this.status = new StatusBar(() => this.enabled);
    this.poller = new StatusPoller(
      () => this.runningClient()?.sendRequest<ServerStatus>(STATUS_REQUEST, {}),
      (status) => this.status.setServer(status),
      (message) => this.log.debug(message),
    );
    this.explainPanel = new ExplainPanel(() => this.explainConnection(), this.log);
    this.nextEdits = new NextEditFeature(
      () => this.runningClient(),
      (document) => vscode.languages.match(DOCUMENT_SELECTOR, document) > 0,
      this.log,
    );
    this.notices = new SuggestionNotices((method, params) => {
      void this.runningClient()
        ?.sendNotification(method, params)
        .catch((error: unknown) => this.log.debug(`${method}: ${String(error)}`));
    });
    this.disposables.push(
      this.log,
      this.status,
      this.poller,
      this.explainPanel,
      this.nextEdits,
      vscode.workspace.onDidChangeConfiguration((event) => this.onConfigurationChanged(event)),
      vscode.workspace.onDidChangeTextDocument((event) =>
        this.notices.changed(
          event.document.uri.toString(),
          event.contentChanges.map((change) => ({ range: change.range, text: change.text })),
        ),
      ),
    );
  }

  /** Whether inline suggestions are on (`infill.enable`). */
  get enabled(): boolean {
    return config().get<boolean>("enable") ?? true;
  }

  /** Finds the server and starts it; a missing server is shown, never thrown. */
  start(): Promise<void> {
    return this.enqueue(() => this.startClient());
  }

  /** Stops the server (if any) and starts it again with the current settings. */
  restart(): Promise<void> {
    return this.enqueue(async () => {
      await this.stopClient();
      await this.startClient();
    });
  }

  /** Resolves once a start or restart in progress has finished (a command run during one waits). */
  settled(): Promise<void> {
    return this.lifecycle;
  }

  private enqueue(step: () => Promise<void>): Promise<void> {
    // `lifecycle` never rejects: a failed step is logged and the next one still runs.
    this.lifecycle = this.lifecycle
      .then(step)
      .catch((error: unknown) => this.log.error(`infill: ${String(error)}`));
    return this.lifecycle;
  }

  private async startClient(): Promise<void> {
    const lookup = resolveServerPath(config().get<string>("serverPath"), hostEnvironment());
    if (!lookup.found) {
      this.log.error(lookup.message);
      this.status.setPhase({ phase: "missing", message: lookup.message });
      void this.offerSetup(lookup.message);
      return;
    }
    const args = (config().get<unknown[]>("serverArgs") ?? []).filter(
      (a): a is string => typeof a === "string",
    );
    this.log.info(`starting ${[lookup.command, ...args].join(" ")}`);
    this.status.setPhase({ phase: "starting" });
    const client = this.createClient({ command: lookup.command, args, transport: TransportKind.stdio });
    this.client = client;
    this.lastSent = undefined;
    client.onDidChangeState(({ newState }) => {
      if (client !== this.client) {
        return;
      }
      if (newState === State.Running) {
        this.status.setPhase({ phase: "running", server: undefined });
        this.poller.refresh();
      } else if (newState === State.Stopped && !this.stopping) {
        this.poller.stop();
        this.status.setPhase({
          phase: "stopped",
          message: "infill: the language server stopped. See its log (infill: Show Log), then restart it.",
        });
      }
    });
    client.onNotification(EXPLAIN_CHUNK, (params: unknown) => {
      if (isChunk(params)) {
        this.explainPanel.onChunk(params);
      }
    });
    try {
      await client.start();
    } catch (error) {
      const message = `infill: the language server did not start: ${error instanceof Error ? error.message : String(error)}`;
      this.log.error(message);
      if (client === this.client) {
        this.status.setPhase({ phase: "stopped", message });
        void vscode.window.showErrorMessage(message, "Show Log").then((choice) => choice && this.log.show());
      }
    }
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.poller.stop();
    this.nextEdits.edits.dismiss();
    this.notices.clear();
    if (!client) {
      return;
    }
    this.stopping = true;
    try {
      if (client.isRunning()) {
        await client.stop(STOP_TIMEOUT_MS);
      }
      await client.dispose();
    } catch (error) {
      this.log.warn(`stopping the language server: ${String(error)}`);
    } finally {
      this.stopping = false;
    }
  }

  private createClient(server: ServerOptions): LanguageClient {
    const options: LanguageClientOptions = {
      documentSelector: DOCUMENT_SELECTOR,
      outputChannel: this.log,
      stdioOptions: {
        stdout: (input, channel) => eachLine(input, (line) => channel.info(line)),
        stderr: (input, channel) => eachLine(input, (line) => logStderrLine(line, channel)),
      },
      initializationOptions: () => {
        const settings = this.serverSettings();
        this.lastSent = JSON.stringify(settings); // the first didChangeConfiguration repeats it
        return { [SECTION]: settings };
      },
      synchronize: { configurationSection: SECTION },
      middleware: {
        provideInlineCompletionItems: (document, position, context, token, next) => {
          // A next edit that inserts at the cursor shows as ghost text; one shown elsewhere
          // is the suggestion of the moment, and no ghost text competes with it for Tab.
          const nextEdit = this.nextEdits.ghostItems(document, position);
          if (nextEdit) {
            return nextEdit;
          }
          if (this.nextEdits.showing) {
            return undefined;
          }
          const version = document.version;
          return gateInline(
            { enabled: () => this.enabled, begin: () => this.status.beginRequest() },
            next,
            document,
            position,
            context,
            token,
          )?.then((items) => {
            if (this.nextEdits.showing) {
              return undefined;
            }
            // Shown: an answer for the document and cursor VS Code still asks about.
            if (!token.isCancellationRequested && document.version === version) {
              this.notices.answered(document.uri.toString(), position, itemsOf(items));
            }
            return items;
          });
        },
        provideCodeActions: async (document, range, context, token, next) =>
          adaptCodeActions(await next(document, range, context, token)),
        handleWorkDoneProgress: (token, params, next) => {
          // The server reports model loads as progress: follow them in the status bar.
          if (params.kind === "begin" && params.title.startsWith("infill: loading")) {
            this.poller.refresh();
          } else if (params.kind === "end") {
            this.poller.refresh();
          }
          next(token, params);
        },
        workspace: {
          // The server gets its own keys only (not serverPath, enable, ...), and only when
          // they changed; a model change makes it reload, which the status bar then follows.
          didChangeConfiguration: async () => {
            const settings = this.serverSettings();
            const sent = JSON.stringify(settings);
            const client = this.client;
            if (!client || sent === this.lastSent) {
              return;
            }
            this.lastSent = sent;
            await client.sendNotification(DidChangeConfigurationNotification.type, {
              settings: { [SECTION]: settings },
            });
            this.poller.refresh();
          },
        },
      },
    };
    return new LanguageClient(SECTION, "infill", server, options);
  }

  private serverSettings(): Record<string, unknown> {
    const section = config();
    return serverSection((key) => section.get(key));
  }

  private runningClient(): LanguageClient | undefined {
    return this.client?.isRunning() ? this.client : undefined;
  }

  private explainConnection(): ExplainConnection | undefined {
    const client = this.runningClient();
    if (!client) {
      return undefined;
    }
    return {
      explain: (target: CommandTarget, token) =>
        client.sendRequest(
          ExecuteCommandRequest.type,
          { command: SERVER_EXPLAIN, arguments: [target] },
          token,
        ),
      cancelProgress: (token) => {
        void client.sendNotification(WorkDoneProgressCancelNotification.type, { token });
      },
    };
  }

  /**
   * An empty selection names the enclosing block, which the server finds: its Explain action
   * for the cursor carries that range (so the panel's title names the right lines).
   * Undefined when there is no code around the cursor.
   */
  async expandTarget(target: CommandTarget): Promise<CommandTarget | undefined> {
    const client = this.runningClient();
    if (!client || !isEmptyRange(target.range)) {
      return target;
    }
    try {
      const actions = await client.sendRequest(CodeActionRequest.type, {
        textDocument: { uri: target.uri },
        range: target.range,
        context: { diagnostics: [], only: [EXPLAIN_KIND] },
      });
      return explainTargetIn(actions, EXPLAIN_KIND);
    } catch (error) {
      this.log.warn(`finding the block around the cursor: ${String(error)}`);
      return target; // the server finds it again when it runs the command
    }
  }

  private rewriteConnection(): RewriteConnection | undefined {
    const client = this.runningClient();
    if (!client) {
      return undefined;
    }
    return {
      rewrite: (target, instruction, token) =>
        client.sendRequest(
          ExecuteCommandRequest.type,
          { command: SERVER_REWRITE, arguments: [{ ...target, instruction }] },
          token,
        ),
    };
  }

  async rewrite(target: CommandTarget): Promise<void> {
    const connection = this.rewriteConnection();
    if (!connection) {
      void vscode.window.showErrorMessage("infill: the language server is not running.");
      return;
    }
    await runRewrite(target, connection, this.log);
  }

  /** The error message for a missing server, with its way out. */
  private async offerSetup(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, "Open Settings", "Installation Guide");
    if (choice === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "infill.serverPath");
    } else if (choice === "Installation Guide") {
      await vscode.env.openExternal(vscode.Uri.parse(SETUP_URL));
    }
  }

  private onConfigurationChanged(event: vscode.ConfigurationChangeEvent): void {
    if (needsRestart((section) => event.affectsConfiguration(section))) {
      this.log.info("infill.serverPath or infill.serverArgs changed: restarting the server");
      void this.restart();
    } else if (event.affectsConfiguration(`${SECTION}.enable`)) {
      this.status.render();
    }
  }

  async dispose(): Promise<void> {
    await this.enqueue(() => this.stopClient());
    for (const disposable of this.disposables) {
      disposable.dispose();
    }
  }
}
