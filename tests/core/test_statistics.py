"""``statistics()``: counters and each sub-env's step latency, on every backend."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import aiovec
from aiovec.testing import FaultyEnv
from tests.backends_matrix import LOCAL_SYNC_BACKENDS

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)
async def test_statistics_count_steps_and_time_each_sub_env(backend: str) -> None:
    envs = aiovec.AsyncVectorEnv([lambda: FaultyEnv(episode_length=4)] * 3, backend=backend)
    before = envs.statistics()
    assert before.steps == 0 and all(math.isnan(entry.mean) for entry in before.step_latency)
    async with envs:
        await envs.reset()
        for _ in range(300):
            await envs.step(np.ones(3))
        statistics = envs.statistics()
    assert (statistics.steps, statistics.resets, statistics.errors, statistics.timeouts,
            statistics.restarts, statistics.abandoned_threads) == (300, 1, 0, 0, 0, 0)
    for entry in statistics.step_latency:
        assert entry.count == 300  # autoreset steps included
        assert 0 < entry.p50 <= entry.p99 and 0 < entry.mean < 1
    assert envs.statistics() == statistics  # still readable once closed
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.steps = 0  # type: ignore[misc]
