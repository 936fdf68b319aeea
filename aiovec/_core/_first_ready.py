"""First-ready bookkeeping: which sub-envs step on their own, and results waiting for ``recv``.

``send`` hands some sub-envs an action each; each then steps on its own and its result lands
(``Arrivals``) whenever it is done. ``recv`` takes the results in landing order, so a sub-env
that finished first is received first: none is starved, none is stepped twice without a new
action, and a result is removed only once the batch that carries it is complete.

Under an in-flight cap (``max_in_flight``), sends beyond it wait in a queue, in send order,
and are taken off it as room is made. A sub-env owes a result from its ``send`` until a
``recv`` returns it or it is aborted, through these states::

    QUEUED ──dispatched──▶ STEPPING ──landed──▶ READY ──recv──▶ (owes nothing)
       └──────────────────────┴────────────────────┴──abort──▶ (owes nothing; needs a reset)

An aborted step the backend could not stop (a thread, a worker process) still runs: it keeps
its room under the cap (``running_on``) until its reply lands, which is then dropped.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Any, NamedTuple, TypeVar

import numpy as np
from gymnasium import Space

from aiovec._core._backend import Arrivals, Pending
from aiovec._core._batching import take_rows
from aiovec._core._requests import NO_REPLY
from aiovec._exceptions import ClosedError, NothingSentError

__all__ = ["REFUSED", "FirstReady", "QueuedSend", "Restarted", "StepBatch", "received_batches"]

#: The phase of the failure a queued send's sub-envs get when the backend refuses its actions
#: at dispatch (say, one that does not pickle): the caller's mistake, as when ``send`` raises
#: it, so the sub-env is neither counted as failed, nor restarted, nor in need of a reset.
REFUSED = "send"


class StepBatch(NamedTuple):
    """What ``recv`` returns: the results of sub-envs ``env_ids``, row ``i`` for ``env_ids[i]``.

    Unpacks like ``step``'s 5-tuple plus the ids:
    ``obs, rewards, terminations, truncations, infos, env_ids = await envs.recv()``.
    """

    observations: Any
    rewards: np.ndarray[Any, np.dtype[np.float64]]
    terminations: np.ndarray[Any, np.dtype[np.bool_]]
    truncations: np.ndarray[Any, np.dtype[np.bool_]]
    infos: dict[str, Any]
    env_ids: np.ndarray[Any, np.dtype[np.intp]]


class Restarted(NamedTuple):
    """A waiting result replaced: its sub-env failed and was restarted meanwhile (with
    another sub-env on the same worker); ``reply`` is its new episode's reset, if any."""

    reply: Any
    reason: str


class QueuedSend:
    """A ``send`` waiting (what is left of it) for room under the in-flight cap."""

    __slots__ = ("batch_of", "env_ids", "payloads", "taken", "timeout")

    def __init__(self, env_ids: list[int], payloads: Any, timeout: float | None,
                 batch_of: Space[Any] | None) -> None:
        self.env_ids = env_ids
        #: The checked actions: a batch of ``batch_of`` values (for a backend that takes
        #: batches) or, when ``batch_of`` is None, a list of one action per sub-env; rows in
        #: ``env_ids`` order.
        self.payloads = payloads
        self.batch_of = batch_of
        #: Each sub-env's deadline, in seconds from when its step is dispatched.
        self.timeout = timeout
        #: How many of ``env_ids``, from the first, were taken off the queue.
        self.taken = 0

    def rows(self, rows: list[int]) -> Any:
        """The actions of rows ``rows``, in the form ``payloads`` has."""
        if len(rows) == len(self.env_ids):  # all of them (rows are taken in order)
            return self.payloads
        if self.batch_of is not None:
            return take_rows(self.payloads, np.array(rows, dtype=np.intp), self.batch_of)
        return [self.payloads[row] for row in rows]


