"""Gymnasium's own vector wrappers work on the shim exactly as on ``SyncVectorEnv``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import vector as wrappers

import aiovec

WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "RecordEpisodeStatistics": wrappers.RecordEpisodeStatistics,
    "NormalizeObservation": wrappers.NormalizeObservation,
    "NormalizeReward": wrappers.NormalizeReward,
    "ClipReward": lambda envs: wrappers.ClipReward(envs, min_reward=0.0, max_reward=0.5),
    "TransformObservation": lambda envs: wrappers.TransformObservation(envs, lambda obs: obs * 2),
    "FlattenObservation": wrappers.FlattenObservation,
    "DtypeObservation": lambda envs: wrappers.DtypeObservation(envs, np.float64),
    "RescaleAction": None,  # Pendulum below: a continuous action space
    "ClipAction": None,
}


def _assert_same(got: Any, want: Any) -> None:
    """Equal, but for RecordEpisodeStatistics' wall-clock episode times."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            if key not in ("t", "_t"):
                _assert_same(got[key], want[key])
    else:
        np.testing.assert_equal(got, want)


def _make(name: str) -> tuple[Any, Any]:
    env_id = "Pendulum-v1" if WRAPPERS[name] is None else "CartPole-v1"
    make = lambda: gym.make(env_id, max_episode_steps=25)  # noqa: E731
    if name == "RescaleAction":
        bound = np.ones(1, np.float32)
        wrap: Callable[[Any], Any] = lambda envs: wrappers.RescaleAction(envs, -bound, bound)  # noqa: E731
    elif name == "ClipAction":
        wrap = wrappers.ClipAction
    else:
        wrap = WRAPPERS[name]  # type: ignore[assignment]
    shim = aiovec.VectorEnv([make] * 3, backend="thread")
    reference = gym.vector.SyncVectorEnv([make] * 3)
    try:
        return wrap(shim), wrap(reference)
    except BaseException:
        shim.close()
        reference.close()
        raise


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_vector_wrappers_behave_as_on_sync_vector_env(name: str) -> None:
    shim, reference = _make(name)
    try:
        for got, want in zip(shim.reset(seed=3), reference.reset(seed=3)):
            _assert_same(got, want)
        shim.action_space.seed(7)
        for _ in range(60):  # several episodes of 25 steps: autoreset happens under the wrapper
            actions = shim.action_space.sample()
            for got, want in zip(shim.step(actions), reference.step(actions)):
                _assert_same(got, want)
    finally:
        shim.close()
        reference.close()
