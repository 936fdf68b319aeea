"""Every backend reproduces the sub-envs stepped one by one, agent by agent, bit for bit."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import aiovec
from tests.helpers import assert_identical
from tests.multiagent.envs import Arena
from tests.multiagent.reference import SerialParallelEnvs

NUM_ENVS = 3
NUM_STEPS = 300
RAY_STEPS = 60


def _pistonball() -> Any:
    from pettingzoo.butterfly import pistonball_v6
    return pistonball_v6.parallel_env(n_pistons=4, max_cycles=40)


ENVS: dict[str, Callable[[], Any]] = {
    "arena": Arena,
    "arena-short": functools.partial(Arena, max_steps=4, health=30),
}


def _actions(envs: Any, agents: list[str], seed: int) -> Callable[[], dict[str, Any]]:
    batched = {agent: batch_space(envs.single_action_space(agent), NUM_ENVS) for agent in agents}
    for offset, space in enumerate(batched.values()):
        space.seed(seed + offset)
    return lambda: {agent: space.sample() for agent, space in batched.items()}


async def _compare(envs: aiovec.AsyncParallelVectorEnv, env_fn: Callable[[], Any],
                   autoreset: bool, num_steps: int, seed: int = 11) -> None:
    oracle = SerialParallelEnvs([env_fn] * NUM_ENVS, autoreset=autoreset)
    try:
        assert_identical(await envs.reset(seed=seed), oracle.reset(seed=seed), "reset")
        sample = _actions(envs, list(envs.possible_agents), seed)
        for index in range(num_steps):
            if index == num_steps // 2:
                seeds = [seed * 5 + offset for offset in range(NUM_ENVS)]
                assert_identical(await envs.reset(seed=seeds), oracle.reset(seed=seeds),
                                 f"reset at {index}")
            actions = sample()
            assert_identical(await envs.step(actions), oracle.step(actions), f"step {index}")
            if not autoreset:
                done = np.array([oracle.episode_over(i) for i in range(NUM_ENVS)])
                if done.any():
                    options = {"reset_mask": done}
                    assert_identical(await envs.reset(options=options),
                                     oracle.reset(options=options), f"masked reset {index}")
    finally:
        oracle.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED],
                         ids=["next_step", "disabled"])
@pytest.mark.parametrize("env_name", sorted(ENVS))
@pytest.mark.parametrize("backend", ["inline", "thread", "process", "ray"])
@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_rollouts_match_stepping_one_by_one(
        anyio_backend: Any, backend: str, env_name: str, mode: AutoresetMode,
        no_leaks: None) -> None:
    env_fn = ENVS[env_name]
    options = {"num_workers": 2} if backend in ("process", "ray") else {}
    async with aiovec.AsyncParallelVectorEnv([env_fn] * NUM_ENVS, backend=backend,
                                             autoreset_mode=mode, **options) as envs:
        await _compare(envs, env_fn, mode is AutoresetMode.NEXT_STEP,
                       RAY_STEPS if backend == "ray" else NUM_STEPS)
