"""Where the usage counts are kept on this machine, across restarts and between processes:
one small JSON file that holds counts and nothing else (no code, no paths, no times), so that
`infill-lsp doctor` (another process) shows them.

The file is the state of this program (XDG's state folder, not the cache: clearing the models'
cache must not lose it): `$INFILL_STATE_DIR/usage.json`, else
`$XDG_STATE_HOME/infill-lsp/usage.json`, else `~/.local/state/infill-lsp/usage.json`.
Each server adds its own counts to the file's under a file lock (two editors at once add
both), writes a temporary file created 0600 and renames it over the old one, so a reader
never sees half a file. A file that cannot be read counts as none (and is replaced whole).

Shape: `{"version": 1, "languages": {"python": {"shown": 3, "accepted": 1, ...}}}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from lsp_server.usage import (
    CHARACTERS_ACCEPTED,
    CHARACTERS_CHECKED,
    CHARACTERS_KEPT,
    COUNT_NAMES,
    LanguageCounts,
    Offered,
    PartialAccept,
    Usage,
    language_name,
)

log = logging.getLogger(__name__)

STATE_DIR_ENV = "INFILL_STATE_DIR"
FILE_NAME = "usage.json"
VERSION = 1
#: A server waits this long for another one writing the file; then it tries again later.
LOCK_TIMEOUT_S = 2.0
#: Beyond this a file is not ours (a few hundred languages' counts are a few tens of kB).
MAX_FILE_BYTES = 1 << 20
#: How often a server with something new checks the accepted parts that are due and adds its
#: counts to the file: a check is at most this late, and a server killed loses at most this.
TICK_S = 10.0


def state_dir() -> Path:
    """Our own state folder: $INFILL_STATE_DIR, else $XDG_STATE_HOME/infill-lsp, else
    ~/.local/state/infill-lsp."""
    if explicit := os.environ.get(STATE_DIR_ENV):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "infill-lsp"


def usage_path() -> Path:
    return state_dir() / FILE_NAME


def read_counts(path: Path) -> dict[str, LanguageCounts]:
    """The counts kept in `path`: known names only, whole numbers from 0; none if there is no
    such file or it is not one of ours."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return {}
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    languages = value.get("languages") if isinstance(value, dict) else None
    if not isinstance(languages, dict):
        return {}
    counts: dict[str, LanguageCounts] = {}
    for language, row in languages.items():
        if not isinstance(row, dict):
            continue
        kept = counts.setdefault(language_name(str(language)), dict.fromkeys(COUNT_NAMES, 0))
        for name in COUNT_NAMES:
            n = row.get(name)
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                kept[name] += n
    return counts


def add_counts(path: Path, added: Mapping[str, Mapping[str, int]]) -> None:
    """Add `added` (counts per language) to the file's. Raises OSError (or filelock's
    Timeout) when the file cannot be written; the caller keeps its counts for a later try."""
    if not added:
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_TIMEOUT_S, mode=0o600):
        totals = read_counts(path)
        for language, row in added.items():
            kept = totals.setdefault(language_name(language), dict.fromkeys(COUNT_NAMES, 0))
            for count in COUNT_NAMES:
                kept[count] += max(0, int(row.get(count, 0)))
        _write_atomically(path, {"version": VERSION, "languages": totals})


def _write_atomically(path: Path, value: Any) -> None:
    # mkstemp creates the file 0600 (readable by this user only), in the same folder so that
    # the rename cannot cross file systems.
    fd, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(value, file, indent=1, sort_keys=True)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


#: `doctor`'s key for the usage section.
USAGE_KEY = "usage"


def usage_report(path: Path | None = None) -> dict[str, Any]:
    """`doctor`'s usage section: where the counts are kept and the totals per language."""
    path = path or usage_path()
    return {"file": str(path), "languages": read_counts(path)}


