/**
 * What the server is told of its inline suggestions, for the counts it keeps on this machine
 * (`infill.usageCounts`): shown, and partially accepted. Accepting a whole suggestion runs the
 * item's own command (`infill.acceptCompletion`), which VS Code does by itself; typing that
 * diverges from a suggestion the server sees in the document's changes.
 *
 * VS Code's stable API says neither when an inline suggestion is displayed nor when part of one
 * is accepted, so:
 * - "shown" is the first item of an answer that reached VS Code for the document version and
 *   cursor it asked about, its request not cancelled (VS Code displays the first item of such
 *   an answer; a later keystroke that keeps it asks again, and the server then offers its rest
 *   under the same id, so it counts once);
 * - "partially accepted" is a change that inserts, at the suggestion's point, a part of it of
 *   `MIN_PART_UNITS` or more (Accept Word, Accept Line); a one-character part cannot be told
 *   from typing and counts as typed.
 */
import { DID_PARTIALLY_ACCEPT_COMPLETION, DID_SHOW_COMPLETION, SERVER_ACCEPT_COMPLETION } from "./commandIds";

/** A zero-based line and UTF-16 column, as VS Code and LSP count. */
export interface Point {
  readonly line: number;
  readonly character: number;
}

/** One content change of a document, as `onDidChangeTextDocument` reports it. */
export interface TextChange {
  readonly range: { readonly start: Point; readonly end: Point };
  readonly text: string;
}

/** An inline item as VS Code holds it (the language client's conversion of the server's). */
export interface AnsweredItem {
  readonly insertText: string | { readonly value: string };
  readonly command?: { readonly title?: string; readonly command: string; readonly arguments?: unknown[] };
}

/** A change shorter than this at the point is typing, not an accepted part. */
export const MIN_PART_UNITS = 2;

interface Shown {
  readonly uri: string;
  /** The item as the server sent it, sent back in each notice. */
  readonly item: { insertText: string; command: { title: string; command: string; arguments: unknown[] } };
  /** Where the rest of it would go. */
  point: Point;
  /** UTF-16 units of the item already in the document (typed along or accepted). */
  inserted: number;
}

/** The items of an inline completion answer, whatever its shape. */
export function itemsOf(
  answer: readonly AnsweredItem[] | { readonly items: readonly AnsweredItem[] } | null | undefined,
): readonly AnsweredItem[] {
  if (!answer) {
    return [];
  }
  return "items" in answer ? answer.items : answer;
}

/** Where `text` ends when inserted at `point`. */
export function endOf(point: Point, text: string): Point {
  const lines = text.split(/\r\n|\r|\n/);
  const last = lines[lines.length - 1] ?? "";
  return lines.length === 1
    ? { line: point.line, character: point.character + last.length }
    : { line: point.line + lines.length - 1, character: last.length };
}

function samePoint(a: Point, b: Point): boolean {
  return a.line === b.line && a.character === b.character;
}

export class SuggestionNotices {
  private shown: Shown | undefined;

  constructor(private readonly notify: (method: string, params: object) => void) {}

  /**
   * An answer reached VS Code for the document `uri` at `point`, still current: its first
   * item is shown, if it is one the server counts (it carries the accept command).
   */
  answered(uri: string, point: Point, items: readonly AnsweredItem[]): void {
    this.shown = undefined;
    const first = items[0];
    const command = first?.command;
    if (!first || command?.command !== SERVER_ACCEPT_COMPLETION) {
      return;
    }
    const insertText = typeof first.insertText === "string" ? first.insertText : first.insertText.value;
    const item = {
      insertText,
      command: {
        title: command.title ?? "",
        command: command.command,
        arguments: [...(command.arguments ?? [])],
      },
    };
    this.shown = { uri, item, point, inserted: 0 };
    this.notify(DID_SHOW_COMPLETION, { item });
  }

  /** The document `uri` changed: a part of the shown suggestion inserted at its point is
   * accepted; anything else ends it here (the server counts the rest). */
  changed(uri: string, changes: readonly TextChange[]): void {
    const shown = this.shown;
    if (!shown || shown.uri !== uri || changes.length === 0) {
      return;
    }
    const change = changes.length === 1 ? changes[0] : undefined;
    const rest = shown.item.insertText.slice(shown.inserted);
    if (
      !change ||
      change.text === "" ||
      !samePoint(change.range.start, shown.point) ||
      !samePoint(change.range.end, shown.point) ||
      !rest.startsWith(change.text) ||
      change.text === rest // the whole rest: VS Code runs the item's accept command
    ) {
      this.shown = undefined;
      return;
    }
    shown.inserted += change.text.length;
    shown.point = endOf(shown.point, change.text);
    if (change.text.length >= MIN_PART_UNITS) {
      // Copilot's clients count `acceptedLength` from the item's start, in UTF-16 units.
      this.notify(DID_PARTIALLY_ACCEPT_COMPLETION, { item: shown.item, acceptedLength: shown.inserted });
    }
  }

  /** The suggestion is gone (the client stopped, suggestions were turned off). */
  clear(): void {
    this.shown = undefined;
  }
}
