/**
 * The status bar item, and the poll of `infill/status` that feeds it: every second while the
 * model loads (after a start, a restart or a settings change), silent once it is ready.
 */
import * as vscode from "vscode";
import { SHOW_STATUS } from "./commandIds";
import { describeStatus, type ClientPhase, type ServerStatus, type StatusInput } from "./status";

export const POLL_INTERVAL_MS = 1000;

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private phase: ClientPhase = { phase: "starting" };
  private busy = 0;

  constructor(private readonly enabled: () => boolean) {
    this.item = vscode.window.createStatusBarItem("infill.status", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "infill";
    this.item.command = SHOW_STATUS;
    this.render();
    this.item.show();
  }

  get input(): StatusInput {
    return { client: this.phase, enabled: this.enabled(), busy: this.busy };
  }

  setPhase(phase: ClientPhase): void {
    this.phase = phase;
    this.render();
  }

  setServer(server: ServerStatus): void {
    if (this.phase.phase === "running") {
      this.setPhase({ phase: "running", server });
    }
  }

  /** Marks an inline request as running; the returned function marks it finished. */
  beginRequest(): () => void {
    this.busy++;
    this.render();
    let ended = false;
    return () => {
      if (!ended) {
        ended = true;
        this.busy--;
        this.render();
      }
    };
  }

  render(): void {
    const view = describeStatus(this.input);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.error
      ? new vscode.ThemeColor("statusBarItem.errorBackground")
      : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }
}

/** Asks the server for its status until the model is no longer loading. */
export class StatusPoller implements vscode.Disposable {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private generation = 0;

  constructor(
    private readonly ask: () => Promise<ServerStatus> | undefined,
    private readonly show: (status: ServerStatus) => void,
    private readonly log: (message: string) => void,
  ) {}

  /** Polls now, then every second while the answer is "loading". */
  refresh(): void {
    this.stop();
    const generation = ++this.generation;
    const poll = async () => {
      const request = this.ask();
      if (!request) {
        return; // no server running: a later start refreshes again
      }
      let loading = true;
      try {
        const status = await request;
        if (generation !== this.generation) {
          return;
        }
        this.show(status);
        loading = status.status === "loading";
      } catch (error) {
        this.log(`infill/status failed: ${String(error)}`);
      }
      if (loading && generation === this.generation) {
        this.timer = setTimeout(() => void poll(), POLL_INTERVAL_MS);
      }
    };
    void poll();
  }

  stop(): void {
    this.generation++;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  dispose(): void {
    this.stop();
  }
}
