"""First-ready calls: ``send``, ``recv`` within its bounds, the in-flight cap and ``abort``.

Sub-envs sent an action step on their own; each result lands when its sub-env is done
(``_first_ready.FirstReady`` keeps who owes what). A batch received is assembled by the
engine's path per sub-env (``Engine._receive``). What this layer adds:

- ``recv`` returns at most ``batch_size`` results, at once when that many are ready, else
  once ``min_size`` are and ``wait`` seconds have passed (``_arguments.RecvBounds``);
- ``max_in_flight`` caps how many sub-envs step at once among first-ready sends: the rest
  wait in a queue, in send order, and are dispatched as results land (a callback the
  landing schedules on the loop, ``Arrivals.pump``), as the cap is raised, or as sub-envs
  are aborted. Dispatching waits while sub-envs are being remade (a restart replaces
  hosts) or another call holds a queued sub-env, and resumes when that ends; a call on other
  sub-envs (a masked ``reset``) does not stop it;
- ``abort`` forgets what sub-envs owe and stops their steps where the backend can; a step it
  cannot stop keeps its room under the cap until it ends, so the cap bounds what really runs.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio

from aiovec._core._arguments import RecvBounds, check_count, check_timeout
from aiovec._core._backend import Arrivals
from aiovec._core._batching import copy_batch
from aiovec._core._engine import Engine, State
from aiovec._core._first_ready import REFUSED, FirstReady, QueuedSend, StepBatch
from aiovec._core._in_flight import USE_DEFAULT, Timeout
from aiovec._core._loop_wakeup import loop_clock, threadsafe_caller
from aiovec._core._refusals import (
    check_can_abort,
    check_can_recv,
    check_can_send,
    check_reset_done,
)
from aiovec._core._requests import Failure, Op
from aiovec._exceptions import EnvTimeoutError, NothingSentError

__all__ = ["FirstReadyCalls", "received_batches"]

Batch = TypeVar("Batch")


async def received_batches(receive: Callable[[], Awaitable[Batch]],
                           owing: Callable[[], bool]) -> AsyncIterator[Batch]:
    """``batches``: ``receive()`` while ``owing()``; the end, quietly, when what was left
    was aborted while it waited."""
    while owing():
        try:
            batch = await receive()
        except NothingSentError:
            if owing():
                raise
            return
        yield batch


class FirstReadyCalls(Engine):
    """The engine's first-ready calls; ``AsyncVectorEnv`` gives them their public names."""

    #: At most this many sub-envs stepping at once among first-ready sends (``None``: no cap).
    _max_in_flight: int | None
    #: What ``Arrivals.pump`` calls while sub-envs are queued: ``_dispatch_queued``, weakly.
    _pump: Callable[[], None]

    def _open_first_ready(self) -> None:
        """Ready the bookkeeping (at start, in the event loop). The queue's callback holds
        the vector env weakly: an unclosed one is still freed, and warned about."""
        self._first_ready = FirstReady(Arrivals(threadsafe_caller()), loop_clock())
        dispatch = weakref.WeakMethod(self._dispatch_queued)

        def pump() -> None:
            method = dispatch()
            if method is not None:
                method()

        self._pump = pump

    def _unblocked(self) -> None:
        first = self._first_ready
        if first is not None and first.queued:  # dispatching waited for this
            self._dispatch_queued()
        super()._unblocked()

    # ------------------------------------------------------------------ send

    def _submit_some(self, actions: Any, env_ids: Any, timeout: Timeout) -> None:
        """``send``: check that sub-envs ``env_ids`` can take a step now, check their actions,
        and submit them to the backend, each with its own deadline; or, past the in-flight
        cap (or behind sends already waiting), queue them."""
        self._check_not_closed("send")
        seconds = self.timeout if timeout is USE_DEFAULT else check_timeout(timeout, "timeout")
        first = self._first_ready
        restarting = self._restarting()  # then it waits in the queue, not refused
        ids = check_can_send(
            env_ids, self.num_envs, running=None if restarting else self._holds_all(),
            has_reset=(self._state is State.RUNNING and first is not None
                       and self._health.has_reset),
            owed=lambda ids: [] if first is None else first.owed(ids),
            held=None if restarting else self._holds)
        assert first is not None
        check_reset_done(self._health.needing_reset(ids))
        backend, cap = self._backend, self._max_in_flight
        if cap is not None:
            first.collect()
        queue = (restarting or bool(first.queued)
                 or (cap is not None and first.running() + len(ids) > cap))
        checker = self._checkers.of_size(len(ids))
        # Queued actions wait: they must be a copy of the caller's, whatever the backend,
        # objects too (sent at once, objects are pickled by then, or handed over as they are
        # to an in-process sub-env, as Gymnasium hands them).
        batch = checker.check(actions, ids, copy=backend.keeps_actions or queue)
        if queue:
            batch = copy_batch(self._checkers.single_action_space, batch)
        payloads = batch if backend.takes_action_batches else checker.split(batch)
        if queue:
            sent = first.enqueue(ids, payloads, seconds, self._checkers.single_action_space
                                 if backend.takes_action_batches else None)
            self._dispatch_queued(raising=sent)
            return
        pending = backend.submit(Op.STEP, ids, payloads, first.arrivals)
        deadline = None if seconds is None else first.clock() + seconds
        first.sent(pending, deadline, seconds)
        if first.receiving:  # a recv waiting meanwhile: a new deadline, a new reply to read
            first.arrivals.wake()

    def _dispatch_queued(self, raising: QueuedSend | None = None) -> None:
        """Submit queued sub-envs, oldest first, as far as the in-flight cap leaves room; each
        one's deadline starts now. Not while sub-envs are being remade, nor while another call
        holds a queued sub-env (``_holds``).

        A queued send that cannot be submitted (the backend refuses its actions) fails its
        sub-envs, reported by ``recv``; unless it is ``raising``, the send being made: that
        one is taken back whole and its error raised, as without a queue.
        """
        first = self._first_ready
        if first is None or self._state is not State.RUNNING:
            return
        if not first.queued:
            first.arrivals.pump = None
            return
        if self._in_flight is not None and self._holds(first.queued) is not None:
            return
        # Set before collect: a thread's result landing from here on runs the pump again
        # (set after, one landing in between left its room unused until the next).
        first.arrivals.pump = self._pump
        first.collect()
        cap = self._max_in_flight
        room = math.inf if cap is None else cap - first.running()
        backend = self._backend
        waking = False  # a new deadline or a failure: a waiting recv must look again
        try:
            for send, rows in first.take(room):
                env_ids = send.env_ids
                ids = env_ids if len(rows) == len(env_ids) else [env_ids[row] for row in rows]
                try:
                    pending = backend.submit(Op.STEP, ids, send.rows(rows), first.arrivals)
                except Exception as error:
                    if send is raising:
                        first.withdraw(send)
                        raise
                    for env_index in ids:
                        first.ready[env_index] = Failure.capture(env_index, REFUSED, error)
                    waking = True
                    continue
                seconds = send.timeout
                first.sent(pending, None if seconds is None else first.clock() + seconds,
                           seconds)
                first.arrivals.refresh()
                waking = waking or seconds is not None
        finally:
            first.arrivals.pump = self._pump if first.queued else None
            if waking and first.receiving:
                first.arrivals.wake()

    @property
    def max_in_flight(self) -> int | None:
        """At most this many sub-envs step at once among first-ready sends (``None``: no
        cap); settable at any time.

        Sends past it wait in a queue, in send order, and are dispatched as results land.
        Raising the cap dispatches at once; lowering it lets the running steps finish. A
        queued sub-env owes a result (``recv`` returns it, ``send`` refuses it) and its
        ``timeout`` starts when its step is dispatched. An aborted step the backend cannot
        stop (thread, process, Ray) counts until it ends, so the cap bounds the steps that
        really run (``num_stepping``). ``max_concurrency``, by contrast, caps every call
        inside the backend and counts waiting for a turn in the timeout.
        """
        return self._max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._max_in_flight = check_count(value, "max_in_flight")
        self._dispatch_queued()

    @property
    def num_stepping(self) -> int:
        """How many first-ready steps run now: dispatched, result not landed, aborted ones
        still running included (a thread, a worker process or a Ray actor cannot stop one;
        their results are never received). This is what ``max_in_flight`` caps."""
        first = self._first_ready
        if first is None:
            return 0
        self._backend.poll_arrivals()
        first.collect()
        return first.running()

    @property
    def num_queued(self) -> int:
        """How many sub-envs sent an action wait for room under ``max_in_flight``."""
        first = self._first_ready
        return 0 if first is None else len(first.queued)

    @property
    def num_ready(self) -> int:
        """How many results landed and wait for ``recv``."""
        first = self._first_ready
        if first is None:
            return 0
        self._backend.poll_arrivals()
        first.collect()
        return len(first.ready)

    # ------------------------------------------------------------------ recv

    async def _recv_some(self, bounds: RecvBounds) -> StepBatch:
        """``recv``: wait for results within ``bounds``, then receive the earliest ones."""
        first = self._first_ready
        check_can_recv(running="recv" if first is not None and first.receiving else None,
                       anything_owed=bool(first))
        assert first is not None
        size, least, wait = bounds
        first.receiving = True
        try:
            until = first.clock() + wait
            first.collect()
            self._dispatch_queued()
            # Never more than owed when called (sends made meanwhile do not raise the count;
            # their results may be among the earliest); fewer if sub-envs are aborted.
            full = min(size, len(first))
            while True:
                full = min(full, len(first))
                if not full:
                    raise NothingSentError("nothing left to receive: every result owed was "
                                           "aborted while recv waited")
                ready = len(first.ready)
                if ready >= full or (ready >= min(least, full) and first.clock() >= until):
                    env_ids = first.first(full)
                    if self._in_flight is None or not self._restartable(first, env_ids):
                        break
                    await self._until_changed()  # its restart must not overlap that call
                elif ready >= min(least, full):
                    await self._wait_for_results(first, full - ready, until)
                else:
                    await self._wait_for_results(first, min(least, full) - ready)
                self._check_open("recv")
                first.collect()
                self._give_up_on_late(first)
                self._dispatch_queued()
            return await self._receive(first, env_ids)
        finally:
            first.receiving = False

    async def _wait_for_results(self, first: FirstReady, count: int,
                                until: float = math.inf) -> None:
        """Wait for ``count`` results to land, at most until the earliest deadline of a
        sub-env stepping or ``until`` (on the loop's clock).

        With none stepping, what it waits for is queued and dispatching is held up (it was
        just tried): it waits for that to end (``_until_changed``) rather than polling the
        backend, which may return at once. An aborted step that runs on is stepping: its
        landing makes room.
        """
        blocked = not first.running() and bool(first.queued)
        deadline = min(first.next_deadline(), until)
        if deadline == math.inf and not blocked:
            await self._backend.wait_arrivals(first.arrivals, count)
            return
        with anyio.move_on_after(max(0.0, deadline - first.clock())):
            if blocked:
                await self._until_changed()
            else:
                await self._backend.wait_arrivals(first.arrivals, count)

    def _give_up_on_late(self, first: FirstReady) -> None:
        """Sub-envs past their deadline: reported as timed out, then discarded by the backend
        (so the neighbours a killed worker took with it are received after them)."""
        late = first.expire(first.clock())
        if not late:
            return
        self._counters.timeouts += len(late)
        for env_index, seconds in late:
            self._recovery.note_late([env_index], seconds)
            error = EnvTimeoutError("step", [env_index], seconds)
            first.ready[env_index] = Failure(env_index, "step", error,
                                             f"step timed out after {seconds:g} s", "")
        self._backend.discard([env_index for env_index, _ in late])
        self._health.need_reset(self._backend.lost_envs())
        first.collect()  # co-hosted sub-envs of a killed worker fail now

    # ------------------------------------------------------------------ abort

    def _abort_some(self, env_ids: Any) -> None:
        """``abort``: forget what sub-envs ``env_ids`` owe and stop their steps where the
        backend can (those it cannot keep their room under the cap until they end); each
        one that owed anything then needs a reset."""
        self._check_not_closed("abort")
        ids = check_can_abort(env_ids, self.num_envs, running=self._holds_all(),
                              held=self._holds)
        first = self._first_ready
        if first is None or not first or not ids:
            return
        first.collect()
        owed, steps = first.abort(ids)
        if not owed:
            return
        if steps:
            first.running_on.update(self._backend.abort_steps(steps))
        self._health.need_reset(owed)
        self._counters.aborts += len(owed)
        self._recovery.episodes.abort(len(owed))
        if first.receiving:  # it may wait for what was aborted: it counts again
            first.arrivals.wake()
            self._signal_changed()
        self._dispatch_queued()
