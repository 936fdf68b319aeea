"""The async backend: coroutine sub-envs (``AsyncEnv``) hosted by tasks on the event loop itself.

No thread, no process: each sub-env has a host task on the caller's loop for its whole life, as
the thread backend gives each one a thread (a system task on trio, so requests run while nobody
awaits them, as on the other backends). The host runs its sub-env's requests one after another,
in order, and parks in between; a request wakes it. Waking a parked task costs less than
starting one, so a vector step of coroutine envs costs less than a bare ``asyncio.gather`` of
their steps, which starts a task per coroutine. ``max_concurrency`` caps how many sub-envs work
at once, first come first served.

A sub-env that misses a deadline has its host cancelled, so unlike a thread it really stops; a
host of its own then closes it, and the next ``remake`` makes a new one. A sub-env's requests
run in (a copy of) the context variables of the call that made it: ``start``, or the ``reset``
that remade it.
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
from aiovec._core._cleanups import (
    CleanupTally,
    cleanups_finished,
    hosted,
    run_cleanups_async,
    take_cleanups,
)
from aiovec._core._requests import NO_REPLY, CallRequest, EnvDescription, Failure, Op, Remade
from aiovec._core._statistics import LatencyLog
from aiovec._limits._shared import SharedLimits
from aiovec._limits._take import bind

__all__ = ["AsyncBackend"]

# (request, payload, where the reply goes or None to drop it, position in that request)
_Job = tuple[Op, Any, "_AsyncPending | None", int]


class _Cancellable(Protocol):
    def cancel(self) -> Any: ...


class _AsyncSlot:
    """Hosts coroutine sub-env ``env_index``: builds it, steps it with autoreset, closes it."""

    __slots__ = ("autoreset", "busy", "cleanups", "discarded", "env", "env_index", "host",
                 "jobs", "last_obs", "parked", "running", "step_timer", "turn", "untimed_steps")

    def __init__(self, env_index: int, autoreset_mode: AutoresetMode,
                 step_timer: Callable[[float], int], cleanups: CleanupTally,
                 episode_timeout: float | None = None) -> None:
        self.env_index = env_index
        self.cleanups = cleanups
        self.autoreset = Autoreset(autoreset_mode, episode_timeout)
        #: With an episode timeout: the latest observation, what a step cut short returns.
        self.last_obs: Any = None
        self.env: Any = None
        #: Times sampled steps as ``EnvSlot.step_timer`` does; steps before the next timed one.
        self.step_timer = step_timer
        self.untimed_steps = 0
        #: Requests not started yet, in order; ``busy`` while one runs or awaits a permit.
        self.jobs: collections.deque[_Job] = collections.deque()
        self.busy = False
        #: Its host task (cancelling it cancels the request it runs), or None before it starts
        #: and once it ended.
        self.host: _Cancellable | None = None
        #: How to wake the host while it is parked (``_Hosts.park``), else None.
        self.parked: Any = None
        #: True while the slot holds a permit: from being given a turn until the turn ends.
        self.turn = False
        #: True while its host runs a request (so cancelling the host cancels that request).
        self.running = False
        #: Given up on (deadline missed): its request is cancelled, its env then closed.
        self.discarded = False

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

    def live_env(self) -> Any:
        if self.env is None:
            raise RuntimeError(f"sub-env {self.env_index} is not running")
        return self.env

    async def _reset(self, request: tuple[int | None, dict[str, Any] | None]) -> Any:
        seed, options = request
        self.autoreset.explicitly_reset()
        env = self.live_env()
        obs, info = await env.reset(seed=seed, options=options)
        self.last_obs = obs
        return obs, info, getattr(env, "np_random_seed", None)

    async def _automatic_reset(self, env: Any) -> Any:
        """``env.reset`` at an episode's end, with the next options queued → ``(obs, info)``."""
        obs, info = await env.reset(**self.autoreset.next_reset())
        self.last_obs = obs
        return obs, info

    async def reset_instead_of_step(self, env: Any) -> Any:
        """The step after an episode's end, in next-step mode: a reset."""
        obs, info = await self._automatic_reset(env)
        return obs, 0.0, False, False, info, None

    async def step_in_time(self, env: Any, action: Any) -> Any:
        """``env.step(action)`` within its episode's time: cancelled when that runs out (the
        step is then cut: the latest observation, truncated, ``info["episode_timeout"]``)."""
        autoreset = self.autoreset
        started = time.monotonic()
        with anyio.move_on_after(max(0.0, autoreset.episode_time_left())):
            obs, reward, terminated, truncated, info = await env.step(action)
            truncated, info = autoreset.cut(terminated, truncated, info, started)
            self.last_obs = obs
            return obs, reward, terminated, truncated, info
        return self.last_obs, 0.0, False, True, autoreset.timed_out(started)

    async def reset_after_step(self, env: Any, outcome: Any) -> Any:
        """A step that ended its episode, in same-step mode: the reset's observation and
        info, the step's own as ``final``."""
        obs, reward, terminated, truncated, info, _ = outcome
        final = {"final_obs": obs, "final_info": info}
        obs, info = await self._automatic_reset(env)
        return obs, reward, terminated, truncated, info, final

    async def _call(self, request: CallRequest | None) -> Any:
        if request is None:  # a call aimed at other sub-envs
            return None
        target, args, kwargs = request
        if callable(target):
            result = target(self.live_env(), *args, **kwargs)
        else:
            attribute = self.live_env().get_wrapper_attr(target)
            if not callable(attribute):
                return attribute
            result = attribute(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def _set_attr(self, request: tuple[str, Any] | None) -> None:
        if request is not None:  # None: aimed at other sub-envs
            name, value = request
            self.live_env().set_wrapper_attr(name, value)

    async def _queue_options(self, queued: tuple[dict[str, Any] | None, ...]) -> None:
        self.autoreset.queue_options(queued)

    async def _close(self, _: None) -> None:
        env, self.env = self.env, None
        if env is not None:
            try:
                result = env.close()
                if inspect.isawaitable(result):
                    await result
            finally:
                cleanups = take_cleanups(env)
                if cleanups:  # bounded, and even if cancelled (shielded)
                    with anyio.CancelScope(shield=True):
                        await run_cleanups_async(cleanups, self.env_index, self.cleanups)


_HANDLERS: dict[Op, Callable[[_AsyncSlot, Any], Awaitable[Any]]] = {
    Op.MAKE: _AsyncSlot._make,
    Op.RESET: _AsyncSlot._reset,
    Op.CALL: _AsyncSlot._call,
    Op.SET_ATTR: _AsyncSlot._set_attr,
    Op.OPTIONS: _AsyncSlot._queue_options,
    Op.CLOSE: _AsyncSlot._close,
}


class _AsyncPending(CountdownPending):
    """Replies handed in by the sub-envs' host tasks, in the event loop's thread."""

    __slots__ = ()

    def deliver(self, position: int, reply: Any) -> None:
        self.replies[position] = reply
        arrivals = self.arrivals
        if arrivals is not None:
            arrivals.land(self, position)
        self.paid()


Serve = Callable[[_AsyncSlot], Coroutine[Any, Any, None]]


class _Hosts(Protocol):
    """Starts, parks and wakes the sub-envs' host tasks on one kind of event loop."""

    def spawn(self, serve: Serve, slot: _AsyncSlot) -> None:
        """Start a host task running ``serve(slot)``; ``slot.host`` cancels it."""

    def park(self, slot: _AsyncSlot) -> Awaitable[Any]:
        """What the host awaits until ``wake(slot)`` (cancellable)."""

    def wake(self, slot: _AsyncSlot) -> None:
        """Wake the host of ``slot`` if it is parked."""


class _AsyncioHosts:
    """asyncio and uvloop: a host is a task, parked on a future of its own."""

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()

    def spawn(self, serve: Serve, slot: _AsyncSlot) -> None:
        # The task gets a copy of the caller's context variables. The slot holds it: as long
        # as the sub-env may get requests, no other reference is needed.
        slot.host = self._loop.create_task(serve(slot))

    def park(self, slot: _AsyncSlot) -> Awaitable[Any]:
        slot.parked = future = self._loop.create_future()
        return future

    def wake(self, slot: _AsyncSlot) -> None:
        future, slot.parked = slot.parked, None
        if future is not None and not future.done():  # done: cancelled, the host is ending
            future.set_result(None)


class _TrioHosts:
    """trio: a host is a system task (requests run whether or not anyone awaits them, like a
    thread), in a cancel scope of its own; it parks by giving up its turn to run."""

    def __init__(self) -> None:
        import trio  # optional: imported once a vector env starts on trio

        self._cancel_scope = trio.CancelScope
        self._spawn_system_task = trio.lowlevel.spawn_system_task
        self._current_task = trio.lowlevel.current_task
        self._wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
        self._reschedule = trio.lowlevel.reschedule
        self._abort_succeeded = trio.lowlevel.Abort.SUCCEEDED

    def spawn(self, serve: Serve, slot: _AsyncSlot) -> None:
        scope = slot.host = self._cancel_scope()  # set now: the task starts later

        async def host() -> None:
            with scope:
                await serve(slot)

        self._spawn_system_task(host, name=f"aiovec-env-{slot.env_index}",
                                context=contextvars.copy_context())

    def park(self, slot: _AsyncSlot) -> Awaitable[Any]:
        def abort(_: Any) -> Any:  # cancelled while parked
            slot.parked = None
            return self._abort_succeeded

        slot.parked = self._current_task()
        return self._wait_task_rescheduled(abort)

    def wake(self, slot: _AsyncSlot) -> None:
        task, slot.parked = slot.parked, None
        if task is not None:
            self._reschedule(task)


def _hosts_for_running_loop() -> _Hosts:
    if sniffio.current_async_library() == "asyncio":
        return _AsyncioHosts()
    return _TrioHosts()


class AsyncBackend(Backend):
    """Coroutine sub-envs stepped concurrently by host tasks on the caller's event loop."""

    name: ClassVar[str] = "async"
    in_process: ClassVar[bool] = True

    _slots: list[_AsyncSlot]
    _hosts: _Hosts

    def __init__(self, env_fns: Sequence[Any], autoreset_mode: AutoresetMode, *,
                 max_concurrency: int | None = None, limits: SharedLimits | None = None,
                 episode_timeout: float | None = None, first_env: int = 0) -> None:
        super().__init__(env_fns, autoreset_mode, limits=limits,
                         episode_timeout=episode_timeout)
        self.max_concurrency = max_concurrency
        #: What its sub-envs are called in replies and failures: ``first_env`` onwards (a
        #: worker process hosting a share of a vector env's sub-envs), whereas requests and
        #: ``discard`` address them from 0.
        self.first_env = first_env
        self._running = 0
        #: Slots whose next request waits for a free permit, first come first served.
        self._waiting: collections.deque[_AsyncSlot] = collections.deque()
        self._lost: set[int] = set()
        #: Slots given up on whose env is not closed yet (closed by a host of their own).
        self._retired: set[_AsyncSlot] = set()
        self._retired_closed: anyio.Event | None = None  # set once none is left (aclose)
        self._cancelled_all = False
        self._hosts_alive = 0
        self._hosts_ended: anyio.Event | None = None  # set once none is alive (aclose)

    async def start(self) -> Pending:
        self._hosts = _hosts_for_running_loop()
        self._cancelled = anyio.get_cancelled_exc_class()
        self.latencies = LatencyLog.allocate(self.num_envs)
        self._slots = [self._new_slot(index) for index in range(self.num_envs)]
        return self.submit(Op.MAKE, range(self.num_envs), self.env_fns)

    def _new_slot(self, env_index: int) -> _AsyncSlot:
        assert self.latencies is not None  # (``log_latencies`` may have replaced it)
        return _AsyncSlot(self.first_env + env_index, self.autoreset_mode,
                          self.latencies.timer(env_index), self.cleanups, self.episode_timeout)

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
               arrivals: Arrivals | None = None) -> Pending:
        pending = _AsyncPending(op, env_indices, arrivals)
        slots, closing, lost, give_turn = self._slots, self.closing, self._lost, self._give_turn
        unlimited = self.max_concurrency is None  # then nothing ever waits for a permit
        close = op is Op.CLOSE
        for position, (env_index, payload) in enumerate(zip(pending.env_indices, payloads)):
            if closing or env_index in lost:
                pending.deliver(position,
                                given_up_reply(self.first_env + env_index, op, _GIVEN_UP))
                continue
            slot = slots[env_index]
            if close:
                self._give_up_queued(slot)
            slot.jobs.append((op, payload, pending, position))
            if not slot.busy:
                slot.busy = True
                if unlimited:
                    give_turn(slot)
                else:
                    self._waiting.append(slot)
        if not unlimited:
            self._start_waiting()
        return pending

    @staticmethod
    def _give_up_queued(slot: _AsyncSlot) -> None:
        """The close is sent: what the sub-env has queued (behind a running request, or
        waiting for a permit) is given up at once and never runs; the close runs next, so a
        sub-env busy when the close began closes once its request is over."""
        for op, _, pending, position in slot.jobs:
            if pending is not None:
                pending.deliver(position, given_up_reply(slot.env_index, op, _GIVEN_UP))
        slot.jobs.clear()

    def _start_waiting(self) -> None:
        """Give the waiting slots their turn, as far as the concurrency cap allows."""
        waiting, limit = self._waiting, self.max_concurrency
        while waiting and (limit is None or self._running < limit):
            self._give_turn(waiting.popleft())

    def _give_turn(self, slot: _AsyncSlot) -> None:
        """A permit for ``slot``'s next request: wake its host (or start one, if it has none)."""
        self._running += 1
        slot.turn = True
        if slot.host is None:
            self._hosts_alive += 1
            self._hosts.spawn(self._serve, slot)
        else:
            self._hosts.wake(slot)  # unless the host is the caller itself, about to look

    async def _serve(self, slot: _AsyncSlot) -> None:
        """A sub-env's host task: takes each turn it is given, runs the next request, delivers
        its reply (any exception of the sub-env's own as a ``Failure``), hands the permit on,
        and parks until its next turn. It ends once its sub-env was given up on and closed, once
        everything was cancelled (closing), or when it is cancelled itself (closing, or the
        request it runs was given up on: a new host then serves whatever follows).

        A turn may find its request withdrawn (the sub-env was given up on meanwhile): the
        permit is handed on all the same.
        """
        park, cancelled = self._hosts.park, self._cancelled
        step_op, perf_counter = Op.STEP, time.perf_counter
        # In the host's own context: its sub-env's limits, and its cleanups' keeper.
        hosted.set(True)
        if self.limits is not None:
            bind(self.limits.local_taker())
        try:
            while True:
                if not slot.turn:
                    if self._cancelled_all or (slot.discarded and not slot.busy):
                        return  # closed, or given up on and its env closed
                    await park(slot)
                slot.running = True
                if not slot.jobs:  # withdrawn: the sub-env was given up on meanwhile
                    self._end_turn(slot)
                    continue
                op, payload, pending, position = slot.jobs.popleft()
                try:
                    if op is not step_op:
                        reply = await _HANDLERS[op](slot, payload)
                    else:  # inline (the hot path): a coroutine per step would cost ~0.3 us
                        untimed_steps = slot.untimed_steps
                        if untimed_steps:  # sampled: most steps are not timed
                            slot.untimed_steps = untimed_steps - 1
                            started = None
                        else:
                            started = perf_counter()
                        try:
                            env, autoreset = slot.live_env(), slot.autoreset
                            if autoreset.reset_instead_of_step():
                                reply = await slot.reset_instead_of_step(env)
                            else:
                                obs, reward, terminated, truncated, info = (
                                    await env.step(payload) if autoreset.episode_timeout is None
                                    else await slot.step_in_time(env, payload))
                                reply = obs, reward, terminated, truncated, info, None
                                if autoreset.reset_now(terminated, truncated):
                                    reply = await slot.reset_after_step(env, reply)
                        finally:
                            if started is not None:
                                slot.untimed_steps = slot.step_timer(started)
                except cancelled:
                    raise
                except BaseException as exc:  # SystemExit & co. from the env: its failure
                    reply = Failure.capture(slot.env_index, op.value, exc)
                if pending is not None and not slot.discarded:
                    pending.deliver(position, reply)
                self._end_turn(slot)
        finally:
            slot.host = None  # first: a request still to serve needs a new host
            if slot.running or slot.turn:  # cancelled in a request, or given a turn
                self._end_turn(slot)
            self._hosts_alive -= 1
            if not self._hosts_alive and self._hosts_ended is not None:
                self._hosts_ended.set()

    def _end_turn(self, slot: _AsyncSlot) -> None:
        slot.running = slot.turn = False
        self._running -= 1
        if slot.jobs or slot.discarded or self._waiting:
            self._next_job(slot)
        else:  # what _next_job concludes, sooner (the hot path)
            slot.busy = False

    def _next_job(self, slot: _AsyncSlot) -> None:
        """A slot's turn is over: queue its next request (a discarded slot's next one closes
        its env), then hand out the turns the freed permit allows."""
        if slot.discarded and slot.env is not None and not slot.jobs:
            slot.jobs.append((Op.CLOSE, None, None, 0))
        if slot.discarded and slot.env is None:
            self._retired.discard(slot)
            if not self._retired and self._retired_closed is not None:
                self._retired_closed.set()
        if slot.jobs and not self._cancelled_all:
            self._waiting.append(slot)
        else:
            slot.busy = False
        if self._waiting:
            self._start_waiting()

    def log_latencies(self, log: LatencyLog) -> None:
        """Time the sub-envs' steps into ``log`` from now on (rows by request index): a
        worker's share of its vector env's log, in shared memory."""
        self.latencies = log
        for index, slot in enumerate(self._slots):
            slot.step_timer = log.timer(index)

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
                    pending.deliver(position, given_up_reply(slot.env_index, _op, _GIVEN_UP))
            slot.jobs.clear()
            slot.discarded = True
            self._retired.add(slot)
            if slot.running and slot.host is not None:
                slot.host.cancel()  # a new host then closes the env
            elif not slot.busy:  # idle: its host closes its env in a request of its own
                self._next_job(slot)
                if not slot.busy and slot.host is not None:  # no env to close: end the host
                    slot.host.cancel()
            # else: its turn, or its permit, is still to come; it then closes the env

    def abort_steps(self, steps: Sequence[tuple[Pending, int]]) -> list[tuple[Pending, int]]:
        """A step not started yet is withdrawn; a running one has its host cancelled, which
        cancels the step's coroutine (a new host serves whatever the sub-env is sent next):
        each is stopped."""
        for pending, position in steps:
            slot = self._slots[pending.env_indices[position]]
            for job in slot.jobs:
                if job[2] is pending and job[3] == position:
                    slot.jobs.remove(job)  # its turn, if it comes, finds it withdrawn
                    break
            else:  # requests run in order: not waiting and not answered, so it is running
                if (pending.replies[position] is NO_REPLY and slot.running
                        and slot.host is not None):
                    slot.host.cancel()
        return []

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        pending = self.submit_remake(env_indices)
        await pending.wait()
        return Remade(list(env_indices), pending.failures())

    def submit_remake(self, env_indices: Sequence[int],
                      arrivals: Arrivals | None = None) -> Pending:
        """``remake`` without waiting: the sub-envs count as hosted again at once, their
        requests queue behind the make."""
        self.refuse_if_closing()
        self._lost.difference_update(env_indices)
        return self.submit(Op.MAKE, env_indices, [self.env_fns[i] for i in env_indices],
                           arrivals)

    def hosts_started(self) -> bool:
        return hasattr(self, "_slots")

    async def wait_closed(self, pending: Pending) -> None:
        await pending.wait()
        if self._retired:  # envs given up on earlier are still closing
            self._retired_closed = anyio.Event()
            await self._retired_closed.wait()

    async def release_hosts(self, pending: Pending) -> None:
        self._cancel_all()
        if self._hosts_alive:  # let the cancelled hosts unwind (bounded: an env might not)
            self._hosts_ended = anyio.Event()
            with anyio.move_on_after(_UNWIND_TIMEOUT):
                await self._hosts_ended.wait()
        await cleanups_finished()  # those of cancelled hosts (each within its bound)

    def _cancel_all(self) -> None:
        self._cancelled_all = True
        self._waiting.clear()
        for slot in [*self._slots, *self._retired]:
            slot.jobs.clear()
            # A host that has yet to take its turn ends by itself (an asyncio task cancelled
            # before it ever ran would not even run its ``finally``).
            if slot.host is not None and (slot.running or slot.parked is not None):
                slot.host.cancel()

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


#: How long ``aclose`` waits for the cancelled hosts to end (an env's step that swallows the
#: cancellation can keep its host running; it is then left to finish on its own).
_UNWIND_TIMEOUT = 1.0

#: Why a request to a sub-env given up on (and not remade yet) or to a closing one failed.
_GIVEN_UP = "the sub-env was given up on (it missed a deadline) or the vector env closed"
