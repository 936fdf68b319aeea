"""make_vec / make_async_vec build aiovec vector envs from registered ids, as gymnasium does."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import VectorizeMode

import aiovec


def assert_same_rollout(envs: gym.vector.VectorEnv, reference: gym.vector.VectorEnv, *,
                        seed: int, steps: int) -> None:
    """Three CartPoles each: the same resets and steps for the same seed and actions."""
    for got, want in zip(envs.reset(seed=seed), reference.reset(seed=seed)):
        np.testing.assert_equal(got, want)
    for step in range(steps):
        actions = np.array([step % 2, 1, 0])
        for got, want in zip(envs.step(actions), reference.step(actions)):
            np.testing.assert_equal(got, want)


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
        assert_same_rollout(envs, reference, seed=4, steps=40)  # through episode ends
    finally:
        envs.close()
        reference.close()


def test_register_envs_covers_every_registered_id() -> None:
    new_ids = aiovec.register_envs()
    assert "aiovec/CartPole-v1" in new_ids and "aiovec/MountainCarContinuous-v0" in new_ids
    assert not any(new_id.startswith("aiovec/aiovec") for new_id in new_ids)
    spec = gym.spec("aiovec/Pendulum-v1")
    assert spec.max_episode_steps == gym.spec("Pendulum-v1").max_episode_steps


# ---------------------------------------------------------------------- vectorization_mode

class CountedEnv(gym.Env[np.ndarray, int]):
    """CartPole-like spaces; counts how many were made (in this process)."""

    made = 0
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        type(self).made += 1

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(2, np.float32), 1.0, False, False, {}


COUNTED = "MakeVecCounted-v0"
if COUNTED not in gym.envs.registration.registry:
    gym.register(COUNTED, entry_point=CountedEnv)


@pytest.mark.parametrize(("mode", "backend"), [
    ("sync", "inline"), ("async", "process"),
    (VectorizeMode.SYNC, "inline"), (VectorizeMode.ASYNC, "process")])
def test_vectorization_mode_picks_the_backend_that_does_what_gymnasium_s_does(
        mode: Any, backend: str) -> None:
    """``"sync"`` steps the sub-envs in the caller's thread (inline), ``"async"`` in worker
    processes; positional as in ``gymnasium.make_vec``; the same rollout as Gymnasium's."""
    envs = aiovec.make_vec("CartPole-v1", 3, mode, None, None, max_episode_steps=15)
    reference = gym.make_vec("CartPole-v1", 3, mode, max_episode_steps=15)
    try:
        assert isinstance(envs, aiovec.VectorEnv) and envs.backend_name == backend
        assert envs.spec is not None
        assert envs.spec.kwargs["vectorization_mode"] == VectorizeMode(mode).value
        assert_same_rollout(envs, reference, seed=7, steps=30)  # through autoresets
    finally:
        envs.close()
        reference.close()


def test_vector_entry_point_mode_gives_what_gymnasium_gives() -> None:
    """The env's own vector implementation (CartPole has one), exactly as
    ``gymnasium.make_vec``; an id of ``register_envs`` gives aiovec's."""
    envs = aiovec.make_vec("CartPole-v1", 2, "vector_entry_point")
    reference = gym.make_vec("CartPole-v1", 2, "vector_entry_point")
    try:
        assert type(envs) is type(reference) and not isinstance(envs, aiovec.VectorEnv)
    finally:
        envs.close()
        reference.close()
    aiovec.register_envs("CartPole-v1")
    with aiovec.make_vec("aiovec/CartPole-v1", 2, VectorizeMode.VECTOR_ENTRY_POINT,
                         backend="thread") as shim:
        assert isinstance(shim, aiovec.VectorEnv) and shim.backend_name == "thread"


@pytest.mark.parametrize(("arguments", "message"), [
    ((2, "threads"), "Invalid vectorization mode: 'threads'"),
    ((2, "sync", {"backend": "process"}), "backend='process'"),
    ((2, "async", {"backend": "thread"}), "backend='thread'"),
])
def test_a_wrong_vectorization_mode_is_refused_before_any_sub_env_is_made(
        arguments: tuple[Any, ...], message: str) -> None:
    made = CountedEnv.made
    with pytest.raises(ValueError, match=re.escape(message)):
        aiovec.make_vec(COUNTED, *arguments)
    with pytest.raises(ValueError, match=re.escape(message)):
        aiovec.make_async_vec(COUNTED, *arguments)
    assert CountedEnv.made == made


def test_make_vec_takes_gymnasium_s_parameters_in_gymnasium_s_order() -> None:
    ours = list(inspect.signature(aiovec.make_vec).parameters.values())
    theirs = list(inspect.signature(gym.make_vec).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours] == [
        (p.name, p.kind, p.default) for p in theirs]


def test_the_mode_agrees_with_a_backend_named_alike() -> None:
    with aiovec.make_vec(COUNTED, 2, "sync", {"backend": "inline", "timeout": 5.0}) as envs:
        assert envs.backend_name == "inline" and envs.async_env.timeout == 5.0
        assert envs.spec is not None and envs.spec.kwargs["vector_kwargs"] == {
            "backend": "inline", "timeout": 5.0}


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "backend"), [("sync", "inline"), ("async", "process"),
                                               (None, None)])
async def test_make_async_vec_takes_the_mode_too(mode: str | None, backend: str | None) -> None:
    async with aiovec.make_async_vec(COUNTED, 2, mode) as envs:
        assert backend is None or envs.backend_name == backend
        obs, _ = await envs.reset(seed=0)
        assert obs.shape == (2, 2)
    with pytest.raises(ValueError, match="vector_entry_point"):
        aiovec.make_async_vec(COUNTED, 2, "vector_entry_point")


@pytest.mark.parametrize(("mode", "expected"), [
    (None, aiovec.VectorEnv), ("vector_entry_point", aiovec.VectorEnv),
    ("sync", gym.vector.SyncVectorEnv)])
def test_registered_ids_follow_gymnasium_s_modes(mode: str | None, expected: type) -> None:
    """Through ``gymnasium.make_vec``, Gymnasium decides: its default and
    ``"vector_entry_point"`` build aiovec's vector env, ``"sync"`` its own ``SyncVectorEnv``
    over the same sub-envs; a wrong mode is refused before any sub-env is made."""
    aiovec.register_envs(COUNTED)
    envs = gym.make_vec("aiovec/MakeVecCounted-v0", 2, mode)
    try:
        assert type(envs) is expected
    finally:
        envs.close()
    made = CountedEnv.made
    with pytest.raises(ValueError, match="Invalid vectorization mode"):
        gym.make_vec("aiovec/MakeVecCounted-v0", 2, "threads")
    assert CountedEnv.made == made
