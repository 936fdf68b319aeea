"""Every backend and the sync shim reproduce ``gymnasium.vector.SyncVectorEnv`` bit for bit."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import aiovec
from aiovec.testing import SPACE_KINDS, EpisodeEnv
from tests.backends_matrix import LOCAL_BACKENDS, for_backend, slow_on
from tests.helpers import assert_identical

NUM_ENVS = 4
#: Episodes last 3 to 40 steps: 500 steps of 4 sub-envs end ~150 episodes both ways.
NUM_STEPS = 500
#: A Ray round trip costs ~1 ms (the others' ~20 µs): shorter rollouts, still ending both ways.
RAY_STEPS = 200

ENV_KINDS = [*SPACE_KINDS, "cartpole"]


def env_factory(kind: str, backend: str = "inline") -> Callable[[], Any]:
    """The sub-env factory; on the async backend the same env behind ``AsyncAdapter``."""
    if kind == "cartpole":
        # Short episodes so both truncation (TimeLimit) and termination happen often.
        factory: Callable[[], Any] = functools.partial(gym.make, "CartPole-v1",
                                                       max_episode_steps=30)
    else:
        factory = functools.partial(EpisodeEnv, kind)
    return for_backend(backend, [factory])[0]


Record = tuple[Any, ...]
ResetFn = Callable[..., Awaitable[tuple[Any, dict[str, Any]]]]
StepFn = Callable[[Any], Awaitable[tuple[Any, ...]]]
Reference = Callable[[str, AutoresetMode, int, int], list[Record]]


def steps_for(backend: str) -> int:
    return RAY_STEPS if backend == "ray" else NUM_STEPS


async def rollout(reset: ResetFn, step: StepFn, action_space: gym.Space[Any],
                  mode: AutoresetMode, seed: int, num_steps: int) -> list[Record]:
    """Seeded random rollout; with autoreset disabled, done sub-envs are reset by mask."""
    action_space.seed(seed)
    records: list[Record] = [await reset(seed=seed)]
    for index in range(num_steps):
        if index == num_steps // 2:
            records.append(await reset(seed=[seed * 7 + i for i in range(NUM_ENVS)],
                                       options={"level": 2}))
        result = await step(action_space.sample())
        records.append(result)
        if mode is AutoresetMode.DISABLED:
            done = np.logical_or(result[2], result[3])
            if done.any():
                records.append(await reset(options={"reset_mask": done}))
    return records


def as_async(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return call


def run_without_loop(coroutine: Any) -> Any:
    """Drive a coroutine that never suspends (its awaits are all plain sync calls)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the reference rollout suspended")


@pytest.fixture(scope="module")
def reference() -> Reference:
    """The SyncVectorEnv rollout for (kind, mode, seed, steps), computed once per module."""

    @functools.cache
    def compute(kind: str, mode: AutoresetMode, seed: int, num_steps: int) -> list[Record]:
        envs = SyncVectorEnv([env_factory(kind)] * NUM_ENVS, autoreset_mode=mode)
        try:
            return run_without_loop(rollout(as_async(envs.reset), as_async(envs.step),
                                            envs.action_space, mode, seed, num_steps))
        finally:
            envs.close()

    return compute


def check_rollout(actual: list[Record], expected: list[Record]) -> None:
    assert len(actual) == len(expected)
    endings = {"terminated": False, "truncated": False}
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_identical(got, want, f"record {index}")
        if len(want) == 5:
            endings["terminated"] |= bool(want[2].any())
            endings["truncated"] |= bool(want[3].any())
    assert endings == {"terminated": True, "truncated": True}, "the rollout must end both ways"


modes = pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.value)
kinds = pytest.mark.parametrize("kind", ENV_KINDS)


@pytest.mark.anyio
# Ray: the next test, on one loop. The process backend's rollouts: make unit only.
@pytest.mark.parametrize("backend", slow_on(LOCAL_BACKENDS, "process"))
@modes
@kinds
async def test_async_rollouts_match_sync_vector_env(
    backend: str, mode: AutoresetMode, kind: str, reference: Reference,
) -> None:
    await check_async_rollout(backend, mode, kind, reference)


@pytest.mark.anyio
@pytest.mark.ray
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # every loop: tests/backends/test_ray.py
@modes
@kinds
async def test_ray_rollouts_match_sync_vector_env(
    mode: AutoresetMode, kind: str, reference: Reference,
) -> None:
    await check_async_rollout("ray", mode, kind, reference, num_workers=2)


async def check_async_rollout(backend: str, mode: AutoresetMode, kind: str,
                              reference: Reference, **options: Any) -> None:
    seed = 1234 + ENV_KINDS.index(kind)
    factories = [env_factory(kind, backend)] * NUM_ENVS
    async with aiovec.AsyncVectorEnv(factories, backend=backend, autoreset_mode=mode,
                                     **options) as envs:
        actual = await rollout(envs.reset, envs.step, envs.action_space, mode, seed,
                               steps_for(backend))
    check_rollout(actual, reference(kind, mode, seed, steps_for(backend)))


@pytest.mark.parametrize(("backend", "kind"), [
    *(pytest.param(backend, kind, marks=[pytest.mark.slow] if backend == "process" else [])
      for backend in LOCAL_BACKENDS for kind in ENV_KINDS),
    ("ray", "dict"),  # the shim's path is the same for every backend: one kind is enough
])
@modes
def test_shim_rollouts_match_sync_vector_env(
    backend: str, mode: AutoresetMode, kind: str,
    reference: Reference,
) -> None:
    seed = 4321 + ENV_KINDS.index(kind)
    factories = [env_factory(kind, backend)] * NUM_ENVS
    shim = aiovec.VectorEnv(factories, autoreset_mode=mode, backend=backend)
    try:
        actual = run_without_loop(rollout(as_async(shim.reset), as_async(shim.step),
                                          shim.action_space, mode, seed, steps_for(backend)))
    finally:
        shim.close()
    check_rollout(actual, reference(kind, mode, seed, steps_for(backend)))
