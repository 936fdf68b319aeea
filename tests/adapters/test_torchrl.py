"""TorchRL over aiovec: ``GymWrapper(aiovec.VectorEnv(...))`` and a ``ParallelEnv`` of such
envs roll out exactly as over Gymnasium's ``SyncVectorEnv`` with the same seeds and policy,
every tensor compared; TorchRL refuses the ``NextStep`` autoreset mode on both alike."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
import torch
from gymnasium.vector import AutoresetMode
from torchrl.envs import GymWrapper, ParallelEnv

import aiovec

NUM_ENVS = 4
_make_cartpole = functools.partial(gym.make, "CartPole-v1", max_episode_steps=30)


def _aiovec(mode: AutoresetMode, backend: str = "process") -> GymWrapper:
    return GymWrapper(aiovec.VectorEnv([_make_cartpole] * NUM_ENVS, backend=backend,
                                       autoreset_mode=mode))


def _sync(mode: AutoresetMode) -> GymWrapper:
    return GymWrapper(gym.vector.SyncVectorEnv([_make_cartpole] * NUM_ENVS,
                                               autoreset_mode=mode))


def _policy(tensordict: Any) -> Any:
    """Push the cart toward the pole's lean: deterministic, so both rollouts act alike."""
    leaning_right = (tensordict["observation"][..., 2] > 0).long()
    tensordict["action"] = torch.nn.functional.one_hot(leaning_right, 2)
    return tensordict


def _rollouts(makers: list[Callable[[], Any]], *, seed: int, steps: int) -> list[Any]:
    """One rollout of each env made (seeded alike, closed after), through episode ends."""
    rollouts = []
    for make in makers:
        env = make()
        try:
            env.set_seed(seed)
            rollouts.append(env.rollout(steps, _policy, break_when_any_done=False))
        finally:
            env.close()
    return rollouts


def _assert_same_rollouts(actual: Any, expected: Any) -> None:
    assert actual.batch_size == expected.batch_size
    assert set(actual.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        assert torch.equal(actual[key], expected[key]), key


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED],
                         ids=lambda mode: mode.value)
def test_gym_wrapper_over_aiovec_rolls_out_as_over_sync_vector_env(mode: AutoresetMode
                                                                   ) -> None:
    actual, expected = _rollouts([lambda: _aiovec(mode), lambda: _sync(mode)], seed=3,
                                 steps=80)
    assert actual.batch_size == (NUM_ENVS, 80)
    assert bool(expected["next", "done"].any())  # episodes end (and autoreset) under way
    _assert_same_rollouts(actual, expected)


def test_torchrl_refuses_next_step_autoreset_on_both_alike() -> None:
    for make in (_aiovec, _sync):
        with pytest.raises(RuntimeError, match="SAME_STEP or DISABLED"):
            make(AutoresetMode.NEXT_STEP)


def _parallel_member_aiovec() -> GymWrapper:
    return _aiovec(AutoresetMode.SAME_STEP, backend="inline")


def _parallel_member_sync() -> GymWrapper:
    return _sync(AutoresetMode.SAME_STEP)


@pytest.mark.slow
# Four interpreters that TorchRL spawns, each importing PyTorch: 25-50 s here on a quiet
# 2-core machine, 59 s in a loaded CI run; the suite's 120 s would leave too little margin.
@pytest.mark.timeout(300)
def test_a_parallel_env_of_aiovec_vector_envs_rolls_out_as_of_sync_ones() -> None:
    """TorchRL's own processes, each holding an aiovec vector env (``inline``: the sub-envs
    in that process), against the same of ``SyncVectorEnv``."""
    actual, expected = _rollouts([lambda: ParallelEnv(2, _parallel_member_aiovec),
                                  lambda: ParallelEnv(2, _parallel_member_sync)],
                                 seed=5, steps=50)
    assert actual.batch_size == (2, NUM_ENVS, 50)
    _assert_same_rollouts(actual, expected)
