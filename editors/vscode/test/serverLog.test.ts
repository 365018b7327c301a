import { describe, expect, it } from "vitest";
import { logStderrLine, stderrLevel } from "../src/serverLog";

describe("the server's stderr", () => {
  it("keeps the stderr copies of log records at debug level (they also come as logMessage)", () => {
    expect(
      stderrLevel("2026-12-01 00:11:38,141 INFO lsp_server.host: completion model loaded in 0.6 s"),
    ).toBe("debug");
    expect(
      stderrLevel("2026-12-01 00:12:14,677 WARNING pygls.protocol.language_server: Ignoring cancel"),
    ).toBe("debug");
  });

  it("shows anything else, such as a traceback or a native library's message", () => {
    expect(stderrLevel("Traceback (most recent call last):")).toBe("info");
    expect(stderrLevel("ModuleNotFoundError: No module named 'pygls'")).toBe("info");
    expect(stderrLevel("llama_kv_cache_iswa: using full-size SWA cache")).toBe("info");
  });

  it("drops blank lines and marks the rest as the server's stderr", () => {
    const lines: string[] = [];
    const sink = {
      debug: (m: string) => lines.push(`debug ${m}`),
      info: (m: string) => lines.push(`info ${m}`),
    };
    logStderrLine("   ", sink);
    logStderrLine("Traceback (most recent call last):", sink);
    expect(lines).toEqual(["info [stderr] Traceback (most recent call last):"]);
  });
});
