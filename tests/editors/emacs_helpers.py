"""Driving a real Emacs (`emacs --batch -Q`) with eglot or lsp-mode against the real server.

The Emacs side is tests/editors/emacs/infill-test.el: each run loads it and calls one of its
scenarios, which writes what it found (the buffer, the items the server sent, the usage
counts, how the shutdown went) to a JSON file. What Emacs printed (its messages, and the
backtrace of an error) goes into every failure's message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsp_helpers import server_env

DRIVER = Path(__file__).resolve().parent / "emacs" / "infill-test.el"
#: The Debian packages the tests use: elpa-eglot (1.9), elpa-lsp-mode (8.0), elpa-company.
PACKAGES = ("eglot", "lsp-mode", "company")
#: The server as the tests start it: this interpreter, the checkout first on its import path.
SERVER = [sys.executable, "-P", "-m", "lsp_server.cli", "serve"]
#: Settings that make the real model's answers as repeatable as they get: no debounce, every
#: suggestion shown (the confidence gate hides the tiny default model's unsure ones), nothing
#: written ahead behind the test's back.
OPTIONS = {"infill": {"debounceMs": 0, "minConfidence": 0, "speculativeSuggestions": 0}}
#: A wait inside Emacs (the model loading, a suggestion written on a busy CPU), and the whole run.
WAIT_S = 240
RUN_S = 420


def find_emacs() -> tuple[str | None, str]:
    """The Emacs to test with, or None and why there is none (Emacs or a package missing)."""
    emacs = shutil.which("emacs")
    if emacs is None:
        return None, (
            "no emacs on PATH: apt-get install emacs-nox elpa-eglot elpa-lsp-mode elpa-company"
        )
    requires = " ".join(f"(require '{name})" for name in PACKAGES)
    try:
        # Loading them as the tests do (the driver), Emacs's own files in a folder of its own.
        with tempfile.TemporaryDirectory(prefix="infill-emacs-") as folder:
            done = subprocess.run(
                [emacs, "--batch", "-Q", "-l", str(DRIVER), "--eval", f"(progn {requires})"],
                env={**os.environ, "INFILL_TEST_EMACS_DIR": folder},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"{emacs} does not run: {error}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        first = next((line for line in lines if "error" in line.lower()), lines[-1])
        return None, (
            f"Emacs lacks eglot, lsp-mode or company ({first.strip()}): "
            "apt-get install elpa-eglot elpa-lsp-mode elpa-company"
        )
    return emacs, emacs


@dataclass(frozen=True)
class Run:
    """One Emacs run: what its scenario found, and what Emacs printed."""

    found: dict[str, Any]
    output: str
    returncode: int
    seconds: float

    def why(self) -> str:
        """For an assertion's message: the findings and Emacs's whole output."""
        found = dict(self.found)
        answers = found.get("completions", [])
        if len(answers) > 4:  # one per poll: the count, and the last ones
            found["completions"] = [f"... {len(answers) - 3} more answers before", *answers[-3:]]
        return (
            f"\n--- emacs exited {self.returncode} after {self.seconds:.1f} s; findings:\n"
            f"{json.dumps(found, indent=1, ensure_ascii=False)}\n"
            f"--- emacs output:\n{self.output}"
        )

    def completed(self) -> Run:
        """This run, once it is sure the scenario ran to its end."""
        assert self.returncode == 0, "the Emacs scenario failed" + self.why()
        return self

    def last_items(self) -> list[dict[str, Any]]:
        """The items of the server's last completion answer that had any."""
        answers = [json.loads(answer) for answer in self.found.get("completions", [])]
        with_items = [answer["items"] for answer in answers if answer and answer["items"]]
        assert with_items, "the server never answered with items" + self.why()
        items: list[dict[str, Any]] = with_items[-1]
        return items


def run_scenario(
    emacs: str, scenario: str, file: Path, folder: Path, wait_s: float = WAIT_S
) -> Run:
    """`emacs --batch -Q` running `(infill-test-SCENARIO)` on `file`; `folder` holds Emacs's
    own files, the findings and the server's state (its usage counts); `wait_s` bounds each
    wait inside Emacs."""
    result = folder / "findings.json"
    env = server_env()
    env |= {
        "INFILL_TEST_SERVER": json.dumps(SERVER),
        "INFILL_TEST_OPTIONS": json.dumps(OPTIONS),
        "INFILL_TEST_RESULT": str(result),
        "INFILL_TEST_TIMEOUT": str(wait_s),
        "INFILL_TEST_FILE": str(file),
        "INFILL_TEST_EMACS_DIR": str(folder / "emacs.d"),
        "INFILL_STATE_DIR": str(folder / "state"),
    }
    start = time.monotonic()
    try:
        done = subprocess.run(
            [emacs, "--batch", "-Q", "-l", str(DRIVER), "--eval", f"(infill-test-{scenario})"],
            env=env,
            cwd=file.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=RUN_S,
            check=False,
        )
        output, returncode = done.stdout, done.returncode
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout
        output = (out.decode(errors="replace") if isinstance(out, bytes) else out or "") + (
            f"\n[killed after {RUN_S} s]"
        )
        returncode = -9
    found: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {}
    return Run(found=found, output=output, returncode=returncode, seconds=time.monotonic() - start)


def poll_gone(pid: int, timeout: float = 5.0) -> bool:
    """Whether process `pid` has ended (or is a zombie) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def utf16_index(line: str, units: int) -> int:
    """The code point index of `units` UTF-16 units into `line`."""
    count = 0
    for index, char in enumerate(line):
        if count >= units:
            return index
        count += 2 if ord(char) > 0xFFFF else 1
    return len(line)


def offset(text: str, position: dict[str, int], encoding: str = "utf-16") -> int:
    """The code point offset in `text` of an LSP position (its columns in `encoding`, UTF-16
    or UTF-32; lines split at `\\n`)."""
    lines = text.split("\n")
    line = position["line"]
    before = sum(len(each) + 1 for each in lines[:line])
    if encoding == "utf-32":
        return before + min(position["character"], len(lines[line]))
    return before + utf16_index(lines[line], position["character"])


def apply_edit(text: str, edit: dict[str, Any], encoding: str = "utf-16") -> str:
    """`text` with an LSP `TextEdit` applied."""
    start = offset(text, edit["range"]["start"], encoding)
    end = offset(text, edit["range"]["end"], encoding)
    new_text: str = edit["newText"]
    return text[:start] + new_text + text[end:]
