"""The VS Code extension, end to end, in a real VS Code: code-server in headless Chromium.

One code-server and one browser for the module. The extension (editors/vscode/infill-lsp.vsix)
is installed into a fresh extensions folder and talks to this checkout's real language server
(.venv/bin/infill-lsp) with the real default models. The tests, in order, do what a user does:

1. open `my project/café.py` (a space and a non-ASCII letter in its path), type a function
   header, wait for the ghost text, accept it with Tab, save, and find it on disk;
2. run "infill: Explain" from the command palette and watch the Explain panel (a webview)
   fill with rendered markdown until its state is "done";
3. run "infill: Rewrite", give it an instruction, and see the edit (or the reason the server
   gives for not making one);
4. open `my project/reçu.py`, rename a variable at one place, and take the next edits the
   extension shows at its other uses with Tab, Tab, one after the other; save, and undo the last;
5. open `my project/fetch.py`, type an argument into one call, and take the same insertion the
   extension shows at the other call of that function with Tab, Tab; save.

Needs: /usr/bin/chromium (Debian's `chromium`), code-server (tests/editors/install_code_server.sh,
run by `make test`), the packaged extension, and the `playwright` Python package (its own
browser downloads are never used). Each missing piece skips the module with the reason.

Environment:
    INFILL_CODE_SERVER      code-server (default: build/code-server/node_modules/.bin/code-server)
    INFILL_VSIX             the extension package (default: editors/vscode/infill-lsp.vsix)
    INFILL_LSP_SERVER       the language server (default: .venv/bin/infill-lsp)
    INFILL_CHROMIUM         the browser (default: /usr/bin/chromium)
    INFILL_SCREENSHOT_DIR   also write the screenshots for the README there, as ghost-text.png
                            and next-edit.png (editors/vscode/)
    INFILL_E2E_ARTIFACTS    where screenshots and logs go, kept (default: a new temporary
                            folder, removed when every test passed)

Screenshots, code-server's log and VS Code's logs (the extension's output, with the server's
stderr, included) go to the artifacts folder; its path is printed with every failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _path_from_env(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser().resolve() if value else default


CODE_SERVER = _path_from_env(
    "INFILL_CODE_SERVER", REPO / "build" / "code-server" / "node_modules" / ".bin" / "code-server"
)
VSIX = _path_from_env("INFILL_VSIX", REPO / "editors" / "vscode" / "infill-lsp.vsix")
LSP_SERVER = _path_from_env("INFILL_LSP_SERVER", REPO / ".venv" / "bin" / "infill-lsp")
CHROMIUM = _path_from_env("INFILL_CHROMIUM", Path("/usr/bin/chromium"))

EXTENSION_ID = "infill-lsp.infill"

# The file the tests edit: a space and a non-ASCII letter in its path, so that its URI has
# %-escapes all the way from VS Code to the server and back.
FOLDER_NAME = "my project"
FILE_NAME = "café.py"
ORIGINAL = '''import math


def circle_area(radius):
    """The area of a circle of this radius."""
    return math.pi * radius * radius


def greet(name):
    return "Hello, " + name + "!"
'''
# Typed at the end of the file, then Enter: VS Code indents the new line, and the ghost text
# appears there.
TYPED_HEADER = "def add(a, b):"

# The next-edit test's own file, beside the other. `total` is renamed to `amount` where it is
# first set; the server then proposes the same change at its other uses in the function, not in
# the string or the comment (lsp_server/next_edit/propagate.py), nearest first.
NEXT_EDIT_FILE_NAME = "reçu.py"
NEXT_EDIT_ORIGINAL = """def receipt(prices, rate):
    total = 0
    for price in prices:
        total += price
    tax = total * rate
    print("total:", total)  # the total, with tax
    return total + tax
"""
RENAMED_FROM, RENAMED_TO = "total", "amount"
# Each other use, in the order the server proposes them: (line, column), 1-based.
NEXT_EDIT_USES = [(4, 9), (5, 11), (6, 21), (7, 12)]
NEXT_EDIT_EXPECTED = """def receipt(prices, rate):
    amount = 0
    for price in prices:
        amount += price
    tax = amount * rate
    print("total:", amount)  # the total, with tax
    return amount + tax
"""

# The inserted-argument test's own file. `fetch` is called the same way twice; `, timeout=5`
# typed into the first call is proposed at the second, not at `parse(url)` (another function)
# nor in the string or the comment that spell the call.
ARGUMENT_FILE_NAME = "fetch.py"
ARGUMENT_ORIGINAL = """def download(url):
    page = fetch(url)
    if page is None:
        page = fetch(url)
    print("fetch(url) failed")  # fetch(url)
    return parse(url)
