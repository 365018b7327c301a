/**
 * What the status bar says: a pure function of the client's phase, the server's
 * `infill/status` answer, the toggle and whether an inline request is running.
 */

/** The answer to `infill/status` (lsp_server/host.py). */
export interface ServerStatus {
  readonly status: "loading" | "ready" | "error";
  readonly model?: string | null;
  readonly model_path?: string | null;
  readonly backend?: string | null;
  readonly device?: string | null;
  readonly context_size?: number | null;
  readonly fim_family?: string | null;
  readonly last_error?: string | null;
}

/** Where the extension's connection to the server stands. */
export type ClientPhase =
  | { readonly phase: "starting" }
  | { readonly phase: "missing"; readonly message: string }
  | { readonly phase: "stopped"; readonly message: string }
  | { readonly phase: "running"; readonly server: ServerStatus | undefined };

export interface StatusInput {
  readonly client: ClientPhase;
  readonly enabled: boolean;
  /** Inline completion requests in flight. */
  readonly busy: number;
}

export interface StatusView {
  /** With a codicon, as VS Code's status bar takes it. */
  readonly text: string;
  readonly tooltip: string;
  readonly error: boolean;
}

/** The status bar's text for each state, named once so that tests and docs agree. */
export const STATUS_TEXT = {
  starting: "$(sync~spin) infill: starting",
  loading: "$(sync~spin) infill: loading",
  ready: "$(sparkle) infill: ready",
  busy: "$(loading~spin) infill: thinking",
  off: "$(circle-slash) infill: off",
  error: "$(error) infill: error",
  missing: "$(error) infill: no server",
  stopped: "$(error) infill: stopped",
} as const;

const CLICK = "Click for infill's actions.";

/** The model line of the tooltip: name, backend, device, context size, FIM family. */
export function describeModel(server: ServerStatus): string | undefined {
  if (!server.model) {
    return undefined;
  }
  const details = [server.backend, server.device].filter(Boolean).join(", ");
  const context = server.context_size ? `, context ${server.context_size}` : "";
  const fim = server.fim_family ? `, FIM ${server.fim_family}` : ", no FIM tokens";
  return `Model: ${server.model}${details ? ` (${details})` : ""}${context}${fim}`;
}

export function describeStatus({ client, enabled, busy }: StatusInput): StatusView {
  const suggestions = `Inline suggestions: ${enabled ? "on" : "off"}`;
  switch (client.phase) {
    case "missing":
      return { text: STATUS_TEXT.missing, tooltip: `${client.message}\n${CLICK}`, error: true };
    case "stopped":
      return { text: STATUS_TEXT.stopped, tooltip: `${client.message}\n${CLICK}`, error: true };
    case "starting":
      return {
        text: enabled ? STATUS_TEXT.starting : STATUS_TEXT.off,
        tooltip: `infill: starting the language server\n${suggestions}\n${CLICK}`,
        error: false,
      };
    case "running":
      break;
  }
  const server = client.server;
  if (server?.status === "error") {
    const cause = server.last_error || "the model could not be loaded";
    return { text: STATUS_TEXT.error, tooltip: `infill: ${cause}\n${CLICK}`, error: true };
  }
  const model = server ? describeModel(server) : undefined;
  const lines = (headline: string) => [headline, model, suggestions, CLICK].filter(Boolean).join("\n");
  if (!enabled) {
    const state = server?.status === "ready" ? "ready" : "loading the model";
    return {
      text: STATUS_TEXT.off,
      tooltip: lines(`infill: ${state}, suggestions turned off`),
      error: false,
    };
  }
  if (server?.status !== "ready") {
    return { text: STATUS_TEXT.loading, tooltip: lines("infill: loading the model"), error: false };
  }
  if (busy > 0) {
    return { text: STATUS_TEXT.busy, tooltip: lines("infill: writing a suggestion"), error: false };
  }
  return { text: STATUS_TEXT.ready, tooltip: lines("infill: ready"), error: false };
}

/** What the status bar's menu offers. */
export type MenuAction = "toggle" | "restart" | "log" | "settings" | "setup";

export interface MenuItem {
  readonly label: string;
  readonly description?: string;
  readonly action?: MenuAction;
}

/** The status bar's menu: the state in words, then what the user can do about it. */
export function statusMenu({ client, enabled }: StatusInput): MenuItem[] {
  const items: MenuItem[] = [];
  const server = client.phase === "running" ? client.server : undefined;
  const headline =
    client.phase === "running"
      ? server
        ? `Model ${server.status}`
        : "Model: asking the server"
      : client.phase === "starting"
        ? "Starting the language server"
        : client.message;
  items.push({
    label: headline,
    description: server?.status === "error" ? (server.last_error ?? "") : undefined,
  });
  const model = server ? describeModel(server) : undefined;
  if (model) {
    items.push({ label: model });
  }
  items.push({
    label: enabled ? "$(circle-slash) Turn inline suggestions off" : "$(check) Turn inline suggestions on",
    action: "toggle",
  });
  items.push({ label: "$(debug-restart) Restart the language server", action: "restart" });
  items.push({ label: "$(output) Show the log", action: "log" });
  items.push({ label: "$(gear) Open infill's settings", action: "settings" });
  if (client.phase === "missing") {
    items.push({ label: "$(link-external) How to install the server", action: "setup" });
  }
  return items;
}
