"""How many threads llama.cpp computes with: every core that no other process is using.

llama.cpp's CPU threads meet at a spinning barrier after every operation of the graph, hundreds
of times per token. When another process takes one of the cores, a thread that loses its core
holds all the others at the next barrier until the scheduler gives it back; measured on a
2-core machine with one competing CPU-bound process (a 600-token prompt of Gemma 3 270M):

| threads | idle: prompt, decode | one core taken: prompt, decode |
|---|---|---|
| 1 | 2.3 s, 51 tokens/s | 2.3-2.9 s, 42-50 tokens/s |
| 2 | 1.2 s, 76 tokens/s | 3.2 s, 27 tokens/s |

OpenMP's passive wait policy (`OMP_WAIT_POLICY=PASSIVE`) removes most of the collapse but costs
the idle machine half its decode speed (41 tokens/s with 2 threads): the barriers then sleep.
So instead of a fixed count, the count follows the machine: before each decode, the CPU time
that other processes used on our cores since the last look (`/proc/stat` less our own) says
how many cores are free, and llama.cpp gets that many (`llama_set_n_threads`, cheap, per
context). After a pause, the tasks running at that moment bound that average. On a system
without `/proc/stat` the count stays at its ceiling.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: The shortest window the load is measured over: `/proc/stat` counts in 10 ms ticks.
WINDOW_SECONDS = 0.1
#: Another process that used this share of a core over the window takes that core.
BUSY_CORE = 0.6
#: A window longer than this is an average over the past: the running tasks bound it.
STALE_SECONDS = 0.5


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_max_threads() -> int:
    """The most threads the adaptive count uses: every usable core, at most 8 (past that, a
    small model's threads spend more time meeting at barriers than computing)."""
    return min(8, usable_cores())


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Seconds of wall-clock time, of CPU time on our cores (all processes), and of ours; and
    how many tasks, ours included, are running right now (None where unknown)."""

    wall: float
    busy: float
    ours: float
    running: int | None = None


def read_cpu_sample() -> CpuSample | None:
    """Now, from `/proc/stat` and `os.times()`; None where the system has no `/proc/stat`.

    Only the lines of the cores we may run on count (a container pinned to 2 of a host's 64
    cores sees the other 62 busy); the running-task count is system-wide, so it is given only
    where our cores are all the system's.
    """
    try:
        with open("/proc/stat", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return None
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        mine = None
    busy_ticks, cores, running = 0, 0, None
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        name = fields[0]
        if name.startswith(b"cpu") and name != b"cpu" and len(fields) >= 5:
            cores += 1
            if mine is not None and int(name[3:]) not in mine:
                continue
            ticks = [int(x) for x in fields[1:9]]
            # user nice system idle iowait irq softirq steal: all but idle and iowait is busy
            # (steal too: a hypervisor that takes the core is as much a competitor).
            busy_ticks += sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        elif name == b"procs_running" and len(fields) == 2:
            running = int(fields[1])
    if cores == 0:
        return None
    own = os.times()
    whole_system = mine is None or len(mine) == cores
    return CpuSample(
        wall=time.monotonic(),
        busy=busy_ticks / os.sysconf("SC_CLK_TCK"),
        ours=own.user + own.system,
        running=running if whole_system else None,
    )


def our_running_threads() -> int:
    """Our threads that are running now (state R), this one among them."""
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as f:
                # "pid (name) S ...": the state follows the last ")" (names may hold spaces).
                state = f.read().rpartition(b")")[2].split(maxsplit=1)[0]
        except (OSError, IndexError):
            continue
        count += state == b"R"
    return max(1, count)


class ThreadPolicy:
    """The thread count for llama.cpp's next decode.

    `fixed`: always that many (the user's `threads` setting). Otherwise adaptive: the usable
    cores less those other processes kept busy over the last window, between 1 and
    `max_threads`.
    """

    def __init__(
        self,
        *,
        fixed: int | None,
        max_threads: int | None = None,
        cores: int | None = None,
        sample: Callable[[], CpuSample | None] = read_cpu_sample,
        ours_running: Callable[[], int] = our_running_threads,
    ) -> None:
        self.fixed = fixed
        self.cores = cores or usable_cores()
        self.max_threads = fixed or max_threads or default_max_threads()
        self._sample = sample
        self._ours_running = ours_running
        self._last = sample() if fixed is None else None
        self._threads = self.max_threads
        self.others = 0.0  # cores other processes used over the last window

    @property
    def threads(self) -> int:
        """The count the last look chose."""
        return self._threads

    def choose(self) -> int:
        """Look at the machine (at most once per `WINDOW_SECONDS`) and return the count.

        The CPU time other processes used since the last look says how many cores they take.
        After a longer pause (`STALE_SECONDS`) that average says more about the past than
        about now, so the tasks running at this moment, where the system tells, bound it: a
        build that ended a second ago no longer counts. (One that began a moment ago is seen
        one batch later, when the window is short again.)
        """
        if self.fixed is not None or self._last is None:
            return self._threads
        now = self._sample()
        if now is None:
            return self._threads
        wall = now.wall - self._last.wall
        if wall < WINDOW_SECONDS:
            return self._threads
        others = max(0.0, (now.busy - self._last.busy) - (now.ours - self._last.ours)) / wall
        if wall > STALE_SECONDS and now.running is not None:
            # Both must say busy: the average alone would count a build that has just
            # ended, the count alone the editor that is sending this very request.
            # (Our own threads' states are read only here: after a pause, not every 0.1 s.)
            others = min(others, float(max(0, now.running - self._ours_running())))
        self._last = now
        self.others = others
        taken = int(others + (1 - BUSY_CORE))
        threads = max(1, min(self.max_threads, self.cores - taken))
        if threads != self._threads:
            log.debug(
                "llama.cpp threads %d -> %d (other processes used %.1f cores)",
                self._threads,
                threads,
                others,
            )
            self._threads = threads
        return threads
