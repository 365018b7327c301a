/**
 * The inline completion middleware: no request while suggestions are turned off, and a busy
 * count for the status bar while one runs.
 */

export interface InlineGate {
  /** Whether suggestions are on (the `infill.enable` setting). */
  enabled(): boolean;
  /** Called when a request starts; returns the function that marks it finished. */
  begin(): () => void;
}

/**
 * Wraps the client's `next` call. Off: nothing is asked of the server and no ghost text
 * shows. On: the request is counted as busy until it settles, even if it fails.
 */
export function gateInline<A extends unknown[], R>(
  gate: InlineGate,
  next: (...args: A) => R | Thenable<R>,
  ...args: A
): Promise<R | undefined> | undefined {
  if (!gate.enabled()) {
    return undefined;
  }
  const end = gate.begin();
  return Promise.resolve(next(...args)).finally(end);
}
