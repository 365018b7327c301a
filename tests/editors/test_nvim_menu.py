"""infill-lsp's suggestions in real Neovim completion menus, with the real server and the real
default model: Neovim 0.11's own `vim.lsp.completion`, nvim-cmp with cmp-nvim-lsp, and
blink.cmp, each loaded unmodified (the menus from `third_party/editor-clients`, with no plugin
manager: their folders on 'runtimepath', as a user's config puts them) and our own plugin not
loaded at all. The server is started with `vim.lsp.start`, the way README.md's "Neovim" section
tells the user of each menu.

Each test types in insert mode as a user does, waits for the menu to show the AI item, confirms
it and checks what the buffer then holds: the typed word replaced by the whole suggestion, every
line of a multi-line one at the right indentation, and no text made for an older word. The
server answers a menu request within 100 ms, with an empty incomplete list while the model is
still writing; no client asks again by itself, so the item shows at the next keystroke or at
the menu's "complete" key. The tests press that key (`<C-Space>`; blink.cmp asks again only
after its completion ended, so there insert mode is left and entered first) while they wait,
as a user who wants the suggestion does.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nvim_helpers import (
    POLL_S,
    REPO,
    Session,
    find_nvim,
    launch,
    lua_string,
    poll,
)

NVIM, NVIM_WHY = find_nvim()
CLIENTS = REPO / "third_party" / "editor-clients"
#: The server of this checkout, as `vim.lsp.start` runs it (`server_env` puts the checkout first
#: on the import path).
SERVER = [sys.executable, "-m", "lsp_server.cli", "serve"]
#: Deterministic menus: no debounce, every suggestion shown, no speculative ones.
SETTINGS = "{ debounceMs = 0, minConfidence = 0, speculativeSuggestions = 0 }"
#: How often the waiting user presses the menu's "complete" key.
RETRIGGER_S = 0.5

#: The body of a recursive function, its last line being written: the model finishes the word
#: `fibo` it is typed on.
FIB = ["def fibonacci(n):", "    if n < 2:", "        return n", "    return "]
FIB_WORD = "fibo"
#: A word the model finishes as the function's name, so that typing on can follow it.
TYPED_ON = "fibon"
#: A blank line at the end of a function's body: asked there, the model writes a block.
PRIME = [
    "def is_prime(n):",
    '    """Whether n is a prime number."""',
    "    if n < 2:",
    "        return False",
    "    ",
]

#: Every user's start: no swap files, spaces for indentation, the menus' folders on
#: 'runtimepath' (their `after/` too, where cmp-nvim-lsp registers itself), then the menu's own
#: set-up.
INIT = """
vim.opt.swapfile = false
vim.opt.shortmess:append("I")
vim.opt.expandtab = true
vim.opt.shiftwidth = 4
for _, dir in ipairs({{ {plugins} }}) do
  vim.opt.rtp:prepend(dir)
  if vim.fn.isdirectory(dir .. "/after") == 1 then
    vim.opt.rtp:append(dir .. "/after")
  end
end
{setup}
"""

#: Neovim's own completion, as its `:help lsp-autocompletion` sets it up. In 0.11, autotrigger
#: asks only on the server's trigger characters (infill-lsp declares none), and the help says to
#: extend them on LspAttach for completion as you type: letters, digits and `_` here.
#: `<C-Space>` asks by hand (`vim.lsp.completion.get`).
BUILTIN = """
vim.cmd([[set completeopt+=menuone,noselect,popup]])
vim.api.nvim_create_autocmd("LspAttach", {
  callback = function(args)
    local client = assert(vim.lsp.get_client_by_id(args.data.client_id))
    if client:supports_method("textDocument/completion") then
      client.server_capabilities.completionProvider.triggerCharacters =
        vim.split("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", "")
      vim.lsp.completion.enable(true, client.id, args.buf, { autotrigger = true })
    end
  end,
})
vim.keymap.set("i", "<C-Space>", vim.lsp.completion.get)
function _G.menu_capabilities()
  return nil
