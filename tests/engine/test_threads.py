"""The thread count follows the machine: every core that other processes leave free."""

from __future__ import annotations

import pytest
from busy import busy_core

import engine.threads as threads
from engine.threads import (
    WINDOW_SECONDS,
    CpuSample,
    ThreadPolicy,
    read_cpu_sample,
    usable_cores,
)

#: Our own threads running when the policy looks (the worker thread itself, and one more).
OURS_RUNNING = 2


class Machine:
    """A fake `/proc/stat`: the test says how busy other processes and we were."""

    def __init__(self) -> None:
        self.now = CpuSample(wall=100.0, busy=50.0, ours=10.0)

    def advance(
        self, seconds: float, *, others: float, ours: float = 0.0, running: int | None = None
    ) -> None:
        """`seconds` pass; other processes keep `others` cores busy, we `ours`; `running`
        other tasks run at the end, beside our `OURS_RUNNING` threads (None: the system does
        not say)."""
        self.now = CpuSample(
            wall=self.now.wall + seconds,
            busy=self.now.busy + seconds * (others + ours),
            ours=self.now.ours + seconds * ours,
            running=None if running is None else running + OURS_RUNNING,
        )

    def sample(self) -> CpuSample:
        return self.now


def test_an_idle_machine_gets_every_core_and_a_busy_core_is_left_alone() -> None:
    machine = Machine()
    policy = ThreadPolicy(fixed=None, max_threads=4, cores=4, sample=machine.sample)
    machine.advance(0.5, others=0.0, ours=4.0)  # our own threads do not count
    assert policy.choose() == 4
    machine.advance(0.5, others=1.0, ours=3.0)
    assert policy.choose() == 3
    machine.advance(0.5, others=2.9, ours=1.0)
    assert policy.choose() == 1
    machine.advance(0.5, others=6.0)  # never fewer than one
    assert policy.choose() == 1
    machine.advance(0.5, others=0.2, ours=1.0)  # a little noise takes no core
    assert policy.choose() == 4


def test_the_count_is_at_most_the_ceiling_and_a_fixed_count_never_changes() -> None:
    machine = Machine()
    capped = ThreadPolicy(fixed=None, max_threads=2, cores=8, sample=machine.sample)
    machine.advance(1.0, others=3.0)
    assert capped.choose() == 2  # 5 cores free, but the ceiling is 2
    fixed = ThreadPolicy(fixed=3, cores=8, sample=machine.sample)
    machine.advance(1.0, others=7.0)
    assert fixed.choose() == 3


def test_the_machine_is_looked_at_once_per_window() -> None:
    machine = Machine()
    policy = ThreadPolicy(fixed=None, max_threads=2, cores=2, sample=machine.sample)
    machine.advance(WINDOW_SECONDS / 2, others=2.0)
    assert policy.choose() == 2  # too short a window to say: the count stays
    machine.advance(WINDOW_SECONDS, others=2.0)
    assert policy.choose() == 1


def test_after_a_pause_a_core_counts_as_taken_only_if_it_still_is() -> None:
    machine = Machine()
    policy = ThreadPolicy(
        fixed=None,
        max_threads=2,
        cores=2,
        sample=machine.sample,
        ours_running=lambda: OURS_RUNNING,
    )
    # A build kept a core busy for most of a long pause, and has just ended.
    machine.advance(5.0, others=0.9, running=0)
    assert policy.choose() == 2
    # It runs on, and is running now.
    machine.advance(5.0, others=1.0, running=1)
    assert policy.choose() == 1
    # An editor that is running only because it sends this request takes no core.
    machine.advance(5.0, others=0.05, running=1)
    assert policy.choose() == 2
    # Where the system does not say, the average over the pause it is.
    machine.advance(5.0, others=0.9, running=None)
    assert policy.choose() == 1


def test_without_proc_stat_the_count_stays_at_its_ceiling() -> None:
    policy = ThreadPolicy(fixed=None, max_threads=2, cores=2, sample=lambda: None)
    assert policy.choose() == 2


@pytest.mark.skipif(read_cpu_sample() is None, reason="this system has no /proc/stat")
def test_a_competing_process_is_seen_on_this_machine() -> None:
    # A real CPU-bound process: whatever else runs here, it alone uses most of a core.
    policy = ThreadPolicy(fixed=None, max_threads=usable_cores(), cores=usable_cores())
    with busy_core() as busy:
        policy.choose()  # starts a window while the process runs
        # A window of at least half a second of the process's CPU time, however loaded the
        # machine is (longer than the policy's own window, so it looks again).
        busy.ran(0.5)
        policy.choose()
    assert policy.others >= 0.6
    assert policy.threads <= max(1, usable_cores() - 1)


@pytest.mark.parametrize(("cores", "ceiling"), [(1, 1), (2, 2), (8, 8), (64, 8)])
def test_by_default_every_usable_core_is_used_and_at_most_eight(
    monkeypatch: pytest.MonkeyPatch, cores: int, ceiling: int
) -> None:
    """README "Speed": by default every core other processes leave free, at most 8."""
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    assert threads.default_max_threads() == ceiling
    machine = Machine()
    policy = ThreadPolicy(fixed=None, cores=cores, sample=machine.sample)
    assert policy.max_threads == ceiling
    machine.advance(1.0, others=0.0)  # an idle machine: the whole ceiling
    assert policy.choose() == ceiling
