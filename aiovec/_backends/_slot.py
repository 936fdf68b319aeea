"""One sub-env and its autoreset state: the code that runs wherever the sub-env lives.

Every backend (the event loop's thread, a dedicated thread, a worker process) hosts its
sub-envs in ``EnvSlot`` objects and feeds them ``Op`` requests through ``EnvSlot.run``, so
autoreset, failure capture and step timing (sampled: ``_statistics.StepTimer``) are written
once. ``run`` never raises for an ``Exception`` in the sub-env: it returns a ``Failure`` that
the caller turns into ``SubEnvError``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from aiovec._backends._autoreset import Autoreset
from aiovec._core._async_env import CoroutineEnvError, is_async_env
from aiovec._core._cleanups import CleanupTally, run_cleanups, take_cleanups
from aiovec._core._requests import (
    CallRequest,
    EnvDescription,
    Failure,
    Op,
    ResetOutcome,
)
from aiovec._core._statistics import SAMPLE_EVERY

__all__ = ["EnvSlot"]


class EnvSlot:
    """Hosts sub-env ``env_index``: builds it, steps it with autoreset, closes it."""

    __slots__ = ("autoreset", "cleanups", "env", "env_index", "step_timer", "untimed_steps")

    def __init__(self, env_index: int, autoreset_mode: AutoresetMode,
                 step_timer: Callable[[float], int] | None = None,
                 cleanups: CleanupTally | None = None,
                 episode_timeout: float | None = None) -> None:
        self.env_index = env_index
        #: Where the sub-env's registered cleanups are counted (see ``_cleanups``).
        self.cleanups = cleanups or CleanupTally()
        self.autoreset = Autoreset(autoreset_mode, episode_timeout)
        self.env: gym.Env[Any, Any] | None = None
        #: Records a timed step (called with its start, ``time.perf_counter``, after it) and
        #: says how many steps to leave untimed next (``_statistics.StepTimer``); ``None``:
        #: steps are not timed.
        self.step_timer = step_timer
        #: Steps to run before the next timed one.
        self.untimed_steps = 0

    def run(self, op: Op, payload: Any) -> Any:
        """Serve one request; a sub-env exception comes back as a ``Failure``."""
        try:
            return _HANDLERS[op](self, payload)
        except Exception as exc:
            return Failure.capture(self.env_index, op.value, exc)

    def _make(self, env_fn: Callable[[], gym.Env[Any, Any]]) -> EnvDescription:
        """Make the sub-env; a remake (restart) closes the old one first, ignoring its errors."""
        old, self.env = self.env, None
        if old is not None:
            with contextlib.suppress(Exception):
                self._close_env(old)
        env = env_fn()
        if is_async_env(env):
            raise CoroutineEnvError(f"the env factory returned {type(env).__name__}, a coroutine "
                                    "env (async def step): run it with backend='async'")
        if not isinstance(env, gym.Env):
            raise TypeError(f"the env factory returned {type(env).__name__}, not a gymnasium.Env")
        self.env = env
        self.autoreset.made()
        return EnvDescription(env.observation_space, env.action_space,
                              dict(env.metadata), env.render_mode)

    def _live_env(self) -> gym.Env[Any, Any]:
        if self.env is None:
            raise self._not_running()
        return self.env

    def _not_running(self) -> RuntimeError:
        return RuntimeError(f"sub-env {self.env_index} is not running")

    def _reset(self, request: tuple[int | None, dict[str, Any] | None]) -> ResetOutcome:
        seed, options = request
        self.autoreset.explicitly_reset()
        env = self._live_env()
        obs, info = env.reset(seed=seed, options=options)
        return obs, info, env.np_random_seed

    def step(self, action: Any) -> Any:
        """``run(Op.STEP, action)`` without the dispatch, a host's hot path: step with
        autoreset (written out, no helper calls), a sub-env exception returned as a
        ``Failure``; the sampled steps are timed by ``_timed_step``."""
        untimed_steps = self.untimed_steps
        if not untimed_steps:
            return self._timed_step(action)
        self.untimed_steps = untimed_steps - 1
        try:
            env = self.env
            if env is None:
                raise self._not_running()
            autoreset = self.autoreset
            if autoreset.pending and autoreset.reset_instead_of_step():
                obs, info = env.reset(**autoreset.next_reset())
                return obs, 0.0, False, False, info, None
            if autoreset.episode_timeout is None:
                obs, reward, terminated, truncated, info = env.step(action)
            else:  # a step in progress runs to its end, then is cut
                started = time.monotonic()
                obs, reward, terminated, truncated, info = env.step(action)
                truncated, info = autoreset.cut(terminated, truncated, info, started)
            if (terminated or truncated) and autoreset.reset_now(terminated, truncated):
                final = {"final_obs": obs, "final_info": info}
                obs, info = env.reset(**autoreset.next_reset())
                return obs, reward, terminated, truncated, info, final
            return obs, reward, terminated, truncated, info, None
        except Exception as exc:
            return Failure.capture(self.env_index, "step", exc)

    def _timed_step(self, action: Any) -> Any:
        """``step``, timed by ``step_timer``, which says how many steps to leave untimed next
        (without a timer: look again in ``SAMPLE_EVERY`` steps, one may be given)."""
        timer = self.step_timer
        self.untimed_steps = 1  # so that ``step`` below runs the step itself
        if timer is None:
            result = self.step(action)
            self.untimed_steps = SAMPLE_EVERY
            return result
        started = time.perf_counter()
        try:
            return self.step(action)
        finally:
            self.untimed_steps = timer(started)

    def _call(self, request: CallRequest | None) -> Any:
        if request is None:  # a call aimed at other sub-envs
            return None
        target, args, kwargs = request
        if callable(target):  # a function of the env, run where the env lives
            return target(self._live_env(), *args, **kwargs)
        attribute = self._live_env().get_wrapper_attr(target)
        return attribute(*args, **kwargs) if callable(attribute) else attribute

    def _set_attr(self, request: tuple[str, Any] | None) -> None:
        if request is not None:  # None: aimed at other sub-envs
            name, value = request
            self._live_env().set_wrapper_attr(name, value)

    def _queue_options(self, queued: tuple[dict[str, Any] | None, ...]) -> None:
        self.autoreset.queue_options(queued)

    def _close(self, _: None) -> None:
        env, self.env = self.env, None
        if env is not None:
            self._close_env(env)

    def _close_env(self, env: gym.Env[Any, Any]) -> None:
        """``env.close()``, then the cleanups it registered, even if ``close`` raised."""
        try:
            env.close()
        finally:
            run_cleanups(take_cleanups(env), self.env_index, self.cleanups)


_HANDLERS: dict[Op, Callable[[EnvSlot, Any], Any]] = {
    Op.MAKE: EnvSlot._make,
    Op.RESET: EnvSlot._reset,
    Op.STEP: EnvSlot.step,
    Op.CALL: EnvSlot._call,
    Op.SET_ATTR: EnvSlot._set_attr,
    Op.OPTIONS: EnvSlot._queue_options,
    Op.CLOSE: EnvSlot._close,
}
