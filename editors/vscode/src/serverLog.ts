/**
 * The server's stderr in the output channel. The server logs each record twice: to stderr and,
 * from INFO up, to the client as `window/logMessage` (which the channel shows at its level).
 * Its stderr copies are kept at debug level, so that the channel shows each message once; any
 * other stderr text (a traceback before the connection is up, a native library's chatter) is
 * shown as it comes.
 */

/** A record as Python's logging writes it: `2026-12-01 00:11:38,141 INFO lsp_server.host: ...`. */
const LOGGING_RECORD = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) /;

export type StderrLevel = "debug" | "info";

export function stderrLevel(line: string): StderrLevel {
  return LOGGING_RECORD.test(line) ? "debug" : "info";
}

/** Where the lines go: the client's LogOutputChannel fits. */
export interface LineSink {
  debug(message: string): void;
  info(message: string): void;
}

export function logStderrLine(line: string, sink: LineSink): void {
  if (!line.trim()) {
    return;
  }
  if (stderrLevel(line) === "debug") {
    sink.debug(`[stderr] ${line}`);
  } else {
    sink.info(`[stderr] ${line}`);
  }
}
