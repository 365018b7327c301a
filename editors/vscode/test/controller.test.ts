import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { changeSettings, recorded, reset } from "./vscode-mock";

/** Each language client the controller makes: how it was made, and what it was told. */
const clients = vi.hoisted(() => {
  interface Made {
    server: { command: string; args?: string[] };
    options: {
      initializationOptions: () => unknown;
      middleware: { workspace: { didChangeConfiguration: (sections: string[]) => Promise<void> } };
      synchronize: { configurationSection: string };
    };
    running: boolean;
    stopped: boolean;
    notifications: { method: string; params: unknown }[];
  }
  return [] as Made[];
});

vi.mock("vscode-languageclient/node", () => {
  const type = (method: string) => ({ type: { method } });
  class LanguageClient {
    private readonly made: (typeof clients)[number];
    constructor(_id: string, _name: string, server: never, options: never) {
      this.made = { server, options, running: false, stopped: false, notifications: [] };
      clients.push(this.made);
    }
    async start(): Promise<void> {
      this.made.running = true;
    }
    isRunning(): boolean {
      return this.made.running;
    }
    async stop(): Promise<void> {
      this.made.running = false;
      this.made.stopped = true;
    }
    async dispose(): Promise<void> {}
    onDidChangeState(): { dispose(): void } {
      return { dispose() {} };
    }
    onNotification(): { dispose(): void } {
      return { dispose() {} };
    }
    async sendNotification(notification: { method: string }, params: unknown): Promise<void> {
      this.made.notifications.push({ method: notification.method, params });
    }
    async sendRequest(): Promise<unknown> {
      return { status: "ready", model: "gemma", backend: "llama.cpp", device: "cpu" };
    }
  }
  return {
    LanguageClient,
    State: { Stopped: 1, Running: 2, Starting: 3 },
    TransportKind: { stdio: 0 },
    CodeActionRequest: type("textDocument/codeAction"),
    DidChangeConfigurationNotification: type("workspace/didChangeConfiguration"),
    ExecuteCommandRequest: type("workspace/executeCommand"),
    WorkDoneProgressCancelNotification: type("window/workDoneProgress/cancel"),
  };
});

const { Controller } = await import("../src/controller");

/** The settings a user has before the extension starts: the server is this test's node (an
 * executable that exists). */
function userSettings(more: Record<string, unknown> = {}): void {
  const values = { "infill.serverPath": process.execPath, "infill.serverArgs": ["--stdio"], ...more };
  for (const [key, value] of Object.entries(values)) {
    recorded.settings.set(key, value);
  }
}

async function started(): Promise<InstanceType<typeof Controller>> {
  const controller = new Controller();
  await controller.start();
  return controller;
}

/** What the language client sends when VS Code reports a settings change. */
async function settingsChanged(values: Record<string, unknown>): Promise<void> {
  changeSettings(values);
  const client = clients.at(-1);
  await client?.options.middleware.workspace.didChangeConfiguration(["infill"]);
}

function sent(index = -1): { method: string; params: unknown }[] {
  return (
    clients.at(index)?.notifications.filter((n) => n.method === "workspace/didChangeConfiguration") ?? []
  );
}

describe("Controller (controller.ts)", () => {
  beforeEach(() => {
    reset();
    clients.length = 0;
    userSettings();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("starts the server at serverPath with serverArgs, the `infill` section in initializationOptions", async () => {
    const controller = await started();
    expect(clients).toHaveLength(1);
    const [client] = clients;
    expect(client?.server).toMatchObject({ command: process.execPath, args: ["--stdio"] });
    const sections = client?.options.initializationOptions() as { infill: Record<string, unknown> };
    expect(Object.keys(sections)).toEqual(["infill"]);
    expect(sections.infill.maxTokensSingleLine).toBe(48); // the default package.json declares
    expect(sections.infill).not.toHaveProperty("serverPath");
    expect(sections.infill).not.toHaveProperty("enable");
    expect(client?.options.synchronize.configurationSection).toBe("infill");
    await controller.dispose();
  });

  it("sends a changed server setting at once, as the `infill` section, and only when it changed", async () => {
    const controller = await started();
    const client = clients[0];
    client?.options.initializationOptions(); // what the server was started with
    await settingsChanged({ "infill.maxTokensSingleLine": 24 });
    const [change] = sent();
    const settings = (change?.params as { settings: { infill: Record<string, unknown> } }).settings;
    expect(settings.infill.maxTokensSingleLine).toBe(24);
    expect(settings.infill).not.toHaveProperty("serverArgs");
    // The same values again, or a key of the extension's own: nothing more is sent.
    await settingsChanged({ "infill.maxTokensSingleLine": 24 });
    await settingsChanged({ "infill.enable": false });
    expect(sent()).toHaveLength(1);
    expect(clients).toHaveLength(1); // no restart for these
    await controller.dispose();
  });

  it("restarts the server when serverPath or serverArgs change, with the new arguments", async () => {
    const controller = await started();
    changeSettings({ "infill.serverArgs": ["--stdio", "-v"] });
    await controller.settled();
    expect(clients).toHaveLength(2);
    expect(clients[0]?.stopped).toBe(true);
    expect(clients[1]?.server).toMatchObject({ command: process.execPath, args: ["--stdio", "-v"] });
    expect(clients[1]?.running).toBe(true);
    // A model change is sent to the running server, which reloads: no new process.
    clients[1]?.options.initializationOptions();
    await settingsChanged({ "infill.model": "/models/other.gguf" });
    expect(clients).toHaveLength(2);
    const [change] = sent(1);
    expect((change?.params as { settings: { infill: { model: string } } }).settings.infill.model).toBe(
      "/models/other.gguf",
    );
    await controller.dispose();
    expect(clients[1]?.stopped).toBe(true);
  });

  it("says so, and starts nothing, when the server is not where serverPath says", async () => {
    userSettings({ "infill.serverPath": "/nowhere/infill-lsp" });
    const controller = await started();
    expect(clients).toHaveLength(0);
    expect(recorded.errors.join("\n")).toContain(
      "/nowhere/infill-lsp (setting infill.serverPath) does not exist",
    );
    await controller.dispose();
  });
});
