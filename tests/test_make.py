"""make_vec / make_async_vec build aiovec vector envs from registered ids, as gymnasium does."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

import aiovec


def test_make_vec_returns_the_shim_with_a_spec() -> None:
    clip = functools.partial(gym.wrappers.ClipReward, min_reward=0.0, max_reward=0.5)
    envs = aiovec.make_vec("CartPole-v1", num_envs=3, vector_kwargs={"backend": "inline"},
                           wrappers=[clip], max_episode_steps=20)
    try:
        assert isinstance(envs, aiovec.VectorEnv) and envs.num_envs == 3
        assert envs.spec is not None and envs.spec.id == "CartPole-v1"
        assert envs.spec.kwargs["num_envs"] == 3
        assert envs.spec.kwargs["max_episode_steps"] == 20
        assert "CartPole-v1" in repr(envs)
        envs.reset(seed=0)
        ended = np.zeros(3, bool)
        for _ in range(25):
            _, rewards, terminations, truncations, _ = envs.step(np.zeros(3, np.int64))
            assert rewards.max() <= 0.5  # the wrapper applies
            ended |= terminations | truncations
        assert ended.all()  # always pushing left ends every episode within 20 steps
    finally:
        envs.close()


@pytest.mark.anyio
async def test_make_async_vec() -> None:
    async with aiovec.make_async_vec("CartPole-v1", 2, vector_kwargs={"backend": "thread"}) as envs:
        assert isinstance(envs, aiovec.AsyncVectorEnv)
        assert envs.spec is not None and envs.spec.id == "CartPole-v1"
        obs, _ = await envs.reset(seed=1)
        assert obs.shape == (2, 4)


def test_make_vec_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        aiovec.make_vec("CartPole-v1", 0)
    with pytest.raises(gym.error.NameNotFound):
        aiovec.make_vec("NoSuchEnv-v0", 2)


def test_gymnasium_make_vec_builds_aiovec_through_registered_ids() -> None:
    assert aiovec.register_envs("CartPole-v1", "Pendulum-v1") == [
        "aiovec/CartPole-v1", "aiovec/Pendulum-v1"]
    assert aiovec.register_envs("CartPole-v1") == ["aiovec/CartPole-v1"]  # again: a no-op
    envs = gym.make_vec("aiovec/CartPole-v1", num_envs=3, backend="thread", timeout=5.0,
                        max_episode_steps=20)
    reference = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync",
                             max_episode_steps=20)
    try:
        assert isinstance(envs, aiovec.VectorEnv)
        assert envs.backend_name == "thread" and envs.async_env.timeout == 5.0
        assert envs.spec is not None and envs.spec.id == "aiovec/CartPole-v1"
        assert envs.spec.kwargs["vectorization_mode"] == "vector_entry_point"
        for got, want in zip(envs.reset(seed=4), reference.reset(seed=4)):
            np.testing.assert_equal(got, want)
        for step in range(40):  # episodes end (max_episode_steps reached the sub-envs)
            actions = np.array([step % 2, 1, 0])
            for got, want in zip(envs.step(actions), reference.step(actions)):
                np.testing.assert_equal(got, want)
    finally:
        envs.close()
        reference.close()


def test_register_envs_covers_every_registered_id() -> None:
    new_ids = aiovec.register_envs()
    assert "aiovec/CartPole-v1" in new_ids and "aiovec/MountainCarContinuous-v0" in new_ids
    assert not any(new_id.startswith("aiovec/aiovec") for new_id in new_ids)
    spec = gym.spec("aiovec/Pendulum-v1")
    assert spec.max_episode_steps == gym.spec("Pendulum-v1").max_episode_steps