end
function _G.menu_items()
  local info = vim.fn.complete_info({ "items", "pum_visible" })
  local items = {}
  if info.pum_visible == 1 then
    for _, item in ipairs(info.items) do
      local lsp = vim.tbl_get(item, "user_data", "nvim", "lsp", "completion_item")
      if lsp then table.insert(items, lsp) end
    end
  end
  return items
end
"""

#: nvim-cmp with cmp-nvim-lsp, as their READMEs set them up: the LSP source alone, snippets
#: through `vim.snippet`, `<C-Space>` to ask and `<C-y>` to confirm the first item.
NVIM_CMP = """
local cmp = require("cmp")
cmp.setup({
  sources = { { name = "nvim_lsp" } },
  snippet = { expand = function(args) vim.snippet.expand(args.body) end },
  mapping = cmp.mapping.preset.insert({
    ["<C-Space>"] = cmp.mapping.complete(),
    ["<C-y>"] = cmp.mapping.confirm({ select = true }),
  }),
})
function _G.menu_capabilities()
  return vim.tbl_deep_extend(
    "force",
    vim.lsp.protocol.make_client_capabilities(),
    require("cmp_nvim_lsp").default_capabilities()
  )
end
function _G.menu_items()
  local items = {}
  if cmp.visible() then
    for _, entry in ipairs(cmp.get_entries()) do
      table.insert(items, entry.completion_item)
    end
  end
  return items
end
"""

#: blink.cmp with its Lua matcher (its Rust one is not built here) and the LSP source alone; its
#: default keys: `<C-Space>` to show, `<C-y>` to accept the first item.
BLINK = """
require("blink.cmp").setup({
  fuzzy = { implementation = "lua" },
  sources = { default = { "lsp" } },
})
function _G.menu_capabilities()
  return require("blink.cmp").get_lsp_capabilities()
end
function _G.menu_items()
  local blink = require("blink.cmp")
  local items = {}
  if blink.is_menu_visible() then
    for _, item in ipairs(blink.get_items()) do
      table.insert(items, { label = item.label, textEdit = item.textEdit,
        insertTextFormat = item.insertTextFormat, command = item.command })
    end
  end
  return items
