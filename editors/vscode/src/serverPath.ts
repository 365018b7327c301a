/**
 * Finding the server executable: the `infill.serverPath` setting, `~` expanded, or
 * `infill-lsp` on PATH. Pure apart from the `isExecutable` check it is given, so that tests
 * can describe a file system.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export const DEFAULT_SERVER = "infill-lsp";

/** Where the README explains how to install the server for VS Code. */
export const SETUP_URL = "https://github.com/infill-lsp/infill-lsp#vs-code";

export type ServerLookup =
  { readonly found: true; readonly command: string } | { readonly found: false; readonly message: string };

export interface LookupEnvironment {
  readonly pathVariable: string | undefined;
  readonly home: string;
  readonly platform: NodeJS.Platform;
  readonly isExecutable: (file: string) => boolean;
}

/** The real machine's environment. */
export function hostEnvironment(): LookupEnvironment {
  return {
    pathVariable: process.env.PATH,
    home: os.homedir(),
    platform: process.platform,
    isExecutable: (file) => {
      try {
        fs.accessSync(file, process.platform === "win32" ? fs.constants.F_OK : fs.constants.X_OK);
        return fs.statSync(file).isFile();
      } catch {
        return false;
      }
    },
  };
}

/** `~` and `~/...` expanded to the home folder; anything else unchanged. */
export function expandHome(file: string, home: string): string {
  if (file === "~") {
    return home;
  }
  if (file.startsWith("~/") || file.startsWith("~\\")) {
    return path.join(home, file.slice(2));
  }
  return file;
}

/**
 * The command to start: a setting holding a path must name an executable file; a bare name
 * (the default `infill-lsp`) is looked up on PATH, the way a shell would.
 */
export function resolveServerPath(setting: string | undefined, env: LookupEnvironment): ServerLookup {
  const wanted = (setting ?? "").trim() || DEFAULT_SERVER;
  const expanded = expandHome(wanted, env.home);
  const isPath = expanded.includes("/") || (env.platform === "win32" && expanded.includes("\\"));
  if (isPath) {
    return env.isExecutable(expanded)
      ? { found: true, command: expanded }
      : {
          found: false,
          message: `infill: the language server ${expanded} (setting infill.serverPath) does not exist or is not executable.`,
        };
  }
  const separator = env.platform === "win32" ? ";" : ":";
  const extensions = env.platform === "win32" ? ["", ".exe", ".cmd", ".bat"] : [""];
  for (const folder of (env.pathVariable ?? "").split(separator)) {
    if (!folder) {
      continue; // an empty PATH entry means the current folder, which is not ours to trust
    }
    for (const extension of extensions) {
      const candidate = path.join(expandHome(folder, env.home), expanded + extension);
      if (env.isExecutable(candidate)) {
        return { found: true, command: candidate };
      }
    }
  }
  return {
    found: false,
    message: `infill: the language server ${expanded} was not found on PATH. Install infill-lsp and set infill.serverPath to its executable (for example /path/to/infill-lsp/.venv/bin/infill-lsp).`,
  };
}
