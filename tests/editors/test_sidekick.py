"""An unmodified sidekick.nvim shows and applies infill-lsp's next edits, in a real headless
Neovim with the real server and the real default model.

sidekick.nvim speaks GitHub Copilot language server's `textDocument/copilotInlineEdit` to the
LSP client whose name contains "copilot". The Lua that sets it up is the editors page's own
(docs/editors.md, "sidekick.nvim"), read from there, so that the page shows exactly what is
tested. The copy of
sidekick.nvim is `third_party/editor-clients/sidekick.nvim` (`third_party/README.md` says why
that commit).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import SERVER_COMMAND
from nvim_helpers import REPO, Session, find_nvim, lua_string, nvim_version, poll, start_session

NVIM, NVIM_WHY = find_nvim()
SIDEKICK = REPO / "third_party" / "editor-clients" / "sidekick.nvim"
#: sidekick.nvim's own minimum (its README); `vim.lsp.config` itself is 0.11's.
MIN_NVIM = (0, 11, 2)
#: What the page's snippet says in place of this machine's paths.
PAGE_SERVER = '{ "infill-lsp" }'
PAGE_SIDEKICK = '"/path/to/sidekick.nvim"'

#: A function that uses its parameter three times after its definition; one line has
#: characters of two and four UTF-8 bytes before it (Neovim negotiates UTF-8 positions), one a
#: string that holds the same word (never renamed).
BEFORE = (
    "def shout(word):\n"
    '    label = "café 🙂 " + word\n'
    '    print("word:", word)\n'
    "    return label + word.upper()\n"
)
AFTER = (
    "def shout(phrase):\n"
    '    label = "café 🙂 " + phrase\n'
    '    print("word:", phrase)\n'
    "    return label + phrase.upper()\n"
)


def readme_sidekick_setup() -> str:
    """The Lua block of docs/editors.md's "sidekick.nvim" section that sets up sidekick.nvim."""
    page = (REPO / "docs" / "editors.md").read_text(encoding="utf-8")
    section = page.split("\n## sidekick.nvim\n", 1)[1].split("\n## ", 1)[0]
    blocks: list[str] = [
        b for b in re.findall(r"```lua\n(.*?)```", section, re.S) if "sidekick" in b
    ]
    assert len(blocks) == 1, "docs/editors.md's sidekick.nvim section shows its setup once"
    return blocks[0]


def setup_lua() -> str:
    """The page's setup with this machine's paths: the server of this checkout, the copy of
    sidekick.nvim."""
    lua = readme_sidekick_setup()
    assert PAGE_SERVER in lua, lua
    assert PAGE_SIDEKICK in lua, lua
    server = "{ " + ", ".join(lua_string(arg) for arg in SERVER_COMMAND) + " }"
    return lua.replace(PAGE_SERVER, server).replace(PAGE_SIDEKICK, lua_string(str(SIDEKICK)))


def _needs() -> str:
    if not (SIDEKICK / "lua" / "sidekick" / "nes" / "init.lua").is_file():
        pytest.fail(f"the repository's copy of sidekick.nvim is missing: {SIDEKICK}")
    if NVIM is None:
        pytest.skip(NVIM_WHY)
    version = nvim_version(NVIM)
    if version is None or version < MIN_NVIM:
        pytest.skip(f"sidekick.nvim needs Neovim 0.11.2 or newer; {NVIM_WHY}")
    try:
        import pynvim  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        pytest.skip("pynvim is not installed: pip install pynvim")
    return NVIM


#: The state of sidekick's next edits in the current buffer: the edits it holds (as the
#: server sent them), whether a request is under way, and how many of its marks show.
SIDEKICK_STATE = """
local nes = require("sidekick.nes")
local ns = require("sidekick.config").ns
local edits = vim.tbl_map(function(e)
  return { range = e.range, text = e.text, command = e.command }
end, nes.get(vim.api.nvim_get_current_buf()))
return {
  edits = edits,
  pending = next(nes._requests) ~= nil,
  marks = #vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {}),
}
"""

#: The accepted propagation edits the server counted (`infill/stats`), asked through the
#: sidekick client.
ACCEPTED = """
local client = require("sidekick.config").get_client(0)
local answer = assert(client:request_sync("infill/stats", {}, 30000, 0))
assert(not answer.err, vim.inspect(answer.err))
local counts = (answer.result.next_edits or {}).propagation or {}
return counts.accepted or 0
"""


