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
from tests.backends_matrix import SYNC_BACKENDS, WORKER_BACKENDS, slow_on
from tests.helpers import assert_identical
from tests.multiagent.envs import Arena, mpe2_env, pettingzoo_env
from tests.multiagent.reference import SerialParallelEnvs

NUM_ENVS = 3
RAY_STEPS = 60


#: name -> (factory, steps per rollout): headless envs of every shape, short episodes so
#: that both episode ends and autoresets happen; the heavy ones (images) step less.
ENVS: dict[str, tuple[Callable[[], Any], int]] = {
    # Agents die and spawn; one agent has other spaces.
    "arena": (Arena, 300),
    "arena-truncated": (functools.partial(Arena, max_steps=4, health=30), 300),
    # Agents with different observation spaces.
    "mpe2-simple_adversary": (mpe2_env("simple_adversary_v3", max_cycles=10), 60),
    "mpe2-simple_spread-continuous": (
        mpe2_env("simple_spread_v3", max_cycles=10, continuous_actions=True), 60),
    # Knights and archers die (killable), zombies end the game.
    "butterfly-knights_archers_zombies": (
        pettingzoo_env("butterfly/knights_archers_zombies-v11", max_cycles=20, spawn_delay=2),
        50),
    # Image observations (457x120x3 per piston) through shared memory.
    "butterfly-pistonball": (
        pettingzoo_env("butterfly/pistonball-v6", n_pistons=3, max_cycles=8), 20),
    "sisl-pursuit": (pettingzoo_env("sisl/pursuit-v5", max_cycles=10, n_evaders=5,
                                    n_pursuers=4), 30),
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


CASES = [
    *[(name, AutoresetMode.NEXT_STEP) for name in ENVS],
    *[(name, AutoresetMode.DISABLED) for name in ("arena", "arena-truncated", "sisl-pursuit")],
]


@pytest.mark.parametrize(("env_name", "mode"), CASES,
                         ids=[f"{name}-{mode.value}" for name, mode in CASES])
@pytest.mark.parametrize("backend", slow_on(SYNC_BACKENDS, "process"))
@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_rollouts_match_stepping_one_by_one(
        anyio_backend: Any, backend: str, env_name: str, mode: AutoresetMode,
        no_leaks: None) -> None:
    env_fn, num_steps = ENVS[env_name]
    options = {"num_workers": 2} if backend in WORKER_BACKENDS else {}
    async with aiovec.AsyncParallelVectorEnv([env_fn] * NUM_ENVS, backend=backend,
                                             autoreset_mode=mode, **options) as envs:
        await _compare(envs, env_fn, mode is AutoresetMode.NEXT_STEP,
                       min(num_steps, RAY_STEPS) if backend == "ray" else num_steps)
