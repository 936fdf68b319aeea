"""``SyncFace``: what both sync shims share, whatever the async vector env they drive.

It starts the async env on a private event loop (``_loop_driver``: run in the caller's own
thread during each call, borrowed from an outer event loop where one runs there), runs each
call there, keeps Gymnasium's call-ordering rules (a ``*_async`` call must be collected by its
``*_wait`` before anything else; nothing runs once closed) and closes on the loop.
``VectorEnv`` and ``ParallelVectorEnv`` add their constructor, spaces, ``reset`` and ``step``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import gymnasium as gym
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from aiovec._core._arguments import check_timeout
from aiovec._core._in_flight import USE_DEFAULT, InFlight, Timeout
from aiovec._core._statistics import Statistics
from aiovec._exceptions import ClosedError
from aiovec._shim._loop_driver import LoopDriver

__all__ = ["AsyncCore", "SyncFace", "per_call"]

# What a shim's calls take and give: arrays for VectorEnv, dicts of agents for ParallelVectorEnv.
ActionsT = TypeVar("ActionsT")
StepResultT = TypeVar("StepResultT")
StepBatchT = TypeVar("StepBatchT")
_Actions_contra = TypeVar("_Actions_contra", contravariant=True)
_StepResult_co = TypeVar("_StepResult_co", covariant=True)
_StepBatch_co = TypeVar("_StepBatch_co", covariant=True)


class AsyncCore(Protocol[_Actions_contra, _StepResult_co, _StepBatch_co]):
    """What a sync face uses of its async vector env (``AsyncVectorEnv`` and
    ``AsyncParallelVectorEnv`` both have it)."""

    @property
    def backend_name(self) -> str: ...

    @property
    def backend_reason(self) -> str: ...

    @property
    def unusable_envs(self) -> tuple[int, ...]: ...

    def statistics(self) -> Statistics: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def close_nowait(self) -> None: ...

    #: What the warning of one left open says to do.
    _how_to_close: str

    def send(self, actions: _Actions_contra, env_ids: Any = None, *,
             timeout: Timeout = USE_DEFAULT) -> None: ...

    async def recv(self, *, batch_size: int | None = None, min_size: int | None = None,
                   wait: float | None = None) -> _StepBatch_co: ...

    def abort(self, env_ids: Any) -> None: ...

    @property
    def max_in_flight(self) -> int | None: ...

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None: ...

    @property
    def num_stepping(self) -> int: ...

    @property
    def num_queued(self) -> int: ...

    @property
    def num_ready(self) -> int: ...

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> tuple[Any, ...]: ...

    async def set_attr(self, name: str, values: Any) -> None: ...

    async def _submit_step(self, actions: _Actions_contra) -> InFlight: ...

    async def _finish_step(self, in_flight: InFlight, timeout: Timeout) -> _StepResult_co: ...


class _Pending(NamedTuple):
    """A ``{name}_async`` call submitted and not yet collected by ``{name}_wait``."""

    name: str  # "reset", "step" or "call", as Gymnasium's errors name it
    in_flight: InFlight


class SyncFace(Generic[ActionsT, StepResultT, StepBatchT]):
    """Blocking calls on an async vector env that runs on the shim's own event loop.

    Subclasses narrow ``_env`` to their async env's class (mypy checks that it fits
    ``AsyncCore``) and call ``__init__`` with it.
    """

    _env: AsyncCore[ActionsT, StepResultT, StepBatchT]
    closed: bool

    def __init__(self, env: AsyncCore[ActionsT, StepResultT, StepBatchT]) -> None:
        """Start ``env`` on a new event loop; if it cannot start, close the loop and raise."""
        self._env = env
        env._how_to_close = "use `with` or call `envs.close()`"
        self._pending: _Pending | None = None
        self.closed = False
        self._loop = LoopDriver()
        try:
            self._loop.run(env.start)
        except BaseException:
            self._loop.stop()
            self.closed = True
            raise

    @property
    def backend_name(self) -> str:
        """The backend the sub-envs run on (``"auto"`` resolved)."""
        return self._env.backend_name

    @property
    def backend_reason(self) -> str:
        """Why they run there (what ``"auto"`` measured, or that the backend was given)."""
        return self._env.backend_reason

    def statistics(self) -> Statistics:
        """Counters and per-sub-env step latency; see ``AsyncVectorEnv.statistics``."""
        return self._env.statistics()

    @property
    def unusable_envs(self) -> tuple[int, ...]:
        """Sub-envs that cannot step until reset; see ``AsyncVectorEnv.unusable_envs``."""
        return self._env.unusable_envs

    # ------------------------------------------------------------------ calls

    def step_async(self, actions: ActionsT) -> None:
        """Send the actions (checked first); collect the result with ``step_wait``."""
        self._start("step", self._env._submit_step, actions)

    def step_wait(self, timeout: float | None = None) -> StepResultT:
        """Wait for ``step_async``: ``timeout`` seconds at most (``None``: the construction
        ``timeout``), then ``EnvTimeoutError``."""
        return self._loop.run(self._env._finish_step, *self._wait("step", timeout))

    def send(self, actions: ActionsT, env_ids: Any = None, *,
             timeout: float | None = None) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) and return at once; see the
        async env's ``send``."""
        self._begin("send")
        self._loop.run(self._send, actions, env_ids, per_call(timeout))

    async def _send(self, actions: ActionsT, env_ids: Any, timeout: Timeout) -> None:
        # ``send`` does not block, but it reads the loop's clock and state: run it there.
        self._env.send(actions, env_ids, timeout=timeout)

    def recv(self, *, batch_size: int | None = None, min_size: int | None = None,
             wait: float | None = None) -> StepBatchT:
        """The first results to land, at most ``batch_size``, within ``min_size`` and
        ``wait``; see the async env's ``recv``."""
        self._begin("recv")
        return self._loop.run(self._env.recv, batch_size=batch_size, min_size=min_size,
                              wait=wait)

    def abort(self, env_ids: Any) -> None:
        """Cancel sub-envs' outstanding first-ready steps; see the async env's ``abort``."""
        self._begin("abort")
        self._loop.run(self._on_loop, self._env.abort, env_ids)

    @property
    def max_in_flight(self) -> int | None:
        """At most this many sub-envs step at once among first-ready sends; settable. See
        the async env's ``max_in_flight``."""
        return self._env.max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._check_open("max_in_flight")
        self._loop.run(self._on_loop, setattr, self._env, "max_in_flight", value)

    @property
    def num_stepping(self) -> int:
        """How many sub-envs sent an action are stepping now."""
        self._check_open("num_stepping")
        return int(self._loop.run(self._on_loop, getattr, self._env, "num_stepping"))

    @property
    def num_queued(self) -> int:
        """How many sub-envs sent an action wait for room under ``max_in_flight``."""
        self._check_open("num_queued")
        return int(self._loop.run(self._on_loop, getattr, self._env, "num_queued"))

    @property
    def num_ready(self) -> int:
        """How many results landed and wait for ``recv``."""
        self._check_open("num_ready")
        return int(self._loop.run(self._on_loop, getattr, self._env, "num_ready"))

    @staticmethod
    async def _on_loop(function: Callable[..., Any], *args: Any) -> Any:
        # Not blocking, but it reads the loop's clock and state (and may submit): run it there.
        return function(*args)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` on every sub-env (or read it, if not callable)."""
        self._begin("call")
        return self._loop.run(self._env.call, name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read attribute ``name`` of every sub-env."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` on every sub-env: one value each (list/tuple) or one for all."""
        self._begin("set_attr")
        self._loop.run(self._env.set_attr, name, values)

    def render(self) -> tuple[Any, ...]:
        """Each sub-env's rendered frame."""
        return self.call("render")

    # ------------------------------------------------------------------ call ordering

    def _check_open(self, method: str) -> None:
        if self.closed:
            raise ClosedError(f"Trying to operate on `{type(self).__name__}`, after a call to "
                              f"`close()` (calling `{method}`).")

    def _begin(self, method: str) -> None:
        """Refuse ``method`` once closed, or while a ``*_async`` call awaits its ``*_wait``."""
        self._check_open(method)
        if self._pending is not None:
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to "
                f"`{self._pending.name}` to complete.",
                self._pending.name,
            )

    def _start(self, name: str, submit: Callable[..., Coroutine[Any, Any, InFlight]],
               *args: Any) -> None:
        """``{name}_async``: submit on the loop; the call is pending until ``{name}_wait``.
        A refused submission (a wrong batch) leaves nothing pending."""
        self._begin(f"{name}_async")
        self._pending = _Pending(name, self._loop.run(submit, *args))

    def _wait(self, name: str, timeout: float | None) -> tuple[InFlight, Timeout]:
        """``{name}_wait``'s arguments: the pending call's request and its deadline, the
        deadline checked first."""
        deadline = per_call(timeout)
        return self._end(name), deadline

    def _end(self, name: str) -> InFlight:
        """``{name}_wait``: the pending call's request, which is no longer pending."""
        self._check_open(f"{name}_wait")
        pending = self._pending
        if pending is None or pending.name != name:
            raise NoAsyncCallError(f"Calling `{name}_wait` without any prior call to "
                                   f"`{name}_async`.", name)
        self._pending = None
        return pending.in_flight

    # ------------------------------------------------------------------ closing

    def _shut_down(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the async env on the loop, then close the loop.

        A pending call is warned about and, unless ``terminate``, collected first by its
        ``*_wait`` (so ``closed`` must still be False here), as Gymnasium's vector envs do.
        """
        if not self._loop.alive:  # the interpreter is shutting down: no loop to close on
            self._env.close_nowait()
            self._loop.abandon()
            return
        try:
            if self._pending is not None:
                name = self._pending.name
                gym.logger.warn(f"Calling `close` while waiting for a pending call to `{name}` "
                                "to complete.")
                if not terminate:
                    with contextlib.suppress(Exception):  # closing: the pending result is moot
                        getattr(self, f"{name}_wait")(timeout)
            self._pending = None
            self._loop.run(self._env.aclose)
        finally:
            self._loop.stop()

    def __del__(self) -> None:
        # Collected while open (often at interpreter exit): nobody waits for a pending call.
        if not getattr(self, "closed", True) and hasattr(self, "_loop"):
            self._shut_down(terminate=True)
            self.closed = True


def per_call(timeout: float | None) -> Timeout:
    """Gymnasium's ``timeout=None`` means the vector env's default deadline; any other is
    checked here, so a ``*_wait`` evaluates it before it takes the pending call (a refused
    timeout leaves the call pending, its results not lost)."""
    return USE_DEFAULT if timeout is None else check_timeout(timeout, "timeout")