class FirstReady:
    """The sub-envs sent an action and not received yet, and their results."""

    __slots__ = ("arrivals", "clock", "deadlines", "in_flight", "positions", "queue", "queued",
                 "ready", "receiving", "running_on")

    def __init__(self, arrivals: Arrivals, clock: Callable[[], float]) -> None:
        self.arrivals = arrivals
        #: The event loop's clock (``loop_clock``): deadlines are set in its callbacks too.
        self.clock = clock
        #: env index -> its request, and its position there, until its result lands (two
        #: dicts, not one of pairs: a pair per step, alive as long as the step, would be one
        #: more object for the garbage collector to promote and scan).
        self.in_flight: dict[int, Pending] = {}
        self.positions: dict[int, int] = {}
        #: env index -> (deadline on the loop's clock, the timeout it came from).
        self.deadlines: dict[int, tuple[float, float]] = {}
        #: env index -> its reply, in landing order, until a ``recv`` returns it.
        self.ready: dict[int, Any] = {}
        #: env index -> the queued send it waits in, in send order (the in-flight cap).
        self.queued: dict[int, QueuedSend] = {}
        #: The queued sends, oldest first (some may hold only sub-envs dispatched or aborted).
        self.queue: collections.deque[QueuedSend] = collections.deque()
        #: Aborted steps ``(request, position)`` that run on (the backend could not stop
        #: them), until their reply lands: they still take room under the cap.
        self.running_on: set[tuple[Pending, int]] = set()
        self.receiving = False

    def __len__(self) -> int:
        """How many sub-envs ``recv`` can still return without a new ``send``."""
        return len(self.in_flight) + len(self.ready) + len(self.queued)

    def owed(self, env_ids: Iterable[int]) -> list[int]:
        """Those of ``env_ids`` queued, stepping or with a result not received yet."""
        in_flight, ready, queued = self.in_flight, self.ready, self.queued
        return [env for env in env_ids if env in in_flight or env in ready or env in queued]

    def running(self) -> int:
        """How many steps run: dispatched and not landed, aborted ones that run on included
        (what the in-flight cap counts)."""
        return len(self.in_flight) + len(self.running_on)

    def stepping(self, env_ids: Iterable[int]) -> list[int]:
        """Those of ``env_ids`` queued or stepping (results waiting for ``recv`` aside)."""
        in_flight, queued = self.in_flight, self.queued
        return [env for env in env_ids if env in in_flight or env in queued]

    def sent(self, pending: Pending, deadline: float | None, timeout: float | None) -> None:
        """The sub-envs of ``pending`` are stepping, each due by ``deadline`` if given."""
        env_indices = pending.env_indices
        self.in_flight.update(dict.fromkeys(env_indices, pending))
        self.positions.update(zip(env_indices, itertools.count()))
        if deadline is not None and timeout is not None:
            self.deadlines.update(dict.fromkeys(env_indices, (deadline, timeout)))

    def enqueue(self, env_ids: list[int], payloads: Any, timeout: float | None,
                batch_of: Space[Any] | None) -> QueuedSend:
        """Queue a send behind the earlier ones (``batch_of``: see ``QueuedSend``)."""
        queued = QueuedSend(env_ids, payloads, timeout, batch_of)
        self.queue.append(queued)
        for env_index in env_ids:
            self.queued[env_index] = queued
        return queued

    def take(self, room: float) -> list[tuple[QueuedSend, list[int]]]:
        """Take up to ``room`` queued sub-envs off the queue, oldest first → each queued send
        they came from with their rows in it."""
        taken: list[tuple[QueuedSend, list[int]]] = []
        queue, queued = self.queue, self.queued
        while room > 0 and queue:
            send = queue[0]
            env_ids = send.env_ids
            rows: list[int] = []
            while send.taken < len(env_ids) and len(rows) < room:
                row = send.taken
                send.taken += 1
                if queued.get(env_ids[row]) is send:  # else aborted meanwhile
                    del queued[env_ids[row]]
                    rows.append(row)
            if send.taken == len(env_ids):
                queue.popleft()
            if rows:
                taken.append((send, rows))
                room -= len(rows)
        return taken

    def withdraw(self, send: QueuedSend) -> None:
        """Take the newest queued send back whole (it could not be submitted)."""
        if self.queue and self.queue[-1] is send:
            self.queue.pop()
        for env_index in send.env_ids:
            if self.queued.get(env_index) is send:
                del self.queued[env_index]

    def abort(self, env_ids: Iterable[int]) -> tuple[list[int], list[tuple[Pending, int]]]:
        """Forget what ``env_ids`` owe (collect first) → the sub-envs that owed anything, and
        the dispatched steps among it (``(request, position)``) whose results have not landed."""
        owed: list[int] = []
        steps: list[tuple[Pending, int]] = []
        in_flight, ready, queued = self.in_flight, self.ready, self.queued
        for env_index in env_ids:
            if env_index in queued:
                del queued[env_index]
            elif env_index in in_flight:
                pending, position = in_flight.pop(env_index), self.positions.pop(env_index)
                self.deadlines.pop(env_index, None)
                if pending.replies[position] is NO_REPLY:
                    steps.append((pending, position))
            elif env_index in ready:
                del ready[env_index]
            else:
                continue
            owed.append(env_index)
        if not queued:
            self.queue.clear()
        return owed, steps

    def collect(self) -> None:
        """Move the results that landed into ``ready`` (stale ones, of sub-envs given up on
        or aborted, are dropped: an aborted step that ran on frees its room)."""
        landed, in_flight, ready = self.arrivals.landed, self.in_flight, self.ready
        deadlines, positions = self.deadlines, self.positions
        while landed:
            pending, position = landed.popleft()
            env_index = pending.env_indices[position]
            if in_flight.get(env_index) is pending and positions[env_index] == position:
                del in_flight[env_index], positions[env_index]
                if deadlines:
                    deadlines.pop(env_index, None)
                ready[env_index] = pending.replies[position]
            elif self.running_on:
                self.running_on.discard((pending, position))

    def next_deadline(self) -> float:
        """The earliest deadline of a sub-env still stepping (``inf``: none)."""
        return min((deadline for deadline, _ in self.deadlines.values()), default=math.inf)

    def expire(self, now: float) -> list[tuple[int, float]]:
        """Give up on the sub-envs whose deadline passed → ``(env index, timeout)`` each.

        A result that landed but is not collected yet (a thread delivers at any moment) is
        not late.
        """
        late = [(env_index, timeout) for env_index, (deadline, timeout) in self.deadlines.items()
                if deadline <= now and not self._landed(env_index)]
        for env_index, _ in late:
            del self.deadlines[env_index], self.in_flight[env_index], self.positions[env_index]
        return late

    def _landed(self, env_index: int) -> bool:
        return self.in_flight[env_index].replies[self.positions[env_index]] is not NO_REPLY

    def first(self, count: int) -> list[int]:
        """The ``count`` earliest results (left in ``ready``)."""
        return list(itertools.islice(self.ready, count))

    def forget(self, env_ids: Any) -> None:
        """Drop the waiting results of ``env_ids`` (they were received, or reset)."""
        ready = self.ready
        for env_index in env_ids:
            ready.pop(env_index, None)


Batch = TypeVar("Batch")


async def received_batches(receive: Callable[[], Awaitable[Batch]],
                           owing: Callable[[], bool],
                           until_owed: Callable[[], Awaitable[None]] | None = None,
                           ) -> AsyncGenerator[Batch, None]:
    """``batches``: ``receive()`` while ``owing()``; the end, quietly, when what was left
    was aborted while it waited. With ``until_owed`` (``follow=True``), owing nothing waits
    for the next send instead, and the vector env's closing is the end."""
    while True:
        try:
            if not owing():
                if until_owed is None:
                    return
                await until_owed()
            batch = await receive()
        except NothingSentError:
            if owing():
                raise
            if until_owed is None:
                return
            continue  # what was owed was aborted: wait for the next send
        except ClosedError:
            if until_owed is None:
                raise
            return
        yield batch
