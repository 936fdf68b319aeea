"""The parent's side of one request to the worker processes (``ProcessPending``: replies
delivered worker by worker, decoded as the request needs) and its handle on each worker
(``WorkerHandle``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import pickle
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from aiovec._backends._children import Child
from aiovec._backends._process._info_records import RecordSchema
from aiovec._backends._process._protocol import HEADER, Kind, ReplyReader
from aiovec._backends._readable import readable
from aiovec._core._backend import Arrivals, Pending, Waited
from aiovec._core._infos import PackedInfos
from aiovec._core._interrupts import WAIT_SLICE, wait_point
from aiovec._core._requests import Failure, Op
from aiovec._exceptions import WorkerDiedError

if TYPE_CHECKING:
    from aiovec._backends._process._backend import ProcessBackend
    from aiovec._backends._process._coroutines import CoroutinePending
    from aiovec._backends._process._parent_worker import ParentThread

__all__ = ["ProcessPending", "WorkerHandle", "read_replies"]

_INBOX_SIZE = 1 << 16
_HEADER_SIZE = HEADER.size
_REPLY = int(Kind.REPLY)
_RECORDED = int(Kind.RECORDED)
_FLUSH_POLL = 0.002  # seconds between reads while a large request waits to be sent (trio)


@dataclass(eq=False)
class WorkerHandle:
    """The parent's handle on one worker process."""

    index: int
    env_indices: range
    #: A worker process, or the parent worker's thread (``_parent_worker``).
    process: Child | ParentThread
    sock: socket.socket
    reader: ReplyReader = field(default_factory=ReplyReader)
    #: Requests sent and not yet answered, oldest first: replies come back in this order.
    outstanding: collections.deque[tuple[int, ProcessPending]] = field(
        default_factory=collections.deque)
    unsent: bytearray = field(default_factory=bytearray)
    #: Reused for every recv: allocating a fresh buffer per recv is measurably slow.
    inbox: bytearray = field(default_factory=lambda: bytearray(_INBOX_SIZE))
    alive: bool = True
    #: True once its HELLO said it hosts coroutine envs (``_coroutine_worker``).
    coroutines: bool = False
    #: Set while a task waits for this socket to be readable (the non-asyncio path).
    reading: anyio.Event | None = None
    #: The asyncio loop whose readiness callbacks serve the socket (``None`` on trio).
    loop: asyncio.AbstractEventLoop | None = None
    #: The step infos' schema the worker announced last (``RecordReader.learn``).
    info_schema: RecordSchema | None = None
    #: A coroutine worker's (``_coroutines``): what it owes, by request sequence: the
    #: request and the positions of the sub-envs still to answer, by env index.
    owed: dict[int, tuple[CoroutinePending, dict[int, int]]] = field(default_factory=dict)
    #: A coroutine worker's REPLY frames go here (set once its HELLO said what it hosts).
    replies: Callable[[WorkerHandle, bytes], None] | None = None
    #: DISCARD requests not acknowledged yet, with when each was sent (``time.monotonic``).
    unacked: dict[int, float] = field(default_factory=dict)
    #: Set once ``unacked`` empties, for whoever waits for that.
    acked: anyio.Event | None = None

    def owes(self) -> bool:
        """True while some request sent to the worker is not fully answered (a DISCARD
        acknowledged included: whoever reads the socket then reads it too)."""
        return bool(self.outstanding or self.owed or self.unacked)

    def acknowledged(self, sequence: int) -> None:
        """A coroutine worker acknowledged DISCARD ``sequence``: its event loop answers."""
        self.unacked.pop(sequence, None)
        if not self.unacked and self.acked is not None:
            self.acked.set()
            self.acked = None

    def send(self, frame: bytes) -> None:
        if self.unsent:
            self.unsent += frame
            return
        try:
            sent = self.sock.send(frame)
        except BlockingIOError:
            sent = 0
        except OSError:  # the worker is gone; its EOF will be seen by the reader
            return
        if sent < len(frame):
            self.unsent += frame[sent:]
            if self.loop is not None:
                self.loop.add_writer(self.sock.fileno(), self.flush_now)

    def flush_now(self) -> None:
        try:
            sent = self.sock.send(self.unsent)
        except BlockingIOError:
            return
        except OSError:
            sent = len(self.unsent)
        del self.unsent[:sent]
        if not self.unsent and self.loop is not None:
            self.loop.remove_writer(self.sock.fileno())

    async def flush(self) -> None:
        """Send what did not fit in the socket buffer (the non-asyncio path).

        Replies are read meanwhile: the worker may be stuck writing a large reply to us, and
        would never read what we write until we read what it wrote.
        """
        while self.unsent and self.alive:
            with anyio.move_on_after(_FLUSH_POLL):
                await anyio.wait_writable(self.sock)
            self.flush_now()
            if self.unsent and self.alive:
                self.receive()

    def receive(self) -> None:
        """Read what the worker sent and deliver every complete reply (readiness callback)."""
        try:
            size = self.sock.recv_into(self.inbox)
        except BlockingIOError:
            return
        except OSError:
            size = 0
        if not size:
            self.disconnect()
            return
        if size == _HEADER_SIZE and self.outstanding and not self.reader.pending:
            # The hot path: one reply with nothing to report, or its infos in the records.
            kind, sequence, length = HEADER.unpack_from(self.inbox)
            expected, pending = self.outstanding[0]
            if sequence == expected and not length:
                if kind == _REPLY:
                    self.outstanding.popleft()
                    pending.deliver_empty(self)
                    return
                if kind == _RECORDED:
                    self.outstanding.popleft()
                    if not pending.deliver_recorded(self):
                        self._break_off(pending)
                    return
        for kind, sequence, payload in self.reader.feed(memoryview(self.inbox)[:size]):
            if self.replies is not None and kind is Kind.REPLY and not sequence:
                self.replies(self, payload)  # a coroutine worker's, sub-env by sub-env
                continue
            if not self.outstanding:
                continue  # nothing asked for this: ignore it
            expected, pending = self.outstanding.popleft()
            if kind is Kind.HELLO or (kind is Kind.REPLY and sequence == expected):
                pending.deliver(self, payload)
            elif (kind is Kind.RECORDED and sequence == expected and not payload
                  and pending.deliver_recorded(self)):
                continue
            else:
                self._break_off(pending)
                return

    def _break_off(self, pending: ProcessPending) -> None:
        """The worker broke the protocol answering ``pending``: it cannot be trusted any
        more. It is killed; its sub-envs fail as a dead worker's do."""
        self.disconnect()
        pending.worker_died(self)
        self.process.signal(signal.SIGKILL)

    def disconnect(self) -> None:
        """Stop talking to the worker (its socket closed, or it broke protocol): stop reading
        its socket and fail what it owed."""
        if not self.alive:
            return
        self.alive = False
        if self.loop is not None:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.sock.fileno())
                self.loop.remove_writer(self.sock.fileno())
        while self.outstanding:
            _, pending = self.outstanding.popleft()
            if pending.op is Op.CLOSE:
                pending.deliver(self, b"")  # a closing worker may go without a word
            else:
                pending.worker_died(self)
        owed, self.owed = self.owed, {}
        for request, positions in owed.values():
            request.worker_died(self, list(positions.values()))
        self.unacked.clear()
        if self.acked is not None:
            self.acked.set()
            self.acked = None

    def receive_waiting(self) -> None:
        """Deliver the replies already waiting in the socket, without waiting for more (unless
        a task is reading it)."""
        while (self.alive and self.owes() and self.reading is None
               and readable([self.sock.fileno()])):
            self.receive()

    async def read_when_ready(self) -> None:
        """Wait until the worker's socket is readable, then deliver what it sent (to whichever
        request each reply answers); if another task is reading it, wait for that instead."""
        if self.reading is not None:
            await self.reading.wait()
            return
        self.reading = anyio.Event()
        try:
            await anyio.wait_readable(self.sock)
            self.receive()
        except anyio.ClosedResourceError:  # closed by aclose: the worker is gone
            self.disconnect()
        finally:
            reading, self.reading = self.reading, None
            reading.set()

    def describe_death(self) -> str:
        ended = self.process.descendants_ended
        return (f"{self.process.host_name(self.index)} died: "
                f"{self.process.describe_exit()}"
                + (f"; {ended} process{'es' * (ended != 1)} its sub-envs had started "
                   f"ended with it" if ended else ""))


