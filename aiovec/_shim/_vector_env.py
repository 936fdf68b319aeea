"""``VectorEnv``: a real ``gymnasium.vector.VectorEnv`` that drives an ``AsyncVectorEnv``.

It is a drop-in for ``gymnasium.vector.AsyncVectorEnv``: the same constructor, the same
``*_async``/``*_wait`` pairs and error types, plus aiovec's ``backend`` and ``timeout``.
The async core runs on a private event loop in a background thread, so the shim also works
from code whose own thread already runs an event loop (notebooks, async web handlers).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector import VectorEnv as GymVectorEnv

from aiovec._core._first_ready import StepBatch
from aiovec._core._in_flight import USE_DEFAULT, InFlight, Timeout
from aiovec._core._restart import RestartPolicy
from aiovec._core._selection import ActorOptions
from aiovec._core._spaces import ObservationMode
from aiovec._core._statistics import Statistics
from aiovec._core._vector_env import AsyncVectorEnv, EnvFactory, StepResult
from aiovec._exceptions import ClosedError
from aiovec._shim._portal import LoopThread

__all__ = ["VectorEnv"]


class _Waiting(enum.Enum):
    """Which ``*_wait`` call the shim expects next, as in Gymnasium's ``AsyncVectorEnv``."""

    NOTHING = "default"
    RESET = "reset"
    STEP = "step"
    CALL = "call"