end
"""

#: The confirm keys: Neovim's own menu confirms the selected item, so the first is selected.
CONFIRM = {"builtin": "<C-n><C-y>", "nvim-cmp": "<C-y>", "blink.cmp": "<C-y>"}
#: The keys that ask again where the cursor is. blink.cmp keeps an answer for its cursor
#: column while its completion is active, even an empty incomplete one, and only a shown menu
#: can be cancelled: leaving insert mode ends it (the keys one by one, as blink.cmp ends it
#: after the key that leaves).
ASK = {
    "builtin": ["<C-Space>"],
    "nvim-cmp": ["<C-Space>"],
    "blink.cmp": ["<Esc>", "a", "<C-Space>"],
}
SETUPS = {
    "builtin": ([], BUILTIN),
    "nvim-cmp": ([CLIENTS / "nvim-cmp", CLIENTS / "cmp-nvim-lsp"], NVIM_CMP),
    "blink.cmp": ([CLIENTS / "blink.cmp"], BLINK),
}

START_SERVER = f"""
local bufnr = ...
return vim.lsp.start({{
  name = "infill",
  cmd = {{ {", ".join(lua_string(arg) for arg in SERVER)} }},
  root_dir = vim.fs.dirname(vim.api.nvim_buf_get_name(bufnr)),
  init_options = {{ infill = {SETTINGS} }},
  capabilities = _G.menu_capabilities(),
}}, {{ bufnr = bufnr }})
"""

#: The server's usage counts for Python, asked through the client.
ACCEPTED = """
local client = assert(vim.lsp.get_client_by_id(...))
local answer = assert(client:request_sync("infill/stats", {}, 30000, 0))
assert(not answer.err, vim.inspect(answer.err))
return vim.tbl_get(answer.result, "usage", "languages", "python", "accepted") or 0
"""

STATUS = """
local client = vim.lsp.get_client_by_id(...)
local answer = client and client:request_sync("infill/status", {}, 30000, 0)
return answer and answer.result and answer.result.status or vim.NIL
"""


def _needs() -> str:
    for folder in (CLIENTS / "nvim-cmp", CLIENTS / "cmp-nvim-lsp", CLIENTS / "blink.cmp"):
        if not (folder / "lua").is_dir():
            pytest.fail(f"the repository's copy of a Neovim menu is missing: {folder}")
    if NVIM is None:
        print(f"skipped: {NVIM_WHY}")
        pytest.skip(NVIM_WHY)
    try:
        import pynvim  # type: ignore[import-untyped]  # noqa: F401  # pynvim ships no types
    except ImportError:
        print("skipped: pynvim is not installed")
        pytest.skip("pynvim is not installed: pip install pynvim")
    return NVIM


@dataclass
class Menu:
    """A Neovim with one menu, a file open in it and the server attached and ready."""

    nv: Session
    kind: str
    client_id: int
    path: Path

    @property
    def buffer(self) -> Any:
        return self.nv.nvim.current.buffer

    def lines(self) -> list[str]:
        return list(self.buffer[:])

    def items(self) -> list[dict[str, Any]]:
        """The AI items the menu shows now (none while it is closed), in its order."""
        items: list[dict[str, Any]] = self.nv.lua("return _G.menu_items()")
        return [
            i for i in items if (i.get("command") or {}).get("command", "").startswith("infill")
        ]

    def accepted(self) -> int:
        return int(self.nv.lua(ACCEPTED, self.client_id))

    def edit(self, lines: list[str]) -> None:
        """The buffer set to `lines`, the cursor at the end of the last, in insert mode."""
        self.nv.nvim.input("<Esc>")
        poll(lambda: self.nv.mode() == "n", what="normal mode", timeout=10)
        self.buffer[:] = lines
        self.nv.nvim.current.window.cursor = (len(lines), len(lines[-1].encode()))
        self.nv.nvim.input("A")
        poll(lambda: self.nv.mode() == "i", what="insert mode", timeout=10)

    def type(self, text: str) -> None:
        """`text` typed a character at a time, at a brisk typist's pace."""
        for char in text:
            self.nv.nvim.input(char)
            time.sleep(0.04)

    def wait_item(self, word: str, *, retrigger: bool = True) -> dict[str, Any]:
        """The first AI item once the menu shows one for `word` (its text starts with it), the
        "complete" key pressed every RETRIGGER_S meanwhile. Every item shown on the way must
        be for `word`: an item for an older word is a stale one."""
        pressed = time.monotonic()

        def probe() -> dict[str, Any] | None:
            nonlocal pressed
            items = self.items()
            for item in items:
                assert new_text(item).startswith(word), f"a stale item for {word!r}: {item}"
            if items:
                return items[0]
            if retrigger and time.monotonic() - pressed > RETRIGGER_S:
                self.ask()
                pressed = time.monotonic()
            return None

        return poll(probe, what=f"the menu to show an AI item for {word!r}", describe=self.state)

    def ask(self) -> None:
        """The menu's "complete" key."""
        for keys in ASK[self.kind]:
            self.nv.nvim.input(keys)
            self.nv.mode()  # a round trip: what the keys scheduled has run

    def confirm(self) -> None:
        before = self.lines()
        self.nv.nvim.input(CONFIRM[self.kind])
        poll(lambda: self.lines() != before, what="the item to go in", timeout=10)
        # Neovim's own menu and blink.cmp run the command and expand the snippet after the
        # confirm's keys: they are done once the menu is closed and the buffer still.
        settled = poll(lambda: self._still(), what="the buffer to settle", timeout=10)
        assert settled

    def _still(self) -> bool:
        first = self.lines()
        time.sleep(0.2)
        return not self.items() and self.lines() == first

    def state(self) -> str:
        return f"lines {self.lines()!r}, mode {self.nv.mode()!r}, items {self.items()!r}"


def new_text(item: dict[str, Any]) -> str:
    """What the item writes over the typed word: a snippet unescaped."""
    text = str(item["textEdit"]["newText"])
    if item.get("insertTextFormat") == 2:
        text = re.sub(r"\\(.)", r"\1", text)
    return text


