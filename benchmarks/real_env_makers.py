"""Env factories and child-process loops for ``benchmarks/real_envs.py``, importable by reference.

Worker processes (aiovec's process and Ray backends, Gymnasium's ``AsyncVectorEnv``, the
spawned children of the 2-core limit) unpickle the functions below as ``real_env_makers.<name>``:
``real_envs.py`` runs as a script, so ``benchmarks/`` is ``sys.path[0]`` and the workers get the
parent's ``sys.path``.

- ``make_pong``: ``ALE/Pong-v5`` with ``frameskip=1``, then ``AtariPreprocessing(frame_skip=4,
  screen_size=84, grayscale_obs=True)`` (its ``noop_max=30``) and ``FrameStackObservation(4)``:
  (4, 84, 84) uint8 observations, Discrete(6), ALE's sticky actions (0.25) left on.
- ``make_half_cheetah``: ``gym.make("HalfCheetah-v5")``; MuJoCo's "settotalmass is deprecated"
  warning, which its C library prints to stderr (and appends to ``MUJOCO_LOG.TXT`` in the
  working directory) on every make, is routed to a no-op handler first, in whatever process
  makes the env.
- ``make_cartpole``: ``gym.make("CartPole-v1")``.

Also the loops that need no vectorizer: ``loop`` (one process stepping its envs in turn),
``two_core_limit`` (two spawned processes doing so at once, ``limit_child`` each), and ``burn``
(the noisy neighbour).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from harness import together

__all__ = ["burn", "limit_child", "loop", "make_cartpole", "make_half_cheetah", "make_pong",
           "two_core_limit"]

Factory = Callable[[], gym.Env[Any, Any]]


def make_pong() -> gym.Env[Any, Any]:
    """Pong with the usual DQN-style preprocessing: 84x84 gray, 4 frames skipped and stacked."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


def make_half_cheetah() -> gym.Env[Any, Any]:
    """HalfCheetah-v5 (MuJoCo), its compile-time deprecation warning silenced."""
    import mujoco

    mujoco.set_mju_user_warning(lambda message: None)
    return gym.make("HalfCheetah-v5")


def make_cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def loop(envs: Sequence[gym.Env[Any, Any]], batches: Sequence[Any], seconds: float,
         min_rounds: int = 3) -> tuple[int, float]:
    """Step every env of ``envs`` in turn (``batches[k][i]`` is env i's action in round k,
    cycled), resetting an env when its episode ends, for ``seconds`` of wall time: the env
    steps made and the seconds taken."""
    rounds, started = 0, time.perf_counter()
    while rounds < min_rounds or time.perf_counter() - started < seconds:
        for env, action in zip(envs, batches[rounds % len(batches)]):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        rounds += 1
    return rounds * len(envs), time.perf_counter() - started


def limit_child(factory: Factory, first_seed: int, batches: Sequence[Any],
                warmup_seconds: float, seconds: float, start: Any, results: Any) -> None:
    """One half of the 2-core limit: make ``len(batches[0])`` envs, warm them up, wait for the
    other half at ``start``, loop for ``seconds`` and put ``(steps, elapsed)`` on ``results``."""
    envs: list[gym.Env[Any, Any]] = []
    try:
        try:
            for offset in range(len(batches[0])):
                envs.append(factory())
                envs[-1].reset(seed=first_seed + offset)
            loop(envs, batches, warmup_seconds, min_rounds=2)
        except BaseException:
            start.abort()  # the parent and the other half stop waiting at once
            raise
        start.wait()
        results.put(loop(envs, batches, seconds))
    finally:
        for env in envs:
            env.close()


def two_core_limit(factory: Factory, batches: Sequence[Any], warmup_seconds: float,
                   seconds: float, timeout: float) -> float:
    """The 2-core limit: two spawned processes, each stepping half of the envs (``batches[k]``
    holds all n actions of round k), started together with no IPC: their steps/s summed."""
    half = len(batches[0]) // 2
    return together(limit_child, [(factory, index * half,
                                   [batch[index * half:(index + 1) * half] for batch in batches],
                                   warmup_seconds, seconds) for index in range(2)],
                    seconds, timeout)


def burn(burning: Any) -> None:
    """The noisy neighbour: set ``burning`` (an event), then keep one core busy until killed."""
    burning.set()
    while True:
        pass