class VectorEnv(GymVectorEnv[Any, Any, np.ndarray[Any, Any]]):
    """A synchronous vector env over aiovec's async core; a drop-in for Gymnasium's.

    Takes Gymnasium's ``AsyncVectorEnv`` arguments (``context`` is the process backend's start
    method, also accepted as SB3's ``start_method``; workers are always daemonic and shared
    memory is used whenever the spaces allow; ``max_concurrency`` caps how many sub-envs
    execute at once, as in Gymnasium) and ``aiovec.AsyncVectorEnv``'s keywords (``backend``,
    ``timeout``, ``close_timeout``, ``restart``, ``batch_size``, ``num_workers``,
    ``address``, ``actor_options``, ``validate_actions``). A ``timeout=None`` in
    a ``*_wait`` call means the construction ``timeout``. ``send``/``recv`` offer first-ready
    batches, as EnvPool's do.
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFactory],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: None = None,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        backend: str = "auto",
        timeout: float | None = None,
        close_timeout: float = 10.0,
        restart: RestartPolicy | bool | int | None = None,
        batch_size: int | None = None,
        max_concurrency: int | None = None,
        num_workers: int | None = None,
        start_method: str | None = None,
        address: str | None = None,
        actor_options: ActorOptions | None = None,
        validate_actions: bool = False,
    ) -> None:
        if worker is not None:
            raise ValueError("aiovec runs its own sub-env hosts: "
                             "a custom `worker` is not supported")
        if start_method is not None and context is not None and start_method != context:
            raise ValueError(f"context={context!r} and start_method={start_method!r} are two "
                             "names for the process backend's start method: pass one")
        context = context if context is not None else start_method
        self.shared_memory = shared_memory
        self.context = context
        self.daemon = daemon
        self.env_fns = env_fns
        self._env = AsyncVectorEnv(
            env_fns, backend=backend, autoreset_mode=autoreset_mode, copy=copy,
            timeout=timeout, observation_mode=observation_mode, close_timeout=close_timeout,
            restart=restart, batch_size=batch_size, max_concurrency=max_concurrency,
            num_workers=num_workers, start_method=context, address=address,
            actor_options=actor_options, validate_actions=validate_actions,
        )
        self.num_envs = self._env.num_envs
        self.copy = copy
        self.observation_mode = observation_mode
        self.autoreset_mode = self._env.autoreset_mode
        self._waiting = _Waiting.NOTHING
        self._in_flight: InFlight | None = None
        self._loop = LoopThread()
        try:
            self._loop.run(self._env.start)
        except BaseException:
            self._loop.stop()
            self.closed = True
            raise
        self.single_observation_space = self._env.single_observation_space
        self.observation_space = self._env.observation_space
        self.single_action_space = self._env.single_action_space
        self.action_space = self._env.action_space
        self.metadata = self._env.metadata
        self.render_mode = self._env.render_mode

    @property
    def async_env(self) -> AsyncVectorEnv:
        """The ``AsyncVectorEnv`` this shim drives (await it only on the shim's own loop)."""
        return self._env

    @property
    def backend_name(self) -> str:
        """The backend the sub-envs run on (``"auto"`` resolved)."""
        return self._env.backend_name

    def statistics(self) -> Statistics:
        """Counters and per-sub-env step latency; see ``AsyncVectorEnv.statistics``."""
        return self._env.statistics()

    @property
    def unusable_envs(self) -> tuple[int, ...]:
        """Sub-envs that cannot step until reset; see ``AsyncVectorEnv.unusable_envs``."""
        return self._env.unusable_envs

    def __repr__(self) -> str:
        env_id = "" if self.spec is None else f"{self.spec.id}, "
        return f"aiovec.VectorEnv({env_id}num_envs={self.num_envs}, backend={self.backend_name!r})"

    # ------------------------------------------------------------------ gymnasium's API

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs and return the batched observations and infos."""
        self._begin("reset")
        return self._loop.run(self._env.reset, seed=seed, options=options)

    def reset_async(
        self,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Start resetting the sub-envs; collect the result with ``reset_wait``."""
        self._begin("reset_async")
        self._in_flight = self._loop.run(self._env._submit_reset, seed, options)
        self._waiting = _Waiting.RESET

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for ``reset_async``; ``timeout`` seconds at most (``EnvTimeoutError``)."""
        in_flight = self._end(_Waiting.RESET, "reset_wait", "reset_async")
        return self._loop.run(self._env._finish_reset, in_flight, _per_call(timeout))

    def step(self, actions: Any) -> StepResult:
        """Step every sub-env and return the batched results."""
        self._begin("step")
        return self._loop.run(self._env.step, actions)

    def step_async(self, actions: Any) -> None:
        """Send the actions; collect the result with ``step_wait``."""
        self._begin("step_async")
        self._in_flight = self._loop.run(self._env._submit_step, actions)
        self._waiting = _Waiting.STEP

    def step_wait(self, timeout: float | None = None) -> StepResult:
        """Wait for ``step_async``; ``timeout`` seconds at most (``EnvTimeoutError``)."""
        in_flight = self._end(_Waiting.STEP, "step_wait", "step_async")
        return self._loop.run(self._env._finish_step, in_flight, _per_call(timeout))

    def send(self, actions: Any, env_ids: Any = None, *,
             timeout: float | None = None) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all); see ``AsyncVectorEnv.send``."""
        self._begin("send")
        self._loop.run(self._send, actions, env_ids, _per_call(timeout))

    async def _send(self, actions: Any, env_ids: Any, timeout: Timeout) -> None:
        self._env.send(actions, env_ids, timeout=timeout)

    def recv(self, *, batch_size: int | None = None) -> StepBatch:
        """The first ``batch_size`` results to land; see ``AsyncVectorEnv.recv``."""
        self._begin("recv")
        return self._loop.run(self._env.recv, batch_size=batch_size)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` on every sub-env (or read it, if not callable)."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start calling ``name`` on every sub-env; collect the results with ``call_wait``."""
        self._begin("call_async")
        self._in_flight = self._loop.run(self._env._submit_call, name, args, kwargs)
        self._waiting = _Waiting.CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for ``call_async``; ``timeout`` seconds at most (``EnvTimeoutError``)."""
        in_flight = self._end(_Waiting.CALL, "call_wait", "call_async")
        return self._loop.run(self._env._finish_call, in_flight, _per_call(timeout))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read attribute ``name`` of every sub-env."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` on every sub-env: one value each (list/tuple) or one for all."""
        self._begin("set_attr")
        self._loop.run(self._env.set_attr, name, values)

    def render(self) -> tuple[Any, ...] | None:
        """Each sub-env's rendered frame."""
        return self.call("render")

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each sub-env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # Gymnasium's AsyncVectorEnv has no setter either
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each sub-env's random generator."""
        return self.get_attr("np_random")

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the sub-envs and stop the loop thread; a pending call is waited for first.

        ``terminate=True`` skips waiting for a pending call; either way closing is bounded
        by the ``close_timeout`` given at construction.
        """
        if not self._loop.alive:  # the interpreter is shutting down: no loop to close on
            self._env.close_nowait()
            return
        try:
            if self._waiting is not _Waiting.NOTHING:
                gym.logger.warn(f"Calling `close` while waiting for a pending call to "
                                f"`{self._waiting.value}` to complete.")
                if not terminate:
                    wait = getattr(self, f"{self._waiting.value}_wait")
                    with contextlib.suppress(Exception):  # closing: the pending result is moot
                        wait(timeout)
            self._waiting = _Waiting.NOTHING
            self._loop.run(self._env.aclose)
        finally:
            self._loop.stop()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_loop"):
            self.close(terminate=True)

    # ------------------------------------------------------------------ call ordering

    def _begin(self, method: str) -> None:
        if self.closed:
            raise ClosedError(f"Trying to operate on `{type(self).__name__}`, after a call to "
                              f"`close()` (calling `{method}`).")
        if self._waiting is not _Waiting.NOTHING:
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to "
                f"`{self._waiting.value}` to complete.",
                self._waiting.value,
            )

    def _end(self, expected: _Waiting, method: str, starter: str) -> InFlight:
        if self.closed:
            raise ClosedError(f"Trying to operate on `{type(self).__name__}`, after a call to "
                              f"`close()` (calling `{method}`).")
        if self._waiting is not expected:
            raise NoAsyncCallError(f"Calling `{method}` without any prior call to `{starter}`.",
                                   expected.value)
        in_flight = self._in_flight
        assert in_flight is not None
        self._waiting, self._in_flight = _Waiting.NOTHING, None
        return in_flight


def _per_call(timeout: float | None) -> Timeout:
    """Gymnasium's ``timeout=None`` means the vector env's default deadline."""
    return USE_DEFAULT if timeout is None else timeout
