"""A worker polls for its next request only while requests come within its window
(``_worker.PollWindow``): a caller that takes its time between steps does not have its
workers burn a core each."""

from __future__ import annotations

import os
import time

import anyio
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import aiovec
from aiovec._backends._process._worker import SPIN_SECONDS, HostedEnvs, PollWindow
from aiovec._backends._process_tree import NoProcessTracking
from tests.envs import PidEnv, worker_pids


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _answer(window: PollWindow, clock: Clock, gap: float) -> float | None:
    """A reply goes, the next request comes ``gap`` seconds later: the window it had."""
    until = window.open()
    clock.now += gap
    window.arrived()
    return until


def test_requests_that_come_within_the_window_keep_the_worker_polling() -> None:
    clock = Clock()
    window = PollWindow(0.001, clock)
    for _ in range(50):
        until = _answer(window, clock, 0.0008)
        assert until is not None and until == pytest.approx(clock.now - 0.0008 + 0.001)


def test_a_slow_caller_stops_the_polling_and_a_quick_one_brings_it_back() -> None:
    clock = Clock()
    window = PollWindow(0.001, clock)
    windows = [_answer(window, clock, 0.005) for _ in range(12)]
    assert windows[0] is not None  # it starts by polling
    assert windows[-1] is None  # ... and blocks once most requests came late
    stopped = windows.index(None)
    assert all(until is None for until in windows[stopped:])
    # Gaps are measured while blocking too: quick requests bring the polling back.
    windows = [_answer(window, clock, 0.0001) for _ in range(12)]
    assert windows[0] is None and windows[-1] is not None


def test_one_long_pause_among_quick_requests_does_not_stop_the_polling() -> None:
    """A training phase between rollouts is one late request among many quick ones."""
    clock = Clock()
    window = PollWindow(0.001, clock)
    for step in range(200):
        until = _answer(window, clock, 2.0 if step % 64 == 63 else 0.0001)
        assert until is not None


def test_a_request_with_no_window_open_is_not_counted() -> None:
    clock = Clock()
    window = PollWindow(0.001, clock)
    for _ in range(20):  # requests before any reply (the first one) change nothing
        clock.now += 10.0
        window.arrived()
    assert window.open() is not None


def _hosting(first_env: int, marks: np.ndarray, peer: int) -> HostedEnvs:
    worker = HostedEnvs(first_env, [], AutoresetMode.NEXT_STEP, started=NoProcessTracking())
    worker.step_marks, worker.peer_rows = marks, (peer,)
    return worker


def test_a_worker_that_does_not_poll_still_marks_its_steps_for_its_peers() -> None:
    """Workers decide to poll each on its own: one that does not must not leave a polling
    peer waiting out its whole window for a mark that never comes, step after step."""
    marks = np.zeros(4, dtype=np.int64)
    polling, blocking = _hosting(0, marks, 2), _hosting(2, marks, 0)
    blocking.finished(7, None)  # not polling: marks, and does not wait
    assert marks[2] == 7 and marks[0] == 0
    started = time.perf_counter()
    polling.finished(7, started + 60.0)  # its peer's mark is there: no wait
    assert time.perf_counter() - started < 30.0
    assert marks[0] == 7


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
@pytest.mark.anyio
async def test_workers_of_a_slow_caller_do_not_spin(no_leaks: None) -> None:
    if not SPIN_SECONDS:
        pytest.skip("AIOVEC_WORKER_SPIN_US=0: workers never poll")
    steps, gap = 300, 5 * SPIN_SECONDS  # the caller's own pace: 5 windows between steps
    async with aiovec.AsyncVectorEnv([PidEnv] * 4, backend="process", num_workers=2) as envs:
        await envs.reset(seed=0)
        pids = set(await worker_pids(envs))
        before = {pid: _cpu_seconds(pid) for pid in pids}
        for _ in range(steps):
            await envs.step([0] * 4)
            await anyio.sleep(gap)  # the caller's own pace (its other work), not a wait for it
        used = {pid: _cpu_seconds(pid) - before[pid] for pid in pids}
    # Polling through every window would take steps * SPIN_SECONDS (0.3 s) of each worker's
    # CPU; with the windows closed after the first few late requests, the steps' own work.
    assert all(seconds < 0.5 * steps * SPIN_SECONDS for seconds in used.values()), used
