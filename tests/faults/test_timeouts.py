"""Deadlines: a hung sub-env raises ``EnvTimeoutError`` on time, its worker is killed or its
thread abandoned, nothing it still owes reaches a later call, and ``reset`` recovers it."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
from aiovec.testing import Fault, FaultLedger
from tests.backends_matrix import DEADLINE_BACKENDS, EVENT_LOOPS, WORKER_BACKENDS
from tests.faults.envs import faulty, one_per_worker
from tests.leaks import wait_for_exit

pytestmark = pytest.mark.anyio

DEADLINE = 0.5
#: Generous: these machines are shared and noisy. docs/guide/benchmarks.md quotes measured lateness.
MARGIN = 3.0
#: How early a deadline may fire by the loop's own clock: uvloop keeps timers in whole ms.
CLOCK_SLACK = 0.002


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: its thread is abandoned at the deadline")
async def test_hung_step_times_out_and_reset_recovers(
    backend: str, ledger: FaultLedger, no_leaks: None
) -> None:
    faults = {1: [Fault("hang", "step", at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(3, ledger, faults, backend=backend), backend=backend,
                                     timeout=DEADLINE, **one_per_worker(backend, 3)) as envs:
        await envs.reset(seed=0)
        await envs.step(np.full(3, 1.0))
        started = anyio.current_time()  # the deadline's clock (uvloop's lags time.monotonic)
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            await envs.step(np.full(3, 2.0))
        elapsed = anyio.current_time() - started
        assert DEADLINE - CLOCK_SLACK <= elapsed < DEADLINE + MARGIN
        assert caught.value.env_ids == (1,) and isinstance(caught.value, TimeoutError)
        obs = caught.value.partial_result[0]
        assert obs[:, 0].tolist() == [2, 1, 2]  # the healthy sub-envs' step is kept
        assert envs.unusable_envs == (1,)
        statistics = envs.statistics()
        assert statistics.timeouts == 1
        assert statistics.abandoned_threads == (1 if backend == "thread" else 0)
        if backend == "process":
            assert "2/3 workers alive" in repr(envs)
        with pytest.raises(aiovec.ResetNeededError):
            await envs.step(np.full(3, 3.0))
        obs, _ = await envs.reset(options={"reset_mask": np.array([False, True, False])})
        assert obs[1].tolist()[::3] == [0.0, 1.0]  # a fresh instance (1) of sub-env 1
        obs, *_ = await envs.step(np.full(3, 3.0))
        assert obs[:, :2].tolist() == [[3, 3], [1, 3], [3, 3]]  # nothing stale
        assert ledger.events(1).count("fault hang step") == 1
        # The step sub-env 1 never answered is not counted.
        assert [entry.count for entry in envs.statistics().step_latency] == [3, 2, 3]


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: its thread is abandoned at the caller's deadline")
async def test_caller_deadline_is_honoured(backend: str, ledger: FaultLedger,
                                           no_leaks: None) -> None:
    faults = {1: [Fault("hang", "step", instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend), backend=backend,
                                     **one_per_worker(backend, 2)) as envs:
        await envs.reset()
        started = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            with anyio.fail_after(DEADLINE):
                await envs.step(np.ones(2))
        assert not isinstance(caught.value, aiovec.EnvTimeoutError)  # the caller's own
        assert time.monotonic() - started < DEADLINE + MARGIN
        await recover_after_caller_deadline(envs, hung=1)


async def recover_after_caller_deadline(envs: aiovec.AsyncVectorEnv, hung: int) -> None:
    """After the caller's deadline cut a step short, while sub-env ``hung`` is still hung:
    every sub-env waits for a reset; a reset with a deadline discards the hung one, the next
    remakes it, and stepping goes on with nothing stale."""
    assert envs.unusable_envs == (0, 1)
    with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
        await envs.reset(timeout=DEADLINE)
    assert timed_out.value.env_ids == (hung,)
    obs, _ = await envs.reset()
    assert obs[:, 3].tolist() == [int(index == hung) for index in range(2)]
    obs, *_ = await envs.step(np.full(2, 5.0))
    assert obs[:, :2].tolist() == [[1, 5], [1, 5]]


#: How long the healthy sub-env gets to start, beside the hung one: nothing to start on the
#: in-process backends; a fresh worker process (an interpreter importing numpy and gymnasium)
#: or Ray actor takes seconds on a loaded machine (4 s were too few for an actor while the
#: suite ran on three xdist workers).
START_DEADLINES = {"thread": DEADLINE, "async": DEADLINE, "process": 10.0, "ray": 15.0}


# The test waits out the whole deadline: the backends with slow starters run on one loop
# (how the loop fires a start deadline is the same for every backend; thread and async show
# it on every loop).
@pytest.mark.parametrize(("anyio_backend", "backend"), [
    pytest.param(EVENT_LOOPS[loop], backend, id=f"{loop}-{backend}")
    for loop in EVENT_LOOPS for backend in DEADLINE_BACKENDS
    if backend not in WORKER_BACKENDS or loop == "asyncio"
])
@pytest.mark.hangs_on_purpose(
    "a factory hangs for good: its thread is abandoned at the start deadline")
async def test_hung_factory_fails_the_start_in_time(anyio_backend: Any, backend: str,
                                                    no_leaks: None) -> None:
    faults = {0: [Fault("hang", "init")]}
    envs = aiovec.AsyncVectorEnv(faulty(2, faults=faults, backend=backend), backend=backend,
                                 **one_per_worker(backend, 2))
    deadline = START_DEADLINES[backend]
    started = time.monotonic()
    with pytest.raises(aiovec.EnvTimeoutError) as caught:
        await envs.start(timeout=deadline)
    assert time.monotonic() - started < deadline + MARGIN + 5  # includes closing the rest
    assert caught.value.env_ids == (0,) and caught.value.operation == "start"
    assert envs.closed


async def test_killed_worker_is_really_gone(ledger: FaultLedger, no_leaks: None) -> None:
    faults = {0: [Fault("hang", "step", instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults), backend="process",
                                     num_workers=2, timeout=DEADLINE) as envs:
        await envs.reset()
        pids = [worker.process.pid for worker in envs._engine.backend._workers]  # type: ignore[attr-defined]
        with pytest.raises(aiovec.EnvTimeoutError):
            await envs.step(np.ones(2))
        assert wait_for_exit([pids[0]], 5.0) == []
        assert wait_for_exit([pids[1]], 0.0) == [pids[1]]


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
@pytest.mark.hangs_on_purpose(
    "a sub-env's close hangs for good: its thread is abandoned at the deadline")
async def test_timed_out_call_leaves_its_sub_env_unusable(backend: str, ledger: FaultLedger,
                                                          no_leaks: None) -> None:
    # The ledger counts instances across processes: only the first sub-env 0 hangs.
    faults = {0: [Fault("hang", "close", instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend), backend=backend,
                                     timeout=DEADLINE, **one_per_worker(backend, 2)) as envs:
        await envs.reset()
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            await envs.call("close")  # sub-env 0 hangs in its close
        assert caught.value.env_ids == (0,) and caught.value.partial_result == (None, None)
        assert envs.unusable_envs == (0,)
        await envs.reset()
        assert envs.unusable_envs == ()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is new in 3.11")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: its thread is abandoned when asyncio.timeout fires")
async def test_asyncio_timeout_is_honoured(backend: str, ledger: FaultLedger,
                                            no_leaks: None) -> None:
    faults = {0: [Fault("hang", "step", instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend), backend=backend,
                                     **one_per_worker(backend, 2)) as envs:
        await envs.reset()
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(DEADLINE):  # type: ignore[attr-defined,unused-ignore]
                await envs.step(np.ones(2))
        assert time.monotonic() - started < DEADLINE + MARGIN
        await recover_after_caller_deadline(envs, hung=0)
