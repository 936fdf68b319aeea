"""``await envs.step()`` on the inline backend: one checkpoint, then the step in full, with
no cancel scope of its own (no positive deadline can pass while inline sub-envs run)."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

import aiovec
from aiovec.testing import CountingEnv

pytestmark = pytest.mark.anyio

ACTIONS = np.ones(3, np.int64)


async def test_an_inline_step_cancelled_at_its_checkpoint_touched_no_sub_env() -> None:
    async with aiovec.AsyncVectorEnv([CountingEnv] * 3, backend="inline") as envs:
        await envs.reset(seed=0)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await envs.step(ACTIONS)
        assert scope.cancelled_caught
        assert "in flight" not in repr(envs)
        assert envs.unusable_envs == ()  # nothing moved: no reset needed
        assert await envs.get_attr("steps") == (0, 0, 0)
        obs, *_ = await envs.step(ACTIONS)
        assert obs.tolist() == [[1, 1]] * 3
        assert envs.statistics().steps == 1


async def test_a_second_task_stepping_an_inline_env_during_a_step_is_refused() -> None:
    async with aiovec.AsyncVectorEnv([CountingEnv] * 3, backend="inline") as envs:
        await envs.reset(seed=0)
        outcomes: list[str] = []

        async def step() -> None:
            try:
                await envs.step(ACTIONS)
                outcomes.append("stepped")
            except aiovec.BusyError:
                outcomes.append("refused")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(step)
            tasks.start_soon(step)
        assert sorted(outcomes) == ["refused", "stepped"]
        assert await envs.get_attr("steps") == (1, 1, 1)


async def test_an_inline_step_with_a_deadline_runs_in_full() -> None:
    # The deadline cannot cut an inline step short (its sub-envs block the loop): a tiny one
    # neither times it out nor leaves a sub-env needing a reset.
    async with aiovec.AsyncVectorEnv([CountingEnv] * 3, backend="inline",
                                     timeout=1e-9) as envs:
        await envs.reset(seed=0, timeout=None)
        for _ in range(3):
            obs, *_ = await envs.step(ACTIONS)
        assert obs[:, 0].tolist() == [3, 3, 3]
        assert envs.statistics().timeouts == 0