def written(line_before_word: str, item: dict[str, Any]) -> list[str]:
    """The lines the item gives when confirmed after `line_before_word`: its first line after
    it, the others as they are, or for a snippet (Neovim's own menu) indented like the cursor's
    line, as `vim.snippet` does."""
    first, *rest = new_text(item).split("\n")
    if item.get("insertTextFormat") == 2:
        indent = line_before_word[: len(line_before_word) - len(line_before_word.lstrip())]
        rest = [indent + line if line else line for line in rest]
    return [line_before_word + first, *rest]


@contextlib.contextmanager
def menu_session(kind: str, tmp_path: Path) -> Iterator[Menu]:
    """Neovim with `kind`'s menu and nothing of ours, editing a file whose path holds a space
    and a non-ASCII letter, infill-lsp started on it and its model loaded. On failure, prints
    Neovim's messages and the LSP log."""
    nvim = _needs()
    plugins, setup = SETUPS[kind]
    home = tmp_path / "nvim"
    home.mkdir()
    init = home / "init.lua"
    init.write_text(
        INIT.format(plugins=", ".join(lua_string(str(p)) for p in plugins), setup=setup),
        encoding="utf-8",
    )
    project = tmp_path / "my project"
    project.mkdir()
    path = project / "fibonacci é.py"
    path.write_text("\n".join(FIB) + "\n", encoding="utf-8")
    with launch(nvim, home, init) as nv:
        try:
            nv.lua("vim.lsp.set_log_level('info')")
            nv.nvim.command(f"edit {nv.nvim.funcs.fnameescape(str(path))}")
            client_id = int(nv.lua(START_SERVER, int(nv.nvim.current.buffer.number)))
            nv.remember_server()
            poll(
                lambda: nv.lua(STATUS, client_id) == "ready",
                what="the model to load",
                describe=lambda: repr(nv.lua(STATUS, client_id)),
            )
            yield Menu(nv=nv, kind=kind, client_id=client_id, path=path)
        except Exception:  # a failure, not a skip
            with contextlib.suppress(Exception):
                print("--- Neovim's messages\n" + nv.output("messages"))
            with contextlib.suppress(Exception):
                log = Path(str(nv.lua("return vim.lsp.get_log_path()")))
                print("--- the LSP log (end)\n" + log.read_text(encoding="utf-8")[-8000:])
            raise


def type_word_and_confirm(menu: Menu) -> list[str]:
    """Types `fibo` on the function's last line, waits for the AI item, confirms it; the
    buffer's lines, checked to hold the whole suggestion in place of the word."""
    menu.edit(FIB)
    menu.type(FIB_WORD)
    item = menu.wait_item(FIB_WORD)
    assert item["label"].startswith(FIB_WORD)
    assert menu.lines()[-1] == FIB[-1] + FIB_WORD, "showing the menu changes nothing"
    menu.confirm()
    lines = menu.lines()
    assert lines == FIB[:-1] + written(FIB[-1], item), (lines, item)
    assert len(lines[-1]) > len(FIB[-1] + FIB_WORD)
    return lines


def confirm_a_block(menu: Menu, ask: Callable[[], None]) -> list[str]:
    """On the blank last line of a function, asked by `ask`: the menu's first AI item, a block
    of lines, confirmed; every line of it in the buffer, indented as the model wrote it."""
    menu.edit(PRIME)
    ask()
    item = menu.wait_item("")
    # Most often a block here; whatever the model wrote (its greedy answer can change with the
    # threads the machine's load leaves it), the buffer must hold exactly that.
    print(f"the item on a blank line: {new_text(item)!r}")
    menu.confirm()
    lines = menu.lines()
    expected = PRIME[:-1] + written(PRIME[-1], item)
    assert lines == expected, (lines, item)
    # Python that the block keeps inside the function: each line indented under `def`.
    assert all(line.startswith("    ") for line in lines[len(PRIME) - 1 :] if line), lines
    return lines


# --- Neovim's own completion -------------------------------------------------------------------


@pytest.mark.slow
def test_builtin_completion_shows_and_inserts_a_whole_suggestion(tmp_path: Path) -> None:
    """`vim.lsp.completion` with autotrigger on every word character: typing `fibo` brings the
    AI item (at once or at the next ask); `<C-y>` replaces the word with the whole line, not
    only its first word, and runs the item's command, which the server counts as accepted."""
    with menu_session("builtin", tmp_path) as menu:
        lines = type_word_and_confirm(menu)
        assert " " in lines[-1].strip(), "the whole line, past its first space"
        poll(lambda: menu.accepted() == 1, what="the server to count the item accepted")


