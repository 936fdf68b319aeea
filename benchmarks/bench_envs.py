"""Benchmark environments for ``benchmarks/run.py``, importable by module reference.

Worker processes (aiovec's process backend, Gymnasium's AsyncVectorEnv, the two-process
reference) unpickle the factories below by reference as ``bench_envs.<name>``: ``run.py`` runs as
a script, so ``benchmarks/`` is ``sys.path[0]``, and the workers receive the parent's
``sys.path``.

- ``make_cartpole``: ``gym.make("CartPole-v1")`` (with Gymnasium's default wrappers).
- ``CpuEnv``: burns exactly 1 ms of *this thread's CPU time* per step in pure Python, holding
  the GIL. It spins on ``time.thread_time()``, not on ``time.perf_counter()``: a wall-clock
  spin keeps counting while the thread waits for the GIL or for a core, so GIL-bound threads
  and oversubscribed processes would seem to beat the CPU ceiling. With a CPU-time spin every
  step is exactly 1 ms of work wherever it runs, with no calibration.
- ``SleepEnv``: ``time.sleep(0.005)`` per step (I/O-bound; the GIL is released).
- ``PixelEnv``: 84x84x4 uint8 observations, trivial compute (a preallocated frame with one byte
  changed per step): measures the cost of moving observations.

The three custom envs never end an episode, so no autoreset happens while they are timed.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "CPU_SECONDS_PER_STEP",
    "PIXEL_SHAPE",
    "SLEEP_SECONDS_PER_STEP",
    "CpuEnv",
    "PixelEnv",
    "SleepEnv",
    "burn_cpu",
    "make_cartpole",
    "raw_loop",
    "raw_loop_in_child",
]

CPU_SECONDS_PER_STEP = 0.001
SLEEP_SECONDS_PER_STEP = 0.005
PIXEL_SHAPE = (84, 84, 4)


def burn_cpu(seconds: float) -> None:
    """Spin in pure Python, holding the GIL, until this thread has used ``seconds`` of CPU."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def make_cartpole() -> gym.Env[Any, Any]:
    """CartPole-v1 exactly as users make it."""
    return gym.make("CartPole-v1")


class _VectorObsEnv(gym.Env[np.ndarray, Any]):
    """A never-ending env with a 4-float observation and two actions."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self._obs.copy(), {}

    def _work(self) -> None:
        raise NotImplementedError

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._work()
        return self._obs.copy(), 1.0, False, False, {}


class CpuEnv(_VectorObsEnv):
    """Burns ``CPU_SECONDS_PER_STEP`` of this thread's CPU time per step, GIL held."""

    def _work(self) -> None:
        burn_cpu(CPU_SECONDS_PER_STEP)


class SleepEnv(_VectorObsEnv):
    """Sleeps ``SLEEP_SECONDS_PER_STEP`` per step (I/O-bound: the GIL is released)."""

    def _work(self) -> None:
        time.sleep(SLEEP_SECONDS_PER_STEP)


class PixelEnv(gym.Env[np.ndarray, Any]):
    """84x84x4 uint8 frames; a step changes one byte of a preallocated frame."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention
    observation_space = gym.spaces.Box(0, 255, PIXEL_SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self._frame = np.zeros(PIXEL_SHAPE, np.uint8)
        self._ticks = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._ticks = 0
        return self._frame, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._ticks += 1
        self._frame[0, 0, 0] = self._ticks & 0xFF
        return self._frame, 1.0, False, False, {}


def raw_loop(env: gym.Env[Any, Any], actions: list[int], seconds: float,
             min_steps: int = 1) -> tuple[int, float]:
    """Step ``env`` (resetting finished episodes) for ``seconds``: (steps, elapsed seconds)."""
    steps = 0
    count = len(actions)
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        _, _, terminated, truncated, _ = env.step(actions[steps % count])
        steps += 1
        if terminated or truncated:
            env.reset()
        now = time.perf_counter()
        if now >= deadline and steps >= min_steps:
            return steps, now - started


def raw_loop_in_child(factory: Any, actions: list[int], warmup_steps: int, seconds: float,
                      start: Any, results: Any) -> None:
    """One process of the "independent raw loops" reference (started with ``spawn``).

    Makes and warms up its env, waits on the ``start`` barrier so every loop runs in the
    same window, then puts ``(steps, elapsed seconds)`` on ``results``.
    """
    env = factory()
    try:
        env.reset(seed=0)
        raw_loop(env, actions, 0.0, min_steps=warmup_steps)
        start.wait()
        results.put(raw_loop(env, actions, seconds))
    finally:
        env.close()
