"""A real CPU-bound process beside a test, and a way to wait for the CPU time it has used
instead of sleeping: on a loaded machine a fixed sleep may end before the process ran at all."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has used, from /proc/PID/stat."""
    # The command name (field 2) may hold spaces; the fields after its ")" are fixed.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Busy:
    """One process that spins on a core until the test ends."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def ran(self, seconds: float, give_up_after: float = 60) -> None:
        """Return once the process has used `seconds` more of CPU time than it had. Giving up
        keeps a machine that never schedules it from hanging the suite."""
        target = cpu_seconds(self.proc.pid) + seconds
        deadline = time.monotonic() + give_up_after
        while cpu_seconds(self.proc.pid) < target:
            assert self.proc.poll() is None, "the busy process ended"
            assert time.monotonic() < deadline, f"the busy process never used {seconds} s of CPU"
            time.sleep(0.01)


@contextmanager
def busy_core() -> Iterator[Busy]:
    """A CPU-bound process, already running (it has used a tenth of a second of CPU)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = Busy(proc)
        busy.ran(0.1)
        yield busy
    finally:
        proc.kill()
        proc.wait()
