"""``AsyncAdapter``: any Gymnasium env as a coroutine env, for testing the async backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

from aiovec._core._async_env import AsyncEnv

__all__ = ["AsyncAdapter"]


class AsyncAdapter(AsyncEnv[Any, Any]):
    """The env ``make()`` returns, with ``async`` methods that yield to the event loop (for
    ``delay`` seconds) before each call: the same results as the env itself, one checkpoint
    later, so an async-backend run can be compared with any other backend's."""

    def __init__(self, make: Callable[[], gym.Env[Any, Any]], delay: float = 0.0) -> None:
        self.env = make()
        self.delay = delay
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.metadata = dict(self.env.metadata)  # type: ignore[misc]
        self.render_mode = self.env.render_mode

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await anyio.sleep(self.delay)
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(self.delay)
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward), terminated, truncated, info

    async def close(self) -> None:
        self.env.close()

    def render(self) -> Any:
        return self.env.render()

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self.env.np_random = value

    @property
    def np_random_seed(self) -> int | None:
        return self.env.np_random_seed

    def get_wrapper_attr(self, name: str) -> Any:
        if name in vars(self) or hasattr(type(self), name):
            return getattr(self, name)
        return self.env.get_wrapper_attr(name)

    def set_wrapper_attr(self, name: str, value: Any) -> None:
        self.env.set_wrapper_attr(name, value)
