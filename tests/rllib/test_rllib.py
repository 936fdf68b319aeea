"""RLlib's PPO trains on aiovec vector envs, in the driver's env runner and in a remote one."""

from __future__ import annotations

import os
import pickle
from typing import Any

import gymnasium as gym
import pytest
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.tune import register_env

import aiovec
from aiovec.rllib import env_creator
from tests.leaks import wait_for_exit, worker_processes_of
from tests.rllib.envs import CRASHING_CARTPOLE

# RLlib's env runners register the same id each time; these tests build several in one process.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*Overriding environment rllib-single-agent-env-v0:UserWarning")

NUM_ENVS = 4
#: Registered in this (driver) process only: the creator carries its spec to remote runners.
DRIVER_ONLY_ID = "AiovecTest/DriverOnlyCartPole-v1"
def ppo_config(env: str, num_env_runners: int) -> PPOConfig:
    """PPO on ``env``, with a batch and network so small that one ``train()`` takes ~0.1 s."""
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=NUM_ENVS,
                     gym_env_vectorize_mode="vector_entry_point")
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )


def sampling_runners(algo: Any, num_env_runners: int) -> list[tuple[int, str]]:
    """The process id and vector env ``repr`` of each env runner that samples."""
    if num_env_runners == 0:
        return [(os.getpid(), repr(algo.env_runner.env.unwrapped))]
    return list(algo.env_runner_group.foreach_env_runner(
        lambda runner: (os.getpid(), repr(runner.env.unwrapped)), local_env_runner=False))


@pytest.mark.parametrize(("backend", "num_env_runners"),
                         [("process", 0), ("process", 1), ("thread", 0), ("thread", 1)])
def test_ppo_trains_on_aiovec_envs(ray_runtime: Any, backend: str, num_env_runners: int) -> None:
    if DRIVER_ONLY_ID not in gym.registry:
        gym.register(DRIVER_ONLY_ID, "gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                     max_episode_steps=500)
    options = {"num_workers": 2} if backend == "process" else {}
    register_env(f"aiovec-{backend}-CartPole",
                 env_creator(DRIVER_ONLY_ID, backend=backend, **options))
    algo = ppo_config(f"aiovec-{backend}-CartPole", num_env_runners).build_algo()
    try:
        runners = sampling_runners(algo, num_env_runners)
        assert [env for _, env in runners] == [
            f"aiovec.VectorEnv(rllib-single-agent-env-v0, num_envs={NUM_ENVS}, "
            f"backend={backend!r})"] * max(num_env_runners, 1)
        started = set().union(*(worker_processes_of(pid) for pid, _ in runners))
        assert len(started) == (2 * len(runners) if backend == "process" else 0)
        result = algo.train()
        assert result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME] >= 64
    finally:
        algo.stop()
    assert not wait_for_exit(sorted(started), timeout=20), "aiovec workers left running"


def test_the_creator_builds_what_rllib_asks_for_and_pickles() -> None:
    creator = pickle.loads(pickle.dumps(env_creator("CartPole-v1", backend="thread")))
    env = creator({"render_mode": "rgb_array"})  # no "num_envs": one env, for RLlib to vectorize
    assert isinstance(env, gym.Env) and env.spec is not None and env.spec.id == "CartPole-v1"
    assert env.render_mode == "rgb_array"
    env.close()
    envs = creator({"num_envs": 2, "render_mode": "rgb_array"})
    try:
        assert isinstance(envs, aiovec.VectorEnv) and envs.backend_name == "thread"
        assert envs.num_envs == 2 and envs.get_attr("render_mode") == ("rgb_array", "rgb_array")
    finally:
        envs.close()
    with pytest.raises(TypeError, match="backnd"):  # in the driver, not in a remote runner
        env_creator("CartPole-v1", backnd="thread")
    with pytest.raises(ValueError, match="next-step autoreset"):  # RLlib would misread episodes
        env_creator("CartPole-v1", autoreset_mode="SameStep")


def test_a_failing_sub_env_surfaces_with_its_index(ray_runtime: Any) -> None:
    register_env("aiovec-crashing", env_creator(CRASHING_CARTPOLE, backend="thread"))
    config = ppo_config("aiovec-crashing", 0).environment(env_config={"crash_seed": 2})
    algo = config.debugging(seed=0).build_algo()  # the driver's runner seeds sub-env i with i
    try:
        with pytest.raises(RuntimeError) as caught:  # RLlib's, ``from`` aiovec's error
            algo.train()
    finally:
        algo.stop()
    group = caught.value.__cause__
    assert isinstance(group, aiovec.SubEnvErrorGroup), repr(group)
    assert group.env_ids == (2,)
    [error] = group.exceptions
    assert isinstance(error, aiovec.SubEnvError) and error.phase == "step"
    assert "the simulator crashed" in str(error.__cause__)
