"""Deterministic test environments (see the package docstring)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["SPACE_KINDS", "CountingEnv", "EpisodeEnv"]

SPACE_KINDS = ("box", "discrete", "dict", "tuple")


def _spaces_for(kind: str) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """(observation space, action space) for one of ``SPACE_KINDS``."""
    if kind == "box":
        return (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-1.0, 1.0, (2,), np.float32))
    if kind == "discrete":
        return spaces.Discrete(7), spaces.Discrete(3)
    observation: spaces.Space[Any]
    action: spaces.Space[Any]
    if kind == "dict":
        observation = spaces.Dict({
            "position": spaces.Box(-1.0, 1.0, (2,), np.float64),
            "flags": spaces.MultiBinary(3),
            "count": spaces.Discrete(5),
        })
        action = spaces.Dict({"move": spaces.Discrete(2),
                              "force": spaces.Box(-1.0, 1.0, (1,), np.float32)})
        return observation, action
    if kind == "tuple":
        observation = spaces.Tuple((spaces.Box(0, 255, (2, 2), np.uint8), spaces.Discrete(4),
                                    spaces.MultiDiscrete([2, 3])))
        action = spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2)))
        return observation, action
    raise ValueError(f"unknown space kind {kind!r}; choose one of {SPACE_KINDS}")


class EpisodeEnv(gym.Env[Any, Any]):
    """Random but seed-determined observations, rewards and episode ends; varied infos.

    Episodes end by termination (probability ``terminate_probability`` per step) or by
    truncation after a random length drawn at reset from ``[min_length, max_length]``.
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - Gymnasium's own convention

    def __init__(self, kind: str = "box", min_length: int = 3, max_length: int = 40,
                 terminate_probability: float = 0.05, render_mode: str | None = None) -> None:
        self.kind = kind
        self.observation_space, self.action_space = _spaces_for(kind)
        self.min_length, self.max_length = min_length, max_length
        self.terminate_probability = terminate_probability
        self.render_mode = render_mode
        self.elapsed = 0
        self.length = max_length
        self.episodes = 0

    def _observe(self) -> Any:
        """An observation drawn from the env's own generator, so the reset seed fixes it."""
        rng = self.np_random
        if self.kind == "box":
            return rng.uniform(-1.0, 1.0, 3).astype(np.float32)
        if self.kind == "discrete":
            return np.int64(rng.integers(7))
        if self.kind == "dict":
            return {"count": np.int64(rng.integers(5)),
                    "flags": rng.integers(0, 2, 3).astype(np.int8),
                    "position": rng.uniform(-1.0, 1.0, 2)}
        return (rng.integers(0, 256, (2, 2)).astype(np.uint8), np.int64(rng.integers(4)),
                rng.integers([2, 3]).astype(np.int64))

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.elapsed = 0
        self.episodes += 1
        self.length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        info: dict[str, Any] = {"episode_length": self.length}
        if options:
            info["options"] = dict(options)
        return self._observe(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.elapsed += 1
        reward = float(self.np_random.normal())
        terminated = bool(self.np_random.random() < self.terminate_probability)
        truncated = not terminated and self.elapsed >= self.length
        info: dict[str, Any] = {"elapsed": self.elapsed, "noise": float(self.np_random.random()),
                                "vector": self.np_random.integers(0, 9, size=2),
                                "nested": {"episodes": self.episodes}}
        if self.elapsed % 4 == 0:
            info["label"] = f"step-{self.elapsed}"
        if self.elapsed % 3 == 0:
            info["flag"] = np.bool_(self.elapsed % 2)
        return self._observe(), reward, terminated, truncated, info

    def render(self) -> np.ndarray[Any, Any]:
        return np.full((4, 4, 3), self.elapsed % 256, dtype=np.uint8)


class CountingEnv(gym.Env[np.ndarray[Any, Any], Any]):
    """Observation ``[steps, resets]``; counts every call, never ends an episode on its own.

    ``steps`` and ``resets`` are attributes, so ``get_attr`` can prove what ran.
    """

    observation_space = spaces.Box(0, np.iinfo(np.int64).max, (2,), np.int64)
    action_space = spaces.Discrete(2)

    def __init__(self, episode_length: int | None = None) -> None:
        self.steps = 0
        self.resets = 0
        self.closed = False
        self.episode_length = episode_length
        self._episode_steps = 0

    def _observation(self) -> np.ndarray[Any, Any]:
        return np.array([self.steps, self.resets], dtype=np.int64)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.resets += 1
        self._episode_steps = 0
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray[Any, Any], float, bool, bool, dict[str, Any]]:
        self.steps += 1
        self._episode_steps += 1
        truncated = self.episode_length is not None and self._episode_steps >= self.episode_length
        return self._observation(), float(action), False, truncated, {}

    def close(self) -> None:
        self.closed = True
