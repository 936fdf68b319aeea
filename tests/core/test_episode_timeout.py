"""Episode timeouts (``episode_timeout=``): an episode whose wall time ran out is truncated
with ``infos["episode_timeout"]``, which the env's own truncations never carry, and the
sub-env resets as after any truncation; on the async backend a step still running then is cut.

The steps sleep: their durations are the workload, and each assertion holds on a machine of
any speed (a sleep only ever lasts longer).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import aiovec
from tests.backends_matrix import ALL_BACKENDS

pytestmark = pytest.mark.anyio

#: Seconds an episode may last, and a step's sleep per unit of its action.
TIMEOUT = 0.5
UNIT = 0.2


class ClockEnv(gym.Env[np.ndarray, int]):
    """Its observation counts the steps of the episode; a step sleeps ``action * UNIT``
    seconds; it truncates itself after ``own_limit`` steps."""

    observation_space = spaces.Box(0, 1e6, (1,), np.float32)
    action_space = spaces.Discrete(1000)

    def __init__(self, own_limit: int = 10_000) -> None:
        self.own_limit = own_limit
        self.count = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.count = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(action * UNIT)
        self.count += 1
        return (np.full(1, self.count, np.float32), 1.0, False, self.count >= self.own_limit,
                {"count": self.count})


class AsyncClockEnv(aiovec.AsyncEnv[np.ndarray, int]):
    """``ClockEnv`` as a coroutine env: its steps sleep by awaiting."""

    observation_space = ClockEnv.observation_space
    action_space = ClockEnv.action_space

    def __init__(self, own_limit: int = 10_000) -> None:
        self.own_limit = own_limit
        self.count = 0

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.count = 0
        return np.zeros(1, np.float32), {}

    async def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(action * UNIT)
        self.count += 1
        return (np.full(1, self.count, np.float32), 1.0, False, self.count >= self.own_limit,
                {"count": self.count})


def clock_envs(backend: str, num_envs: int, **kwargs: Any) -> list[Any]:
    env_class = AsyncClockEnv if backend == "async" else ClockEnv
    return [functools.partial(env_class, **kwargs)] * num_envs


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_an_episode_past_its_time_is_truncated_and_then_reset(backend: str,
                                                                   no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(clock_envs(backend, 1), backend=backend,
                                     episode_timeout=TIMEOUT, timeout=60) as envs:
        began = time.monotonic()
        await envs.reset(seed=0)
        for step in range(1, 4):  # 3 steps of UNIT = 0.6 s > TIMEOUT: cut by the third
            obs, _, terminations, truncations, infos = await envs.step(np.array([1]))
            if truncations.any():
                break
            assert obs.ravel().tolist() == [step]
            assert "episode_timeout" not in infos
        assert time.monotonic() - began >= TIMEOUT
        assert truncations.tolist() == [True] and not terminations.any()
        assert infos["episode_timeout"].tolist() == [True]
        assert infos["_episode_timeout"].tolist() == [True]
        # The step's own observation; on the async backend the step is cut while it runs,
        # with the latest observation (unless it ended before the cut could land).
        assert obs[0, 0] == step or (backend == "async" and obs[0, 0] == step - 1)
        # Next step mode: the next step resets it, and a new episode's clock starts.
        obs, _, _, truncations, infos = await envs.step(np.array([0]))
        assert obs.ravel().tolist() == [0] and not truncations.any()
        obs, _, _, truncations, infos = await envs.step(np.array([0]))
        assert obs.ravel().tolist() == [1] and not truncations.any()


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_a_cut_step_says_whether_it_was_running_when_the_time_ran_out(
        backend: str, no_leaks: None) -> None:
    """A hung tool or a slow policy: sub-env 1's first step sleeps past the episode's time
    (running when it runs out: ``step_in_flight``, for how long); sub-env 0's second step
    begins after its time ran out (the episode waited for its action: no ``step_in_flight``).
    Sub-env 0 steps first wherever steps run one after another."""
    workers = {"num_workers": 2} if backend in ("process", "ray") else {}
    budget = 1.5  # (a wide margin: sub-env 0's first step and sub-env 1's start fit in it)
    async with aiovec.AsyncVectorEnv(clock_envs(backend, 2), backend=backend,
                                     episode_timeout=budget, timeout=60, **workers) as envs:
        await envs.reset(seed=0)
        _, _, _, truncations, infos = await envs.step(np.array([0, 10]))  # 2 s > budget
        assert truncations.tolist() == [False, True]
        assert infos["episode_timeout"].tolist() == [False, True]
        assert infos["_step_in_flight"].tolist() == [False, True]
        assert 0 < infos["step_in_flight"][1] <= budget
        _, _, _, truncations, infos = await envs.step(np.array([0, 0]))  # after 2 s
        assert truncations.tolist() == [True, False]  # (sub-env 1: its reset step)
        assert infos["episode_timeout"].tolist() == [True, False]
        assert "step_in_flight" not in infos


@pytest.mark.parametrize("backend", ["inline", "async"])
async def test_the_envs_own_truncation_does_not_say_episode_timeout(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(clock_envs(backend, 2, own_limit=2), backend=backend,
                                     episode_timeout=60) as envs:
        await envs.reset(seed=0)
        await envs.step(np.array([0, 0]))
        _, _, _, truncations, infos = await envs.step(np.array([0, 0]))
        assert truncations.tolist() == [True, True]
        assert "episode_timeout" not in infos and infos["count"].tolist() == [2, 2]


async def test_on_the_async_backend_a_step_past_the_episodes_time_is_cut(
        no_leaks: None) -> None:
    """A step awaiting for a minute is cancelled when its episode's time runs out: the
    latest observation, truncated; no error, no restart, and the next step resets."""
    async with aiovec.AsyncVectorEnv(clock_envs("async", 2), backend="async",
                                     episode_timeout=TIMEOUT, timeout=120) as envs:
        await envs.reset(seed=0)
        await envs.step(np.array([0, 0]))
        began = time.monotonic()
        obs, rewards, _, truncations, infos = await envs.step(np.array([300, 0]))
        assert time.monotonic() - began < 60  # (cut at ~0.5 s, not after 60)
        assert truncations.tolist() == [True, False]
        assert infos["episode_timeout"].tolist() == [True, False]
        assert obs.ravel().tolist() == [1, 2]  # sub-env 0: its latest observation
        assert rewards.tolist() == [0.0, 1.0]
        assert envs.statistics().restarts == 0 and envs.statistics().errors == 0
        obs, _, _, _, _ = await envs.step(np.array([0, 0]))
        assert obs[0, 0] == 0  # reset


@pytest.mark.parametrize("backend", ["thread", "async"])
async def test_same_step_mode_puts_the_timeout_in_the_final_info(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(clock_envs(backend, 1), backend=backend,
                                     episode_timeout=TIMEOUT,
                                     autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        await envs.reset(seed=0)
        for _ in range(3):
            obs, _, _, truncations, infos = await envs.step(np.array([1]))
            if truncations.any():
                break
        assert truncations.tolist() == [True]
        assert obs.ravel().tolist() == [0]  # the new episode's first observation
        assert infos["final_info"]["episode_timeout"].tolist() == [True]


@pytest.mark.parametrize("value", [0, -1, True, float("nan"), "5"])
def test_an_episode_timeout_that_means_nothing_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="episode_timeout"):
        aiovec.AsyncVectorEnv(clock_envs("inline", 1), episode_timeout=value)
