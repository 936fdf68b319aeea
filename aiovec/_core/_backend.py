"""The small interface every backend implements, and the in-flight request it returns.

A backend hosts the sub-envs somewhere (the event loop's thread, dedicated threads, worker
processes, …) and serves ``Op`` requests on them. It knows nothing about batching, seeding or
info merging: the async core does that, once, for every backend.

A request is fire-and-forget (``submit`` never blocks); its ``Pending`` collects the replies,
in any order, from any thread. Replies to a request that nobody awaits any more (the caller
was cancelled or timed out) land in that request's own ``Pending`` and are dropped with it, so a
late reply can never be taken for the answer to a newer request.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import enum
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import gymnasium as gym
from gymnasium.vector import AutoresetMode

from aiovec._core._cleanups import CleanupTally
from aiovec._core._infos import PackedInfos
from aiovec._core._loop_wakeup import ThreadsafeCaller
from aiovec._core._requests import NO_REPLY, BatchBuffers, Failure, Op, Remade
from aiovec._core._spaces import VectorSpaces
from aiovec._core._statistics import LatencyLog
from aiovec._exceptions import ClosedError
from aiovec._limits._shared import SharedLimits

__all__ = ["Arrivals", "Backend", "Pending", "Waited"]


class Waited(enum.Enum):
    """How ``Pending.wait_here`` ended."""

    #: Every reply is in.
    DONE = "done"
    #: The timeout passed first: the sub-envs still owing a reply are late.
    LATE = "late"
    #: What is left needs the event loop (a dead worker's exit status to wait for): finish
    #: with ``wait`` there.
    ON_LOOP = "on loop"


class Arrivals:
    """Where first-ready requests announce each reply as it lands, so that ``recv`` wakes
    once, when enough have landed, however many requests and threads deliver them; and,
    while a ``pump`` is set, a callback runs soon in the loop's thread after replies land
    (the in-flight cap's queue dispatches what they made room for)."""

    __slots__ = ("_event", "_lock", "_pump_due", "_target", "_wake", "landed", "pump", "reader",
                 "total", "wakes")

    def __init__(self, wake: ThreadsafeCaller | None = None) -> None:
        #: ``(request, position)`` of every reply landed and not yet taken, in landing order.
        self.landed: collections.deque[tuple[Pending, int]] = collections.deque()
        #: How many replies ever landed (taken or not): what a waiting ``recv`` counts.
        self.total = 0
        self._lock = threading.Lock()
        self._target = math.inf
        self._event: anyio.Event | None = None
        self._wake = wake
        #: Called soon in the loop's thread after replies land, while set (one call for the
        #: replies that land before it runs).
        self.pump: Callable[[], object] | None = None
        self._pump_due = False
        #: The cancel scope of a ``wait_arrivals`` that reads replies itself, while it does:
        #: ``wake`` and ``refresh`` cancel it; ``wakes`` counts the wake-ups, to tell them
        #: apart (it returns after a wake, and reads again after a refresh).
        self.reader: anyio.CancelScope | None = None
        self.wakes = 0

    def land(self, pending: Pending, position: int) -> None:
        """A reply landed (called in the event loop's thread)."""
        self.landed.append((pending, position))
        self.total += 1
        if self.total >= self._target:
            event, self._event, self._target = self._event, None, math.inf
            if event is not None:  # once: the replies landing after it have nothing to set
                event.set()
        if self.pump is not None and not self._pump_due and self._wake is not None:
            self._pump_due = True
            self._wake(self._run_pump)

    def land_from_thread(self, pending: Pending, position: int) -> None:
        """A reply landed (called in any other thread): wakes the loop only when enough have."""
        with self._lock:
            self.landed.append((pending, position))
            self.total += 1
            event = self._event if self.total >= self._target else None
            if event is not None:
                self._event, self._target = None, math.inf
            pump = self.pump is not None and not self._pump_due
            if pump:
                self._pump_due = True
        if self._wake is not None and (event is not None or pump):
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                if event is not None:
                    self._wake(event.set)
                if pump:
                    self._wake(self._run_pump)

    def _run_pump(self) -> None:
        with self._lock:
            self._pump_due = False
        pump = self.pump
        if pump is not None:
            pump()

    def goal(self, count: int) -> int:
        """The ``total`` at which ``count`` replies not taken yet have landed (those waiting in
        ``landed`` count): a goal that holds however many are taken meanwhile."""
        with self._lock:
            return self.total - len(self.landed) + count

    async def wait(self, count: int) -> None:
        """Return once ``count`` replies not taken when called have landed (cancellable)."""
        with self._lock:
            goal = self.total - len(self.landed) + count
            if self.total >= goal:
                event = None
            else:
                event = self._event = anyio.Event()
                self._target = goal
        if event is None:
            await anyio.lowlevel.checkpoint()
            return
        try:
            await event.wait()
        finally:
            with self._lock:
                if self._event is event:
                    self._event, self._target = None, math.inf

    def refresh(self) -> None:
        """More requests were submitted: a ``wait_arrivals`` reading replies itself starts
        reading their hosts too."""
        if self.reader is not None:
            self.reader.cancel()

    def wake(self) -> None:
        """Wake the waiting ``recv`` now (the vector env is closing, or what it waits for was
        aborted): it returns from its wait early and looks again."""
        self.wakes += 1
        if self._event is not None:
            self._event.set()
        if self.reader is not None:
            self.reader.cancel()


class Pending(abc.ABC):
    """Replies to one request, one per addressed sub-env, in the order of ``env_indices``.

    A first-ready request (``arrivals`` set) also announces each reply there as it lands.
    """

    __slots__ = ("arrivals", "env_indices", "op", "packed_infos", "quiet", "replies")

    #: False while the request provably reached no sub-env (so cancelling it changed nothing).
    started: bool = True

    def __init__(self, op: Op, env_indices: Sequence[int],
                 arrivals: Arrivals | None = None) -> None:
        self.op = op
        self.env_indices = tuple(env_indices)
        self.replies: list[Any] = [NO_REPLY] * len(self.env_indices)
        self.arrivals = arrivals
        #: True while no reply of a step written in place (``attach``) had anything to report:
        #: once every reply came, each is ``None`` (no infos, no failure) and the core need
        #: not read them one by one. Backends that never know it leave it false.
        self.quiet = False
        #: Step infos merged by the host of a run of sub-envs, ``(first sub-env, infos)``:
        #: those sub-envs' replies are ``None`` (``_infos.splice_infos``).
        self.packed_infos: tuple[tuple[int, PackedInfos], ...] = ()  # no list per step

    @abc.abstractmethod
    async def wait(self) -> None:
        """Return once every addressed sub-env has replied (cancellable)."""

    def wait_here(self, timeout: float | None) -> Waited:
        """``wait``, blocking the calling thread with no event loop, ``timeout`` seconds at
        most (only on a backend that ``waits_in_caller``, from the thread that runs its event
        loop, while the loop stands still)."""
        raise NotImplementedError("this backend's replies arrive through its event loop")

    def abandon(self) -> None:
        """The caller gave up on this request: what still arrives is never read.

        Backends that write replies into the batch arrays when they arrive (not in request
        order) must then stop writing them, or a late reply could land over a later call's.
        """
        return

    def abort(self) -> None:
        """Wake the task waiting on this request now (the vector env is closing).

        Backends whose closing fails every outstanding request anyway need do nothing.
        """
        return

    def failures(self) -> list[Failure]:
        """The replies that are failures, in sub-env order."""
        return [reply for reply in self.replies if type(reply) is Failure]

    def unanswered(self) -> list[int]:
        """The indices of the sub-envs that still owe a reply."""
        return [index for index, reply in zip(self.env_indices, self.replies)
                if reply is NO_REPLY]


class Backend(abc.ABC):
    """Hosts ``len(env_fns)`` sub-envs and serves requests on them.

    Replies to ``Op.STEP`` are ``StepOutcome`` tuples and to ``Op.RESET`` ``ResetOutcome``,
    unless ``attach`` returned ``BatchBuffers`` (see there). Any reply may be a ``Failure``.
    """

    name: ClassVar[str]
    #: True when the sub-envs live in this process, so their objects can be read directly.
    in_process: ClassVar[bool]
    #: True when a request is served in full in the calling thread (``Pending.wait_here``
    #: runs the sub-envs there, one after another: inline), so awaiting it is no wait.
    serves_in_caller: ClassVar[bool] = False
    #: True when a request's replies can be waited for in the calling thread with no event
    #: loop (``Pending.wait_here``): what the sync shim does between two blocking calls.
    waits_in_caller: bool = False
    #: True when ``Op.STEP`` takes the checked batch of actions whole, not one per sub-env.
    takes_action_batches: bool = False
    #: False when ``submit`` is done with a step's actions by the time it returns (written to
    #: shared memory, pickled): the core then hands it the caller's arrays, not a private copy.
    keeps_actions: ClassVar[bool] = True
    #: Each sub-env's sampled step durations, once started; ``None`` on a backend whose
    #: hosts the parent cannot read from (Ray: its summaries then have counts only).
    latencies: LatencyLog | None = None
    #: True once closing began: no request reaches a sub-env, no restart starts a host.
    closing: bool = False

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        autoreset_mode: AutoresetMode,
        *,
        limits: SharedLimits | None = None,
        episode_timeout: float | None = None,
        **options: Any,
    ) -> None:
        if options:
            raise TypeError(f"the {self.name} backend takes no options {sorted(options)}")
        #: The vector env's named limits (``limits=``), which its sub-envs' calls take from.
        self.limits = limits
        #: Seconds an episode may last (``episode_timeout=``; ``_autoreset``), or ``None``.
        self.episode_timeout = episode_timeout
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.autoreset_mode = autoreset_mode
        #: Processes the sub-envs had started that were ended when their sub-env closed,
        #: restarted or died (backends that isolate process trees).
        self.descendants_reaped = 0
        #: The sub-envs' registered cleanups run and failed (see ``_core._cleanups``).
        self.cleanups = CleanupTally()

    @abc.abstractmethod
    async def start(self) -> Pending:
        """Make every sub-env (``Op.MAKE``); the replies are ``EnvDescription`` or ``Failure``."""

    async def attach(self, spaces: VectorSpaces) -> BatchBuffers | None:
        """Called once the spaces are known; in-place backends return their buffers."""
        return None

    @abc.abstractmethod
    def submit(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
               arrivals: Arrivals | None = None) -> Pending:
        """Send ``op`` to each sub-env in ``env_indices`` with its payload; never blocks.

        ``payloads`` is one per sub-env, or for ``Op.STEP`` on a backend that
        ``takes_action_batches``, the checked batch of their actions (in ``env_indices``
        order). With ``arrivals``, every reply is also announced there as it lands.
        """

    def queue_options(self, queued: dict[int, tuple[Any, ...]]) -> None:
        """Set the reset options queued for each sub-env's next automatic resets
        (``{env_index: options, oldest first}``; ``Op.OPTIONS``), without waiting: the engine
        does so only for sub-envs that run nothing, just before it steps them, and each host
        serves its requests in order, so they are in place for that step. Nothing is read
        back (a host that died meanwhile fails the step instead)."""
        self.submit(Op.OPTIONS, list(queued), list(queued.values()))

    async def wait_arrivals(self, arrivals: Arrivals, count: int) -> None:
        """Return once ``count`` replies of first-ready requests not taken when called have
        landed (``Arrivals.wait``; cancellable).

        Backends whose replies need the waiting task to do the work (read sockets, run the
        sub-envs) override this.
        """
        await arrivals.wait(count)

    def poll_arrivals(self) -> None:
        """Deliver first-ready replies that came in and wait to be read, without waiting for
        more. Only backends whose replies the waiting task reads have any (``wait_arrivals``)."""
        return

    def abort_steps(self, steps: Sequence[tuple[Pending, int]]) -> list[tuple[Pending, int]]:
        """The caller aborted these first-ready steps (``(request, position)`` each): stop
        them where that harms no other sub-env → those it did not stop, whose replies still
        land (the in-flight cap counts them until then).

        Whatever they still reply is never read, and their sub-envs are reset before they
        step again, so a backend that cannot stop one (a thread, a worker process, a Ray
        actor) lets it finish; a step not started yet may still run."""
        return list(steps)

    def lost_envs(self) -> list[int]:
        """Sub-envs whose host is gone (dead worker, abandoned thread): only ``remake`` helps."""
        return []

    def discard(self, env_indices: Sequence[int]) -> None:
        """These sub-envs missed a deadline: make sure whatever they still owe is never used
        (kill their worker, abandon their thread). They are lost until remade.

        The inline backend's sub-envs run to completion before the event loop can notice a
        deadline; only a first-ready step, sent and not run yet, can miss one there.
        """
        return

    @abc.abstractmethod
    async def remake(self, env_indices: Sequence[int]) -> Remade:
        """Make the sub-envs at ``env_indices`` afresh (closing any old one, its errors ignored).

        Cancellable; a cancelled remake leaves the sub-envs it had not finished lost.
        """

    def abandoned_threads(self) -> int:
        """Hung sub-env threads given up on and still running."""
        return 0

    # ------------------------------------------------------------------ closing

    def closing_began(self) -> bool:
        """True once ``aclose`` or ``close_nowait`` began (a method, not an attribute: the
        answer changes across the awaits of a restart racing a close)."""
        return self.closing

    def refuse_if_closing(self) -> None:
        """Stop a restart that raced a close: it must not start hosts nobody will close."""
        if self.closing:
            raise ClosedError("the vector env was closed during a restart")

    async def aclose(self, timeout: float) -> Pending | None:
        """Close every sub-env and release everything; bounded by ``timeout`` seconds.

        Sends ``Op.CLOSE`` to every sub-env, waits at most ``timeout`` for the replies, then
        lets the backend release its hosts (``release_hosts``) whatever came back. Returns the
        close request, so the caller can report sub-envs whose ``close`` raised, or ``None``
        when the sub-envs were never made or closing had begun already.
        """
        if self.closing:
            return None
        if not self.hosts_started():
            self.closing = True
            return None
        pending = self.submit(Op.CLOSE, range(self.num_envs), [None] * self.num_envs)
        self.closing = True  # from now on, no request reaches a sub-env
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(timeout):
                await self.wait_closed(pending)
            await self.release_hosts(pending)
        return pending

    @abc.abstractmethod
    def hosts_started(self) -> bool:
        """True once ``start`` made hosts (tasks, threads, workers, actors) to close."""

    async def wait_closed(self, pending: Pending) -> None:
        """Wait for the close request (cancelled by ``aclose``'s deadline)."""
        await pending.wait()

    async def release_hosts(self, pending: Pending) -> None:
        """Release the hosts once the close request was answered or its deadline passed:
        stop what is still running, free what the backend holds (shielded, not timed)."""
        return

    @abc.abstractmethod
    def close_nowait(self) -> None:
        """Best-effort teardown without awaiting (for ``__del__`` and broken event loops);
        sets ``closing``."""

    def closing_threads(self) -> Sequence[threading.Thread]:
        """After ``close_nowait``: this process's threads still closing sub-envs (and running
        their cleanups), which interpreter exit waits for (``_exit.join_at_exit``). None by
        default."""
        return ()

    def local_env(self, env_index: int) -> gym.Env[Any, Any]:
        """The sub-env object itself, for backends whose sub-envs live in this process."""
        raise NotImplementedError(f"the {self.name} backend keeps its sub-envs out of process")

    def describe(self) -> str:
        """A few words for ``repr``: how many sub-envs are alive and where."""
        return f"{self.name} backend"