@pytest.mark.slow
def test_builtin_completion_inserts_every_line_of_a_block(tmp_path: Path) -> None:
    """Asked on a blank line by hand (`vim.lsp.completion.get`): a multi-line item goes in as a
    snippet, every line indented from the cursor's line as Python needs."""
    with menu_session("builtin", tmp_path) as menu:
        confirm_a_block(menu, menu.ask)
        poll(lambda: menu.accepted() == 1, what="the server to count the item accepted")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["builtin", "nvim-cmp", "blink.cmp"])
def test_a_suggestion_typed_inside_brackets_leaves_one_closer(kind: str, tmp_path: Path) -> None:
    """Typing the argument of a call whose `)` is already there: the model writes the closing
    bracket too, and each menu inserts only up to the cursor, so the item stops before the
    `)` that follows; the line ends with one `)`, balanced."""
    with menu_session(kind, tmp_path) as menu:
        line = FIB[-1] + "fibonacci(n - 1) + fibonacci()"
        menu.nv.nvim.input("<Esc>")
        poll(lambda: menu.nv.mode() == "n", what="normal mode", timeout=10)
        menu.buffer[:] = [*FIB[:-1], line]
        menu.nv.nvim.current.window.cursor = (len(FIB), len(line) - 1)
        menu.nv.nvim.input("i")
        poll(lambda: menu.nv.mode() == "i", what="insert mode", timeout=10)
        menu.type("n")
        item = menu.wait_item("n")
        menu.confirm()
        written = menu.lines()[-1]
        assert written == line[:-1] + new_text(item) + ")", (written, item)
        assert written.count("(") == written.count(")"), written


# --- nvim-cmp --------------------------------------------------------------------------------


@pytest.mark.slow
def test_nvim_cmp_shows_and_inserts_a_whole_suggestion(tmp_path: Path) -> None:
    """nvim-cmp + cmp-nvim-lsp: typing `fibo` brings the AI item; confirming writes the whole
    suggestion over the word and runs its command (counted accepted once)."""
    with menu_session("nvim-cmp", tmp_path) as menu:
        type_word_and_confirm(menu)
        poll(lambda: menu.accepted() == 1, what="the server to count the item accepted")


@pytest.mark.slow
def test_nvim_cmp_inserts_every_line_of_a_block(tmp_path: Path) -> None:
    """nvim-cmp, asked by hand on a blank line: a block goes in whole, every line as written
    (a session of its own: the buffer is set through the API, which the menus do not see as
    typing)."""
    with menu_session("nvim-cmp", tmp_path) as menu:
        confirm_a_block(menu, menu.ask)
        poll(lambda: menu.accepted() == 1, what="the server to count the block accepted")


