/** Small fakes shared by the tests. */
import type * as vscode from "vscode";

/** An output channel that keeps what was logged instead of printing it. */
export function silentLog(): vscode.LogOutputChannel & { lines: string[] } {
  const lines: string[] = [];
  const keep = (message: string) => void lines.push(message);
  return { lines, info: keep, warn: keep, error: keep, debug: keep, trace: keep } as never;
}

/** A promise with its resolve and reject at hand. */
export function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
