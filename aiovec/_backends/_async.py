"""The async backend: coroutine sub-envs (``AsyncEnv``) run as tasks on the event loop itself.

No thread, no process: each request to a sub-env is a task on the caller's loop (a system task
on trio, so requests run while nobody awaits them, as on the other backends). Requests to one
sub-env run one after another, in order; ``max_concurrency`` caps how many sub-envs work at
once, first come first served. A sub-env that misses a deadline has its task cancelled, so
unlike a thread it really stops; it is made afresh by the next ``remake``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ClassVar, Protocol

import anyio
import anyio.lowlevel
import anyio.to_thread
import sniffio
from gymnasium.vector import AutoresetMode

from aiovec._backends._autoreset import Autoreset
from aiovec._backends._base import CountdownPending, given_up_reply
from aiovec._core._async_env import is_async_env
from aiovec._core._backend import Arrivals, Backend, Pending
from aiovec._core._cleanups import CleanupTally, run_cleanups, take_cleanups
from aiovec._core._requests import CallRequest, EnvDescription, Failure, Op, Remade
from aiovec._core._statistics import LatencyLog

__all__ = ["AsyncBackend"]

# (request, payload, where the reply goes or None to drop it, position in that request)
_Job = tuple[Op, Any, "_AsyncPending | None", int]


class _Cancellable(Protocol):
    def cancel(self) -> Any: ...


class _AsyncSlot:
    """Hosts coroutine sub-env ``env_index``: builds it, steps it with autoreset, closes it."""

    __slots__ = ("autoreset", "busy", "cleanups", "discarded", "env", "env_index", "jobs",
                 "running", "step_timer", "task", "untimed_steps")

    def __init__(self, env_index: int, autoreset_mode: AutoresetMode,
                 step_timer: Callable[[float], int], cleanups: CleanupTally) -> None:
        self.env_index = env_index
        self.cleanups = cleanups
        self.autoreset = Autoreset(autoreset_mode)
        self.env: Any = None
        #: Times sampled steps as ``EnvSlot.step_timer`` does; steps before the next timed one.
        self.step_timer = step_timer
        self.untimed_steps = 0
        #: Requests not started yet, in order; ``busy`` while one runs or awaits a permit.
        self.jobs: collections.deque[_Job] = collections.deque()
        self.busy = False
        #: True while a request's task is inside ``_run_job`` (so cancelling it unwinds it).
        self.running = False
        #: Given up on (deadline missed): its request is cancelled, its env then closed.
        self.discarded = False
        self.task: _Cancellable | None = None

    async def _make(self, env_fn: Callable[[], Any]) -> EnvDescription:
        await self._close(None)
        env = env_fn()
        if inspect.isawaitable(env):  # an async factory
            env = await env
        if not is_async_env(env):
            raise TypeError(
                f"the env factory returned {type(env).__name__}, whose step is not a coroutine "
                "function: the async backend runs aiovec.AsyncEnv-style envs; use "
                "backend='thread' or 'process' for plain gymnasium envs")
        self.env = env
        self.autoreset.made()
        return EnvDescription(env.observation_space, env.action_space,
                              dict(getattr(env, "metadata", {})),
                              getattr(env, "render_mode", None))

    def _live_env(self) -> Any:
        if self.env is None:
            raise RuntimeError(f"sub-env {self.env_index} is not running")
        return self.env

    async def _reset(self, request: tuple[int | None, dict[str, Any] | None]) -> Any:
        seed, options = request
        self.autoreset.explicitly_reset()
        env = self._live_env()
        obs, info = await env.reset(seed=seed, options=options)
        return obs, info, getattr(env, "np_random_seed", None)

    async def step(self, action: Any) -> Any:
        """Step with autoreset (the hot path: called straight from the request's task); the
        sampled steps timed as ``EnvSlot`` times them."""
        untimed_steps = self.untimed_steps
        started: float | None = None
        if untimed_steps:
            self.untimed_steps = untimed_steps - 1
        else:
            started = time.perf_counter()
        try:
            env = self._live_env()
            if self.autoreset.reset_instead_of_step():
                obs, info = await env.reset()
                return obs, 0.0, False, False, info, None
            obs, reward, terminated, truncated, info = await env.step(action)
            if self.autoreset.reset_now(terminated, truncated):
                final = {"final_obs": obs, "final_info": info}
                obs, info = await env.reset()
                return obs, reward, terminated, truncated, info, final
            return obs, reward, terminated, truncated, info, None
        finally:
            if started is not None:
                self.untimed_steps = self.step_timer(started)

    async def _call(self, request: CallRequest | None) -> Any:
        if request is None:  # a call aimed at other sub-envs
            return None
        target, args, kwargs = request
        if callable(target):
            result = target(self._live_env(), *args, **kwargs)
        else:
            attribute = self._live_env().get_wrapper_attr(target)
            if not callable(attribute):
                return attribute
            result = attribute(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def _set_attr(self, request: tuple[str, Any] | None) -> None:
        if request is not None:  # None: aimed at other sub-envs
            name, value = request
            self._live_env().set_wrapper_attr(name, value)

    async def _close(self, _: None) -> None:
        env, self.env = self.env, None
        if env is not None:
            try:
                result = env.close()
                if inspect.isawaitable(result):
                    await result
            finally:
                cleanups = take_cleanups(env)
                if cleanups:  # bounded, blocking: off the loop, and even if cancelled
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(run_cleanups, cleanups, self.env_index,
                                                       self.cleanups)


_HANDLERS: dict[Op, Callable[[_AsyncSlot, Any], Awaitable[Any]]] = {
    Op.MAKE: _AsyncSlot._make,
    Op.RESET: _AsyncSlot._reset,
    Op.CALL: _AsyncSlot._call,
    Op.SET_ATTR: _AsyncSlot._set_attr,
    Op.CLOSE: _AsyncSlot._close,
}


class _AsyncPending(CountdownPending):
    """Replies handed in by the sub-envs' tasks, in the event loop's thread."""

    __slots__ = ()

    def deliver(self, position: int, reply: Any) -> None:
        self.replies[position] = reply
        if self.arrivals is not None:
            self.arrivals.land(self, position)
        self.paid()


RunJob = Callable[[_AsyncSlot], Coroutine[Any, Any, None]]
Spawner = Callable[[RunJob, _AsyncSlot], None]


def _task_spawner() -> Spawner:
    """Starts a background task on the running loop, recording its handle on the slot."""
    if sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()

        def spawn_asyncio(run_job: RunJob, slot: _AsyncSlot) -> None:
            # The slot holds the task until its next request: no other reference is needed.
            slot.task = loop.create_task(run_job(slot))

        return spawn_asyncio

    import trio

    async def in_scope(run_job: RunJob, slot: _AsyncSlot) -> None:
        with trio.CancelScope() as scope:
            slot.task = scope
            await run_job(slot)

    def spawn_trio(run_job: RunJob, slot: _AsyncSlot) -> None:
        # A system task: requests run whether or not anyone awaits them (like a thread). It
        # gets the caller's context variables, as an asyncio task does.
        trio.lowlevel.spawn_system_task(in_scope, run_job, slot,
                                        name=f"aiovec-env-{slot.env_index}",
                                        context=contextvars.copy_context())

    return spawn_trio


class AsyncBackend(Backend):
    """Coroutine sub-envs stepped concurrently as tasks on the caller's event loop."""

    name: ClassVar[str] = "async"
    in_process: ClassVar[bool] = True

    _slots: list[_AsyncSlot]
    _spawn: Spawner

    def __init__(self, env_fns: Sequence[Any], autoreset_mode: AutoresetMode, *,
                 max_concurrency: int | None = None) -> None:
        super().__init__(env_fns, autoreset_mode)
        self.max_concurrency = max_concurrency
        self._running = 0
        #: Slots whose next request waits for a free permit, first come first served.
        self._waiting: collections.deque[_AsyncSlot] = collections.deque()
        self._lost: set[int] = set()
        #: Slots given up on whose env is not closed yet (closed by their own task).
        self._retired: set[_AsyncSlot] = set()
        self._retired_closed: anyio.Event | None = None  # set once none is left (aclose)
        self._cancelled_all = False

    async def start(self) -> Pending:
        self._spawn = _task_spawner()
        self._cancelled = anyio.get_cancelled_exc_class()
        self.latencies = LatencyLog.allocate(self.num_envs)
        self._slots = [self._new_slot(index) for index in range(self.num_envs)]
        return self.submit(Op.MAKE, range(self.num_envs), self.env_fns)

    def _new_slot(self, env_index: int) -> _AsyncSlot:
        assert self.latencies is not None
        return _AsyncSlot(env_index, self.autoreset_mode, self.latencies.timer(env_index),
                          self.cleanups)

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
               arrivals: Arrivals | None = None) -> Pending:
        pending = _AsyncPending(op, env_indices, arrivals)
        slots, closing, lost = self._slots, self.closing, self._lost
        unlimited = self.max_concurrency is None  # then nothing ever waits for a permit
        spawn, run_job = self._spawn, self._run_job
        for position, (env_index, payload) in enumerate(zip(pending.env_indices, payloads)):
            if closing or env_index in lost:
                pending.deliver(position, given_up_reply(env_index, op, _GIVEN_UP))
                continue
            slot = slots[env_index]
            slot.jobs.append((op, payload, pending, position))
            if not slot.busy:
                slot.busy = True
                if unlimited:
                    self._running += 1
                    spawn(run_job, slot)
                else:
                    self._waiting.append(slot)
        if not unlimited:
            self._start_waiting()
        return pending

    def _start_waiting(self) -> None:
        """Start the waiting slots' next requests, as far as the concurrency cap allows."""
        waiting, limit = self._waiting, self.max_concurrency
        while waiting and (limit is None or self._running < limit):
            self._running += 1
            self._spawn(self._run_job, waiting.popleft())

    async def _run_job(self, slot: _AsyncSlot) -> None:
        """One request's task: run it, deliver its reply (any exception of the sub-env's
        own as a ``Failure``), hand the permit on.

        Everything is inside ``try``: a task may find its request withdrawn (the sub-env was
        given up on before the task ran), and must give its permit back all the same.
        """
        slot.running = True
        try:
            if slot.jobs:
                op, payload, pending, position = slot.jobs.popleft()
                try:
                    if op is Op.STEP:
                        reply = await slot.step(payload)
                    else:
                        reply = await _HANDLERS[op](slot, payload)
                except self._cancelled:
                    raise
                except BaseException as exc:  # SystemExit & co. from the env: its failure
                    reply = Failure.capture(slot.env_index, op.value, exc)
                if pending is not None and not slot.discarded:
                    pending.deliver(position, reply)
        finally:
            slot.running = False
            slot.task = None
            self._running -= 1
            self._next_job(slot)

    def _next_job(self, slot: _AsyncSlot) -> None:
        """A slot's request is over: queue its next one (a discarded slot's next job closes
        its env), then start what the freed permit allows."""
        if slot.discarded and slot.env is not None and not slot.jobs:
            slot.jobs.append((Op.CLOSE, None, None, 0))
        if slot.discarded and slot.env is None:
            self._retired.discard(slot)
            if not self._retired and self._retired_closed is not None:
                self._retired_closed.set()
        # Closing, only the envs given up on earlier still get to close, until all is cancelled.
        if slot.jobs and not self._cancelled_all and (slot.discarded or not self.closing):
            self._waiting.append(slot)
        else:
            slot.busy = False
        if self._waiting:
            self._start_waiting()

    def lost_envs(self) -> list[int]:
        return sorted(self._lost)

    def discard(self, env_indices: Sequence[int]) -> None:
        for env_index in env_indices:
            if env_index in self._lost:
                continue
            self._lost.add(env_index)
            slot, self._slots[env_index] = self._slots[env_index], self._new_slot(env_index)
            for _op, _payload, pending, position in slot.jobs:
                if pending is not None:
                    pending.deliver(position, given_up_reply(env_index, _op, _GIVEN_UP))
            slot.jobs.clear()
            slot.discarded = True
            self._retired.add(slot)
            if slot.running and slot.task is not None:
                slot.task.cancel()  # its task then closes the env
            elif not slot.busy:  # idle: close its env in a request of its own
                self._next_job(slot)
            # else: its task, or its permit, is still to come; it then closes the env

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        self.refuse_if_closing()
        self._lost.difference_update(env_indices)
        pending = self.submit(Op.MAKE, env_indices, [self.env_fns[i] for i in env_indices])
        await pending.wait()
        return Remade(list(env_indices), pending.failures())

    def hosts_started(self) -> bool:
        return hasattr(self, "_slots")

    async def wait_closed(self, pending: Pending) -> None:
        await pending.wait()
        if self._retired:  # envs given up on earlier are still closing
            self._retired_closed = anyio.Event()
            await self._retired_closed.wait()

    async def release_hosts(self, pending: Pending) -> None:
        self._cancel_all()
        await anyio.lowlevel.checkpoint()  # let the cancelled tasks unwind

    def _cancel_all(self) -> None:
        self._cancelled_all = True
        self._waiting.clear()
        for slot in [*self._slots, *self._retired]:
            slot.jobs.clear()
            if slot.running and slot.task is not None:
                slot.task.cancel()

    def close_nowait(self) -> None:
        # No event loop may be running: the envs' async close cannot run, only be cancelled.
        self.closing = True
        if hasattr(self, "_slots"):
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._cancel_all()

    def local_env(self, env_index: int) -> Any:
        env = self._slots[env_index].env
        if env is None:
            raise RuntimeError(f"sub-env {env_index} is not running")
        return env

    def describe(self) -> str:
        cap = "" if self.max_concurrency is None else f", at most {self.max_concurrency} at once"
        return f"async backend, {self.num_envs - len(self._lost)} coroutine envs{cap}"


#: Why a request to a sub-env given up on (and not remade yet) or to a closing one failed.
_GIVEN_UP = "the sub-env was given up on (it missed a deadline) or the vector env closed"
