/**
 * An explanation being written: its text, assembled from `infill/explainChunk` notifications,
 * and its state. Chunks carry the server's progress token, which the client learns only from
 * the first chunk: the first chunk with a token nobody owns goes to the explanation that is
 * waiting for one. The extension runs one explanation at a time (a new one waits until the
 * previous request has settled), so no other stream can be mistaken for it.
 */

export type ProgressToken = string | number;

/** `infill/explainChunk` params. */
export interface ExplainChunk {
  readonly token: ProgressToken;
  readonly text: string;
  readonly done: boolean;
}

/**
 * waiting: asked, nothing came yet (the chat model may be loading); generating: text is
 * coming; done: the whole answer; stopped: the user stopped it (the text so far stays);
 * error: the request failed.
 */
export type ExplainState = "waiting" | "generating" | "done" | "stopped" | "error";

export function isChunk(value: unknown): value is ExplainChunk {
  const c = value as ExplainChunk | null;
  return (
    typeof c === "object" &&
    c !== null &&
    (typeof c.token === "string" || typeof c.token === "number") &&
    typeof c.text === "string" &&
    typeof c.done === "boolean"
  );
}

export class ExplainSession {
  token: ProgressToken | undefined;
  text = "";
  state: ExplainState = "waiting";
  stopRequested = false;
  error: string | undefined;

  constructor(readonly title: string) {}

  get running(): boolean {
    return this.state === "waiting" || this.state === "generating";
  }
}

export class ExplainRouter {
  private current: ExplainSession | undefined;
  /** Tokens of earlier explanations: their late chunks must not be claimed. */
  private readonly retired = new Set<ProgressToken>();

  get session(): ExplainSession | undefined {
    return this.current;
  }

  /** A new explanation replaces the current one (whose request must have settled). */
  start(title: string): ExplainSession {
    if (this.current?.token !== undefined) {
      this.retired.add(this.current.token);
    }
    this.current = new ExplainSession(title);
    return this.current;
  }

  /** Adds a chunk to the explanation it belongs to; returns that one, or undefined. */
  accept(chunk: ExplainChunk): ExplainSession | undefined {
    const session = this.current;
    if (!session || !session.running || this.retired.has(chunk.token)) {
      return undefined;
    }
    if (session.token === undefined) {
      // An empty closing chunk is what a stream that never started sends (its request was
      // cancelled before any text): it names nobody's token worth claiming.
      if (chunk.done && !chunk.text) {
        return undefined;
      }
      session.token = chunk.token;
    } else if (session.token !== chunk.token) {
      return undefined;
    }
    session.text += chunk.text;
    if (session.text) {
      session.state = "generating";
    }
    return session;
  }

  /** The user pressed Stop; returns the token to cancel, if the stream has one yet. */
  stop(session: ExplainSession): ProgressToken | undefined {
    if (!session.running) {
      return undefined;
    }
    session.stopRequested = true;
    return session.token;
  }

  /** The command answered: its result is the whole answer (or what came before a stop). */
  finish(session: ExplainSession, result: unknown): void {
    if (typeof result === "string" && (result || !session.text)) {
      session.text = result;
    }
    session.state = session.stopRequested ? "stopped" : "done";
    this.retire(session);
  }

  /** The command failed; after a stop, a cancelled request is just a stop. */
  fail(session: ExplainSession, message: string): void {
    if (session.stopRequested) {
      session.state = "stopped";
    } else {
      session.state = "error";
      session.error = message;
    }
    this.retire(session);
  }

  private retire(session: ExplainSession): void {
    if (session.token !== undefined) {
      this.retired.add(session.token);
    }
  }
}