"""
ARGUMENT = ", timeout=5"
# Where it is typed (before the first call's closing parenthesis) and where the same insertion
# goes at the other call: (line, column), 1-based.
ARGUMENT_TYPED_AT = (2, 21)
ARGUMENT_OTHER_CALL = (4, 25)
ARGUMENT_EXPECTED = """def download(url):
    page = fetch(url, timeout=5)
    if page is None:
        page = fetch(url, timeout=5)
    print("fetch(url) failed")  # fetch(url)
    return parse(url)
"""

# Chromium's flags: as root it needs --no-sandbox; the background-networking family keeps it
# from connecting out (connections are refused on a closed network, which slows it down).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
]

SETTINGS: dict[str, Any] = {
    # Quiet: no trust prompt, welcome page, walkthroughs, tips, telemetry or update checks.
    "security.workspace.trust.enabled": False,
    "workbench.startupEditor": "none",
    "workbench.welcomePage.walkthroughs.openOnInstall": False,
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "extensions.ignoreRecommendations": True,
    "git.enabled": False,
    "workbench.colorTheme": "Default Dark Modern",
    "workbench.editor.enablePreview": False,
    # The editor: ghost text on; nothing else that reacts to typing (brackets closed for us,
    # the suggest widget, hovers), so that what is typed is what lands in the file and Tab
    # accepts the ghost text.
    "editor.inlineSuggest.enabled": True,
    "editor.autoClosingBrackets": "never",
    "editor.autoClosingQuotes": "never",
    "editor.autoSurround": "never",
    "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
    "editor.suggestOnTriggerCharacters": False,
    "editor.wordBasedSuggestions": "off",
    "editor.acceptSuggestionOnEnter": "off",
    "editor.parameterHints.enabled": False,
    "editor.hover.enabled": False,
    "editor.minimap.enabled": False,
    # Saving is the test's job, and no unsaved text survives into another run.
    "files.autoSave": "off",
    "files.hotExit": "off",
    "files.trimTrailingWhitespace": False,
    "files.insertFinalNewline": False,
}

# DOM facts (VS Code 1.100). Inline suggestions: the part on the cursor's line is spans with
# class `ghost-text-decoration` inside `.view-lines`; the lines after it live in a view zone,
# `.view-zones .suggest-preview-text`, one `.view-line` each (spans of class `ghost-text`).
# Both render spaces as U+00A0.
GHOST_SELECTOR = ".view-lines .ghost-text-decoration, .view-zones .suggest-preview-text .ghost-text"
READ_GHOST_JS = """editor => {
  const first = Array.from(editor.querySelectorAll('.view-lines .ghost-text-decoration'))
    .map(span => span.textContent).join('');
  const rest = Array.from(editor.querySelectorAll('.view-zones .suggest-preview-text .view-line'))
    .map(line => line.textContent);
  return [first, ...rest].join('\\n').replace(/\\u00a0/g, ' ');
}"""
# A next edit (editors/vscode/src/nextEditView.ts) is drawn with decorations: the replaced text
# in spans styled `line-through`, the new text and the "⇥ Tab: next edit" marker as
# after-content of a span (VS Code renders a decoration's `after.contentText` as CSS `content`).
# Returns what shows in the focused editor.
NEXT_EDIT_JS = """() => {
  const editor = document.querySelector('.editor-instance .monaco-editor.focused');
  const struck = [];
  const after = [];
  if (!editor) {
    return { struck, after };
  }
  for (const span of editor.querySelectorAll('.view-lines span')) {
    const decoration = getComputedStyle(span).textDecorationLine;
    if (span.children.length === 0 && decoration.includes('line-through')) {
      struck.push(span.textContent.replace(/\u00a0/g, ' '));
    }
    const content = getComputedStyle(span, '::after').content;
    if (content && content !== 'none' && content !== 'normal') {
      after.push(content.replace(/^"|"$/g, '').replace(/\u00a0/g, ' '));
    }
  }
  return { struck, after };
}"""
# The extension's status bar item says "infill: <state>" (editors/vscode/src/status.ts).
STATUS_JS = """() => {
  for (const item of document.querySelectorAll('.statusbar-item')) {
    const text = (item.textContent || '').trim();
    if (/^infill: (starting|loading|ready|thinking|off|error|no server|stopped)$/.test(text)) {
      return text;
    }
  }
  return null;
}"""
STATUS_SETTLED_JS = STATUS_JS.replace(
    "return text;", "return /starting|loading/.test(text) ? null : text;"
)
# The Explain panel (editors/vscode/src/explainView.ts): `body[data-state]` is waiting,
# generating, done, stopped or error; the answer is rendered into `#content`; `#error`.
EXPLAIN_FINAL_STATES = ("done", "stopped", "error")
# The state, and how many characters of the answer show (none while a placeholder does).
EXPLAIN_PROGRESS_JS = """body => {
  const content = document.getElementById('content');
  const answer = !content || content.querySelector('.placeholder') ? '' : content.innerText;
  return [body.dataset.state || '', answer.trim().length];
}"""
NOTIFICATIONS = ".notifications-toasts .notification-toast"
# The quick input (Quick Open, the command palette, an extension's quick pick) after Enter:
# hidden, or reused at once for another question, its input then holding other text.
QUICK_INPUT_DONE_JS = """text => {
  const widget = document.querySelector('.quick-input-widget');
  if (!widget || getComputedStyle(widget).display === 'none') {
    return true;
  }
  const input = widget.querySelector('.quick-input-box input');
  return !input || input.value !== text;
}"""
# The active editor group's active tab (the Explain panel has a tab in another group).
ACTIVE_TAB = ".editor-group-container.active .tabs-container .tab.active"
# What the server or the extension says when a Rewrite makes no edit.
REWRITE_REFUSED = re.compile("not applied|nothing was changed|rewrite failed", re.IGNORECASE)

# Deadlines (ms). The models run on the CPU of a busy machine: generous, never fixed sleeps.
STARTUP_MS = 90_000
READY_MS = 300_000
GHOST_MS = 180_000
EXPLAIN_MS = 300_000
REWRITE_MS = 300_000
UI_MS = 20_000
TYPING_DELAY_MS = 50


def _skip_reason() -> str | None:
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if not os.access(CODE_SERVER, os.X_OK):
        # The install script leaves why it could not install beside where it would have.
        failed = CODE_SERVER.parents[2] / ".install-failed"
        why = f": {failed.read_text().strip()}" if failed.is_file() else ""
        return (
            f"code-server is not installed at {CODE_SERVER}{why} "
            "(tests/editors/install_code_server.sh build/code-server, or set INFILL_CODE_SERVER)"
        )
    if not VSIX.is_file():
        return f"no extension package at {VSIX} (editors/vscode: npm ci && npm run package)"
    if not os.access(LSP_SERVER, os.X_OK):
        return f"the language server is not installed at {LSP_SERVER} (make install)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install playwright)"
    return None


_SKIP = _skip_reason()
if _SKIP:
    pytest.skip(_SKIP, allow_module_level=True)

from playwright.sync_api import (  # noqa: E402  (only importable when not skipped)
    Browser,
    FrameLocator,
    Locator,
    Page,
    Playwright,
    expect,
    sync_playwright,
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _descendants(root: int) -> list[int]:
    """The process ids under `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _stop_process_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to code-server's process group, then SIGKILL to whatever of its tree is left."""
    tree = [proc.pid, *_descendants(proc.pid)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
        time.sleep(0.2)
    for pid in tree:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _wait_for_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"code-server exited with {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"code-server did not answer {url} in {timeout_s:.0f} s:\n{_tail(log)}"
            )
        time.sleep(0.25)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({path}: {error})"


@dataclass
class VSCode:
    """The running VS Code: its page, its folders, and where diagnostics go."""

    page: Page
    workspace: Path
    file: Path
    user_data: Path
    artifacts: Path
    #: The server's state folder (INFILL_STATE_DIR): its usage counts.
    state: Path
    console: list[str] = field(default_factory=list)
    failed: bool = False

    # -- diagnostics ------------------------------------------------------------------------

    def extension_log(self) -> str:
        """The last lines of the extension's output channel(s), from VS Code's log files."""
        logs = sorted((self.user_data / "logs").rglob("*infill*.log"))
        return "\n".join(f"== {log.name}\n{_tail(log)}" for log in logs) or "(no extension log)"

    def save_diagnostics(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.page.screenshot(path=str(self.artifacts / f"{name}.png"))
        with contextlib.suppress(Exception):
            (self.artifacts / f"{name}.notifications.txt").write_text(
                "\n---\n".join(self.page.locator(NOTIFICATIONS).all_inner_texts())
            )

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Runs a test step; on failure saves a screenshot and names the artifacts folder."""
        try:
            yield
        except BaseException as error:
            if isinstance(error, pytest.skip.Exception):
                raise
            self.failed = True
            self.save_diagnostics(f"failed-{name}")
            print(f"\nVS Code e2e: '{name}' failed; screenshots and logs in {self.artifacts}")
            print(f"extension log:\n{self.extension_log()}")
            raise

    # -- the UI -----------------------------------------------------------------------------

    def quick_input(self) -> Locator:
        return self.page.locator(".quick-input-widget")

    def pick(self, text: str) -> None:
        """Enters `text` into the open quick input and accepts its first row once that row
        shows `text`. The text is set on the input itself rather than typed, so that no key is
        lost while the widget takes focus."""
        widget = self.quick_input()
        expect(widget).to_be_visible(timeout=UI_MS)
        box = widget.locator(".quick-input-box input")
        box.fill(text)
        expect(widget.locator(".monaco-list-row.focused").first).to_contain_text(
            text.removeprefix(">"), timeout=UI_MS
        )
        box.press("Enter")
        # Closed, or already showing the next question (then its input no longer holds text).
        self.page.wait_for_function(QUICK_INPUT_DONE_JS, arg=text, timeout=UI_MS)

    def run_command(self, title: str) -> None:
        """Runs a command from the command palette (F1), by its title."""
        self.page.keyboard.press("F1")
        self.pick(f">{title}")

    def open_file(self, name: str) -> Locator:
        """Opens a file with Quick Open (Ctrl+P); returns its focused editor."""
        self.page.keyboard.press("Control+P")
        self.pick(name)
        expect(self.page.locator(ACTIVE_TAB)).to_contain_text(name, timeout=UI_MS)
        return self.focused_editor()

    def focused_editor(self) -> Locator:
        editor = self.page.locator(".editor-instance .monaco-editor.focused")
        expect(editor).to_have_count(1, timeout=UI_MS)
        return editor

    def go_to_line(self, line: int, column: int | None = None) -> None:
        """Moves the cursor to the start of `line`, or to its `column` (Ctrl+G; 1-based)."""
        self.page.keyboard.press("Control+G")
        widget = self.quick_input()
        expect(widget).to_be_visible(timeout=UI_MS)
        box = widget.locator(".quick-input-box input")
        box.fill(f":{line}" if column is None else f":{line}:{column}")
        box.press("Enter")
        expect(widget).to_be_hidden(timeout=UI_MS)

    def wait_for_ghost(self, editor: Locator, where: str) -> None:
        """Waits for ghost text in `editor`; failing, says so with the status and the log."""
        try:
            editor.locator(GHOST_SELECTOR).first.wait_for(state="visible", timeout=GHOST_MS)
        except Exception as error:
            raise AssertionError(
                f"no ghost text{where} after {GHOST_MS / 1000:.0f} s; status {self.status()!r}\n"
                f"{self.extension_log()}"
            ) from error

    def expect_cursor(self, line: int, column: int) -> None:
        """Waits for the status bar to show the cursor at `line`:`column` (1-based) and no
        selection (a selection adds "(N selected)" to the item)."""
        item = self.page.locator("[id='status.editor.selection']")
        expect(item).to_have_text(f"Ln {line}, Col {column}", timeout=UI_MS)

    def save(self) -> None:
        self.page.keyboard.press("Control+S")
        expect(self.page.locator(f"{ACTIVE_TAB}.dirty")).to_have_count(0, timeout=UI_MS)

    def wait_until_ready(self) -> None:
        """Waits for the status bar to leave starting/loading (the model loads); fails unless
        it then says ready (or thinking: a suggestion is being written)."""
        status = self.page.wait_for_function(STATUS_SETTLED_JS, timeout=READY_MS).json_value()
        assert status in ("infill: ready", "infill: thinking"), (
            f"the extension's status is {status!r}\n{self.extension_log()}"
        )

    def status(self) -> str | None:
        status: str | None = self.page.evaluate(STATUS_JS)
        return status

    def explain_frame(self) -> FrameLocator:
        """The Explain panel's page: the webview's outer iframe, then its active inner one."""
        outer = self.page.frame_locator(f'iframe.webview[src*="extensionId={EXTENSION_ID}"]').last
        return outer.frame_locator("iframe#active-frame")


def _write_settings(user_data: Path) -> None:
    settings = {**SETTINGS, "infill.serverPath": str(LSP_SERVER)}
    (user_data / "User").mkdir(parents=True, exist_ok=True)
    (user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=2))


def _install_extension(env: dict[str, str], user_data: Path, extensions: Path, log: Path) -> None:
    result = subprocess.run(
        [
            str(CODE_SERVER),
            "--install-extension",
            str(VSIX),
            "--extensions-dir",
            str(extensions),
            "--user-data-dir",
            str(user_data),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0 or not any(extensions.glob(f"{EXTENSION_ID}-*")):
        raise RuntimeError(
            f"installing {VSIX} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )


@pytest.fixture(scope="module")
def vscode() -> Iterator[VSCode]:
    artifacts_env = os.environ.get("INFILL_E2E_ARTIFACTS")
    if artifacts_env:
        artifacts = Path(artifacts_env).resolve()
        artifacts.mkdir(parents=True, exist_ok=True)
    else:
        artifacts = Path(tempfile.mkdtemp(prefix="infill-vscode-e2e-artifacts-"))
    work = Path(tempfile.mkdtemp(prefix="infill-vscode-e2e-"))
    user_data, extensions, workspace = work / "user-data", work / "extensions", work / "workspace"
    for folder in (user_data, extensions, workspace / FOLDER_NAME):
        folder.mkdir(parents=True)
    file = workspace / FOLDER_NAME / FILE_NAME
    file.write_text(ORIGINAL, encoding="utf-8")
    (workspace / FOLDER_NAME / NEXT_EDIT_FILE_NAME).write_text(NEXT_EDIT_ORIGINAL, encoding="utf-8")
    (workspace / FOLDER_NAME / ARGUMENT_FILE_NAME).write_text(ARGUMENT_ORIGINAL, encoding="utf-8")
    _write_settings(user_data)
    # code-server writes a default config file (with a password) under XDG_CONFIG_HOME on
    # its first run: keep that out of the user's home.
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(work / "config"),
        "XDG_DATA_HOME": str(work / "data"),
        "INFILL_STATE_DIR": str(work / "state"),
    }
    print(f"\nVS Code e2e: artifacts in {artifacts}")

    port = _free_port()
    server_log = artifacts / "code-server.log"
    proc: subprocess.Popen[bytes] | None = None
    playwright: Playwright | None = None
    browser: Browser | None = None
    session: VSCode | None = None
    try:
        _install_extension(env, user_data, extensions, artifacts / "install-extension.log")
        with server_log.open("wb") as log:
            proc = subprocess.Popen(
                [
                    str(CODE_SERVER),
                    "--auth",
                    "none",
                    "--bind-addr",
                    f"127.0.0.1:{port}",
                    "--disable-telemetry",
                    "--disable-update-check",
                    "--disable-workspace-trust",
                    "--disable-getting-started-override",
                    "--user-data-dir",
                    str(user_data),
                    "--extensions-dir",
                    str(extensions),
                    str(workspace),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: teardown stops all of it
            )
        _wait_for_http(f"http://127.0.0.1:{port}/healthz", proc, server_log, STARTUP_MS / 1000)

        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(UI_MS)
        session = VSCode(page, workspace, file, user_data, artifacts, work / "state")
        page.on(
            "console", lambda message: session.console.append(f"{message.type}: {message.text}")
        )
        page.on("pageerror", lambda error: session.console.append(f"pageerror: {error}"))

        with session.step("startup"):
            page.goto(
                f"http://127.0.0.1:{port}/?folder={urllib.request.pathname2url(str(workspace))}"
            )
            expect(page.locator(".monaco-workbench .part.statusbar")).to_be_visible(
                timeout=STARTUP_MS
            )
            # The extension is active once its status bar item is there.
            page.wait_for_function(STATUS_JS, timeout=STARTUP_MS)
        yield session
    finally:
        if session is not None:
            with contextlib.suppress(Exception):
                (artifacts / "browser-console.log").write_text("\n".join(session.console))
        if browser is not None:
            with contextlib.suppress(Exception):
                browser.close()
        if playwright is not None:
            with contextlib.suppress(Exception):
                playwright.stop()
        if proc is not None:
            _stop_process_tree(proc)
        # VS Code's logs: the extension's output channel, the extension host, the server's.
        with contextlib.suppress(OSError):
            shutil.copytree(user_data / "logs", artifacts / "vscode-logs", dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        if session is None or session.failed:
            print(f"\nVS Code e2e: diagnostics in {artifacts}")
        elif not artifacts_env:
            shutil.rmtree(artifacts, ignore_errors=True)  # all passed: nothing to look at


def test_ghost_text_accepted_and_saved(vscode: VSCode) -> None:
    page = vscode.page
    with vscode.step("ghost-text"):
        vscode.wait_until_ready()
        editor = vscode.open_file(FILE_NAME)
        # The empty line after the last one, with nothing selected: typing must not replace
        # anything an earlier test (Explain, in another order) left behind. A shuffled run
        # once typed over a selected line here; the status bar now says where the cursor is
        # before a key is typed.
        last = len(ORIGINAL.splitlines()) + 1
        vscode.go_to_line(last)
        vscode.expect_cursor(last, 1)
        page.keyboard.press("Enter")
        # At a typist's pace: typed all at once (no delay between keys), VS Code 1.100 sometimes
        # asks for no inline suggestion at all until the next keystroke.
        page.keyboard.type(TYPED_HEADER, delay=TYPING_DELAY_MS)
        page.keyboard.press("Enter")  # VS Code indents the new line: the ghost text goes there

        vscode.wait_for_ghost(editor, "")
        # Read it once it holds still (a newer answer may replace the first one).
        ghost = editor.evaluate(READ_GHOST_JS)
        for _ in range(20):
            page.wait_for_timeout(250)
            again = editor.evaluate(READ_GHOST_JS)
            if again == ghost:
                break
            ghost = again
        print(f"\nghost text: {ghost!r}")
        assert ghost.strip(), "the ghost text is empty"

        shot = vscode.artifacts / "ghost-text.png"
        page.locator(".part.editor").screenshot(path=str(shot))
        page.screenshot(path=str(vscode.artifacts / "ghost-text-window.png"))
        if os.environ.get("INFILL_SCREENSHOT_DIR"):
            out = Path(os.environ["INFILL_SCREENSHOT_DIR"]).resolve()
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, out / "ghost-text.png")

        page.keyboard.press("Tab")
        expect(editor.locator(".view-lines .ghost-text-decoration")).to_have_count(0, timeout=UI_MS)
        vscode.save()

        on_disk = vscode.file.read_text(encoding="utf-8")
        # The indentation VS Code put on the new line, then what the ghost text showed.
        expected = f"{ORIGINAL}\n{TYPED_HEADER}\n    {ghost}"
        assert on_disk == expected, (
            f"the file on disk is not the typed text followed by the ghost text:\n"
            f"--- expected\n{expected}\n--- on disk\n{on_disk}"
        )

    with vscode.step("usage-counts"):
        # README "Usage counts": the extension said the suggestion showed and VS Code ran its
        # accept command; the server adds its counts to its file within seconds.
        usage = vscode.state / "usage.json"

        def counted() -> dict[str, int] | None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                python: dict[str, int] = json.loads(usage.read_text(encoding="utf-8"))["languages"][
                    "python"
                ]
                if python["accepted"] >= 1:
                    return python
            return None

        deadline = time.monotonic() + 60
        while (python := counted()) is None and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        assert python is not None, f"no accepted suggestion counted in {usage}"
        assert python["shown"] >= python["accepted"] >= 1
        assert python["characters_accepted"] > 0


def test_explain_fills_the_panel(vscode: VSCode) -> None:
    page = vscode.page
    with vscode.step("explain"):
        vscode.wait_until_ready()
        vscode.open_file(FILE_NAME)
        vscode.go_to_line(ORIGINAL.splitlines().index("def greet(name):") + 2)  # in greet's body
        vscode.run_command("infill: Explain")

        frame = vscode.explain_frame()
        body = frame.locator("body")
        # Watch it fill: the states the panel goes through, with how much text it shows.
        seen: list[tuple[str, int]] = []
        deadline = time.monotonic() + EXPLAIN_MS / 1000
        while not seen or seen[-1][0] not in EXPLAIN_FINAL_STATES:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the Explain panel did not finish in {EXPLAIN_MS / 1000:.0f} s; "
                    f"it went through {seen}\n{vscode.extension_log()}"
                )
            now = tuple(body.evaluate(EXPLAIN_PROGRESS_JS, timeout=EXPLAIN_MS))
            if not seen or seen[-1] != now:
                seen.append(now)
            page.wait_for_timeout(50)
        print(f"\nExplain panel states (state, characters): {seen}")
        state = body.get_attribute("data-state")
        title = frame.locator("#title").inner_text()
        error_text = frame.locator("#error").inner_text()
        content = frame.locator("#content")
        text = content.inner_text().strip()
        html = content.inner_html()
        print(f"\n{title} ({state}): {text[:500]!r}")
        page.screenshot(path=str(vscode.artifacts / "explain.png"))
        assert state == "done", f"the Explain panel ended {state!r}: {error_text}"
        assert text, "the Explain panel is empty"
        # It filled while the model wrote: part of the answer showed before the end.
        assert any(seen_state == "generating" and 0 < n < seen[-1][1] for seen_state, n in seen), (
            f"the Explain panel showed no partial answer before the end: {seen}"
        )
        # The panel names the file: its URI made the round trip to the server and back.
        assert FILE_NAME in title, f"the Explain panel's title is {title!r}"
        assert "<p>" in html or "<li>" in html or "<pre>" in html, (
            f"no rendered markdown: {html[:300]}"
        )


def test_rewrite_edits_the_function(vscode: VSCode) -> None:
    page = vscode.page
    with vscode.step("rewrite"):
        vscode.wait_until_ready()
        vscode.open_file(FILE_NAME)
        before = vscode.file.read_text(encoding="utf-8")
        line = before.splitlines().index("def circle_area(radius):") + 3  # the return line
        vscode.go_to_line(line)
        vscode.run_command("infill: Rewrite")
        # The instruction: a quick pick of presets that also takes the user's own words.
        vscode.pick("Add type hints.")

        # The outcome: the document changes (the tab turns dirty), or the server says why not.
        dirty = page.locator(f"{ACTIVE_TAB}.dirty")
        refused = page.locator(NOTIFICATIONS, has_text=REWRITE_REFUSED)
        outcome = dirty.or_(refused)
        try:
            outcome.first.wait_for(state="visible", timeout=REWRITE_MS)
        except Exception as error:
            raise AssertionError(
                f"neither an edit nor a message {REWRITE_MS / 1000:.0f} s after Rewrite\n"
                f"{vscode.extension_log()}"
            ) from error
        page.screenshot(path=str(vscode.artifacts / "rewrite.png"))
        messages = page.locator(NOTIFICATIONS).all_inner_texts()
        if dirty.count() == 0:
            failure = [m for m in messages if "rewrite failed" in m]
            assert not failure, f"the rewrite failed: {failure}"
            pytest.skip(
                "the server made no edit (the chat model's answer was not usable), and said so: "
                + " | ".join(m.replace("\n", " ") for m in messages)
            )
        vscode.save()
        after = vscode.file.read_text(encoding="utf-8")
        print(f"\nafter Rewrite:\n{after}")
        assert after != before
        # Only the function under the cursor changed: what comes before and after it did not.
        head, tail = "import math\n\n\n", before[before.index("\n\ndef greet(name):") :]
        assert after.startswith(head), f"the rewrite changed the file above the function:\n{after}"
        assert after.endswith(tail), f"the rewrite changed the file below the function:\n{after}"
        assert "def circle_area(" in after, f"the rewritten function lost its name:\n{after}"
        # The edit was one undo step: one Ctrl+Z in the editor gives the file back whole.
        vscode.focused_editor()
        page.keyboard.press("Control+Z")
        expect(page.locator(f"{ACTIVE_TAB}.dirty")).to_have_count(1, timeout=UI_MS)
        vscode.save()
        undone = vscode.file.read_text(encoding="utf-8")
        assert undone == before, f"one undo did not take the whole rewrite back:\n{undone}"


def test_an_untitled_document_gets_ghost_text(vscode: VSCode) -> None:
    """README "VS Code": ghost text in any file, saved or `untitled:` (a new file never saved
    has no path; the server knows it by its `untitled:` URI)."""
    page = vscode.page
    with vscode.step("untitled"):
        vscode.wait_until_ready()
        # The palette ranks "Compare New Untitled Text Files" first: click the exact row.
        page.keyboard.press("F1")
        widget = vscode.quick_input()
        expect(widget).to_be_visible(timeout=UI_MS)
        widget.locator(".quick-input-box input").fill(">File: New Untitled Text File")
        rows = widget.locator(".monaco-list-row")
        row = rows.filter(has_text=re.compile(r"^\s*File: New Untitled Text File"))
        row.first.click(timeout=UI_MS)
        expect(page.locator(ACTIVE_TAB)).to_contain_text("Untitled", timeout=UI_MS)
        editor = vscode.focused_editor()
        page.keyboard.type("def add(a, b):", delay=TYPING_DELAY_MS)
        page.keyboard.press("Enter")
        page.keyboard.type("    return ", delay=TYPING_DELAY_MS)
        vscode.wait_for_ghost(editor, " in the untitled document")
        ghost = editor.evaluate(READ_GHOST_JS)
        print(f"\nghost text in the untitled document: {ghost!r}")
        assert ghost.strip(), "the ghost text is empty"
        # Only our extension offers inline completions here: the server answered for the
        # untitled document itself. (VS Code writes the output channel's log file late, so
        # its lines are no event to wait for.)
        # Closed without saving: the next test finds the workspace as it was.
        vscode.run_command("View: Revert and Close Editor")


def _next_edit_shown(vscode: VSCode, new: str, old: str = RENAMED_FROM) -> dict[str, list[str]]:
    """Waits for a next edit that replaces `old` by `new` (`old` empty: an insertion of `new`,
    nothing struck through); what the editor shows."""
    deadline = time.monotonic() + UI_MS / 1000
    while True:
        shown: dict[str, list[str]] = vscode.page.evaluate(NEXT_EDIT_JS)
        struck = old in shown["struck"] if old else not shown["struck"]
        if struck and new in shown["after"]:
            return shown
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no next edit {old!r} -> {new!r} shows; the editor shows {shown}\n"
                f"{vscode.extension_log()}"
            )
        vscode.page.wait_for_timeout(100)


def _tab_jumps_then_applies(vscode: VSCode, line: int, column: int, length: int) -> None:
    """Tab: the cursor at the edit (`line`, `column`); Tab again: applied, the cursor after its
    `length` characters of new text."""
    vscode.page.keyboard.press("Tab")
    vscode.expect_cursor(line, column)
    vscode.page.keyboard.press("Tab")
    vscode.expect_cursor(line, column + length)


def test_next_edits_rename_every_use_with_tab(vscode: VSCode) -> None:
    """Rename a variable where it is set: the extension shows the same rename at the next use
    (struck through, the new name after it, a marker at the cursor's line saying where); Tab
    jumps there and Tab applies it, use after use. One undo takes back one applied edit."""
    page = vscode.page
    path = vscode.workspace / FOLDER_NAME / NEXT_EDIT_FILE_NAME
    with vscode.step("next-edit"):
        vscode.wait_until_ready()
        vscode.open_file(NEXT_EDIT_FILE_NAME)
        # `total` where it is set: line 2, column 5; selected as a word, then typed over.
        vscode.go_to_line(2, 5)
        vscode.expect_cursor(2, 5)
        page.keyboard.press("Control+Shift+ArrowRight")
        page.keyboard.type(RENAMED_TO, delay=TYPING_DELAY_MS)
        vscode.expect_cursor(2, 5 + len(RENAMED_TO))

        for index, (line, column) in enumerate(NEXT_EDIT_USES):
            shown = _next_edit_shown(vscode, RENAMED_TO)
            print(f"\nnext edit {index + 1}: {shown}")
            # The edit is on another line than the cursor: the marker says where.
            assert f"⇥ Tab: next edit ↓ line {line}" in shown["after"], shown
            if index == 0:
                shot = vscode.artifacts / "next-edit.png"
                page.locator(".part.editor").screenshot(path=str(shot))
                if os.environ.get("INFILL_SCREENSHOT_DIR"):
                    out = Path(os.environ["INFILL_SCREENSHOT_DIR"]).resolve()
                    out.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(shot, out / "next-edit.png")
            _tab_jumps_then_applies(vscode, line, column, len(RENAMED_TO))

        vscode.save()
        on_disk = path.read_text(encoding="utf-8")
        assert on_disk == NEXT_EDIT_EXPECTED, (
            f"the file on disk is not renamed everywhere:\n{on_disk}\n{vscode.extension_log()}"
        )
        # Each applied edit is one undo step: one Ctrl+Z takes back the last one only.
        page.keyboard.press("Control+Z")
        expect(page.locator(f"{ACTIVE_TAB}.dirty")).to_have_count(1, timeout=UI_MS)
        vscode.save()
        undone = path.read_text(encoding="utf-8")
        assert undone == NEXT_EDIT_EXPECTED.replace("return amount + tax", "return total + tax"), (
            f"one undo did not take back exactly the last next edit:\n{undone}"
        )


def test_next_edit_inserts_a_typed_argument_at_the_other_call_with_tab(vscode: VSCode) -> None:
    """Type an argument into one call: the extension shows the same insertion at the other call
    of that function (the argument as after-text, nothing struck through, a marker at the
    cursor's line saying where); Tab jumps there and Tab applies it."""
    page = vscode.page
    path = vscode.workspace / FOLDER_NAME / ARGUMENT_FILE_NAME
    with vscode.step("next-edit-argument"):
        vscode.wait_until_ready()
        vscode.open_file(ARGUMENT_FILE_NAME)
        line, column = ARGUMENT_TYPED_AT
        vscode.go_to_line(line, column)
        vscode.expect_cursor(line, column)
        # Typed as a user types it; the last key is a digit, so the proposal comes once the
        # user pauses on it (the extension asks after the pause).
        page.keyboard.type(ARGUMENT, delay=TYPING_DELAY_MS)
        vscode.expect_cursor(line, column + len(ARGUMENT))

        shown = _next_edit_shown(vscode, ARGUMENT, old="")
        print(f"\nnext edit: {shown}")
        other_line, other_column = ARGUMENT_OTHER_CALL
        assert shown["struck"] == [], shown
        assert f"⇥ Tab: next edit ↓ line {other_line}" in shown["after"], shown
        _tab_jumps_then_applies(vscode, other_line, other_column, len(ARGUMENT))

        vscode.save()
        on_disk = path.read_text(encoding="utf-8")
        assert on_disk == ARGUMENT_EXPECTED, (
            f"the file on disk does not have the argument at both calls:\n{on_disk}\n"
            f"{vscode.extension_log()}"
        )
