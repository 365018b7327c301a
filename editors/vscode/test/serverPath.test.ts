import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { expandHome, hostEnvironment, resolveServerPath, type LookupEnvironment } from "../src/serverPath";

function env(executables: string[], pathVariable = "/usr/bin:/opt/infill/bin"): LookupEnvironment {
  return {
    pathVariable,
    home: "/home/ada",
    platform: "linux",
    isExecutable: (file) => executables.includes(file),
  };
}

describe("finding the server", () => {
  it("finds infill-lsp on PATH by default, in PATH order", () => {
    const lookup = resolveServerPath("", env(["/opt/infill/bin/infill-lsp", "/usr/bin/other"]));
    expect(lookup).toEqual({ found: true, command: "/opt/infill/bin/infill-lsp" });
    const first = resolveServerPath(undefined, env(["/usr/bin/infill-lsp", "/opt/infill/bin/infill-lsp"]));
    expect(first).toEqual({ found: true, command: "/usr/bin/infill-lsp" });
  });

  it("takes a path from the setting, with ~ as the home folder", () => {
    const lookup = resolveServerPath(
      "~/infill-lsp/.venv/bin/infill-lsp",
      env(["/home/ada/infill-lsp/.venv/bin/infill-lsp"]),
    );
    expect(lookup).toEqual({ found: true, command: "/home/ada/infill-lsp/.venv/bin/infill-lsp" });
  });

  it("looks a bare name up on PATH", () => {
    expect(resolveServerPath("my-infill", env(["/usr/bin/my-infill"]))).toEqual({
      found: true,
      command: "/usr/bin/my-infill",
    });
  });

  it("says so when the configured file is missing, naming it and the setting", () => {
    const lookup = resolveServerPath("/nowhere/infill-lsp", env(["/usr/bin/infill-lsp"]));
    expect(lookup.found).toBe(false);
    expect(!lookup.found && lookup.message).toContain("/nowhere/infill-lsp");
    expect(!lookup.found && lookup.message).toContain("infill.serverPath");
  });

  it("says so when infill-lsp is not on PATH, and how to point at it", () => {
    const lookup = resolveServerPath("", env([], "/usr/bin"));
    expect(lookup.found).toBe(false);
    expect(!lookup.found && lookup.message).toMatch(/infill-lsp was not found on PATH.*infill\.serverPath/);
  });

  it("does not search the current folder for an empty PATH entry", () => {
    expect(resolveServerPath("", env(["infill-lsp"], ":/usr/bin")).found).toBe(false);
  });
});

describe("~ expansion", () => {
  it.each([
    ["~", "/home/ada"],
    ["~/bin/x", "/home/ada/bin/x"],
    ["/abs/~/x", "/abs/~/x"],
    ["~bob/x", "~bob/x"],
  ])("%s -> %s", (input, output) => {
    expect(expandHome(input, "/home/ada")).toBe(output);
  });
});

describe("on the real file system", () => {
  const folder = mkdtempSync(join(tmpdir(), "infill-path-"));
  afterAll(() => rmSync(folder, { recursive: true, force: true }));

  it("accepts an executable file and refuses one that is not executable", () => {
    const runnable = join(folder, "infill-lsp");
    const plain = join(folder, "notes.txt");
    writeFileSync(runnable, "#!/bin/sh\n");
    chmodSync(runnable, 0o755);
    writeFileSync(plain, "text");
    const host = hostEnvironment();
    expect(resolveServerPath(runnable, host)).toEqual({ found: true, command: runnable });
    expect(resolveServerPath(plain, host).found).toBe(false);
    expect(resolveServerPath(folder, host).found).toBe(false); // a folder is not a server
    expect(resolveServerPath("", { ...host, pathVariable: folder })).toEqual({
      found: true,
      command: runnable,
    });
  });
});
