/**
 * Next edit suggestions, the plain logic: when to ask the server (debounced), which of its
 * edits to show, what Tab and Esc do, and what the server is told. Everything VS Code draws or
 * changes goes through a `NextEditHost` (nextEditView.ts is the real one; the tests pass fakes).
 *
 * Positions here are the protocol's (`line`, `character` in the encoding the language client
 * negotiated, UTF-16): the host converts with the client's own converters.
 *
 * One edit shows at a time, the first the server sends (it sends the nearest first). Tab with
 * the cursor away from it jumps there; Tab on its lines applies it (one edit, one undo step)
 * and runs its command, which tells the server it was accepted. Then the document has changed:
 * a new request brings the next one. An insertion exactly at the cursor shows as ghost text
 * instead (the inline completion middleware hands it to VS Code), where VS Code's own Tab
 * takes it and runs the same command.
 */
import { DID_REJECT_NEXT_EDIT, DID_SHOW_INLINE_EDIT } from "./commandIds";

/**
 * How long the document and the cursor hold still before next edits are asked for. The
 * server answers in milliseconds (no model), so this only keeps a half-typed rename (`total`
 * -> `amo`) from flashing proposals between keystrokes: gaps inside a word run 100-200 ms
 * when typing 5-10 characters a second.
 */
export const NEXT_EDIT_DEBOUNCE_MS = 300;

export interface Position {
  readonly line: number;
  readonly character: number;
}

export interface Range {
  readonly start: Position;
  readonly end: Position;
}

/** The command the client runs once it applied the edit (the server's accept command). */
export interface EditCommand {
  readonly title: string;
  readonly command: string;
  readonly arguments?: unknown[];
}

/** One edit the server proposed, checked. */
export interface NextEdit {
  /** The server's id for the offer (its command's argument), named in show and reject. */
  readonly id: string | undefined;
  readonly uri: string;
  /** The document version the range is about: the edit applies to that version only. */
  readonly version: number;
  readonly range: Range;
  readonly text: string;
  readonly command: EditCommand | undefined;
}

/** Where the user is: the active editor's document, its version and the cursor. */
export interface Cursor {
  readonly uri: string;
  readonly version: number;
  readonly position: Position;
}

/** What Tab did. */
export enum TabOutcome {
  /** No next edit shows. */
  Nothing = "nothing",
  /** The cursor was away from the edit: it moved there. */
  Jumped = "jumped",
  /** The edit was applied and its command run. */
  Applied = "applied",
  /** The document is no longer the version the edit is about: the edit was dropped. */
  Stale = "stale",
}

/** What VS Code does for the logic: the real one is in nextEditView.ts. */
export interface NextEditHost {
  /** Whether next edits are wanted and offered: settings on, server running and offering. */
  enabled(): boolean;
  /** The active editor's document and cursor, if it is one the server knows. */
  cursor(): Cursor | undefined;
  /** `textDocument/copilotInlineEdit` for the cursor; the raw answer. */
  request(cursor: Cursor): Promise<unknown>;
  notify(method: string, params: object): void;
  /** Draws the edit; `cursor`: where the cursor is (for the marker when the edit is away). */
  show(edit: NextEdit, cursor: Position): void;
  /** Removes what `show` drew. */
  hide(): void;
  /** Asks VS Code for inline suggestions at the cursor: `ghostAt` then hands it the edit. */
  showAsGhostText(edit: NextEdit): void;
  /** Moves the cursor to `position` and scrolls it into view. */
  jump(position: Position): void;
  /** Replaces the edit's range by its text in one edit (one undo step); false if refused. */
  apply(edit: NextEdit): Thenable<boolean>;
  /** Runs the edit's command (the server's accept command, through the language client). */
  run(command: EditCommand): Thenable<unknown>;
  log(message: string): void;
}

// -- the server's answer ------------------------------------------------------------------------

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

function asPosition(value: unknown): Position | undefined {
  if (isRecord(value) && isCount(value.line) && isCount(value.character)) {
    return { line: value.line, character: value.character };
  }
  return undefined;
}

export function comparePositions(a: Position, b: Position): number {
  return a.line - b.line || a.character - b.character;
}

export function samePosition(a: Position, b: Position): boolean {
  return comparePositions(a, b) === 0;
}

function asRange(value: unknown): Range | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const start = asPosition(value.start);
  const end = asPosition(value.end);
  return start && end && comparePositions(start, end) <= 0 ? { start, end } : undefined;
}

function asCommand(value: unknown): EditCommand | undefined {
  if (!isRecord(value) || typeof value.command !== "string") {
    return undefined;
  }
  const title = typeof value.title === "string" ? value.title : value.command;
  return Array.isArray(value.arguments)
    ? { title, command: value.command, arguments: value.arguments }
    : { title, command: value.command };
}

/**
 * The edits of a `textDocument/copilotInlineEdit` answer that are about document `uri` at
 * `version`, in the server's order; malformed ones are left out.
 */
