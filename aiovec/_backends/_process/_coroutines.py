"""The parent's side of coroutine workers (``_coroutine_worker``): requests answered sub-env
by sub-env, in whatever order the sub-envs finish.

A worker hosting coroutine envs runs many requests at once, so its replies are matched to
requests by sequence number and sub-env (``WorkerHandle.owed``), not by order. A sub-env given
up on (``discard``) or a first-ready step aborted fails or drops its place here at once, as on
the async backend, and its worker cancels what it runs; only a worker whose event loop does
not answer is killed.
"""

from __future__ import annotations

import pickle
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from aiovec._backends._base import CountdownPending, given_up_reply
from aiovec._core._backend import Arrivals
from aiovec._core._requests import Failure, Op
from aiovec._exceptions import WorkerDiedError

if TYPE_CHECKING:
    from aiovec._backends._process._backend import ProcessBackend
    from aiovec._backends._process._workers import WorkerHandle

__all__ = ["GIVEN_UP", "CoroutinePending", "deliver_replies"]

#: Why a request to a sub-env given up on (and not remade yet) failed.
GIVEN_UP = "the sub-env was given up on (it missed a deadline) or the vector env closed"


class CoroutinePending(CountdownPending):
    """Replies to one request to coroutine workers, delivered sub-env by sub-env."""

    __slots__ = ("_backend", "_dead", "sequence")

    def __init__(self, backend: ProcessBackend, op: Op, env_indices: Sequence[int],
                 sequence: int, arrivals: Arrivals | None = None) -> None:
        super().__init__(op, env_indices, arrivals)
        self._backend = backend
        self.sequence = sequence
        #: Workers that died owing replies, with the positions they owed (failed once their
        #: exit status is known, unless first-ready requests cannot wait for it).
        self._dead: list[tuple[WorkerHandle, list[int]]] = []

    def deliver(self, position: int, reply: Any) -> None:
        self.replies[position] = reply
        if self.arrivals is not None:
            self.arrivals.land(self, position)
        self.paid()

    def worker_died(self, worker: WorkerHandle, positions: list[int]) -> None:
        """``worker`` will never answer for ``positions``: a close has nothing left to do, a
        first-ready request fails them at once, any other once the exit status is known."""
        if self.op is Op.CLOSE:
            for position in positions:
                self.deliver(position, None)
        elif self.arrivals is not None:
            for position in positions:
                self.deliver(position, _died(worker, self.env_indices[position], self.op))
        else:
            self._dead.append((worker, positions))
            self.paid(len(positions))

    async def wait(self) -> None:
        if self._backend.loop is None and self.owed > 0:  # trio: nobody else reads
            await self._read_until_paid()
        else:
            await super().wait()
        dead, self._dead = self._dead, []
        for worker, positions in dead:
            await self._backend.reap(worker)
            for position in positions:
                self.replies[position] = _died(worker, self.env_indices[position], self.op)

    async def _read_until_paid(self) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        owing = [worker for worker in self._backend.workers
                 if worker.alive and self.sequence in worker.owed]
        async with anyio.create_task_group() as group:
            for worker in owing:
                group.start_soon(self._read, worker, group.cancel_scope)

    async def _read(self, worker: WorkerHandle, scope: anyio.CancelScope) -> None:
        await worker.flush()
        while worker.alive and self.owed > 0 and self.sequence in worker.owed:
            await worker.read_when_ready()
        if self.owed <= 0:
            scope.cancel()


def _died(worker: WorkerHandle, env_index: int, op: Op) -> Failure:
    reason = WorkerDiedError(worker.describe_death(), list(worker.env_indices),
                             worker.process.exitcode(), worker.process.descendants_ended)
    return Failure(env_index, op.value, reason, str(reason), "")


def deliver_replies(backend: ProcessBackend, worker: WorkerHandle, payload: bytes) -> None:
    """A coroutine worker's REPLY frame: the replies that landed, and the cleanups run and
    processes ended meanwhile. A reply to nothing owed (dropped: given up on, aborted) is
    ignored; a frame that cannot be decoded breaks the protocol, and the worker with it."""
    try:
        entries, (reaped, run, failed) = pickle.loads(payload)
    except Exception:
        worker.disconnect()
        worker.process.signal(signal.SIGKILL)
        return
    backend.descendants_reaped += reaped
    backend.cleanups.add(run, failed)
    for sequence, env_index, reply in entries:
        if env_index < 0:  # a DISCARD acknowledged
            worker.acknowledged(sequence)
            continue
        owed = _take_owed(worker, sequence, env_index)
        if owed is not None:
            pending, position = owed
            pending.deliver(position, reply)


def _take_owed(worker: WorkerHandle, sequence: int,
               env_index: int) -> tuple[CoroutinePending, int] | None:
    """Sub-env ``env_index``'s place in request ``sequence``, no longer owed from now on →
    (the request, the position), or ``None`` if it was not owed (answered, dropped)."""
    request = worker.owed.get(sequence)
    if request is None:
        return None
    pending, positions = request
    position = positions.pop(env_index, None)
    if position is None:
        return None
    if not positions:
        del worker.owed[sequence]
    return pending, position


def give_up_on(worker: WorkerHandle, env_index: int) -> None:
    """Sub-env ``env_index`` of ``worker`` was given up on: each reply it owes fails now."""
    for sequence in list(worker.owed):
        owed = _take_owed(worker, sequence, env_index)
        if owed is not None:
            pending, position = owed
            pending.deliver(position, given_up_reply(env_index, pending.op, GIVEN_UP))


def withdraw(worker: WorkerHandle, pending: CoroutinePending, env_index: int) -> bool:
    """A first-ready step aborted: its reply is never read → True if it was still owed."""
    if _take_owed(worker, pending.sequence, env_index) is None:
        return False
    pending.paid()
    return True
