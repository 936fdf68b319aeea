"""The thread backend: one dedicated thread per sub-env, concurrent steps, a free event loop."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import aiovec
from aiovec.testing import CountingEnv
from tests.envs import GatedEnv

pytestmark = pytest.mark.anyio


class BarrierEnv(CountingEnv):
    """``step`` returns only once every sub-env is inside ``step`` at the same time."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.barrier = barrier

    def step(self, action: int) -> Any:
        self.barrier.wait(timeout=30)  # BrokenBarrierError if the steps were not concurrent
        return super().step(action)


async def test_each_sub_env_keeps_one_dedicated_thread() -> None:
    envs_made: list[GatedEnv] = []

    def make() -> GatedEnv:
        envs_made.append(GatedEnv(gated=False))
        return envs_made[-1]

    async with aiovec.AsyncVectorEnv([make] * 4, backend="thread") as envs:
        await envs.reset()
        for _ in range(5):
            await envs.step(np.zeros(4, np.int64))
        await envs.reset(options={"reset_mask": np.array([True, False, True, False])})
    per_env = [env.thread_ids for env in envs_made]
    assert all(len(ids) == 1 for ids in per_env), per_env  # made, stepped, closed on one thread
    owners = {next(iter(ids)) for ids in per_env}
    assert len(owners) == 4 and threading.get_ident() not in owners


async def test_steps_run_concurrently() -> None:
    barrier = threading.Barrier(6)
    async with aiovec.AsyncVectorEnv([lambda: BarrierEnv(barrier)] * 6, backend="thread") as envs:
        await envs.reset()
        for _ in range(3):
            obs, *_ = await envs.step(np.zeros(6, np.int64))
        assert obs[:, 0].tolist() == [3] * 6


async def test_event_loop_runs_while_sub_envs_step() -> None:
    gated = GatedEnv()
    ticks = 0

    async def probe() -> None:
        nonlocal ticks
        # The step below cannot finish until this coroutine runs: a blocked loop deadlocks.
        while not gated.entered.is_set():
            await anyio.lowlevel.checkpoint()
        for _ in range(10):
            ticks += 1
            await anyio.lowlevel.checkpoint()
        gated.release.set()

    async with aiovec.AsyncVectorEnv([lambda: gated, CountingEnv], backend="thread") as envs:
        await envs.reset()
        async with anyio.create_task_group() as group:
            group.start_soon(probe)
            obs, *_ = await envs.step(np.ones(2, np.int64))
    assert ticks == 10 and obs[:, 0].tolist() == [1, 1]


async def test_close_is_bounded_when_a_sub_env_hangs() -> None:
    gated = GatedEnv()
    envs = aiovec.AsyncVectorEnv([lambda: gated, CountingEnv], backend="thread",
                                 close_timeout=0.5)
    await envs.reset()
    with anyio.move_on_after(0.1):
        await envs.step(np.ones(2, np.int64))
    with anyio.fail_after(20):  # generous: the point is that close returns at all
        await envs.aclose()
    assert envs.closed
    gated.release.set()  # let the abandoned daemon thread finish so no thread outlives the test
    for thread in threading.enumerate():
        if thread.name.startswith("aiovec-env-"):
            thread.join(timeout=10)