def sidekick_state(nv: Session) -> dict[str, Any]:
    state: dict[str, Any] = nv.lua(SIDEKICK_STATE)
    return state


def buffer_text(nv: Session) -> str:
    return "\n".join(nv.nvim.current.buffer[:]) + "\n"


def test_sidekick_shows_and_applies_a_propagated_rename(tmp_path: Path) -> None:
    """docs/editors.md "sidekick.nvim": with infill-lsp as its "copilot" client, sidekick.nvim
    asks for next edits once the user has renamed a parameter by typing, shows them, jumps to
    the nearest, applies them all and runs their command (the server counts them accepted);
    the file is written with the rename everywhere but inside the string."""
    nvim = _needs()
    project = tmp_path / "my project"
    project.mkdir()
    (project / ".git").mkdir()
    path = project / "café.py"
    path.write_text(BEFORE, encoding="utf-8")
    # Our own plugin is left without a filetype to attach to: the only client is sidekick's.
    with start_session(nvim, SERVER_COMMAND[0], tmp_path / "nvim", "filetypes = {},") as nv:
        nv.lua(setup_lua())
        nv.nvim.command(f"edit {nv.nvim.funcs.fnameescape(str(path))}")
        clients = poll(
            lambda: nv.lua(
                "return vim.tbl_map(function(c) return c.name end,"
                " require('sidekick.config').get_clients({ bufnr = 0 }))"
            ),
            what="sidekick to find infill-lsp as its copilot client",
            timeout=30,
        )
        assert clients == ["infill_copilot"]
        assert nv.lua("return #vim.lsp.get_clients()") == 1
        nv.remember_server()
        poll(lambda: nv.lua("return require('sidekick.nes').enabled"), what="sidekick's NES")
        accepted_before = nv.lua(ACCEPTED)

        # 1. The user renames the parameter in insert mode: the word deleted, the new name typed.
        nv.nvim.current.window.cursor = (1, BEFORE.index("word") + len("word") - 1)
        nv.nvim.input("a")
        poll(lambda: nv.mode() == "i", what="insert mode", timeout=10)
        nv.nvim.input("<C-w>")
        for char in "phrase":
            nv.nvim.input(char)
        nv.nvim.input("<Esc>")
        poll(lambda: nv.mode() == "n", what="normal mode", timeout=10)
        assert nv.nvim.current.buffer[0] == "def shout(phrase):"

        # 2. Leaving insert mode is what makes sidekick ask; then it is asked again, by hand.
        poll(lambda: sidekick_state(nv)["edits"], what="sidekick's own request for next edits")
        nv.lua("require('sidekick.nes').update()")
        state = poll(
            lambda: (s := sidekick_state(nv))["edits"] and not s["pending"] and s,
            what="sidekick's next edits",
            describe=lambda: repr(sidekick_state(nv)),
        )
        edits = state["edits"]
        assert sorted(edit["text"] for edit in edits) == ["phrase"] * 3, edits
        assert state["marks"] > 0, "sidekick shows the edits"
        assert all(edit["command"]["command"] == "infill.acceptNextEdit" for edit in edits)

        # 3. As on a key mapped to the page's `nes_jump_or_apply`, pressed twice: the first jumps
        # to the nearest edit (a byte column after "café 🙂"), the second applies them all and
        # runs each one's command.
        jump_or_apply = "return require('sidekick').nes_jump_or_apply()"
        assert nv.lua(jump_or_apply) is True
        line = BEFORE.splitlines()[1]
        nearest = (2, len(line[: line.index("word")].encode("utf-8")))
        poll(lambda: tuple(nv.nvim.current.window.cursor) == nearest, what="the jump", timeout=10)
        assert buffer_text(nv) == BEFORE.replace("(word)", "(phrase)"), "a jump changes nothing"
        assert nv.lua(jump_or_apply) is True
        poll(
            lambda: buffer_text(nv) == AFTER,
            what="the rename everywhere",
            describe=lambda: repr(buffer_text(nv)),
        )
        accepted = poll(
            lambda: (n := nv.lua(ACCEPTED)) >= accepted_before + len(edits) and n,
            what="the server to count the edits accepted",
        )
        assert accepted == accepted_before + len(edits)

        nv.nvim.command("write")
        assert path.read_text(encoding="utf-8") == AFTER
