"""``RemoteVectorEnv``: a served session as a synchronous ``gymnasium.vector.VectorEnv``.

It drives an ``AsyncRemoteVectorEnv`` on the sync shim's private event loop (the loop runs
only during a call; Ctrl-C in a call cancels it, which cancels the server's step too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from aiovec._core._arguments import check_timeout
from aiovec._core._first_ready import StepBatch
from aiovec._core._in_flight import USE_DEFAULT
from aiovec._core._seeding import ResetOptions
from aiovec._exceptions import ClosedError
from aiovec._remote._vector_env import AsyncRemoteVectorEnv, Encoding
from aiovec._shim._loop_driver import LoopDriver

__all__ = ["RemoteVectorEnv"]

StepResult = tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any],
                   dict[str, Any]]


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
        self._pending: tuple[str, Any, float] | None = None  # a *_async call, its start
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
              options: ResetOptions = None) -> tuple[Any, dict[str, Any]]:
        self._begin_call("reset")
        return self._driver.run(self._remote.reset, seed=seed, options=options)

    def step(self, actions: Any) -> StepResult:
        self._begin_call("step")
        return self._driver.run(self._remote.step, actions)

    # Two phases, as ``gymnasium.vector.AsyncVectorEnv``: the request goes out in ``*_async``,
    # the server works while the caller does, ``*_wait`` collects the answer.

    def reset_async(self, seed: int | Sequence[int | None] | None = None,
                    options: ResetOptions = None) -> None:
        """Send the reset; collect it with ``reset_wait``."""
        self._begin_call("reset_async")
        call = self._remote._begin_reset(seed, options, USE_DEFAULT)
        self._pending = ("reset", call, self._driver.run(self._remote._start, call))

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """The answer of ``reset_async``; ``timeout``: seconds to wait at most (``None``: the
        construction ``timeout``), then ``EnvTimeoutError``."""
        seconds = check_timeout(timeout, "timeout")  # refused: the call is still pending
        call, started = self._end_call("reset")
        reply = self._driver.run(self._remote._finish, call, timeout=seconds, started=started,
                                 refusals=False)
        return self._remote._reset_result(call, reply)

    def step_async(self, actions: Any) -> None:
        """Send the actions (checked first); collect the result with ``step_wait``."""
        self._begin_call("step_async")
        call = self._remote._begin_step(actions, USE_DEFAULT)
        self._pending = ("step", call, self._driver.run(self._remote._start, call))

    def step_wait(self, timeout: float | None = None) -> StepResult:
        """The result of ``step_async``; ``timeout`` as for ``reset_wait``."""
        seconds = check_timeout(timeout, "timeout")  # refused: the call is still pending
        call, started = self._end_call("step")
        reply = self._driver.run(self._remote._finish, call, timeout=seconds, started=started)
        return self._remote._step_result(reply)

    # First-ready batches, as ``aiovec.VectorEnv``'s.

    def send(self, actions: Any, env_ids: Any = None, *, timeout: float | None = None) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) and return once the request is
        out; ``timeout``: each sub-env's deadline (``None``: the construction ``timeout``)."""
        self._begin_call("send")
        self._remote.send(actions, env_ids, timeout=USE_DEFAULT if timeout is None else timeout)
        self._driver.run(self._remote._flush_queued)

    def recv(self, *, batch_size: int | None = None, min_size: int | None = None,
             wait: float | None = None) -> StepBatch:
        """The first results to land, within ``batch_size``, ``min_size`` and ``wait``; see
        ``AsyncRemoteVectorEnv.recv``."""
        self._begin_call("recv")
        return self._driver.run(self._remote.recv, batch_size=batch_size, min_size=min_size,
                                wait=wait)

    def abort(self, env_ids: Any = None) -> None:
        """Cancel sub-envs ``env_ids``' outstanding steps (``None``: all) and return once the
        request is out; see ``AsyncRemoteVectorEnv.abort``."""
        self._begin_call("abort")
        self._remote.abort(env_ids)
        self._driver.run(self._remote._flush_queued)

    @property
    def max_in_flight(self) -> int | None:
        """The session's in-flight cap; see ``AsyncRemoteVectorEnv.max_in_flight``. Set, it
        is sent at once."""
        return self._remote.max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._begin_call("set max_in_flight")
        self._remote.max_in_flight = value
        self._driver.run(self._remote._flush_queued)

    @property
    def batch_size(self) -> int:
        """How many results ``recv`` returns by default: the served session's."""
        return self._remote.batch_size

    def _begin_call(self, method: str) -> None:
        """Refuse ``method`` once closed, or while a ``*_async`` call awaits its ``*_wait``."""
        if self.closed:
            raise ClosedError(f"cannot {method}: the remote vector env was closed")
        if self._pending is not None:
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to "
                f"`{self._pending[0]}` to complete.", self._pending[0])

    def _end_call(self, name: str) -> tuple[Any, float]:
        if self.closed:
            raise ClosedError(f"cannot {name}_wait: the remote vector env was closed")
        pending = self._pending
        if pending is None or pending[0] != name:
            raise NoAsyncCallError(f"Calling `{name}_wait` without any prior call to "
                                   f"`{name}_async`.", name)
        self._pending = None
        return pending[1], pending[2]

    def close_extras(self, **kwargs: Any) -> None:
        if self._driver.alive:
            try:
                if self._pending is not None:  # its answer is moot: abandon it
                    _name, call, _started = self._pending
                    self._pending = None
                    self._driver.run(self._remote._abandon_call, call)
                self._driver.run(self._remote.aclose)
            finally:
                self._driver.stop()
