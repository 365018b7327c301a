/**
 * A hand-written stand-in for the parts of the `vscode` API the tested modules use. It
 * records what the extension shows (status bar items, webview pages and messages, messages
 * to the user) so that tests can assert on it; `reset()` starts each test afresh.
 */

type Listener<T> = (value: T) => void;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  readonly event = (listener: Listener<T>) => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };
  fire(value: T): void {
    for (const listener of [...this.listeners]) {
      listener(value);
    }
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class CodeActionKind {
  static readonly Empty = new CodeActionKind("");
  static readonly QuickFix = new CodeActionKind("quickfix");
  static readonly Refactor = new CodeActionKind("refactor");
  static readonly RefactorRewrite = new CodeActionKind("refactor.rewrite");
  constructor(readonly value: string) {}
  append(part: string): CodeActionKind {
    return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
  }
}

export interface Command {
  title: string;
  command: string;
  arguments?: unknown[];
}

export class CodeAction {
  command?: Command;
  edit?: unknown;
  diagnostics?: unknown[];
  constructor(
    public title: string,
    public kind?: CodeActionKind,
  ) {}
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
  isEqual(other: Position): boolean {
    return this.line === other.line && this.character === other.character;
  }
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
  get isEmpty(): boolean {
    return this.start.isEqual(this.end);
  }
}

export class Selection extends Range {
  constructor(
    readonly anchor: Position,
    readonly active: Position,
  ) {
    super(anchor, active);
  }
}

export class MarkdownString {
  constructor(public value = "") {}
  appendCodeblock(code: string, language = ""): MarkdownString {
    this.value += `\n\`\`\`${language}\n${code}\n\`\`\`\n`;
    return this;
  }
}

export class InlineCompletionItem {
  constructor(
    readonly insertText: string,
    readonly range?: Range,
    readonly command?: Command,
  ) {}
}

export enum OverviewRulerLane {
  Left = 1,
  Center = 2,
  Right = 4,
  Full = 7,
}

export enum DecorationRangeBehavior {
  OpenOpen = 0,
  ClosedClosed = 1,
}

export enum TextEditorRevealType {
  Default = 0,
  InCenter = 1,
  InCenterIfOutsideViewport = 2,
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export enum ViewColumn {
  Active = -1,
  Beside = -2,
  One = 1,
}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

export enum ConfigurationTarget {
  Global = 1,
  Workspace = 2,
}

export class CancellationTokenSource {
  private readonly emitter = new EventEmitter<void>();
  readonly token = {
    isCancellationRequested: false,
    onCancellationRequested: this.emitter.event,
  };
  cancel(): void {
    if (!this.token.isCancellationRequested) {
      this.token.isCancellationRequested = true;
      this.emitter.fire();
    }
  }
  dispose(): void {}
}

export class Uri {
  private constructor(private readonly text: string) {}
  static parse(text: string): Uri {
    return new Uri(text);
  }
  toString(): string {
    return this.text;
  }
}

export class FakeStatusBarItem {
  text = "";
  tooltip: string | undefined;
  command: string | undefined;
  name: string | undefined;
  backgroundColor: ThemeColor | undefined;
  visible = false;
  constructor(readonly id: string) {}
  show(): void {
    this.visible = true;
  }
  hide(): void {
    this.visible = false;
  }
  dispose(): void {
    this.visible = false;
  }
}

export class FakeWebviewPanel {
  title: string;
  disposed = false;
  revealed = 0;
  readonly posted: unknown[] = [];
  private readonly received = new EventEmitter<unknown>();
  private readonly disposedEmitter = new EventEmitter<void>();
  readonly webview = {
    html: "",
    postMessage: async (message: unknown) => {
      this.posted.push(message);
      return true;
    },
    onDidReceiveMessage: this.received.event,
  };
  readonly onDidDispose = this.disposedEmitter.event;

  constructor(
    readonly viewType: string,
    title: string,
    readonly showOptions: unknown,
    readonly options: unknown,
  ) {
    this.title = title;
  }
  /** What the page's script would send. */
  sendFromPage(message: unknown): void {
    this.received.fire(message);
  }
  reveal(): void {
    this.revealed++;
  }
  dispose(): void {
    if (!this.disposed) {
      this.disposed = true;
      this.disposedEmitter.fire();
    }
  }
  /** The last view the extension posted. */
  get lastView(): Record<string, unknown> | undefined {
    const last = this.posted.at(-1) as { view?: Record<string, unknown> } | undefined;
    return last?.view;
  }
}

/** A decoration type: the options it was made with. */
export class FakeDecorationType {
  disposed = false;
  constructor(readonly options: Record<string, unknown>) {}
  dispose(): void {
    this.disposed = true;
  }
}

/** What the extension showed, and the settings it reads, for the current test. */
export const recorded = {
  commands: [] as unknown[][],
  decorationTypes: [] as FakeDecorationType[],
  statusBarItems: [] as FakeStatusBarItem[],
  panels: [] as FakeWebviewPanel[],
  errors: [] as string[],
  infos: [] as string[],
  settings: new Map<string, unknown>(),
};

/** A `LogOutputChannel`: its lines, by level, for the current test. */
export class FakeLogChannel {
  readonly lines: string[] = [];
  constructor(readonly name: string) {}
  info(line: string): void {
    this.lines.push(`info ${line}`);
  }
  warn(line: string): void {
    this.lines.push(`warn ${line}`);
  }
  error(line: string): void {
    this.lines.push(`error ${line}`);
  }
  debug(line: string): void {
    this.lines.push(`debug ${line}`);
  }
  trace(line: string): void {
    this.lines.push(`trace ${line}`);
  }
  appendLine(line: string): void {
    this.lines.push(line);
  }
  show(): void {}
  dispose(): void {}
}

const configurationChanged = new EventEmitter<{ affectsConfiguration(section: string): boolean }>();
/** The editor events: tests fire them as VS Code would. */
export const events = {
  textDocumentChanged: new EventEmitter<{ document: unknown; contentChanges: unknown[] }>(),
  selectionChanged: new EventEmitter<{ textEditor: unknown }>(),
  activeEditorChanged: new EventEmitter<unknown>(),
};

/** What VS Code does when the user changes settings: store them, then say which changed. */
export function changeSettings(values: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(values)) {
    recorded.settings.set(key, value);
  }
  const changed = Object.keys(values);
  configurationChanged.fire({
    affectsConfiguration: (section: string) =>
      changed.some((key) => key === section || key.startsWith(`${section}.`)),
  });
}

export function reset(): void {
  configurationChanged.dispose(); // no listener of an earlier test hears this one's changes
  for (const emitter of Object.values(events)) {
    emitter.dispose();
  }
  recorded.commands.length = 0;
  recorded.decorationTypes.length = 0;
  recorded.statusBarItems.length = 0;
  recorded.panels.length = 0;
  recorded.errors.length = 0;
  recorded.infos.length = 0;
  recorded.settings.clear();
  window.activeTextEditor = undefined;
}

export const window = {
  activeTextEditor: undefined as unknown,
  createStatusBarItem(id: string): FakeStatusBarItem {
    const item = new FakeStatusBarItem(id);
    recorded.statusBarItems.push(item);
    return item;
  },
  createWebviewPanel(
    viewType: string,
    title: string,
    showOptions: unknown,
    options: unknown,
  ): FakeWebviewPanel {
    const panel = new FakeWebviewPanel(viewType, title, showOptions, options);
    recorded.panels.push(panel);
    return panel;
  },
  async showErrorMessage(message: string): Promise<undefined> {
    recorded.errors.push(message);
    return undefined;
  },
  async showInformationMessage(message: string): Promise<undefined> {
    recorded.infos.push(message);
    return undefined;
  },
  setStatusBarMessage(message: string) {
    recorded.infos.push(message);
    return { dispose() {} };
  },
  createOutputChannel(name: string): FakeLogChannel {
    return new FakeLogChannel(name);
  },
  createTextEditorDecorationType(options: Record<string, unknown>): FakeDecorationType {
    const type = new FakeDecorationType(options);
    recorded.decorationTypes.push(type);
    return type;
  },
  onDidChangeTextEditorSelection: events.selectionChanged.event,
  onDidChangeActiveTextEditor: events.activeEditorChanged.event,
};

export const commands = {
  async executeCommand(command: string, ...args: unknown[]): Promise<undefined> {
    recorded.commands.push([command, ...args]);
    return undefined;
  },
};

export const languages = {
  /** Only the scheme filters are used: 10 for a match, 0 for none. */
  match(selector: { scheme?: string }[], document: { uri: { scheme: string } }): number {
    return selector.some((filter) => filter.scheme === document.uri.scheme) ? 10 : 0;
  },
};

export const workspace = {
  onDidChangeConfiguration: configurationChanged.event,
  onDidChangeTextDocument: events.textDocumentChanged.event,
  getConfiguration(section: string) {
    return {
      get: <T>(key: string, fallback?: T): T | undefined =>
        (recorded.settings.has(`${section}.${key}`)
          ? recorded.settings.get(`${section}.${key}`)
          : fallback) as T,
      update: async (key: string, value: unknown) => {
        recorded.settings.set(`${section}.${key}`, value);
      },
    };
  },
};