export function parseNextEdits(answer: unknown, uri: string, version: number): NextEdit[] {
  const edits = isRecord(answer) && Array.isArray(answer.edits) ? answer.edits : [];
  const out: NextEdit[] = [];
  for (const raw of edits) {
    if (!isRecord(raw) || typeof raw.text !== "string" || !isRecord(raw.textDocument)) {
      continue;
    }
    const range = asRange(raw.range);
    if (!range || raw.textDocument.uri !== uri || raw.textDocument.version !== version) {
      continue;
    }
    const command = asCommand(raw.command);
    const argument = command?.arguments?.[0];
    out.push({
      id: typeof argument === "string" ? argument : undefined,
      uri,
      version,
      range,
      text: raw.text,
      command,
    });
  }
  return out;
}

// -- geometry -----------------------------------------------------------------------------------

/** An insertion exactly at the cursor: ordinary ghost text shows it. */
export function isInsertionAt(edit: NextEdit, cursor: Cursor): boolean {
  return (
    edit.uri === cursor.uri &&
    samePosition(edit.range.start, edit.range.end) &&
    samePosition(edit.range.start, cursor.position)
  );
}

/** Whether the cursor is on one of the edit's lines: Tab applies it without a jump. */
export function isNear(range: Range, cursor: Position): boolean {
  return range.start.line <= cursor.line && cursor.line <= range.end.line;
}

/** The new text as one line of after-text: its lines joined by `⏎`. */
export function inlinePreview(text: string): string {
  return text.split(/\r\n|\r|\n/).join(" ⏎ ");
}

/** Whether the new text spans several lines (then a hover shows it whole). */
export function isMultiLine(text: string): boolean {
  return /\r|\n/.test(text);
}

/** The marker at the cursor's line when the edit is elsewhere: where it is, and the key. */
export function markerText(edit: NextEdit, cursorLine: number): string {
  const line = edit.range.start.line;
  const arrow = line < cursorLine ? "↑" : "↓";
  return `⇥ Tab: next edit ${arrow} line ${line + 1}`;
}

/** Where the cursor goes after the edit: the end of the new text. */
export function endOfInsertion(start: Position, text: string): Position {
  const lines = text.split(/\r\n|\r|\n/);
  const last = lines[lines.length - 1] ?? "";
  return lines.length === 1
    ? { line: start.line, character: start.character + last.length }
    : { line: start.line + lines.length - 1, character: last.length };
}

/** What identifies an edit across requests: the server offers it again under a new id. */
function editKey(edit: NextEdit): string {
  const { start, end } = edit.range;
  return JSON.stringify([
    edit.uri,
    edit.version,
    start.line,
    start.character,
    end.line,
    end.character,
    edit.text,
  ]);
}

// -- timing -------------------------------------------------------------------------------------

/** Runs `action` once things have held still for `delayMs` (each `schedule` starts over). */
export class Debouncer {
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly delayMs: number,
    private readonly action: () => void,
  ) {}

  schedule(): void {
    this.cancel();
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.action();
    }, this.delayMs);
  }

  cancel(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  get pending(): boolean {
    return this.timer !== undefined;
  }
}

// -- the state ----------------------------------------------------------------------------------

interface Shown {
  readonly edit: NextEdit;
  /** Cursor places that keep it on show: where it was asked for, and where Tab jumped. */
  readonly stays: Position[];
}

/** What a document's current version has seen: edits shown (by key) and edits rejected. */
interface Seen {
  readonly version: number;
  readonly shown: Map<string, NextEdit>;
  readonly rejected: Set<string>;
}

export class NextEdits {
  private shown: Shown | undefined;
  private ghost: NextEdit | undefined;
  /** Bumped by every request and every dismissal: an answer for an older one is dropped. */
  private generation = 0;
  private readonly debouncer: Debouncer;
  private readonly seen = new Map<string, Seen>();

  constructor(
    private readonly host: NextEditHost,
    delayMs: number = NEXT_EDIT_DEBOUNCE_MS,
  ) {
    this.debouncer = new Debouncer(delayMs, () => void this.requestNow());
  }

  /** The edit on show as decorations (not as ghost text), if any. */
  get current(): NextEdit | undefined {
    return this.shown?.edit;
  }

  /** Asks for next edits once the editor has held still. */
  schedule(): void {
    this.debouncer.schedule();
  }

  /** A document's text changed: what shows for it is stale; ask again after the debounce. */
  changed(uri: string): void {
    this.seen.delete(uri);
    if (this.shown?.edit.uri === uri || this.ghost?.uri === uri) {
      this.dismiss();
    }
    this.schedule();
  }