async def read_replies(workers: Sequence[WorkerHandle], arrivals: Arrivals, count: int) -> None:
    """Read the sockets of the workers that owe replies until ``count`` first-ready replies
    not taken yet have landed (``Arrivals.goal``), none is owed any more, or ``arrivals`` is
    woken: the waiting task's own reading where no readiness callback does it (trio)."""
    goal, wakes = arrivals.goal(count), arrivals.wakes
    while arrivals.total < goal and arrivals.wakes == wakes:
        busy = [worker for worker in workers if worker.alive and worker.owes()]
        if not busy:
            await anyio.lowlevel.checkpoint()
            return
        try:
            async with anyio.create_task_group() as group:
                arrivals.reader = group.cancel_scope
                for worker in busy:
                    group.start_soon(_read_until, worker, arrivals, goal, group.cancel_scope)
        finally:
            arrivals.reader = None


async def _read_until(worker: WorkerHandle, arrivals: Arrivals, goal: int,
                      scope: anyio.CancelScope) -> None:
    await worker.flush()
    while worker.alive and worker.owes():
        await worker.read_when_ready()
        if arrivals.total >= goal:
            scope.cancel()
            return


class ProcessPending(Pending):
    """Replies to one request, delivered worker by worker."""

    __slots__ = ("_backend", "_dead", "_future", "_in_place_step", "_owing", "_position",
                 "_recorded", "sequence")

    def __init__(self, backend: ProcessBackend, op: Op, env_indices: Sequence[int],
                 sequence: int, arrivals: Arrivals | None = None) -> None:
        super().__init__(op, env_indices, arrivals)
        self._backend = backend
        self.sequence = sequence
        self._owing: set[WorkerHandle] = set()
        self._dead: list[WorkerHandle] = []
        every_env = backend.every_env
        # None: every sub-env, in order (position = env index), the common case.
        self._position: dict[int, int] | None = (
            None if self.env_indices is every_env or self.env_indices == every_env
            else {env_index: position for position, env_index in enumerate(self.env_indices)})
        self.quiet = op is Op.STEP and backend.buffers is not None
        #: A full step written in place: an empty reply just marks its sub-envs answered.
        self._in_place_step = self.quiet and self._position is None and arrivals is None
        #: The workers that answered with their infos in the records (read once all are in).
        self._recorded: list[WorkerHandle] | None = None
        self._future: asyncio.Future[None] | None = None
        if backend.loop is not None:
            self._future = backend.loop.create_future()

    @property
    def every_env(self) -> bool:
        """True when the request addresses every sub-env, in order."""
        return self._position is None

    def position(self, env_index: int) -> int:
        return env_index if self._position is None else self._position[env_index]

    def expect(self, worker: WorkerHandle) -> None:
        self._owing.add(worker)

    def _answered(self, worker: WorkerHandle) -> None:
        self._owing.discard(worker)
        if not self._owing and self._future is not None and not self._future.done():
            self._future.set_result(None)

    def deliver_empty(self, worker: WorkerHandle) -> None:
        """``deliver(worker, b"")``, the hot path of a step: a reply with nothing in it."""
        if not self._in_place_step:
            self.deliver(worker, b"")
            return
        hosted = worker.env_indices
        self.replies[hosted.start:hosted.stop] = [None] * len(hosted)
        owing = self._owing
        owing.discard(worker)
        future = self._future
        if not owing and future is not None and not future.done():
            future.set_result(None)

    def deliver_recorded(self, worker: WorkerHandle) -> bool:
        """A worker's reply to a full step with its infos in the records → True; False if
        this request is not such a step or no schema was announced (out of protocol)."""
        if not self._in_place_step or worker.info_schema is None:
            return False
        hosted = worker.env_indices
        self.replies[hosted.start:hosted.stop] = [None] * len(hosted)
        self.quiet = False
        if self._recorded is None:
            self._recorded = [worker]
        else:
            self._recorded.append(worker)
        self._answered(worker)
        return True

    def deliver(self, worker: WorkerHandle, payload: bytes) -> None:
        """Store one worker's reply (decoded according to the request)."""
        try:
            self._store(worker, payload)
        except Exception as error:  # a reply that cannot be decoded: fail its sub-envs
            self.quiet = False
            for env_index in self.hosted_by(worker):
                self.replies[self.position(env_index)] = Failure(
                    env_index, self.op.value, error,
                    f"the reply of worker {worker.index} could not be decoded: {error!r}", "")
        if self.arrivals is not None:
            self._land(worker)
        self._answered(worker)

    def _land(self, worker: WorkerHandle) -> None:
        arrivals = self.arrivals
        assert arrivals is not None
        for env_index in self.hosted_by(worker):
            arrivals.land(self, self.position(env_index))

    def hosted_by(self, worker: WorkerHandle) -> list[int]:
        """The sub-envs of this request that ``worker`` hosts."""
        if self._position is None:
            return list(worker.env_indices)
        return [env_index for env_index in worker.env_indices if env_index in self._position]

    def _store(self, worker: WorkerHandle, payload: bytes) -> None:
        replies = self.replies
        if self.op is Op.STEP:
            if payload:
                self.quiet = False
            if self._position is None:
                hosted = worker.env_indices
                if self._backend.buffers is not None:
                    replies[hosted.start:hosted.stop] = [None] * len(hosted)
                entries = pickle.loads(payload) if payload else ()
                if type(entries) is RecordSchema:  # infos in the records, from now on
                    self._backend.records.learn(worker, entries)
                    self._recorded = [*(self._recorded or ()), worker]
                    return
                if type(entries) is PackedInfos:  # the worker merged its sub-envs' infos
                    self.packed_infos += ((hosted.start, entries),)
                    return
                for env_index, entry in entries:
                    replies[env_index] = entry
                return
            if self._backend.buffers is not None:
                for env_index in self.hosted_by(worker):
                    replies[self._position[env_index]] = None
            for env_index, entry in pickle.loads(payload) if payload else ():
                replies[self._position[env_index]] = entry
            return
        if self.op is Op.MAKE or self.op is Op.CLOSE:  # see _worker._ending_reply
            values, (reaped, run, failed), *hello = (pickle.loads(payload) if payload
                                                     else ([], (0, 0, 0)))
            if hello:  # a HELLO also says whether the worker hosts coroutine envs
                worker.coroutines = hello[0]
            self._backend.descendants_reaped += reaped
            self._backend.cleanups.add(run, failed)
        else:
            values = pickle.loads(payload) if payload else []
        for env_index, value in zip(self.hosted_by(worker), values):
            replies[self.position(env_index)] = value

    def worker_died(self, worker: WorkerHandle) -> None:
        """The worker will never answer; its sub-envs fail once its exit status is known.

        A first-ready request cannot wait for that: its failures land at once, with the
        exit status if it is known already.
        """
        self.quiet = False
        if self.arrivals is not None:
            self._fail_hosted(worker)
            self._land(worker)
        else:
            self._dead.append(worker)
        # Only a worker this request waits for: one found dead while the request was being
        # sent was never expected, and must not end the wait for the live ones still to be.
        if worker in self._owing:
            self._answered(worker)

    def _fail_hosted(self, worker: WorkerHandle) -> None:
        reason = WorkerDiedError(worker.describe_death(), list(worker.env_indices),
                                 worker.process.exitcode(), worker.process.descendants_ended)
        for env_index in self.hosted_by(worker):
            self.replies[self.position(env_index)] = Failure(
                env_index, self.op.value, reason, str(reason), "")

    async def wait(self) -> None:
        try:
            if self._owing and self._future is not None:  # asyncio: the callbacks answer
                await self._future
            else:
                await self._replies_or_deaths()
            for worker in self._dead:  # its exit status makes the failure's message
                await self._backend.reap(worker)
        finally:
            self._settle()

    def wait_here(self, timeout: float | None) -> Waited:
        """``wait`` in this thread, with the event loop standing still (the sync shim): the
        sockets of the workers owing replies are read directly, ``timeout`` seconds at most.
        Only the poll is interruptible (``wait_point``): a reply read is always delivered.
        A worker found dead leaves the rest to ``wait`` (its exit status is awaited)."""
        owing = self._owing
        settle = True
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while owing:
                slice_ = WAIT_SLICE
                for worker in owing:
                    if worker.unsent:  # a large request: sent as the worker reads it
                        worker.flush_now()
                        slice_ = _FLUSH_POLL
                if deadline is not None:
                    slice_ = min(slice_, deadline - time.monotonic())
                    if slice_ <= 0:  # replies that did arrive must not count as late
                        self._receive_ready(0.0)
                        if owing:
                            return Waited.LATE
                        break
                self._receive_ready(slice_)
            settle = not self._dead  # else ``wait`` awaits their exit status, then settles
            return Waited.ON_LOOP if self._dead else Waited.DONE
        finally:
            if settle:
                self._settle()

    def _receive_ready(self, timeout: float) -> None:
        """Deliver what the owing workers sent, waiting ``timeout`` seconds at most for the
        first; only the wait is interruptible (``wait_point``)."""
        by_descriptor = {worker.sock.fileno(): worker for worker in self._owing}
        for descriptor in wait_point(functools.partial(readable, by_descriptor, timeout)):
            by_descriptor[descriptor].receive()

    def _settle(self) -> None:
        """What a wait ends with, however it ends (answered, late, cancelled)."""
        # The infos of the workers that did answer are theirs to report.
        if self._recorded is not None:
            self.packed_infos += self._backend.records.read(self._recorded,
                                                            self._backend.num_workers)
            self._recorded = None
        # A worker known dead is its sub-envs' failure, with its exit status if known by then;
        # they did not miss a deadline.
        for worker in self._dead:
            self._fail_hosted(worker)
        self._dead.clear()

    async def _replies_or_deaths(self) -> None:
        """Return once every worker addressed has replied or died, where no readiness
        callback answers the future (or nothing is owed any more)."""
        if not self._owing:  # answered already, or addressed to no live worker at all
            await anyio.lowlevel.checkpoint()
        else:  # no readiness callbacks (trio): read the workers' sockets in turn
            # A cancellation point even when every reply is in already, as on asyncio.
            await anyio.lowlevel.checkpoint_if_cancelled()
            try:
                for worker in list(self._owing):
                    await worker.flush()
                for worker in list(self._owing):
                    worker.receive()  # whatever arrived already, without parking
                    while worker in self._owing:
                        await worker.read_when_ready()
            except BaseException:
                # Cancelled (a deadline): replies that did arrive must not count as late.
                for worker in list(self._owing):
                    if worker.alive and worker.reading is None:
                        worker.receive()
                raise
