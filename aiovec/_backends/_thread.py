"""The thread backend: each sub-env lives on its own dedicated thread for its whole life.

Many simulators and renderers demand that every call comes from the thread that created them,
so a sub-env is made, stepped and closed on one thread. Requests go through a queue per
thread; the last sub-env to answer wakes the awaiting task once, so a vector step costs one
event-loop wake-up whatever the number of sub-envs. The event loop itself never blocks.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import gymnasium as gym
from gymnasium.vector import AutoresetMode

from aiovec._backends._base import CountdownPending, given_up_reply
from aiovec._backends._slot import EnvSlot
from aiovec._core._backend import Arrivals, Backend, Pending
from aiovec._core._cleanups import hosted, run_cleanups, take_cleanups
from aiovec._core._loop_wakeup import ThreadsafeCaller, threadsafe_caller
from aiovec._core._requests import NO_REPLY, Failure, Op, Remade
from aiovec._core._statistics import LatencyLog
from aiovec._limits._shared import SharedLimits
from aiovec._limits._take import bind
from aiovec._limits._takers import LocalTaker, Taker

__all__ = ["ThreadBackend"]

# (request, payload, where the reply goes or None to drop it, position in that request)
_Job = tuple[Op, Any, "_ThreadPending | None", int]


class _ThreadPending(CountdownPending):
    """Replies handed in by sub-env threads: counted under a lock in those threads, so that
    only the last one wakes the event loop (one wake-up per request, not one per reply)."""

    __slots__ = ("_arrived", "_lock", "_wake")

    def __init__(self, op: Op, env_indices: Sequence[int], wake: ThreadsafeCaller,
                 arrivals: Arrivals | None = None) -> None:
        super().__init__(op, env_indices, arrivals)
        self._arrived = 0
        self._lock = threading.Lock()
        self._wake = wake

    def deliver(self, position: int, reply: Any) -> None:
        """Store one sub-env's reply (called from that sub-env's thread)."""
        self.replies[position] = reply
        if self.arrivals is not None:  # first-ready: recv counts the replies itself
            self.arrivals.land_from_thread(self, position)
            return
        with self._lock:
            self._arrived += 1
            last = self._arrived == len(self.env_indices)
        if last:
            # A RuntimeError means the event loop is closed: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                self._wake(self.paid_in_full)


class _Permit:
    """A sub-env thread's share of ``max_concurrency``: held while a request runs, given back
    when it ends, or at once when the thread is given up on (a hung sub-env must not starve
    the others; the given-up thread then runs unlimited until it exits)."""

    __slots__ = ("_given_up", "_held", "_limiter", "_lock")

    def __init__(self, limiter: threading.Semaphore) -> None:
        self._limiter = limiter
        self._lock = threading.Lock()
        self._held = False
        self._given_up = False

    def __enter__(self) -> None:
        if not self._given_up:
            self._limiter.acquire()
            self._keep()

    def _keep(self) -> None:
        """Hold the permit just acquired, unless the thread was given up on meanwhile."""
        with self._lock:
            if self._given_up:
                self._limiter.release()
            else:
                self._held = True

    def __exit__(self, *exc_info: object) -> None:
        self._give_back()

    def give_up(self) -> None:
        with self._lock:
            self._given_up = True
        self._give_back()

    def _give_back(self) -> None:
        with self._lock:
            held, self._held = self._held, False
        if held:
            self._limiter.release()


def _thread_main(slot: EnvSlot, jobs: queue.SimpleQueue[_Job], permit: _Permit | None,
                 taker: Taker | None) -> None:
    """A sub-env thread's whole life: serve requests until asked to close.

    With a ``permit`` (``max_concurrency``), a request runs only while holding it, so at most
    that many sub-envs work at once. With a ``taker``, the sub-env's ``aiovec.limit`` takes
    from it (the vector env's ``limits=``).
    """
    bind(taker)
    hosted.set(True)  # its cleanups outlive this process (its keeper's)
    while True:
        op, payload, pending, position = jobs.get()
        try:
            if permit is None:
                reply = slot.run(op, payload)
            else:
                with permit:
                    reply = slot.run(op, payload)
        except BaseException as exc:  # SystemExit/KeyboardInterrupt raised by the env itself
            reply = Failure.capture(slot.env_index, op.value, exc)
        if pending is not None:
            pending.deliver(position, reply)
        if op is Op.CLOSE:
            return


def _run_cleanups_of(slots: list[EnvSlot]) -> None:
    for slot in slots:
        if slot.env is not None:
            run_cleanups(take_cleanups(slot.env), slot.env_index, slot.cleanups)


#: Hung sub-env threads still running, beyond which no replacement thread is started.
MAX_ABANDONED_THREADS = 64


class ThreadBackend(Backend):
    """One dedicated thread per sub-env; steps run concurrently.

    A thread cannot be killed: a sub-env that misses a deadline is *abandoned* (told to close
    whenever its call returns, never sent anything else) and its slot gets a new thread and a
    fresh env at the next ``remake``. At most ``MAX_ABANDONED_THREADS`` may linger.
    """

    name: ClassVar[str] = "thread"
    in_process: ClassVar[bool] = True

    def __init__(self, env_fns: Sequence[Any], autoreset_mode: AutoresetMode, *,
                 max_concurrency: int | None = None, limits: SharedLimits | None = None,
                 episode_timeout: float | None = None) -> None:
        super().__init__(env_fns, autoreset_mode, limits=limits,
                         episode_timeout=episode_timeout)
        self.max_concurrency = max_concurrency
        self._limiter = None if max_concurrency is None else threading.Semaphore(max_concurrency)
        self._permits: list[_Permit | None] = [None] * self.num_envs
        #: Each sub-env thread's taker of the vector env's limits (``limits=``), if any.
        self._takers: list[LocalTaker | None] = [None] * self.num_envs

    _slots: list[EnvSlot]
    _queues: list[queue.SimpleQueue[_Job]]
    _threads: list[threading.Thread | None]
    _wake: ThreadsafeCaller

    async def start(self) -> Pending:
        self._wake = threadsafe_caller()
        self.latencies = LatencyLog.allocate(self.num_envs)
        self._slots = [self._new_slot(index) for index in range(self.num_envs)]
        self._queues = [queue.SimpleQueue() for _ in range(self.num_envs)]
        self._threads = [None] * self.num_envs
        self._abandoned: list[threading.Thread] = []
        #: The sub-envs of abandoned threads: if still hung at close, their cleanups run then.
        self._abandoned_slots: list[tuple[threading.Thread, EnvSlot]] = []
        for env_index in range(self.num_envs):
            self._start_thread(env_index)
        return self.submit(Op.MAKE, range(self.num_envs), self.env_fns)

    def _new_slot(self, env_index: int) -> EnvSlot:
        assert self.latencies is not None
        return EnvSlot(env_index, self.autoreset_mode, self.latencies.timer(env_index),
                       self.cleanups, self.episode_timeout)

    def _start_thread(self, env_index: int) -> None:
        if self._limiter is not None:
            self._permits[env_index] = _Permit(self._limiter)
        if self.limits is not None:
            self._takers[env_index] = self.limits.local_taker()
        thread = threading.Thread(target=_thread_main, daemon=True, name=f"aiovec-env-{env_index}",
                                  args=(self._slots[env_index], self._queues[env_index],
                                        self._permits[env_index], self._takers[env_index]))
        self._threads[env_index] = thread
        thread.start()

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
               arrivals: Arrivals | None = None) -> Pending:
        pending = _ThreadPending(op, env_indices, self._wake, arrivals)
        queues, threads = self._queues, self._threads
        for position, (env_index, payload) in enumerate(zip(pending.env_indices, payloads)):
            if threads[env_index] is None or self.closing:  # abandoned, or closed
                pending.deliver(position, given_up_reply(env_index, op, _NO_THREAD))
            else:
                queues[env_index].put((op, payload, pending, position))
        return pending

    def lost_envs(self) -> list[int]:
        return [index for index, thread in enumerate(self._threads) if thread is None]

    def discard(self, env_indices: Sequence[int]) -> None:
        for env_index in env_indices:
            thread = self._threads[env_index]
            if thread is None:
                continue
            # The old thread closes its env and exits if its call ever returns.
            self._queues[env_index].put((Op.CLOSE, None, None, 0))
            permit, taker = self._permits[env_index], self._takers[env_index]
            if permit is not None:
                permit.give_up()
            if taker is not None:  # a take it waits in gives up: it holds nothing past now
                taker.abandon()
            self._abandoned.append(thread)
            self._abandoned_slots.append((thread, self._slots[env_index]))
            self._threads[env_index] = None
            self._slots[env_index] = self._new_slot(env_index)
            self._queues[env_index] = queue.SimpleQueue()

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        self.refuse_if_closing()
        lingering = self.abandoned_threads()
        refused: list[Failure] = []
        for env_index in env_indices:
            if self._threads[env_index] is not None:
                continue
            if lingering >= MAX_ABANDONED_THREADS:
                refused.append(Failure(
                    env_index, "make", None,
                    f"RuntimeError: {lingering} abandoned sub-env threads are still running "
                    f"(the cap is {MAX_ABANDONED_THREADS}); not starting another", ""))
                continue
            self._start_thread(env_index)
        startable = [i for i in env_indices if self._threads[i] is not None]
        pending = self.submit(Op.MAKE, startable, [self.env_fns[i] for i in startable])
        await pending.wait()
        return Remade(list(env_indices), sorted(pending.failures() + refused,
                                                key=lambda failure: failure.env_index))

    def abandoned_threads(self) -> int:
        self._abandoned = [thread for thread in getattr(self, "_abandoned", ())
                           if thread.is_alive()]
        return len(self._abandoned)

    def hosts_started(self) -> bool:
        return hasattr(self, "_threads")

    async def release_hosts(self, pending: Pending) -> None:
        # Threads that answered are returning; a hung one is a daemon and is abandoned.
        finishing = [thread for thread, reply in zip(self._threads, pending.replies)
                     if reply is not NO_REPLY and thread is not None]
        await anyio.to_thread.run_sync(_join_all, finishing, 1.0)
        # A sub-env still hung will close itself if its call ever returns; its cleanups
        # run now (taken, so never twice).
        hung = [slot for thread, slot in self._abandoned_slots if thread.is_alive()]
        hung += [slot for thread, slot, reply in zip(self._threads, self._slots,
                                                     pending.replies)
                 if reply is NO_REPLY and thread is not None]
        if any(slot.env is not None for slot in hung):
            await anyio.to_thread.run_sync(_run_cleanups_of, hung)

    def close_nowait(self) -> None:
        # No event loop may be running here, so the replies are dropped rather than awaited.
        self.closing = True
        for jobs in getattr(self, "_queues", ()):
            jobs.put((Op.CLOSE, None, None, 0))

    def closing_threads(self) -> Sequence[threading.Thread]:
        # Not the abandoned ones: hung, their cleanups stay unclaimed, for the keeper to run.
        return [thread for thread in getattr(self, "_threads", ()) if thread is not None]

    def local_env(self, env_index: int) -> gym.Env[Any, Any]:
        env = self._slots[env_index].env
        if env is None:
            raise RuntimeError(f"sub-env {env_index} is not running")
        return env

    def describe(self) -> str:
        alive = sum(thread is not None and thread.is_alive()
                    for thread in getattr(self, "_threads", ()))
        return f"thread backend, {alive} threads alive"


#: Why a request to a sub-env without a thread failed (the abandoned thread closes its env
#: itself, so a close request succeeds).
_NO_THREAD = "the sub-env has no thread (abandoned after missing a deadline, or closed)"


def _join_all(threads: Sequence[threading.Thread], timeout: float) -> None:
    for thread in threads:
        thread.join(timeout)
