"""The process backend: worker processes, each hosting a contiguous share of the sub-envs.

Data path: observations, actions, rewards and episode ends live in one shared memory block
(``_shared_memory``); a step is one tiny frame to each worker and one tiny frame back, with
infos pickled only when a sub-env has some. Signalling costs no CPU while waiting: on asyncio
each worker's socket has a persistent readiness callback that completes one future per request;
elsewhere (trio) the waiting task parks on the sockets through anyio.

A worker that dies (EOF on its socket) fails every request it owed with ``WorkerDiedError``
naming its sub-envs and exit status, promptly and never as a bare ``EOFError``. Workers die with
the parent (Linux parent-death signal, and EOF), and ``aclose`` is bounded: close, then
terminate, then kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import cloudpickle
import sniffio
from gymnasium.vector import AutoresetMode

from aiovec._backends._base import given_up_reply, split_into_shares, workers_within
from aiovec._backends._children import START_METHODS, Child, start_child
from aiovec._backends._process._coroutines import (
    GIVEN_UP,
    CoroutinePending,
    deliver_replies,
    give_up_on,
    withdraw,
)
from aiovec._backends._process._forkserver import ForkServer
from aiovec._backends._process._forkserver import available as fork_server_available
from aiovec._backends._process._info_records import RecordReader
from aiovec._backends._process._parent_worker import ParentThread
from aiovec._backends._process._protocol import HEADER, Kind, dumps, encode
from aiovec._backends._process._shared_memory import (
    BlockLayout,
    BlockViews,
    map_block,
    open_block,
    same_dtypes,
    write_rows,
)
from aiovec._backends._process._worker import ANY_KIND, COROUTINES, PLAIN
from aiovec._backends._process._workers import ProcessPending, WorkerHandle, read_replies
from aiovec._backends._process_tree import GRACE
from aiovec._backends._registrations import export_registrations
from aiovec._core._async_env import makes_async_envs
from aiovec._core._backend import Arrivals, Backend, Pending
from aiovec._core._observations import copy_into, read_row
from aiovec._core._requests import BatchBuffers, Failure, Op, Remade
from aiovec._core._selection import usable_cpus
from aiovec._core._spaces import VectorSpaces
from aiovec._exceptions import ClosedError, WorkerDiedError
from aiovec._limits._shared import SharedLimits
from aiovec._object_space import ObjectSpace

__all__ = ["ProcessBackend"]

_KIND_OF_OP = {Op.RESET: Kind.RESET, Op.STEP: Kind.STEP, Op.CALL: Kind.CALL,
               Op.SET_ATTR: Kind.SET_ATTR, Op.CLOSE: Kind.CLOSE, Op.MAKE: Kind.MAKE,
               Op.OPTIONS: Kind.OPTIONS}
#: Requests only the workers of the sub-envs they address get (the others go to every worker,
#: a payload per hosted sub-env).
_ADDRESSED = (Op.RESET, Op.MAKE, Op.OPTIONS)
# Seconds to wait for a dead worker's exit status: its fork server first ends what the
# worker left behind (SIGTERM, a grace, SIGKILL). Event-driven: only a status that never
# comes waits this long.
_REAP_TIMEOUT = GRACE + 5.0
_EXIT_TIMEOUT = 2.0  # seconds a worker gets to exit after CLOSE, then after SIGTERM
#: Seconds a coroutine worker's event loop may take to acknowledge a DISCARD before it is
#: taken for stuck (a sub-env blocking it) and killed at the next restart.
_ACK_GRACE = 5.0
_ACK_MOMENT = 0.5
# Seconds a closing fork server gets to exit: it ends whatever is left below it first.
_SERVER_EXIT_TIMEOUT = GRACE + 5.0
#: ``parent_worker``'s default where it is not given: "1" for on (the test suite runs its
#: process-backend tests both ways with it).
PARENT_WORKER_VARIABLE = "AIOVEC_PARENT_WORKER"
#: A fork server where the platform has one (Linux), else a fresh interpreter per worker.
DEFAULT_START_METHOD = "forkserver" if fork_server_available() else "spawn"


def default_num_workers(num_envs: int) -> int:
    """One worker per usable CPU, never more than there are sub-envs."""
    return max(1, min(num_envs, usable_cpus()))


class ProcessBackend(Backend):
    """Sub-envs in ``num_workers`` worker processes, results in shared memory."""

    name: ClassVar[str] = "process"
    in_process: ClassVar[bool] = False
    # submit writes a step's actions into shared memory, or pickles them into the frames.
    keeps_actions: ClassVar[bool] = False
    # The sync shim reads the workers' sockets itself, with its event loop standing still.
    waits_in_caller: bool = True

    def __init__(self, env_fns: Sequence[Any], autoreset_mode: AutoresetMode, *,
                 num_workers: int | None = None, start_method: str | None = None,
                 max_concurrency: int | None = None, parent_worker: bool | None = None,
                 limits: SharedLimits | None = None,
                 episode_timeout: float | None = None, hosts_coroutines: bool = True) -> None:
        super().__init__(env_fns, autoreset_mode, limits=limits,
                         episode_timeout=episode_timeout)
        #: What the workers are told they host (``_worker.learn_kind``): whichever their
        #: factories make, until the first workers said; only plain envs where coroutine envs
        #: must fail (``CoroutineEnvError``: ``"auto"`` then switches to the async backend).
        self._worker_kind = ANY_KIND if hosts_coroutines else PLAIN
        self.num_workers = workers_within(num_workers, max_concurrency,
                                          default_num_workers(self.num_envs))
        if not 1 <= self.num_workers <= self.num_envs:
            raise ValueError(f"num_workers must be between 1 and {self.num_envs}, "
                             f"got {self.num_workers}")
        #: Coroutine workers run their sub-envs at once: each takes its part of the cap
        #: (``max_concurrency`` split over the workers, at least 1 each), so the sum holds it.
        self._caps: list[int | None] = (
            [None] * self.num_workers if max_concurrency is None
            else [len(part) for part in split_into_shares(max_concurrency, self.num_workers)])
        self.start_method = start_method or DEFAULT_START_METHOD
        if self.start_method not in START_METHODS:
            raise ValueError(f"unknown start method {self.start_method!r}; "
                             f"choose one of {', '.join(START_METHODS)}")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.buffers: BatchBuffers | None = None
        #: Reads the step infos the workers write into the block's records.
        self.records = RecordReader()
        self._workers: list[WorkerHandle] = []
        self._sequence = itertools.count(1)
        self._block: Any = None
        self._block_fd: int | None = None
        self._action_views: Any = None
        self._lifeline: tuple[int, int] | None = None
        #: Each worker's INIT but what it hosts (``_worker_kind``, known once they said).
        self._inits: list[tuple[Any, ...]] = []
        self._worker_of: list[int] = [0] * self.num_envs
        self._attach_frame = b""
        self._fork_server: ForkServer | None = None
        self._fork_server_lock = threading.Lock()
        self.every_env = tuple(range(self.num_envs))
        self._every_range = range(self.num_envs)
        if parent_worker and self.start_method == "fork":
            raise ValueError("parent_worker=True does not go with start_method='fork': "
                             "restarts would fork the parent while its worker thread runs")
        if parent_worker is None:
            parent_worker = (os.environ.get(PARENT_WORKER_VARIABLE, "") == "1"
                             and self.start_method != "fork")
        if makes_async_envs(self.env_fns[0]):  # an event loop here already runs coroutines
            parent_worker = False
        #: The worker that is a thread of this process (``_parent_worker``), if any: the last.
        self.parent_worker: int | None = self.num_workers - 1 if parent_worker else None
        #: Every parent worker thread started, until it ends (abandoned ones included).
        self._parent_threads: list[ParentThread] = []
        #: True once the workers said they host coroutine envs (``_coroutine_worker``):
        #: requests then take ``_coroutines``'s path, with no shared memory.
        self.coroutines = False
        #: Coroutine envs given up on and not remade yet (their workers live on).
        self._lost: set[int] = set()
        #: ``aclose``'s bound, which coroutine workers give their sub-envs to close.
        self._close_timeout = math.inf

    @property
    def workers(self) -> Sequence[WorkerHandle]:
        """The handles on the workers, by index."""
        return self._workers

    # ------------------------------------------------------------------ start-up

    def _launch(self) -> list[WorkerHandle]:
        """Start every worker process and send it its sub-envs (blocking: run in a thread)."""
        shares = split_into_shares(self.num_envs, self.num_workers)
        # Pickle first: a factory that cannot be pickled fails here, before any process exists.
        registrations = export_registrations()
        limits = None if self.limits is None else self.limits.for_workers()
        self._inits = [(hosted.start, self.autoreset_mode.value,
                        cloudpickle.dumps([self.env_fns[i] for i in hosted]),
                        registrations, limits, self.episode_timeout, cap)
                       for hosted, cap in zip(shares, self._caps)]
        for index, hosted in enumerate(shares):
            self._worker_of[hosted.start:hosted.stop] = [index] * len(hosted)
        # The lifeline: see _worker._exit_with_parent. The read end stays open here
        # too, for workers started later (restarts).
        self._lifeline = os.pipe()
        workers: list[WorkerHandle] = []
        try:
            for index, hosted in enumerate(shares):
                workers.append(self._spawn(index, hosted, send_init=False))
            for worker in workers:  # meanwhile, the workers start up
                self._send_init(worker)
        except BaseException:
            for worker in workers:
                worker.process.signal(signal.SIGKILL)
                worker.process.wait_blocking(_EXIT_TIMEOUT)
                worker.process.close()
                worker.sock.close()
            self._stop_fork_server_blocking()
            os.close(self._lifeline[0])
            os.close(self._lifeline[1])
            self._lifeline = None
            raise
        return workers

    def _spawn(self, index: int, hosted: range, *, send_init: bool = True) -> WorkerHandle:
        """Start worker ``index`` for the sub-envs ``hosted`` (blocking, briefly)."""
        assert self._lifeline is not None
        parent_end, child_end = socket.socketpair()
        if index == self.parent_worker:  # the thread serves (and closes) child_end
            try:
                thread = ParentThread(child_end, index)
            except BaseException:
                parent_end.close()
                child_end.close()
                raise
            self._parent_threads.append(thread)
            child: Child | ParentThread = thread
        else:
            child = self._start_process(child_end, parent_end)
        worker = WorkerHandle(index, hosted, child, parent_end, loop=self.loop)
        if self.coroutines:
            worker.replies = self._deliver_replies
        if send_init:
            try:
                self._send_init(worker)
            except BaseException:
                child.signal(signal.SIGKILL)
                child.wait_blocking(_EXIT_TIMEOUT)
                child.close()
                parent_end.close()
                raise
        return worker

    def _start_process(self, child_end: socket.socket, parent_end: socket.socket) -> Child:
        """A worker process serving ``child_end`` (closed here once the process has it)."""
        assert self._lifeline is not None
        try:
            with child_end:
                if self._supervised:
                    child = self._start_supervised(child_end)
                else:
                    child = start_child(self.start_method, child_end, self._lifeline[0])
        except BaseException:
            parent_end.close()
            raise
        return child

    @property
    def _supervised(self) -> bool:
        """True when the workers are started (and supervised) by a fork server."""
        return self.start_method != "fork" and fork_server_available()

    def _start_supervised(self, child_end: socket.socket) -> Child:
        """A worker started by the fork server, itself started now if there is none (or it
        died)."""
        assert self._lifeline is not None
        with self._fork_server_lock:  # restarts start workers from several threads at once
            server = self._fork_server
            if server is None or server.process.poll() is not None:
                self.refuse_if_closing()  # aclose may have stopped it already: no new one
                if server is not None:  # killed from outside (its workers live on): reaped
                    server.stop_blocking(_EXIT_TIMEOUT)
                server = self._fork_server = ForkServer(self._lifeline[0])
                if self.closing_began():  # aclose began meanwhile and may not have seen it
                    self._stop_fork_server_blocking()
                    raise ClosedError("the vector env was closed during a restart")
        return server.start_child(child_end, self.start_method)

    def _send_init(self, worker: WorkerHandle) -> None:
        worker.sock.sendall(encode(Kind.INIT, 0, dumps((*self._inits[worker.index],
                                                         self._worker_kind))))
        worker.sock.setblocking(False)

    async def start(self) -> Pending:
        if sniffio.current_async_library() == "asyncio":
            self.loop = asyncio.get_running_loop()
        if self.start_method == "fork":  # fork from the loop's thread, not a pool thread
            self._workers = self._launch()
        else:
            self._workers = await anyio.to_thread.run_sync(self._launch)
        pending = ProcessPending(self, Op.MAKE, range(self.num_envs), 0)
        for worker in self._workers:
            self._expect_hello(worker, pending)
        return pending

    def _expect_hello(self, worker: WorkerHandle, pending: ProcessPending) -> None:
        """``pending`` gets the worker's HELLO (its sub-envs made, or failed)."""
        worker.outstanding.append((0, pending))
        pending.expect(worker)
        if self.loop is not None:
            self.loop.add_reader(worker.sock.fileno(), worker.receive)

    async def attach(self, spaces: VectorSpaces) -> BatchBuffers | None:
        hosting = {worker.coroutines for worker in self._workers}
        if True in hosting:  # coroutine envs: no shared memory, replies sub-env by sub-env
            if False in hosting:
                raise TypeError("some factories make coroutine envs (aiovec.AsyncEnv) and "
                                "others plain gymnasium envs: one vector env runs one kind")
            self.coroutines = True
            self._worker_kind = COROUTINES  # a restarted worker need not find out again
            self.waits_in_caller = False  # their replies come through the event loop
            for worker in self._workers:
                worker.replies = self._deliver_replies
            # Shared memory for the step latencies alone (results travel pickled).
            await self._map_block(BlockLayout.plan(ObjectSpace(), ObjectSpace(), self.num_envs))
            return None
        self._worker_kind = PLAIN
        # Worker processes done early wait for each other, not for a parent worker: the
        # parent is awake anyway while its own thread steps (waiting for it only spins).
        views = await self._map_block(BlockLayout.plan(
            spaces.single_observation_space, spaces.single_action_space, self.num_envs,
            tuple(worker.env_indices.start for worker in self._workers
                  if worker.index != self.parent_worker)))
        if views.info_records is not None:
            self.records.attach(views.info_records)
        self._action_views = views.actions
        self.takes_action_batches = views.actions is not None
        if views.observations is None:  # results travel pickled: the core batches them
            return None
        self.buffers = BatchBuffers(views.observations, views.rewards, views.terminations,
                                    views.truncations)
        return self.buffers

    async def _map_block(self, layout: BlockLayout) -> BlockViews:
        """Make the shared memory block, have every worker map it (ATTACH) → its views."""
        self._block_fd = open_block(layout.size)
        self._block = map_block(self._block_fd, layout.size)
        views = layout.views(self._block)
        self._attach_frame = dumps(layout)
        pending = self._attach(self._workers)
        await pending.wait()
        failures = pending.failures()
        if failures:
            raise WorkerDiedError(failures[0].description,
                                  [failure.env_index for failure in failures], None)
        self.latencies = views.latencies
        return views

    def _attach(self, workers: Sequence[WorkerHandle]) -> ProcessPending:
        """Send ATTACH (the block's descriptor rides along) to ``workers``."""
        assert self._block_fd is not None
        sequence = next(self._sequence)
        # The acknowledgement carries no values: only dead workers leave a trace (failures).
        indices = sorted(index for worker in workers for index in worker.env_indices)
        pending = ProcessPending(self, Op.MAKE, indices, sequence)
        frame = encode(Kind.ATTACH, sequence, self._attach_frame)
        for worker in workers:
            if not worker.alive:
                pending.worker_died(worker)
                continue
            with contextlib.suppress(OSError):  # died already: the reader sees its EOF
                socket.send_fds(worker.sock, [frame], [self._block_fd])
            worker.outstanding.append((sequence, pending))
            pending.expect(worker)
        return pending

    # ------------------------------------------------------------------ restarts

    def lost_envs(self) -> list[int]:
        lost = [index for worker in self._workers if not worker.alive
                for index in worker.env_indices]
        return sorted(self._lost.union(lost)) if self._lost else lost

    def discard(self, env_indices: Sequence[int]) -> None:
        workers = [self._workers[index]
                   for index in sorted({self._worker_of[env] for env in env_indices})]
        if self.coroutines:  # their workers cancel them, and live on
            for worker in workers:
                self._discard_coroutines(worker, [env for env in env_indices
                                                  if env in worker.env_indices])
            return
        for worker in workers:
            worker.process.signal(signal.SIGKILL)
            worker.disconnect()

    def _discard_coroutines(self, worker: WorkerHandle, env_indices: list[int]) -> None:
        """Fail what these sub-envs owe now and have their worker cancel them (DISCARD,
        acknowledged as soon as its event loop reads it: ``remake`` kills a worker whose
        loop does not)."""
        fresh = [env for env in env_indices if env not in self._lost]
        self._lost.update(fresh)
        for env_index in fresh:
            give_up_on(worker, env_index)
        if fresh and worker.alive:
            sequence = next(self._sequence) & 0xFFFFFFFF
            worker.send(encode(Kind.DISCARD, sequence, dumps(fresh)))
            worker.unacked[sequence] = time.monotonic()

    def abort_steps(self, steps: Sequence[tuple[Pending, int]]) -> list[tuple[Pending, int]]:
        if not self.coroutines:  # a worker process steps to the end what it began
            return list(steps)
        withdrawn: dict[int, list[tuple[int, int]]] = {}
        for pending, position in steps:
            assert isinstance(pending, CoroutinePending)
            env_index = pending.env_indices[position]
            worker = self._workers[self._worker_of[env_index]]
            if withdraw(worker, pending, env_index):
                withdrawn.setdefault(worker.index, []).append((pending.sequence, env_index))
        for index, pairs in withdrawn.items():  # their coroutines are cancelled there
            self._workers[index].send(encode(Kind.ABORT, 0, dumps(pairs)))
        return []

    async def _answering(self, worker: WorkerHandle) -> bool:
        """A coroutine worker acknowledges what it was told to give up (its event loop
        answers) → True; else, once the acknowledgement is ``_ACK_GRACE`` seconds late, it
        is killed (its sub-envs are then remade with a new worker) → False."""
        if self.loop is None:  # trio: what came meanwhile is read now, not waited for
            worker.receive_waiting()
        if worker.unacked and worker.alive:
            late = min(worker.unacked.values()) + _ACK_GRACE - time.monotonic()
            # At least a moment: an acknowledgement may be on its way however late it is.
            with anyio.move_on_after(max(_ACK_MOMENT, late)):
                while worker.unacked and worker.alive:
                    if self.loop is None:  # trio: this task sends and reads
                        await worker.flush()
                        await worker.read_when_ready()
                    else:
                        worker.acked = worker.acked or anyio.Event()
                        await worker.acked.wait()
            if worker.unacked and worker.alive:
                worker.process.signal(signal.SIGKILL)
                worker.disconnect()
        return worker.alive

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        wanted = set(env_indices)
        involved = [self._workers[index]
                    for index in sorted({self._worker_of[env] for env in wanted})]
        if self.coroutines:
            for worker in involved:
                await self._answering(worker)
        dead = [worker for worker in involved if not worker.alive]
        remade = sorted(wanted.union(*(worker.env_indices for worker in dead)))
        self._lost.difference_update(remade)
        live_indices = sorted(index for index in wanted
                              if self._workers[self._worker_of[index]].alive)
        failures: list[Failure] = []
        pending = self.submit(Op.MAKE, live_indices, [None] * len(live_indices))
        async with anyio.create_task_group() as group:
            for worker in dead:
                group.start_soon(self._respawn, worker, failures)
            await pending.wait()
        failures += pending.failures()
        return Remade(remade, sorted(failures, key=lambda failure: failure.env_index))

    async def _respawn(self, old: WorkerHandle, failures: list[Failure]) -> None:
        """Replace a dead worker by a new one hosting the same sub-envs, made afresh.

        A failure to start it (or the vector env closing meanwhile) fails its sub-envs.
        """
        try:
            old.process.signal(signal.SIGKILL)
            # Its status comes once what it left behind is gone: the new one starts after.
            await old.process.wait(_REAP_TIMEOUT)
            self._retire(old)
            self.refuse_if_closing()
            if self.start_method == "fork":
                worker = self._spawn(old.index, old.env_indices)
            else:
                worker = await anyio.to_thread.run_sync(self._spawn, old.index,
                                                        old.env_indices)
            if self.closing_began():  # closed while it started: aclose never saw it
                worker.process.signal(signal.SIGKILL)
                worker.process.wait_blocking(_EXIT_TIMEOUT)
                worker.alive = False
                worker.sock.close()
                worker.process.close()
                raise ClosedError("the vector env was closed during a restart")
        except Exception as error:
            failures += [Failure(env_index, "make", error,
                                 f"{old.process.host_name(old.index)} could not be restarted: "
                                 f"{error!r}",
                                 "") for env_index in old.env_indices]
            return
        self._workers[old.index] = worker
        try:
            hello = ProcessPending(self, Op.MAKE, worker.env_indices, 0)
            self._expect_hello(worker, hello)
            await hello.wait()
            failures += hello.failures()
            if worker.alive:
                attached = self._attach([worker])
                await attached.wait()
                failures += attached.failures()
        except BaseException:  # cancelled: a half-started worker is no use to anyone
            worker.process.signal(signal.SIGKILL)
            worker.disconnect()
            raise

    def _count_what_died_with(self, worker: WorkerHandle) -> None:
        """What its fork server ended and cleaned up after it died (once it is reaped)."""
        self.descendants_reaped += worker.process.descendants_ended or 0
        self.cleanups.add(*worker.process.cleanups)

    def _retire(self, worker: WorkerHandle) -> None:
        """Release a dead worker's socket and process handle."""
        worker.disconnect()
        self._count_what_died_with(worker)
        if self.loop is None:  # wake tasks parked on the socket (trio) before closing it
            anyio.notify_closing(worker.sock)
        worker.sock.close()
        worker.process.close()

    # ------------------------------------------------------------------ requests

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Any,
               arrivals: Arrivals | None = None) -> Pending:
        if self.coroutines:
            return self._submit_coroutines(op, env_indices, payloads, arrivals)
        if op is Op.STEP and arrivals is None and env_indices == self._every_range:
            pending = self._step_through_memory(payloads)
            if pending is not None:
                return pending
        sequence = next(self._sequence)
        pending = ProcessPending(self, op, env_indices, sequence, arrivals)
        kind = _KIND_OF_OP[op]
        # First-ready steps always name their sub-envs: their infos are read one by one.
        some = op is Op.STEP and (not pending.every_env or arrivals is not None)
        if some:
            kind = Kind.STEP_SOME
        # Every frame is built before any is sent: a payload that fails to pickle must not
        # leave some workers running the request and others not.
        frames: list[tuple[WorkerHandle, bytes]] = []
        dead: list[WorkerHandle] = []
        for worker in self._workers:
            requested = (pending.hosted_by(worker) if op in _ADDRESSED or some
                         else worker.env_indices)
            if not requested:
                continue
            if not worker.alive:
                if op is not Op.CLOSE:  # a dead worker has nothing left to close
                    dead.append(worker)
                continue
            if some:
                payload = self._some_steps_payload(pending, requested, payloads)
            elif op is Op.STEP:
                payload = self._step_payload(worker, payloads)
            elif op is Op.RESET:
                payload = dumps([(env_index, *payloads[pending.position(env_index)])
                                 for env_index in requested])
            elif op is Op.OPTIONS:
                payload = dumps([(env_index, payloads[pending.position(env_index)])
                                 for env_index in requested])
            elif op is Op.SET_ATTR or op is Op.CALL:
                payload = dumps([payloads[env_index] for env_index in requested])
            elif op is Op.MAKE:
                payload = dumps(requested)
            else:
                payload = b""
            frames.append((worker, encode(kind, sequence, payload)))
        for worker in dead:
            pending.worker_died(worker)
        for worker, frame in frames:
            worker.send(frame)
            worker.outstanding.append((sequence, pending))
            pending.expect(worker)
        return pending

    def _step_through_memory(self, actions: Any) -> ProcessPending | None:
        """The hot path: every sub-env steps, its actions written into shared memory (the
        batch at once), and each worker gets a header-only frame. ``None`` when the general
        path must serve it: a dead worker, one that may still be reading the block (a request
        it has not answered), actions of another dtype than the space's."""
        views = self._action_views
        if views is None or not same_dtypes(views, actions):
            return None
        workers = self._workers
        for worker in workers:
            if worker.outstanding or not worker.alive:
                return None
        copy_into(views, actions)
        sequence = next(self._sequence)
        frame = HEADER.pack(Kind.STEP, sequence & 0xFFFFFFFF, 0)
        for worker in workers:
            worker.send(frame)
        # The bookkeeping waits until the workers are busy: replies are read only once this
        # task awaits (readiness callbacks, or the task itself on trio).
        pending = ProcessPending(self, Op.STEP, self.every_env, sequence)
        for worker in workers:
            worker.outstanding.append((sequence, pending))
            pending.expect(worker)
        return pending

    def _step_payload(self, worker: WorkerHandle, actions: Any) -> bytes:
        """Actions go through shared memory, unless the worker may still be reading it."""
        hosted = worker.env_indices
        if self.takes_action_batches:
            # Shared memory holds the space's dtype; other dtypes reach the env unchanged.
            if not worker.outstanding and same_dtypes(self._action_views, actions):
                write_rows(self._action_views, actions, slice(hosted.start, hosted.stop))
                return b""
            return dumps([read_row(actions, env_index) for env_index in hosted])
        return dumps([actions[env_index] for env_index in hosted])

    def _some_steps_payload(self, pending: ProcessPending, requested: Sequence[int],
                            actions: Any) -> bytes:
        """A first-ready step of some of a worker's sub-envs: their rows of shared memory are
        theirs alone until their results are received, so the actions go there directly."""
        positions = [pending.position(env_index) for env_index in requested]
        if not self.takes_action_batches:
            return dumps((requested, [actions[position] for position in positions]))
        if same_dtypes(self._action_views, actions):
            write_rows(self._action_views, actions, requested, positions)
            return dumps((requested, None))
        return dumps((requested, [read_row(actions, position) for position in positions]))

    def _submit_coroutines(self, op: Op, env_indices: Sequence[int], payloads: Any,
                           arrivals: Arrivals | None) -> Pending:
        """A request to coroutine workers: each worker gets its sub-envs' payloads, and
        answers sub-env by sub-env (``_coroutines``)."""
        sequence = next(self._sequence) & 0xFFFFFFFF or next(self._sequence)
        pending = CoroutinePending(self, op, env_indices, sequence, arrivals)
        shares: dict[int, tuple[list[tuple[int, Any]], dict[int, int]]] = {}
        if op is Op.CLOSE:  # every live worker closes, even one whose sub-envs are all lost
            shares = {worker.index: ([], {}) for worker in self._workers if worker.alive}
        for position, env_index in enumerate(pending.env_indices):
            if env_index in self._lost and op is not Op.MAKE:
                pending.deliver(position, given_up_reply(env_index, op, GIVEN_UP))
                continue
            requests, positions = shares.setdefault(self._worker_of[env_index], ([], {}))
            requests.append((env_index, None if op is Op.MAKE or op is Op.CLOSE
                             else payloads[position]))
            positions[env_index] = position
        # Every frame is built before any is sent: a payload that fails to pickle must not
        # leave some workers running the request and others not. A close carries the bound
        # the worker gives its sub-envs: the caller's.
        frames = [(self._workers[index],
                   encode(_KIND_OF_OP[op], sequence,
                          dumps(self._close_timeout if op is Op.CLOSE else requests)),
                   positions) for index, (requests, positions) in shares.items()]
        for worker, frame, positions in frames:
            if not worker.alive:
                pending.worker_died(worker, list(positions.values()))
                continue
            worker.send(frame)
            worker.owed[sequence] = (pending, positions)
        return pending

    def _deliver_replies(self, worker: WorkerHandle, payload: bytes) -> None:
        deliver_replies(self, worker, payload)

    async def aclose(self, timeout: float) -> Pending | None:
        self._close_timeout = timeout
        return await super().aclose(timeout)

    async def wait_arrivals(self, arrivals: Arrivals, count: int) -> None:
        if self.loop is not None:  # readiness callbacks deliver the replies
            await arrivals.wait(count)
            return
        await read_replies(self._workers, arrivals, count)  # trio: this task reads them

    def poll_arrivals(self) -> None:
        if self.loop is None:  # trio: nothing reads the sockets between two waits
            for worker in self._workers:
                worker.receive_waiting()

    async def reap(self, worker: WorkerHandle) -> None:
        """Wait (bounded) for a dead worker's exit status."""
        await worker.process.wait(_REAP_TIMEOUT)

    # ------------------------------------------------------------------ shutdown

    def hosts_started(self) -> bool:
        return bool(self._workers)

    async def release_hosts(self, pending: Pending) -> None:
        for worker in self._workers:
            worker.disconnect()
        await self._stop_processes()
        await self._stop_fork_server()
        if self.loop is None:  # wake tasks parked on a socket (trio) before closing it
            for worker in self._workers:
                anyio.notify_closing(worker.sock)
        self._release()

    async def _stop_processes(self) -> None:
        """CLOSE was sent; give the workers a moment, then terminate, then kill."""
        for signum in (None, signal.SIGTERM, signal.SIGKILL):
            running = [worker for worker in self._workers if worker.process.poll() is None]
            if not running:
                return
            for worker in running:
                if signum is not None:
                    worker.process.signal(signum)
            with anyio.move_on_after(_EXIT_TIMEOUT):
                for worker in running:
                    await worker.process.wait(_EXIT_TIMEOUT)

    async def _stop_fork_server(self) -> None:
        """Once its workers are gone."""
        server, self._fork_server = self._fork_server, None
        if server is not None:
            await server.stop(_SERVER_EXIT_TIMEOUT)

    def _stop_fork_server_blocking(self) -> None:
        server, self._fork_server = self._fork_server, None
        if server is not None:
            server.stop_blocking(_SERVER_EXIT_TIMEOUT)

    def _release(self) -> None:
        for worker in self._workers:
            self._count_what_died_with(worker)
            worker.sock.close()
            worker.process.close()
        self.buffers = None
        self.records.release()
        self._action_views = None
        if self.latencies is not None:
            self.latencies.release()
            self.latencies = None
        if self._block is not None:
            # Views the caller still holds (copy=False) keep the mapping alive until they go.
            with contextlib.suppress(BufferError):
                self._block.close()
            self._block = None
        if self._block_fd is not None:
            os.close(self._block_fd)
            self._block_fd = None
        if self._lifeline is not None:
            os.close(self._lifeline[0])
            os.close(self._lifeline[1])
            self._lifeline = None

    def close_nowait(self, kill: int = signal.SIGKILL) -> None:
        # ``kill`` is bound now: at interpreter exit (``__del__``) module globals may be gone.
        self.closing = True
        for worker in self._workers:
            worker.process.signal(kill)
            if self.loop is not None and not self.loop.is_closed():
                with contextlib.suppress(Exception):
                    self.loop.remove_reader(worker.sock.fileno())
        for worker in self._workers:  # SIGKILLed processes exit at once: reap, leave no zombie
            worker.process.wait_blocking(_EXIT_TIMEOUT)
        self._stop_fork_server_blocking()
        self._release()

    def closing_threads(self) -> Sequence[threading.Thread]:
        # A parent worker's thread closes its sub-envs (their cleanups run) once let go of.
        return [parent.thread for parent in self._parent_threads]

    def abandoned_threads(self) -> int:
        self._parent_threads = [thread for thread in self._parent_threads if thread.running]
        return sum(thread.abandoned for thread in self._parent_threads)

    def describe(self) -> str:
        alive = sum(worker.alive for worker in self._workers)
        parent = "" if self.parent_worker is None else " (the last a thread of this process)"
        return (f"process backend, {alive}/{self.num_workers} workers alive{parent}, "
                f"start method {self.start_method!r}")
