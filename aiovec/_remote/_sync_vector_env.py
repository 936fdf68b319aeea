"""``RemoteVectorEnv``: a served session as a synchronous ``gymnasium.vector.VectorEnv``.

It drives an ``AsyncRemoteVectorEnv`` on the sync shim's private event loop (the loop runs
only during a call; Ctrl-C in a call cancels it, which cancels the server's step too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from aiovec._exceptions import ClosedError
from aiovec._remote._vector_env import AsyncRemoteVectorEnv, Encoding
from aiovec._shim._loop_driver import LoopDriver

__all__ = ["RemoteVectorEnv"]


class RemoteVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` sub-envs of ``env_id`` served at ``url``, as a Gymnasium vector env
    (arguments as for ``AsyncRemoteVectorEnv``); the session opens here."""

    def __init__(self, url: str, env_id: str, num_envs: int = 1, *, token: str | None = None,
                 timeout: float | None = 60.0, encoding: Encoding = "binary",
                 headers: Mapping[str, str] | None = None) -> None:
        self._remote = AsyncRemoteVectorEnv(url, env_id, num_envs, token=token,
                                            timeout=timeout, encoding=encoding,
                                            headers=headers)
        self._driver = LoopDriver()
        try:
            self._driver.run(self._remote.start)
        except BaseException:
            self._driver.stop()
            raise
        remote = self._remote
        self.num_envs = num_envs
        self.single_observation_space = remote.single_observation_space
        self.single_action_space = remote.single_action_space
        self.observation_space = remote.observation_space
        self.action_space = remote.action_space
        self.metadata = dict(remote.metadata)

    @property
    def async_env(self) -> AsyncRemoteVectorEnv:
        return self._remote

    def __repr__(self) -> str:
        return repr(self._remote).replace("AsyncRemoteVectorEnv", "RemoteVectorEnv", 1)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self._check_open("reset")
        return self._driver.run(self._remote.reset, seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any],
                                          np.ndarray[Any, Any], dict[str, Any]]:
        self._check_open("step")
        return self._driver.run(self._remote.step, actions)

    def _check_open(self, method: str) -> None:
        if self.closed:
            raise ClosedError(f"cannot {method}: the remote vector env was closed")

    def close_extras(self, **kwargs: Any) -> None:
        if self._driver.alive:
            try:
                self._driver.run(self._remote.aclose)
            finally:
                self._driver.stop()
