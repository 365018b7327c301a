import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import type { ServerStatus } from "../src/status";
import { StatusBar, StatusPoller } from "../src/statusBar";

const mock = vscode as unknown as typeof import("./vscode-mock");

describe("the status bar item", () => {
  beforeEach(() => mock.reset());

  it("is shown at once, opens the menu on click, and follows the server", () => {
    let enabled = true;
    const bar = new StatusBar(() => enabled);
    const item = mock.recorded.statusBarItems[0]!;
    expect(item).toMatchObject({
      visible: true,
      command: "infill.showStatus",
      text: "$(sync~spin) infill: starting",
    });
    bar.setPhase({ phase: "running", server: undefined });
    bar.setServer({ status: "ready", model: "m.gguf" });
    expect(item.text).toBe("$(sparkle) infill: ready");
    const end = bar.beginRequest();
    expect(item.text).toBe("$(loading~spin) infill: thinking");
    end();
    end(); // a second call must not count twice
    expect(item.text).toBe("$(sparkle) infill: ready");
    enabled = false;
    bar.render();
    expect(item.text).toBe("$(circle-slash) infill: off");
  });

  it("colours errors", () => {
    const bar = new StatusBar(() => true);
    const item = mock.recorded.statusBarItems[0]!;
    bar.setPhase({ phase: "missing", message: "not found" });
    expect(item.backgroundColor).toEqual(new vscode.ThemeColor("statusBarItem.errorBackground"));
    bar.setPhase({ phase: "running", server: { status: "ready" } });
    expect(item.backgroundColor).toBeUndefined();
  });
});

describe("polling infill/status", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("asks every second while the model loads, and stops once it is ready", async () => {
    const answers: ServerStatus[] = [{ status: "loading" }, { status: "loading" }, { status: "ready" }];
    const ask = vi.fn(async () => answers.shift() ?? { status: "ready" as const });
    const shown: string[] = [];
    const poller = new StatusPoller(
      ask,
      (s) => shown.push(s.status),
      () => {},
    );
    poller.refresh();
    await vi.advanceTimersByTimeAsync(0);
    expect(shown).toEqual(["loading"]);
    await vi.advanceTimersByTimeAsync(1000);
    expect(shown).toEqual(["loading", "loading"]);
    await vi.advanceTimersByTimeAsync(1000);
    expect(shown).toEqual(["loading", "loading", "ready"]);
    await vi.advanceTimersByTimeAsync(5000);
    expect(ask).toHaveBeenCalledTimes(3);
  });

  it("shows an error answer and stops asking", async () => {
    const ask = vi.fn(async () => ({ status: "error" as const, last_error: "no such model" }));
    const shown: ServerStatus[] = [];
    const poller = new StatusPoller(
      ask,
      (s) => shown.push(s),
      () => {},
    );
    poller.refresh();
    await vi.advanceTimersByTimeAsync(3000);
    expect(shown).toEqual([{ status: "error", last_error: "no such model" }]);
    expect(ask).toHaveBeenCalledTimes(1);
  });

  it("tries again after a failed request, and stop() ends it", async () => {
    const ask = vi.fn(() => Promise.reject(new Error("not initialized")));
    const logged: string[] = [];
    const poller = new StatusPoller(
      ask,
      () => {},
      (m) => logged.push(m),
    );
    poller.refresh();
    await vi.advanceTimersByTimeAsync(2000);
    expect(ask).toHaveBeenCalledTimes(3);
    poller.stop();
    await vi.advanceTimersByTimeAsync(5000);
    expect(ask).toHaveBeenCalledTimes(3);
    expect(logged[0]).toContain("not initialized");
  });

  it("asks nothing while no server runs", async () => {
    const shown: unknown[] = [];
    const poller = new StatusPoller(
      () => undefined,
      (s) => shown.push(s),
      () => {},
    );
    poller.refresh();
    await vi.advanceTimersByTimeAsync(3000);
    expect(shown).toEqual([]);
  });
});