def print_usage(report: Mapping[str, Any]) -> None:
    """The usage section as text: a line per language, the share of accepted characters still
    there a minute later beside it."""
    print(f"usage (kept on this machine only, {report['file']}):")
    languages = report["languages"]
    if not languages:
        print("  nothing counted yet")
    for language, row in languages.items():
        checked = row[CHARACTERS_CHECKED]
        share = f" ({100 * row[CHARACTERS_KEPT] / checked:.0f}%)" if checked else ""
        print(
            f"  {language:24} shown {row['shown']}, accepted {row['accepted']}, "
            f"partially {row['partially_accepted']}, rejected {row['rejected']}; "
            f"characters accepted {row[CHARACTERS_ACCEPTED]}, "
            f"still there a minute later {row[CHARACTERS_KEPT]} of {checked}{share}"
        )


class KeptUsage:
    """What the server holds for usage counts: the counts (`usage.Usage`), when the accepted
    parts are checked and when the counts are added to the file (every `TICK_S` while there
    is something new, and at shutdown), and the setting that turns it all off.

    Off (`infill.usageCounts: false`), nothing is counted or written: the items carry no
    command, notices are ignored, and what was counted but not yet written is dropped.
    """

    def __init__(
        self, path: Path | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path or usage_path()
        self.enabled = True
        self.usage = Usage()
        self._clock = clock
        self._written: dict[str, LanguageCounts] = {}  # of `usage.counts()`, in the file
        self._timer: asyncio.TimerHandle | None = None
        self._failed = False

    def now(self) -> float:
        return self._clock()

    def set_enabled(self, enabled: bool) -> None:
        if enabled == self.enabled:
            return
        self.enabled = enabled
        if not enabled:
            self.usage, self._written = Usage(), {}
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    # --- what the handlers call: nothing while counting is off ---------------------------

    def offer(
        self, uri: str, language_id: str, text: str, offset: int, items: list[Offered]
    ) -> list[str] | None:
        """The ids of an answer's items (`Usage.offer`); None while counting is off."""
        if not self.enabled:
            return None
        return self.usage.offer(uri, language_id, text, offset, items)

    def shown(self, suggestion_id: str) -> None:
        if self.enabled and self.usage.shown(suggestion_id):
            self.counted()

    def accepted(self, suggestion_id: str) -> None:
        if self.enabled and self.usage.accepted(suggestion_id, self.now()):
            self.counted()

    def partially_accepted(self, notice: PartialAccept) -> None:
        if self.enabled and self.usage.partially_accepted(
            notice.id, notice.accepted_length, notice.item_text, self.now()
        ):
            self.counted()

    def changed(self, uri: str, text: str) -> None:
        if self.enabled:
            self.usage.changed(uri, text)
            self.counted()  # a divergence may have been counted

    def forget(self, uri: str) -> None:
        if self.enabled:
            self.usage.forget(uri)
            self.counted()

    # --- when checks and writes happen ----------------------------------------------------

    def counted(self) -> None:
        """Something was counted (or a check is waiting): a tick within `TICK_S`."""
        if self._timer is not None or not self.enabled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a plain call): `close` writes
        self._timer = loop.call_later(TICK_S, self._tick)

    def report(self) -> dict[str, Any]:
        """`infill/stats`' `usage`: whether counting is on, this server's counts per
        language, and where the totals are kept."""
        return {"counting": self.enabled, "file": str(self.path), "languages": self.usage.counts()}

    def close(self) -> None:
        """Shutdown: every waiting check done now, the counts added to the file."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.enabled:
            self.usage.finish()
            self.write()

    def write(self) -> bool:
        """Add what was counted since the last write to the file; whether all of it is there."""
        counts = self.usage.counts()
        added = {
            language: {
                name: n - self._written.get(language, {}).get(name, 0) for name, n in row.items()
            }
            for language, row in counts.items()
        }
        added = {language: row for language, row in added.items() if any(row.values())}
        if not added:
            return True
        try:
            add_counts(self.path, added)
        except (OSError, Timeout) as e:
            if not self._failed:
                log.warning("usage counts not written to %s: %s", self.path, e)
            self._failed = True
            return False
        self._failed = False
        self._written = counts
        return True

    def _tick(self) -> None:
        self._timer = None
        if not self.enabled:
            return
        self.usage.due(self.now())
        written = self.write()
        if not written or self.usage.next_due() is not None:
            self.counted()
