import { describe, expect, it } from "vitest";
import { describeStatus, STATUS_TEXT, statusMenu, type ClientPhase, type ServerStatus } from "../src/status";

const ready: ServerStatus = {
  status: "ready",
  model: "gemma-3-270m-q4_k_m.gguf",
  model_path: "/cache/gemma.gguf",
  backend: "llama.cpp",
  device: "cpu",
  context_size: 4096,
  fim_family: "gemma",
  last_error: null,
};
const running = (server: ServerStatus | undefined): ClientPhase => ({ phase: "running", server });

describe("the status bar", () => {
  it("spins while the server starts and while the model loads", () => {
    expect(describeStatus({ client: { phase: "starting" }, enabled: true, busy: 0 }).text).toBe(
      "$(sync~spin) infill: starting",
    );
    expect(describeStatus({ client: running(undefined), enabled: true, busy: 0 }).text).toBe(
      "$(sync~spin) infill: loading",
    );
    const loading = describeStatus({ client: running({ status: "loading" }), enabled: true, busy: 0 });
    expect(loading.text).toBe(STATUS_TEXT.loading);
    expect(loading.tooltip).toContain("loading the model");
  });

  it("says ready and names the model, its backend and device in the tooltip", () => {
    const view = describeStatus({ client: running(ready), enabled: true, busy: 0 });
    expect(view.text).toBe("$(sparkle) infill: ready");
    expect(view.tooltip).toContain(
      "Model: gemma-3-270m-q4_k_m.gguf (llama.cpp, cpu), context 4096, FIM gemma",
    );
    expect(view.tooltip).toContain("Inline suggestions: on");
    expect(view.error).toBe(false);
  });

  it("shows activity while an inline request runs", () => {
    expect(describeStatus({ client: running(ready), enabled: true, busy: 1 }).text).toBe(
      "$(loading~spin) infill: thinking",
    );
  });

  it("shows the load error with its message in the tooltip", () => {
    const view = describeStatus({
      client: running({ status: "error", last_error: "model file /m.gguf not found" }),
      enabled: true,
      busy: 0,
    });
    expect(view.text).toBe("$(error) infill: error");
    expect(view.tooltip).toContain("model file /m.gguf not found");
    expect(view.error).toBe(true);
  });

  it("shows a missing server and a stopped one as errors with their message", () => {
    const missing = describeStatus({
      client: { phase: "missing", message: "infill-lsp was not found" },
      enabled: true,
      busy: 0,
    });
    expect(missing).toMatchObject({ text: "$(error) infill: no server", error: true });
    expect(missing.tooltip).toContain("infill-lsp was not found");
    const stopped = describeStatus({
      client: { phase: "stopped", message: "it crashed" },
      enabled: true,
      busy: 0,
    });
    expect(stopped).toMatchObject({ text: "$(error) infill: stopped", error: true });
  });

  it("says off when suggestions are turned off, whatever the model does", () => {
    for (const client of [running(ready), running({ status: "loading" }), { phase: "starting" } as const]) {
      const view = describeStatus({ client, enabled: false, busy: 0 });
      expect(view.text).toBe("$(circle-slash) infill: off");
      expect(view.tooltip).toContain("Inline suggestions: off");
    }
  });

  it("lets an error show through even when suggestions are off", () => {
    const view = describeStatus({
      client: running({ status: "error", last_error: "boom" }),
      enabled: false,
      busy: 0,
    });
    expect(view.text).toBe(STATUS_TEXT.error);
  });
});

describe("the status bar's menu", () => {
  it("offers to turn suggestions off when they are on, and on when off", () => {
    const on = statusMenu({ client: running(ready), enabled: true, busy: 0 });
    expect(on.find((i) => i.action === "toggle")?.label).toContain("Turn inline suggestions off");
    const off = statusMenu({ client: running(ready), enabled: false, busy: 0 });
    expect(off.find((i) => i.action === "toggle")?.label).toContain("Turn inline suggestions on");
  });

  it("starts with the state and the model", () => {
    const items = statusMenu({ client: running(ready), enabled: true, busy: 0 });
    expect(items[0]?.label).toBe("Model ready");
    expect(items[1]?.label).toContain("gemma-3-270m-q4_k_m.gguf");
  });

  it("offers the installation guide only when the server is missing", () => {
    const missing = statusMenu({
      client: { phase: "missing", message: "not found" },
      enabled: true,
      busy: 0,
    });
    expect(missing[0]?.label).toBe("not found");
    expect(missing.some((i) => i.action === "setup")).toBe(true);
    const fine = statusMenu({ client: running(ready), enabled: true, busy: 0 });
    expect(fine.some((i) => i.action === "setup")).toBe(false);
  });
});
