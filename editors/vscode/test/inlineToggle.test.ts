import { describe, expect, it, vi } from "vitest";
import { gateInline } from "../src/inline";
import { toggleMessage, toggleSuggestions } from "../src/toggle";

function gate(enabled: boolean) {
  const events: string[] = [];
  return {
    events,
    gate: {
      enabled: () => enabled,
      begin: () => {
        events.push("begin");
        return () => events.push("end");
      },
    },
  };
}

describe("inline suggestions", () => {
  it("asks the server and counts the request as busy until it answers", async () => {
    const { gate: g, events } = gate(true);
    let answer!: (items: string[]) => void;
    const next = vi.fn(
      (_document: string, _position: string) => new Promise<string[]>((resolve) => (answer = resolve)),
    );
    const pending = gateInline(g, next, "document", "position");
    expect(next).toHaveBeenCalledWith("document", "position");
    expect(events).toEqual(["begin"]);
    answer(["    return a + b"]);
    expect(await pending).toEqual(["    return a + b"]);
    expect(events).toEqual(["begin", "end"]);
  });

  it("ends the busy state when the request fails too", async () => {
    const { gate: g, events } = gate(true);
    await expect(gateInline(g, () => Promise.reject(new Error("model not loaded")))).rejects.toThrow(
      "model not loaded",
    );
    expect(events).toEqual(["begin", "end"]);
  });

  it("asks nothing and shows nothing while suggestions are off", () => {
    const { gate: g, events } = gate(false);
    const next = vi.fn(() => ["x"]);
    expect(gateInline(g, next)).toBeUndefined();
    expect(next).not.toHaveBeenCalled();
    expect(events).toEqual([]);
  });
});

describe("the toggle", () => {
  function settings(initial: boolean | undefined, workspaceOverride?: boolean) {
    const user = { enable: initial };
    return {
      user,
      config: {
        get: () => workspaceOverride ?? user.enable,
        update: async (_key: "enable", value: boolean, global: true) => {
          expect(global).toBe(true);
          user.enable = value;
        },
      },
    };
  }

  it("turns suggestions off, then on again, in the user settings", async () => {
    const { user, config } = settings(undefined);
    expect(await toggleSuggestions(config)).toEqual({ enabled: false, overridden: false });
    expect(user.enable).toBe(false);
    expect(await toggleSuggestions(config)).toEqual({ enabled: true, overridden: false });
    expect(user.enable).toBe(true);
  });

  it("says so when the workspace's setting decides", async () => {
    const { config } = settings(true, true);
    const outcome = await toggleSuggestions(config);
    expect(outcome).toEqual({ enabled: true, overridden: true });
    expect(toggleMessage(outcome)).toBe(
      "infill: inline suggestions on (the workspace's infill.enable setting decides)",
    );
    expect(toggleMessage({ enabled: false, overridden: false })).toBe("infill: inline suggestions off");
  });
});