  /** The cursor moved (or the active editor changed): a suggestion stays only where it was
   * asked for or where Tab jumped; anything else dismisses it and asks again. */
  moved(cursor: Cursor | undefined): void {
    const shown = this.shown;
    if (
      shown &&
      cursor &&
      cursor.uri === shown.edit.uri &&
      shown.stays.some((place) => samePosition(place, cursor.position))
    ) {
      return;
    }
    if (this.ghost && cursor && isInsertionAt(this.ghost, cursor) && cursor.version === this.ghost.version) {
      return;
    }
    this.dismiss();
    this.schedule();
  }

  /** Asks the server now (the debounce's action); shows the first usable edit it sends. */
  async requestNow(): Promise<void> {
    this.debouncer.cancel();
    const cursor = this.host.cursor();
    if (!cursor || !this.host.enabled()) {
      return;
    }
    const generation = ++this.generation;
    let answer: unknown;
    try {
      answer = await this.host.request(cursor);
    } catch (error) {
      if (generation === this.generation) {
        this.host.log(`next edits: ${error instanceof Error ? error.message : String(error)}`);
      }
      return;
    }
    const now = this.host.cursor();
    if (generation !== this.generation || !now || !sameCursor(now, cursor) || !this.host.enabled()) {
      return; // something moved on meanwhile, and asks again itself
    }
    const seen = this.seenFor(cursor.uri, cursor.version);
    const edit = parseNextEdits(answer, cursor.uri, cursor.version).find(
      (candidate) => !seen.rejected.has(editKey(candidate)),
    );
    if (!edit) {
      return;
    }
    // The same edit offered again (the cursor moved and came back): keep the first offer, so
    // that the server counts it shown once.
    const offered = seen.shown.get(editKey(edit)) ?? edit;
    if (isInsertionAt(offered, cursor)) {
      this.ghost = offered;
      this.host.showAsGhostText(offered);
      return;
    }
    this.shown = { edit: offered, stays: [cursor.position] };
    this.host.show(offered, cursor.position);
    this.markShown(offered, seen);
  }

  /**
   * The inline completion provider's question: the ghost-text edit for this place, if one
   * waits there (it counts as shown once VS Code asked for it).
   */
  ghostAt(cursor: Cursor): NextEdit | undefined {
    const ghost = this.ghost;
    if (!ghost || !isInsertionAt(ghost, cursor) || ghost.version !== cursor.version) {
      return undefined;
    }
    this.markShown(ghost, this.seenFor(ghost.uri, ghost.version));
    return ghost;
  }

  /** Tab: jump to the edit when the cursor is away from it, else apply it. */
  async tab(): Promise<TabOutcome> {
    const shown = this.shown;
    if (!shown) {
      return TabOutcome.Nothing;
    }
    const { edit } = shown;
    const cursor = this.host.cursor();
    if (!cursor || cursor.uri !== edit.uri || cursor.version !== edit.version) {
      this.dismiss();
      return TabOutcome.Stale;
    }
    if (!isNear(edit.range, cursor.position)) {
      shown.stays.push(edit.range.start);
      this.host.jump(edit.range.start);
      return TabOutcome.Jumped;
    }
    this.dismiss();
    if (!(await this.host.apply(edit))) {
      return TabOutcome.Stale;
    }
    if (edit.command) {
      try {
        await this.host.run(edit.command);
      } catch (error) {
        this.host.log(`next edits: ${edit.command.command}: ${String(error)}`);
      }
    }
    return TabOutcome.Applied;
  }

  /** Esc: the user turned the edit down. The server hears of it; it is not shown again for
   * this version of the document. False when none shows. */
  reject(): boolean {
    const edit = this.shown?.edit;
    if (!edit) {
      return false;
    }
    this.seenFor(edit.uri, edit.version).rejected.add(editKey(edit));
    if (edit.id !== undefined) {
      this.host.notify(DID_REJECT_NEXT_EDIT, { id: edit.id });
    }
    this.dismiss();
    return true;
  }

  /** Removes what shows and drops any answer on its way (the settings turned it off, ...). */
  dismiss(): void {
    this.generation++;
    this.ghost = undefined;
    if (this.shown) {
      this.shown = undefined;
      this.host.hide();
    }
  }

  dispose(): void {
    this.debouncer.cancel();
    this.dismiss();
    this.seen.clear();
  }

  private seenFor(uri: string, version: number): Seen {
    let seen = this.seen.get(uri);
    if (!seen || seen.version !== version) {
      seen = { version, shown: new Map(), rejected: new Set() };
      this.seen.set(uri, seen);
    }
    return seen;
  }

  private markShown(edit: NextEdit, seen: Seen): void {
    const key = editKey(edit);
    if (seen.shown.has(key)) {
      return;
    }
    seen.shown.set(key, edit);
    if (edit.id !== undefined) {
      this.host.notify(DID_SHOW_INLINE_EDIT, { id: edit.id });
    }
  }
}

function sameCursor(a: Cursor, b: Cursor): boolean {
  return a.uri === b.uri && a.version === b.version && samePosition(a.position, b.position);
}