@pytest.mark.slow
def test_nvim_cmp_typing_on_never_lands_text_made_for_an_older_word(tmp_path: Path) -> None:
    """With the AI item on show for `fibon`: typing the suggestion's next characters keeps the
    item for the longer word, and confirming writes the suggestion once (no `fibonafibon...`).
    Typing a character that the item cannot match drops it: nothing made for `fibon` shows
    again or lands. Typing one that nvim-cmp still matches fuzzily leaves the old item on show
    (nvim-cmp's own choice): confirmed, it goes in whole, as any fuzzy match, never mixed."""
    with menu_session("nvim-cmp", tmp_path) as menu:
        # 1. Agreeing: the next two characters of the suggestion.
        menu.edit(FIB)
        menu.type(TYPED_ON)
        item = menu.wait_item(TYPED_ON)
        suggestion = new_text(item)
        ahead = suggestion[len(TYPED_ON) : len(TYPED_ON) + 2]
        assert re.fullmatch(r"\w\w", ahead), f"the model does not finish the word: {suggestion!r}"
        menu.type(ahead)
        longer = menu.wait_item(TYPED_ON + ahead, retrigger=False)
        assert new_text(longer) == suggestion, "the same suggestion, typed along"
        menu.confirm()
        assert menu.lines() == [*FIB[:-1], FIB[-1] + suggestion]

        # 2. Diverging, with a character that nvim-cmp's fuzzy matcher cannot match against the
        # item: it goes at once, the menu stays closed while the model writes for the new word,
        # and what shows next is made for that word.
        old = show_for(menu, TYPED_ON)
        rest = old[len(TYPED_ON) :]
        other = next(c for c in "xqzjkw" if not cmp_matches(menu, TYPED_ON + c, old))
        menu.type(other)
        word = TYPED_ON + other
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for shown in menu.items():
                assert new_text(shown).startswith(word), f"a stale item: {shown}"
            time.sleep(POLL_S)
        fresh = menu.wait_item(word)
        menu.confirm()
        line = menu.lines()[-1]
        assert line == FIB[-1] + new_text(fresh)
        assert rest not in line, (old, line)

        # 3. Diverging with a character that the item has further on, which nvim-cmp's matcher
        # still matches: nvim-cmp keeps a source's items when its answer comes empty (as the
        # server's does while the model writes for the new word), so the old item stays on
        # show, filtered by the new word. Confirmed, it replaces the typed word whole, as any
        # fuzzy match does: the line holds that suggestion once, never mixed with the typing.
        old = show_for(menu, TYPED_ON)
        rest = old[len(TYPED_ON) :]
        fuzzy = [c for c in rest[1:] if c.isalpha() and c != rest[0]]
        fuzzy = [c for c in fuzzy if cmp_matches(menu, TYPED_ON + c, old)]
        if not fuzzy:
            print(f"no character of {rest!r} that nvim-cmp matches fuzzily: case 3 not run")
            return
        menu.type(fuzzy[0])
        word = TYPED_ON + fuzzy[0]
        time.sleep(1.0)
        print(f"{word!r} after {old!r}: the menu shows {[new_text(i) for i in menu.items()]}")
        texts = [new_text(i) for i in menu.items()]
        # The old item (kept by nvim-cmp), or one made for the new word (the model may finish
        # within the menu's wait), never anything else.
        assert all(t == old or t.startswith(word) for t in texts), menu.state()
        if texts:
            menu.confirm()
            assert menu.lines()[-1] == FIB[-1] + texts[0]
        else:
            fresh = menu.wait_item(word)
            menu.confirm()
            assert menu.lines()[-1] == FIB[-1] + new_text(fresh)


def show_for(menu: Menu, word: str) -> str:
    """The function's last line typed up to `word`, the AI item on show: its text."""
    menu.edit(FIB)
    menu.type(word)
    return new_text(menu.wait_item(word))


def cmp_matches(menu: Menu, typed: str, text: str) -> bool:
    """Whether nvim-cmp's matcher, as configured, keeps an item filtered by `text` for
    `typed`."""
    score = menu.nv.lua(
        "local typed, text = ...\n"
        "local matching = require('cmp.config').get().matching\n"
        "return (require('cmp.matcher').match(typed, text, matching))",
        typed,
        text,
    )
    return bool(score)


# --- blink.cmp -------------------------------------------------------------------------------


@pytest.mark.slow
def test_blink_cmp_shows_and_inserts_a_whole_suggestion(tmp_path: Path) -> None:
    """blink.cmp (Lua matcher): typing `fibo` brings the AI item; `<C-y>` writes the whole
    suggestion over the word and runs its command (counted accepted)."""
    with menu_session("blink.cmp", tmp_path) as menu:
        type_word_and_confirm(menu)
        poll(lambda: menu.accepted() == 1, what="the server to count the item accepted")


@pytest.mark.slow
def test_blink_cmp_inserts_every_line_of_a_block(tmp_path: Path) -> None:
    """blink.cmp, asked on a blank line: a block goes in whole, every line as written (a
    session of its own: blink.cmp keeps an answer for a cursor place it saw, and the buffer
    set through the API is no typing it sees)."""
    with menu_session("blink.cmp", tmp_path) as menu:
        confirm_a_block(menu, menu.ask)
        poll(lambda: menu.accepted() == 1, what="the server to count the block accepted")
