"""``AsyncEnv``: the protocol of a coroutine environment, as a small base class.

An I/O-bound environment (a simulator behind a socket, a game engine over gRPC, a web or
tool-use environment) spends its step waiting. Written with ``async def reset``/``step``, a
thousand of them run concurrently on one event loop (``backend="async"``) with no thread or
process per sub-env. The interface is ``gymnasium.Env``'s, with coroutine methods.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Generic, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

__all__ = ["AsyncEnv", "CoroutineEnvError", "is_async_env", "makes_async_envs"]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")


class AsyncEnv(Generic[ObsType, ActType]):
    """A Gymnasium-style environment whose ``reset``, ``step`` and ``close`` are coroutines.

    Subclasses set ``observation_space`` and ``action_space`` and implement ``step`` and
    ``reset`` (calling ``await super().reset(seed=seed)`` first seeds ``self.np_random``,
    exactly as ``gymnasium.Env.reset`` does). ``close`` may release connections. Any object
    with this interface works too, e.g. a ``gymnasium.Env`` subclass with ``async def`` methods.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    render_mode: str | None = None
    spec: gym.envs.registration.EnvSpec | None = None
    observation_space: gym.Space[ObsType]
    action_space: gym.Space[ActType]

    _np_random: np.random.Generator | None = None
    _np_random_seed: int | None = None

    async def step(
        self, action: ActType
    ) -> tuple[ObsType, float, bool, bool, dict[str, Any]]:
        """Run one timestep → ``(obs, reward, terminated, truncated, info)``."""
        raise NotImplementedError

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode → ``(obs, info)``; the base implementation only seeds ``np_random``."""
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
        return None, {}  # type: ignore[return-value]  # subclasses return their observation

    async def close(self) -> None:
        """Release what the environment holds (connections, files); the default does nothing."""
        return

    def render(self) -> Any:
        """A frame of the environment, if it renders; the default renders nothing."""
        return None

    @property
    def np_random(self) -> np.random.Generator:
        """The environment's random generator, seeded on first use if ``reset`` was not."""
        if self._np_random is None:
            self._np_random, self._np_random_seed = seeding.np_random()
        return self._np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random = value
        self._np_random_seed = -1

    @property
    def np_random_seed(self) -> int | None:
        """The seed of ``np_random`` (``-1`` if it was set directly), as in Gymnasium."""
        if self._np_random_seed is None:
            self._np_random, self._np_random_seed = seeding.np_random()
        return self._np_random_seed

    @property
    def unwrapped(self) -> AsyncEnv[ObsType, ActType]:
        return self

    def get_wrapper_attr(self, name: str) -> Any:
        """``getattr``: the same call as on a wrapped ``gymnasium.Env``."""
        return getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any) -> None:
        """``setattr``: the same call as on a wrapped ``gymnasium.Env``."""
        setattr(self, name, value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} (async)>"


class CoroutineEnvError(TypeError):
    """A factory made a coroutine env where plain ``gymnasium.Env``s run (not the async
    backend); ``backend="auto"`` then switches to ``"async"``."""


def is_async_env(env: object) -> bool:
    """True when ``env``'s ``step`` is a coroutine function (it needs ``backend="async"``)."""
    return inspect.iscoroutinefunction(getattr(env, "step", None))


def makes_async_envs(env_fn: object) -> bool:
    """True when the factory is an ``AsyncEnv`` subclass, or a ``functools.partial`` of one:
    what ``backend="auto"`` can tell without making an env."""
    target = getattr(env_fn, "func", env_fn)
    return isinstance(target, type) and issubclass(target, AsyncEnv)
