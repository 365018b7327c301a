/**
 * The code an Explain or Rewrite works on, as the server's commands take it: a document uri
 * and an LSP range (UTF-16 positions, which are VS Code's own: nothing to convert).
 */

export interface LspPosition {
  readonly line: number;
  readonly character: number;
}

export interface LspRange {
  readonly start: LspPosition;
  readonly end: LspPosition;
}

export interface CommandTarget {
  readonly uri: string;
  readonly range: LspRange;
  /**
   * The document's version the range was taken in: the server refuses to rewrite a range of
   * a document that has changed since (the range may then hold other code).
   */
  readonly version?: number;
}

function isPosition(value: unknown): value is LspPosition {
  const p = value as LspPosition | null;
  return (
    typeof p === "object" &&
    p !== null &&
    Number.isInteger(p.line) &&
    Number.isInteger(p.character) &&
    p.line >= 0 &&
    p.character >= 0
  );
}

/**
 * A target from a command argument (`{uri, range, version?}`, as the server's actions carry it), or
 * undefined for anything else: the palette passes nothing and the editor's context menu
 * passes the document's Uri, and both mean "the active editor's selection".
 */
export function parseTarget(value: unknown): CommandTarget | undefined {
  const candidate = value as {
    uri?: unknown;
    range?: { start?: unknown; end?: unknown };
    version?: unknown;
  } | null;
  if (typeof candidate !== "object" || candidate === null || typeof candidate.uri !== "string") {
    return undefined;
  }
  const range = candidate.range;
  if (!range || !isPosition(range.start) || !isPosition(range.end)) {
    return undefined;
  }
  const version = Number.isInteger(candidate.version) ? (candidate.version as number) : undefined;
  return {
    uri: candidate.uri,
    range: {
      start: { line: range.start.line, character: range.start.character },
      end: { line: range.end.line, character: range.end.character },
    },
    ...(version === undefined ? {} : { version }),
  };
}

/** The file name of a uri, for titles (`file:///a/b/fib.py` -> `fib.py`, `untitled:Untitled-1`
 * -> `Untitled-1`). */
export function fileName(uri: string): string {
  const path = uri.replace(/[?#].*$/, "").replace(/^[a-z][\w+.-]*:/i, "");
  const name = path.slice(path.lastIndexOf("/") + 1);
  try {
    return decodeURIComponent(name) || uri;
  } catch {
    return name || uri;
  }
}

/**
 * Lines as people count them (from 1): `fib.py:5-9`, or `fib.py:5` for one line. A range that
 * ends at the start of a line (a selection of whole lines) does not count that line.
 */
export function describeTarget(target: CommandTarget): string {
  const { start, end } = target.range;
  const first = start.line + 1;
  const endLine = end.character === 0 && end.line > start.line ? end.line - 1 : end.line;
  const last = endLine + 1;
  return `${fileName(target.uri)}:${first === last ? first : `${first}-${last}`}`;
}

export function isEmptyRange(range: LspRange): boolean {
  return range.start.line === range.end.line && range.start.character === range.end.character;
}

/**
 * The target of the server's Explain action in a `textDocument/codeAction` answer: for an
 * empty selection, that is the enclosing block the server chose (undefined: no code there).
 */
export function explainTargetIn(
  actions: readonly unknown[] | null | undefined,
  kind: string,
): CommandTarget | undefined {
  for (const action of actions ?? []) {
    const candidate = action as { kind?: unknown; command?: { arguments?: unknown[] } } | null;
    if (candidate?.kind === kind) {
      const target = parseTarget(candidate.command?.arguments?.[0]);
      if (target) {
        return target;
      }
    }
  }
  return undefined;
}
