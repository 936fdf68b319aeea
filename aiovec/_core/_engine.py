"""The engine: how a call on the vector env travels. Claimed, submitted to the backend,
gathered under its deadline, recovered (restarts), assembled into a batch, and released.

``AsyncVectorEnv`` (``_vector_env``) is the public face: it checks the caller's arguments,
runs the lifecycle (start, close) and owns one ``Engine``, which holds the vector env's state
and carries every call. The step path, for a full batch::

    step(actions)
      submit_step   claim the vector env; check every sub-env can step (``Health``); check
                    the actions (``ActionChecker``); ``backend.submit(Op.STEP, ...)``
      finish_step   _gather: await the replies under the deadline; late sub-envs are
                    discarded by the backend, failures collected
                    _store_step: replies into the reusable batch arrays (already there,
                    for in-place backends; ``BatchResults.store_steps``)
                    _restart_step: broken sub-envs remade under the restart policy
                    (``Recovery``)
                    _end_step: copies for the caller; _fail: raise for the broken
                    sub-envs, the healthy results attached
                    release: the next call may start

``submit_*`` and ``finish_*`` are separate so the sync shim can offer Gymnasium's
``step_async``/``step_wait``; ``finish_*`` releases the claim whatever happens. On a backend
whose replies can be waited for in the caller's thread (inline, process), ``step_now`` takes
the place of ``finish_step`` with no event loop at all: the same ``_collect``,
``_store_step`` and ``_end_step``, and a loop only for what must be awaited (a restart:
``_resume_step``, through a ``PausedStep``).

First-ready calls (``send``, ``recv``, ``abort``): sub-envs sent an action step on their own,
each result lands when its sub-env is done (``_first_ready.FirstReady`` keeps who owes
what), and a batch received takes the same path per sub-env (``_receive``). What they add:

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

import enum
import functools
import math
import weakref
from collections.abc import Callable, Container, Coroutine, Iterable, Sequence
from typing import Any, NoReturn

import anyio
import numpy as np
from gymnasium.vector import AutoresetMode

from aiovec._core._actions import ActionCheckers
from aiovec._core._arguments import RecvBounds, check_count, check_timeout
from aiovec._core._backend import Arrivals, Backend, Waited
from aiovec._core._batching import copy_batch
from aiovec._core._episode_options import EpisodeOptions, OptionsSource
from aiovec._core._failures import call_error, error_group
from aiovec._core._first_ready import REFUSED, FirstReady, QueuedSend, Restarted, StepBatch
from aiovec._core._health import Health
from aiovec._core._in_flight import USE_DEFAULT, InFlight, Timeout
from aiovec._core._infos import merge_info
from aiovec._core._loop_wakeup import loop_clock, threadsafe_caller
from aiovec._core._observations import check_out, copy_into, copy_observations
from aiovec._core._recovery import Recovery
from aiovec._core._refusals import (
    check_can_abort,
    check_can_recv,
    check_can_send,
    check_not_busy,
    check_nothing_owed,
    check_reset_done,
)
from aiovec._core._requests import NO_REPLY, BatchBuffers, Failure, Op
from aiovec._core._restart import RestartPolicy
from aiovec._core._results import BatchResults, Restarts
from aiovec._core._spaces import VectorSpaces
from aiovec._core._statistics import Counters, StepCounts
from aiovec._exceptions import (
    ClosedError,
    EnvTimeoutError,
    NothingSentError,
    NotStartedError,
    ResetNeededError,
    SubEnvErrorGroup,
)

__all__ = ["BoolArray", "Engine", "PausedStep", "State", "StepResult"]

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
StepResult = tuple[Any, np.ndarray[Any, Any], BoolArray, BoolArray, dict[str, Any]]
#: The claim of a ``recv`` while it restarts the failed sub-envs of its batch.
RESTARTING = "recv (restarting sub-envs)"


class PausedStep:
    """A step run with no event loop (``Engine.step_now``) that needs one to finish: a
    sub-env to restart, or a dead worker's exit status to wait for. It holds the claim until
    ``resume()`` is run on the loop (or ``Engine.drop_paused``)."""

    __slots__ = ("_finish", "broken", "in_flight", "resumed")

    def __init__(self, in_flight: InFlight, broken: dict[int, str],
                 finish: Callable[[], Coroutine[Any, Any, StepResult]]) -> None:
        self.in_flight = in_flight
        #: The sub-envs found broken so far (they need a reset if ``resume`` never runs).
        self.broken = broken
        self._finish = finish
        #: True once ``resume`` began: the claim is then its own to release.
        self.resumed = False

    async def resume(self) -> StepResult:
        """Finish the step on the event loop; the claim is released as it ends."""
        self.resumed = True
        return await self._finish()


class State(enum.Enum):
    """The vector env's lifecycle (each sub-env's own state is ``Health``'s)."""

    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    CLOSED = "closed"


class Engine:
    """How every call travels (see the module's docstring): one per ``AsyncVectorEnv``, which
    checks the caller's arguments, runs the lifecycle (``start``, ``aclose``) and gives the
    calls their public names. Its state is the vector env's: ``state``, the call holding it
    (``in_flight``), each sub-env's ``health``, the ``results`` batch, the first-ready
    bookkeeping, the counters."""

    def __init__(self, num_envs: int, autoreset_mode: AutoresetMode, backend: Backend,
                 restart_policy: RestartPolicy | None, *, copy: bool, timeout: float | None,
                 validate_actions: bool, max_in_flight: int | None,
                 episode_options: OptionsSource | None = None) -> None:
        self.num_envs = num_envs
        self.all_envs = range(num_envs)
        self._every_env = np.arange(num_envs)
        self.autoreset_mode = autoreset_mode
        #: Observations returned are copies of the batch arrays (``copy=``).
        self.copy = copy
        #: The default deadline of every call (``timeout=``).
        self.timeout = timeout
        self.validate_actions = validate_actions
        self.state = State.CREATED
        #: The call holding the vector env (``claim`` to ``release``), or ``None``.
        self.in_flight: InFlight | None = None
        self.counters = Counters()
        self.step_counts = StepCounts(num_envs)
        #: Each sub-env's state: made, reset, stepping, needing a reset.
        self.health = Health(num_envs)
        #: Remakes sub-envs under the restart policy; holds the backend.
        self.recovery = Recovery(backend, restart_policy, num_envs, self.counters, self.health)
        #: Each episode's reset options (``episode_options=``, ``reset(options=[...])``).
        self.episode_options = EpisodeOptions(num_envs, episode_options, autoreset_mode)
        #: Set at start (``allocate_buffers``): the batch and the action checkers.
        self.results: BatchResults
        self.checkers: ActionCheckers
        #: Set at start, in the event loop (``open_first_ready``).
        self.first_ready: FirstReady | None = None
        #: Sub-envs restarted along with another one while not stepping: their next result
        #: carries ``infos["restart"]``.
        self.restart_notes: dict[int, str] = {}
        #: At most this many sub-envs stepping at once among first-ready sends (``None``: no
        #: cap).
        self._max_in_flight = max_in_flight
        #: What ``Arrivals.pump`` calls while sub-envs are queued: ``_dispatch_queued``, weakly.
        self._pump: Callable[[], None] = _no_pump
        #: True while sub-envs are being remade (a restart, or a reset's lost sub-envs): their
        #: hosts may be replaced, so nothing else may be submitted meanwhile.
        self._remaking = False
        #: Set (and dropped) when the claim is released, a remake ends, or first-ready
        #: sub-envs are aborted: what ``_until_changed`` awaits.
        self._changed: anyio.Event | None = None
        #: Set (and dropped) by each ``send`` and by ``close``: what ``until_owed`` awaits.
        self._sent: anyio.Event | None = None

    def close(self) -> None:
        """Closed from now on (``aclose``, before the backend closes): the call in flight
        and a waiting ``recv`` wake up to a ``ClosedError``; the batch arrays are let go."""
        self.state = State.CLOSED
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is not None and in_flight.pending is not None:
            in_flight.pending.abort()  # its task wakes up to a ClosedError
        self.signal_changed()  # a recv waiting for a call to end wakes up to a ClosedError
        self._signal_sent()  # and batches(follow=True) waiting for a send, to its end
        if self.first_ready is not None:
            self.first_ready.arrivals.wake()
        self.drop_buffers()

    def open_first_ready(self) -> None:
        """Ready the first-ready bookkeeping (at start, in the event loop). The queue's
        callback holds the engine weakly: an unclosed vector env is still freed, and warned
        about."""
        self.first_ready = FirstReady(Arrivals(threadsafe_caller()), loop_clock())
        dispatch = weakref.WeakMethod(self._dispatch_queued)

        def pump() -> None:
            method = dispatch()
            if method is not None:
                method()

        self._pump = pump

    def allocate_buffers(self, spaces: VectorSpaces, buffers: BatchBuffers | None) -> None:
        n = self.num_envs
        self.results = BatchResults(spaces, buffers, n, self.copy)
        self.checkers = ActionCheckers(spaces.single_action_space, n, self.validate_actions)

    def drop_buffers(self) -> None:
        """Let go of the batch arrays, so shared memory can be unmapped when closing."""
        results = self.__dict__.get("results")
        if results is not None:
            results.drop()

    @property
    def backend(self) -> Backend:
        """Where the sub-envs run (``Recovery`` holds it: a restart remakes them there);
        replaced before start when ``"auto"`` settles on another."""
        return self.recovery.backend

    @backend.setter
    def backend(self, backend: Backend) -> None:
        self.recovery.backend = backend

    @property
    def restart_policy(self) -> RestartPolicy | None:
        return self.recovery.policy

    def indices_in_range(self, env_ids: Sequence[int]) -> Sequence[int]:
        for index in env_ids:
            if not 0 <= index < self.num_envs:
                raise IndexError(f"sub-env index {index} is out of range for "
                                 f"{self.num_envs} sub-envs")
        return env_ids

    # ------------------------------------------------------------------ the claim

    def check_not_closed(self, verb: str) -> None:
        if self.state is State.CLOSED:
            raise ClosedError(f"cannot {verb} the vector env: it was closed")

    def check_open(self, operation: str) -> None:
        """After an await: another task may have closed the vector env meanwhile."""
        if self.state is State.CLOSED:
            raise ClosedError(f"the vector env was closed during {operation}")

    def claim(self, operation: str, env_indices: Sequence[int] = ()) -> None:
        """Refuse a second concurrent call; the claim lasts until its ``finish_*``
        (``release``).

        A ``step`` is refused while any sub-env owes a first-ready result; a ``reset`` only
        while one of its own sub-envs (``env_indices``) is queued or stepping (it drops
        their results waiting for ``recv``): the others step on meanwhile.
        """
        self.check_not_closed(operation)
        if self.in_flight is not None:
            check_not_busy(operation, self.in_flight.operation)
        if operation in ("step", "reset") and self.first_ready:
            first = self.first_ready
            first.collect()
            check_nothing_owed(operation, first.owed(self.all_envs) if operation == "step"
                               else first.stepping(env_indices))

    def submit(
        self, op: Op, operation: str, env_indices: Sequence[int], payloads: Sequence[Any],
        out: Any = None,
    ) -> InFlight:
        pending = self.backend.submit(op, env_indices, payloads)
        in_flight = InFlight(operation, op, env_indices, payloads, pending, out=out)
        self.in_flight = in_flight
        return in_flight

    def release(self, in_flight: InFlight) -> None:
        if self.in_flight is in_flight:
            self.in_flight = None
            self._unblocked()

    def _unblocked(self) -> None:
        """The claim was released or a remake ended: dispatch the sends queued behind it,
        and wake whoever waits for that."""
        first = self.first_ready
        if first is not None and first.queued:
            self._dispatch_queued()
        self.signal_changed()

    def signal_changed(self) -> None:
        """Wake whoever awaits ``_until_changed``."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    def _signal_sent(self) -> None:
        sent = self._sent
        if sent is not None:
            self._sent = None
            sent.set()

    async def until_owed(self) -> None:
        """Return once a result is owed (a ``send`` was made), or raise ``ClosedError`` once
        the vector env closes: ``batches(follow=True)`` while every row waits on the caller."""
        if self.first_ready is None:
            raise NotStartedError("nothing can be sent before the sub-envs run: use `async "
                                  "with` (or `await envs.start()`) and reset first")
        while True:
            self.check_open("batches")
            if self.first_ready:
                return
            if self._sent is None:
                self._sent = anyio.Event()
            await self._sent.wait()

    async def _until_changed(self) -> None:
        """Return at the next ``_unblocked`` (the caller checked, with no await since, that
        what it waits for is held)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _holds_all(self) -> str | None:
        """The call holding every sub-env now (the start, a call on all of them, or one
        remaking sub-envs), or ``None``."""
        claim = self.in_flight
        if claim is not None and (self._remaking or claim.op is Op.MAKE
                                  or len(claim.env_indices) == self.num_envs):
            return claim.operation
        return None

    def _restarting(self) -> bool:
        """A ``recv`` is restarting failed sub-envs: a ``send`` meanwhile waits in the queue
        (dispatched once they are remade), as it would for the in-flight cap."""
        claim = self.in_flight
        return claim is not None and claim.operation == RESTARTING

    def _holds(self, env_indices: Iterable[int]) -> str | None:
        """The call holding any of ``env_indices`` now (all of them while sub-envs are being
        remade), or ``None``: what ``send``, ``abort`` and the queue must leave alone."""
        claim = self.in_flight
        if claim is None:
            return None
        if self._remaking:
            return claim.operation
        held: Container[int] = claim.env_indices
        if not isinstance(held, range):
            held = set(claim.env_indices)
        return claim.operation if any(index in held for index in env_indices) else None

    # ------------------------------------------------------------------ step

    def submit_step(self, actions: Any, out: Any = None, served_now: bool = False) -> InFlight:
        """Claim, check the actions (and ``out``), submit: nothing here awaits.
        ``served_now``: the request is served before this call's caller returns (``step_now``
        at once), so the backend may read the caller's actions, not a copy."""
        self.claim("step")
        if self.state is not State.RUNNING or not self.health.all_ready():
            raise ResetNeededError(self._reset_needed_message())
        backend, checker = self.backend, self.checkers.full
        batch = checker.check(actions, copy=backend.keeps_actions and not served_now)
        if out is not None:
            check_out(out, self.results.observations)
        payloads = batch if backend.takes_action_batches else checker.split(batch)
        episodes = self.episode_options
        if episodes.active:
            episodes.draw_ahead(self._every_env)
            episodes.ship(self._every_env, backend)
        return self.submit(Op.STEP, "step", self.all_envs, payloads, out)

    def _reset_needed_message(self) -> str:
        if self.state is not State.RUNNING or not self.health.has_reset:
            return "cannot step before reset: call `await envs.reset()` first"
        indices = self.health.needing_reset()
        return (f"cannot step: sub-env(s) {', '.join(map(str, indices))} need a reset first "
                "(never reset, failed, or done with autoreset disabled); reset them with "
                "`reset(options={'reset_mask': mask})`")

    async def finish_step(self, in_flight: InFlight, timeout: Timeout) -> StepResult:
        try:
            replies, broken = await self._gather(in_flight, timeout)
            infos, restartable = self._store_step(in_flight, replies, broken)
            restarted = None
            if restartable:
                broken, restarted = await self._restart_step(in_flight, restartable, broken,
                                                             infos)
            return self._end_step(in_flight, broken, infos, restarted)
        finally:
            self.release(in_flight)

    @property
    def steps_here(self) -> bool:
        """True when a step can run in the calling thread with no event loop (the backend
        ``waits_in_caller``, once started): ``step_here``."""
        return self.state is State.RUNNING and self.backend.waits_in_caller

    def step_here(self, actions: Any, out: Any = None) -> StepResult | PausedStep:
        """A whole ``step`` with no event loop, for the sync shim: ``step_now``."""
        return self.step_now(self.submit_step(actions, out, served_now=True), USE_DEFAULT)

    def step_now(self, in_flight: InFlight, timeout: Timeout) -> StepResult | PausedStep:
        """``finish_step`` with no event loop, for a backend that ``waits_in_caller``: this
        thread waits for the replies (inline: runs the sub-envs), under the same deadline and
        the same rules. What needs awaiting (a restart, a dead worker's exit status) is left
        to a ``PausedStep``, which holds the claim meanwhile. Interrupted (Ctrl-C) anywhere,
        the step's sub-envs may have moved unseen: they need a reset."""
        paused = waited = None
        try:
            deadline = self.timeout if timeout is USE_DEFAULT else timeout
            in_flight.deadline = deadline
            assert in_flight.pending is not None
            waited = in_flight.pending.wait_here(deadline)
            if waited is Waited.ON_LOOP:
                paused = PausedStep(in_flight, {},
                                    functools.partial(self.finish_step, in_flight, timeout))
                return paused
            if waited is Waited.LATE:
                in_flight.late = in_flight.unanswered()
            replies, broken = self._collect(in_flight)
            infos, restartable = self._store_step(in_flight, replies, broken)
            if restartable:
                paused = PausedStep(in_flight, broken, functools.partial(
                    self._resume_step, in_flight, restartable, broken, infos))
                return paused
            return self._end_step(in_flight, broken, infos)
        except BaseException as error:
            # The wait broke or was interrupted, or an interrupt came after it: as a
            # cancelled wait, the sub-envs may have moved unseen (not so a failure raised
            # for broken sub-envs, whose health is settled).
            if waited is None or not isinstance(error, Exception):
                self._abandon(in_flight)
            raise
        finally:
            if paused is None:
                self.release(in_flight)

    async def _resume_step(self, in_flight: InFlight, restartable: dict[int, str],
                           broken: dict[int, str], infos: dict[str, Any]) -> StepResult:
        """Restart what ``step_now`` found broken, then end the step as ``finish_step``."""
        try:
            broken, restarted = await self._restart_step(in_flight, restartable, broken, infos)
            return self._end_step(in_flight, broken, infos, restarted)
        finally:
            self.release(in_flight)

    def interrupted_step(self) -> None:
        """Ctrl-C struck during a step run with no event loop, or as it ended (its result
        never reached the caller): its sub-envs may have moved unseen, and need a reset. A
        step paused for the loop (``PausedStep``) lets go of its claim."""
        claim = self.in_flight
        if claim is not None and claim.operation == "step":  # this thread's, held by the lock
            self._abandon(claim)
            self.release(claim)
        if self.state is State.RUNNING:
            self.health.need_reset(list(self.all_envs))

    def drop_paused(self, paused: PausedStep) -> None:
        """After ``paused.resume`` ran (its own to release the claim, even if left unfinished
        on a stopped loop) or never began (its caller interrupted first: the step is
        abandoned, its broken sub-envs need a reset)."""
        in_flight = paused.in_flight
        if not paused.resumed and self.in_flight is in_flight:
            self._abandon(in_flight)
            self.health.need_reset(list(paused.broken))
            self.release(in_flight)

    def _store_step(self, in_flight: InFlight, replies: list[Any],
                    broken: dict[int, str]) -> tuple[dict[str, Any], dict[int, str]]:
        """The step's replies into the batch → (its infos, the broken sub-envs the restart
        policy restarts)."""
        results = self.results
        pending = in_flight.pending
        infos = {} if in_flight.quiet() else results.store_steps(
            replies, broken, in_flight.out, () if pending is None else pending.packed_infos)
        if results.misfits:
            self._refuse_misfits(in_flight, replies, broken)
        if broken:
            self.step_counts.add_answered(in_flight.env_indices, replies)
            return infos, self.recovery.restartable(broken)
        self.step_counts.add_all()
        return infos, {}

    async def _restart_step(
        self, in_flight: InFlight, restartable: dict[int, str], broken: dict[int, str],
        infos: dict[str, Any],
    ) -> tuple[dict[int, str], Restarts | None]:
        """Restart a step's broken sub-envs (their rows as the autoreset mode says: the new
        episode's first observation, or the last one until the next step) → the sub-envs
        still broken, and those restarted."""
        results = self.results
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        previous = {index: results.row(index) for index in restartable}
        restarted = await self._restart_or_abandon(
            in_flight, restartable, {} if same_step else None, previous)
        self.check_open("step")
        if restarted is None:
            return broken, None
        results.apply_restarts(restarted, previous, infos, out=in_flight.out)
        return _still_broken(broken, restarted), restarted

    def _end_step(self, in_flight: InFlight, broken: dict[int, str],
                  infos: dict[str, Any], restarted: Restarts | None = None) -> StepResult:
        """The step's result for the caller; raise for its broken sub-envs."""
        results = self.results
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self.health.ended(results.terminations, results.truncations)
        self.recovery.episodes.step(results.terminations, results.truncations, infos)
        self.episode_options.stepped(self._every_env, results.terminations,
                                     results.truncations, infos, restarted)
        # No local name for the batch: a raised error's frames must not pin shared memory.
        result = (
            self._observations_for_caller(in_flight.out),
            results.rewards.copy(),
            results.terminations.copy(),
            results.truncations.copy(),
            infos,
        )
        if broken:
            self._fail("step", in_flight, broken, result)
        self.counters.steps += 1
        self.recovery.env_steps.add_all()
        return result

    def _refuse_misfits(self, in_flight: InFlight, replies: list[Any],
                        broken: dict[int, str]) -> None:
        """Sub-envs whose observation did not fit the batch failed: as if they had raised."""
        misfits = self.results.misfits
        positions = {env_index: position for position, env_index
                     in enumerate(in_flight.env_indices)}
        for failure in misfits:
            replies[positions[failure.env_index]] = failure
            broken[failure.env_index] = failure.description
        in_flight.failed.extend(misfits)
        self.counters.errors += len(misfits)

    def _observations_for_caller(self, out: Any) -> Any:
        """The batch's observations as the caller gets them: in ``out`` (the caller's buffer,
        checked when the call was submitted; backends not in place concatenated into it
        already), else a copy unless ``copy=False``."""
        observations = self.results.observations
        if out is not None:
            return copy_into(out, observations) if self.results.in_place else out
        return copy_observations(observations) if self.copy else observations

    # ------------------------------------------------------------------ reset

    def submit_reset(self, seeds: Sequence[int | None], reset_mask: Any,
                     env_options: dict[str, Any] | None, out: Any = None,
                     per_env: Sequence[dict[str, Any] | None] | None = None) -> InFlight:
        """Claim the sub-envs ``reset_mask`` selects (``None``: all), check ``out``, submit
        their resets; lost sub-envs are made afresh first (``finish_reset``). Options:
        ``env_options`` for all, or each sub-env its own (``per_env``, or from the
        ``episode_options`` source for those given none)."""
        if reset_mask is None:
            indices: Sequence[int] = self.all_envs
        else:
            indices = np.flatnonzero(reset_mask).tolist()
        self.claim("reset", indices)
        if out is not None:
            check_out(out, self.results.observations)
        episodes = self.episode_options
        chosen: list[Any] | None = None  # each episode's own options, if any
        if per_env is not None or (not env_options and episodes.source is not None):
            chosen = episodes.reset_options(indices, per_env)
            payloads = [(seeds[index], options) for index, options in zip(indices, chosen)]
        else:
            payloads = [(seeds[index], env_options) for index in indices]
        lost = set(self.backend.lost_envs()).union(self.health.unmade).intersection(indices)
        if lost:  # made afresh first, under the reset's deadline
            in_flight = InFlight("reset", Op.RESET, indices, payloads, None, sorted(lost), out)
            self.in_flight = in_flight
        else:
            in_flight = self.submit(Op.RESET, "reset", indices, payloads, out)
        if chosen is not None:
            episodes.reset_sent(indices, chosen)
        elif episodes.active:  # options shared by all, or none: no episode's own
            episodes.reset_sent(indices, [None] * len(indices))
        self._drop_old_results(indices)
        return in_flight

    def _drop_old_results(self, env_indices: Sequence[int]) -> None:
        """A reset of ``env_indices`` was submitted: their results still waiting for ``recv``
        belong to the old episodes and are dropped. Those sub-envs then need the reset to
        succeed before they step again: else (it failed, or was cancelled before it reached
        them) a step would be lost unseen."""
        first = self.first_ready
        if first:
            dropped = [env_index for env_index in env_indices if env_index in first.ready]
            if dropped:
                first.forget(dropped)
                self.health.need_reset(dropped)

    async def finish_reset(
        self, in_flight: InFlight, timeout: Timeout
    ) -> tuple[Any, dict[str, Any]]:
        try:
            self.recovery.reset_sent(in_flight.env_indices)
            if in_flight.pending is None:
                await self._remake_lost(in_flight)
            replies, broken = await self._gather(in_flight, timeout)
            indices = list(in_flight.env_indices)
            restarted = None
            restartable = self.recovery.restartable(broken)
            if restartable:
                payloads = dict(zip(indices, in_flight.payloads))
                restarted = await self._restart_or_abandon(
                    in_flight, restartable, {index: payloads[index] for index in restartable})
                self.check_open("reset")
                if restarted is not None:
                    for env_index, (reply, _reason) in restarted.items():
                        replies[indices.index(env_index)] = reply
                    broken = _still_broken(broken, restarted)
            result = self._assemble_reset(indices, replies, broken, in_flight.out)
            if self.results.misfits:
                self._refuse_misfits(in_flight, replies, broken)
            for env_index, (_reply, reason) in (restarted or {}).items():
                if env_index not in broken:  # (its new observation may not have fitted)
                    merge_info(result[1], {"restart": reason}, env_index, self.num_envs)
            if self.episode_options.active:
                self.episode_options.name_reset(
                    result[1], [index for index in indices if index not in broken],
                    self.num_envs)
            if broken:
                self._fail("reset", in_flight, broken, result)
            self.counters.resets += 1
            return result
        finally:
            self.release(in_flight)

    def _assemble_reset(self, indices: list[int], replies: list[Any], broken: dict[int, str],
                        out: Any) -> tuple[Any, dict[str, Any]]:
        healthy = [position for position, env_index in enumerate(indices)
                   if env_index not in broken] if broken else range(len(indices))
        infos = self.results.store_resets(indices, replies, healthy, out)
        done = [indices[position] for position in healthy]
        for env_index in done:
            self.restart_notes.pop(env_index, None)
        self.health.reset_done(done)
        self.health.has_reset = True
        return self._observations_for_caller(out), infos

    # ------------------------------------------------------------------ other calls

    async def finish_call(self, in_flight: InFlight, timeout: Timeout) -> tuple[Any, ...]:
        try:
            replies, broken = await self._gather(in_flight, timeout)
            result = tuple(None if reply is NO_REPLY or type(reply) is Failure else reply
                           for reply in replies)
            if broken:
                self._fail(in_flight.operation, in_flight, broken, result)
            return result
        finally:
            self.release(in_flight)

    async def collect_start(self, in_flight: InFlight, timeout: Timeout) -> list[Any]:
        """The sub-envs' descriptions; a factory that fails or hangs fails the start."""
        replies, broken = await self._gather(in_flight, timeout)
        if broken:
            self._fail("start", in_flight, broken, None)
        return replies

    # ------------------------------------------------------------------ replies

    async def _gather(self, in_flight: InFlight,
                      timeout: Timeout) -> tuple[list[Any], dict[int, str]]:
        """Await the replies (under the deadline) → (replies, broken sub-envs and why).

        A sub-env that missed the deadline is discarded by the backend (worker killed, thread
        abandoned), so nothing it still owes can ever reach a later call.
        """
        deadline = self.timeout if timeout is USE_DEFAULT else check_timeout(timeout, "timeout")
        in_flight.deadline = deadline
        try:
            assert in_flight.pending is not None
            if deadline is None:  # no cancel scope of our own: the caller's still apply
                await in_flight.pending.wait()
            else:
                with anyio.move_on_after(deadline) as scope:
                    await in_flight.pending.wait()
                if scope.cancelled_caught:
                    in_flight.late = in_flight.unanswered()
        except BaseException:  # cancelled by the caller (or interrupted)
            self._abandon(in_flight)
            raise
        return self._collect(in_flight)

    def _collect(self, in_flight: InFlight) -> tuple[list[Any], dict[int, str]]:
        """Every reply is in, or its deadline passed → (replies, broken sub-envs and why)."""
        if self.state is State.CLOSED:  # another task closed the vector env meanwhile
            raise ClosedError(f"the vector env was closed during {in_flight.operation}")
        replies = in_flight.replies()
        broken: dict[int, str] = {}
        if in_flight.quiet():  # every reply is None: nothing failed, nothing to read
            return replies, broken
        deadline = in_flight.deadline
        if in_flight.late:
            self.counters.timeouts += len(in_flight.late)
            self.recovery.note_late(in_flight.late, deadline)
            self.backend.discard(in_flight.late)
            self.health.need_reset(self.backend.lost_envs())  # whatever the call was
            for env_index in in_flight.late:
                broken[env_index] = f"{in_flight.operation} timed out after {deadline:g} s"
        if Failure not in map(type, replies):  # (the common case, in one pass in C)
            return replies, broken
        in_flight.failed = [reply for reply in replies if type(reply) is Failure
                            and reply.env_index not in broken]
        for failure in in_flight.failed:
            broken[failure.env_index] = failure.description
        self.counters.errors += len(in_flight.failed)
        return replies, broken

    def _abandon(self, in_flight: InFlight) -> None:
        """The caller gave up on ``in_flight``: sub-envs it may have moved need a reset."""
        pending = in_flight.pending
        if pending is not None and not pending.started:
            return  # it never reached a sub-env
        if pending is not None:
            pending.abandon()
        if in_flight.operation in ("step", "reset"):
            self.health.need_reset(list(in_flight.env_indices))

    def _fail(self, operation: str, in_flight: InFlight, broken: dict[int, str],
              partial_result: Any) -> NoReturn:
        """Raise for the broken sub-envs of a call; the healthy ones' results ride along."""
        if operation in ("step", "reset"):
            self.health.need_reset(list(broken))
        if operation == "step":  # (a reset that fails ends no episode: none had begun)
            self.recovery.episodes.failed(len(broken))
        raise self.recovery.spent(call_error(operation, in_flight, broken, partial_result))

    # ------------------------------------------------------------------ remaking sub-envs

    async def _remake_lost(self, in_flight: InFlight) -> None:
        """Make a reset's lost sub-envs afresh, then send the reset.

        Bounded by the make deadline (``RestartPolicy.make_timeout``, else ``START_TIMEOUT``),
        not the call's: starting a worker process may take longer than a reset should.
        """
        deadline = self.recovery.make_deadline()
        self._remaking = True
        try:
            with anyio.move_on_after(deadline) as scope:
                remade = await self.backend.remake(in_flight.remake)
        except BaseException:
            self._abandon(in_flight)
            raise
        finally:
            self._remaking = False
            self._unblocked()
        self.counters.restarts += len(in_flight.remake)
        if scope.cancelled_caught:
            self.backend.discard(in_flight.remake)
            self.counters.timeouts += len(in_flight.remake)
            self.health.need_reset(in_flight.remake)
            raise EnvTimeoutError("make", in_flight.remake, deadline)
        self.check_open("reset")
        self.recovery.note_remade(remade)
        for failure in remade.failures:
            in_flight.early[failure.env_index] = failure
        early = in_flight.early
        indices = [index for index in in_flight.env_indices if index not in early]
        payloads = [payload for index, payload in zip(in_flight.env_indices, in_flight.payloads)
                    if index not in early]
        in_flight.pending = self.backend.submit(in_flight.op, indices, payloads)

    async def _restart(
        self, broken: dict[int, str], reset_payloads: dict[int, Any] | None,
        previous: dict[int, Any] | None = None,
    ) -> Restarts | None:
        """``Recovery.restart``; the restarted sub-envs can then step, unless autoreset is
        off (their new episode needs the caller's reset)."""
        self._remaking = True
        episodes = self.episode_options
        try:
            restarted = await self.recovery.restart(
                broken, reset_payloads, self.check_open, previous, self.results.row,
                episodes.restart_options if episodes.active else None)
        finally:
            self._remaking = False
            self._unblocked()
        if restarted is not None:
            if episodes.active:
                episodes.remade(list(restarted))
            if self.autoreset_mode is AutoresetMode.DISABLED:
                self.health.need_reset(list(restarted))
            else:
                self.health.reset_done(list(restarted))
        return restarted

    async def _restart_or_abandon(
        self, in_flight: InFlight, broken: dict[int, str], reset_payloads: dict[int, Any] | None,
        previous: dict[int, Any] | None = None,
    ) -> dict[int, tuple[Any, str]] | None:
        """``_restart``; if the caller is cancelled meanwhile, the call's sub-envs need a reset
        (the healthy ones moved unseen, the broken ones may be half made)."""
        try:
            return await self._restart(broken, reset_payloads, previous)
        except BaseException:
            self._abandon(in_flight)
            self.health.need_reset(list(broken))
            raise

    # ------------------------------------------------------------------ first-ready: send

    def send(self, actions: Any, env_ids: Any, timeout: Timeout) -> None:
        """``send``: check that sub-envs ``env_ids`` can take a step now, check their actions,
        and submit them to the backend, each with its own deadline; or, past the in-flight
        cap (or behind sends already waiting), queue them."""
        self.check_not_closed("send")
        seconds = self.timeout if timeout is USE_DEFAULT else check_timeout(timeout, "timeout")
        first = self.first_ready
        restarting = self._restarting()  # then it waits in the queue, not refused
        ids = check_can_send(
            env_ids, self.num_envs, running=None if restarting else self._holds_all(),
            has_reset=(self.state is State.RUNNING and first is not None
                       and self.health.has_reset),
            owed=lambda ids: [] if first is None else first.owed(ids),
            held=None if restarting else self._holds)
        assert first is not None
        check_reset_done(self.health.needing_reset(ids))
        backend, cap = self.backend, self._max_in_flight
        if cap is not None:
            first.collect()
        queue = (restarting or bool(first.queued)
                 or (cap is not None and first.running() + len(ids) > cap))
        checker = self.checkers.of_size(len(ids))
        # Queued actions wait: they must be a copy of the caller's, whatever the backend,
        # objects too (sent at once, objects are pickled by then, or handed over as they are
        # to an in-process sub-env, as Gymnasium hands them).
        batch = checker.check(actions, ids, copy=backend.keeps_actions or queue)
        if queue:
            batch = copy_batch(self.checkers.single_action_space, batch)
        payloads = batch if backend.takes_action_batches else checker.split(batch)
        episodes = self.episode_options
        if episodes.active:
            episodes.draw_ahead(np.asarray(ids))
        if queue:
            sent = first.enqueue(ids, payloads, seconds, self.checkers.single_action_space
                                 if backend.takes_action_batches else None)
            self._dispatch_queued(raising=sent)
            self._signal_sent()
            return
        if episodes.active:
            episodes.ship(np.asarray(ids), backend)
        pending = backend.submit(Op.STEP, ids, payloads, first.arrivals)
        deadline = None if seconds is None else first.clock() + seconds
        first.sent(pending, deadline, seconds)
        if first.receiving:  # a recv waiting meanwhile: a new deadline, a new reply to read
            first.arrivals.wake()
        if self._sent is not None:
            self._signal_sent()

    def _dispatch_queued(self, raising: QueuedSend | None = None) -> None:
        """Submit queued sub-envs, oldest first, as far as the in-flight cap leaves room; each
        one's deadline starts now. Not while sub-envs are being remade, nor while another call
        holds a queued sub-env (``_holds``).

        A queued send that cannot be submitted (the backend refuses its actions) fails its
        sub-envs, reported by ``recv``; unless it is ``raising``, the send being made: that
        one is taken back whole and its error raised, as without a queue.
        """
        first = self.first_ready
        if first is None or self.state is not State.RUNNING:
            return
        if not first.queued:
            first.arrivals.pump = None
            return
        if self.in_flight is not None and self._holds(first.queued) is not None:
            return
        # Set before collect: a thread's result landing from here on runs the pump again
        # (set after, one landing in between left its room unused until the next).
        first.arrivals.pump = self._pump
        first.collect()
        cap = self._max_in_flight
        room = math.inf if cap is None else cap - first.running()
        backend = self.backend
        waking = False  # a new deadline or a failure: a waiting recv must look again
        try:
            for send, rows in first.take(room):
                env_ids = send.env_ids
                ids = env_ids if len(rows) == len(env_ids) else [env_ids[row] for row in rows]
                try:
                    if self.episode_options.active:
                        self.episode_options.ship(np.asarray(ids), backend)
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
        """``AsyncVectorEnv.max_in_flight``."""
        return self._max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._max_in_flight = check_count(value, "max_in_flight")
        self._dispatch_queued()

    @property
    def num_stepping(self) -> int:
        """How many first-ready steps run now: dispatched, result not landed, aborted ones
        still running included (a thread, a worker process or a Ray actor cannot stop one;
        their results are never received)."""
        first = self.first_ready
        if first is None:
            return 0
        self.backend.poll_arrivals()
        first.collect()
        return first.running()

    @property
    def num_queued(self) -> int:
        """How many sub-envs sent an action wait for room under ``max_in_flight``."""
        first = self.first_ready
        return 0 if first is None else len(first.queued)

    @property
    def num_ready(self) -> int:
        """How many results landed and wait for ``recv``."""
        first = self.first_ready
        if first is None:
            return 0
        self.backend.poll_arrivals()
        first.collect()
        return len(first.ready)

    def owing(self) -> bool:
        """Whether any sub-env sent an action owes its result (queued, stepping or ready)."""
        return bool(self.first_ready)

    # ------------------------------------------------------------------ first-ready: recv

    async def recv(self, bounds: RecvBounds) -> StepBatch:
        """``recv``: wait for results within ``bounds``, then receive the earliest ones."""
        first = self.first_ready
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
                    if self.in_flight is None or not self._restartable(first, env_ids):
                        break
                    await self._until_changed()  # its restart must not overlap that call
                elif ready >= min(least, full):
                    await self._wait_for_results(first, full - ready, until)
                else:
                    await self._wait_for_results(first, min(least, full) - ready)
                self.check_open("recv")
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
            await self.backend.wait_arrivals(first.arrivals, count)
            return
        with anyio.move_on_after(max(0.0, deadline - first.clock())):
            if blocked:
                await self._until_changed()
            else:
                await self.backend.wait_arrivals(first.arrivals, count)

    def _give_up_on_late(self, first: FirstReady) -> None:
        """Sub-envs past their deadline: reported as timed out, then discarded by the backend
        (so the neighbours a killed worker took with it are received after them)."""
        late = first.expire(first.clock())
        if not late:
            return
        self.counters.timeouts += len(late)
        for env_index, seconds in late:
            self.recovery.note_late([env_index], seconds)
            error = EnvTimeoutError("step", [env_index], seconds)
            first.ready[env_index] = Failure(env_index, "step", error,
                                             f"step timed out after {seconds:g} s", "")
        self.backend.discard([env_index for env_index, _ in late])
        self.health.need_reset(self.backend.lost_envs())
        first.collect()  # co-hosted sub-envs of a killed worker fail now

    def _restartable(self, first: FirstReady, env_ids: list[int]) -> dict[int, str]:
        """Those of ``env_ids`` whose result is a failure the restart policy restarts (not a
        send refused at dispatch: ``REFUSED``, the caller's own mistake)."""
        ready = first.ready
        return self.recovery.restartable({
            env_index: reply.description for env_index in env_ids
            if type(reply := ready[env_index]) is Failure and reply.phase != REFUSED})

    async def _receive(self, first: FirstReady, env_ids: list[int]) -> StepBatch:
        replies = [first.ready[env_index] for env_index in env_ids]
        broken = {env_index: reply.description for env_index, reply in zip(env_ids, replies)
                  if type(reply) is Failure}
        refused = [env_index for env_index, reply in zip(env_ids, replies)
                   if type(reply) is Failure and reply.phase == REFUSED]
        restartable = self._restartable(first, env_ids)
        if restartable and self.in_flight is not None:
            # Never over another call's claim (``recv`` waits for it to end): both
            # would remake the same hosts. Nothing was touched: the results stay waiting.
            check_not_busy("recv", self.in_flight.operation)
        answered_all = not broken
        self.counters.errors += len(broken) - len(refused)
        restarted: dict[int, tuple[Any, str]] = {
            env_index: reply for env_index, reply in zip(env_ids, replies)
            if type(reply) is Restarted}
        previous: dict[int, Any] = {}
        if restartable:
            previous = {env_index: self.results.row(env_index) for env_index in restartable}
            same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
            # Claimed meanwhile: no send, step or reset may touch sub-envs being remade.
            claim = InFlight(RESTARTING, Op.STEP, list(broken), (), None)
            self.in_flight = claim
            try:
                outcome = await self._restart(restartable, {} if same_step else None,
                                              previous)
            except BaseException:  # the results stay waiting: the next recv retries
                self.health.need_reset(list(broken))
                raise
            finally:
                self.release(claim)
            self.check_open("recv")
            if outcome is not None:
                batch_ids = set(env_ids)
                self._settle_restart_extras(first, outcome, batch_ids)
                # Neighbours restarted with them (same worker) are cut short in this batch too.
                restarted.update((env_index, reason) for env_index, reason in outcome.items()
                                 if env_index in batch_ids)
                broken = _still_broken(broken, outcome)
        # No await from here on: the results leave `ready` only with the finished batch.
        if answered_all:
            self.step_counts.add(env_ids)
        else:
            self.step_counts.add_answered(env_ids, replies)
        batch = self.results.batch(env_ids, replies, broken, restarted, previous,
                                    self.restart_notes)
        for failure in self.results.misfits:  # as if they had raised
            replies[env_ids.index(failure.env_index)] = failure
            broken[failure.env_index] = failure.description
            self.counters.errors += 1
        first.forget(env_ids)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            done = batch.terminations | batch.truncations
            self.health.need_reset(batch.env_ids[done])
        self.recovery.episodes.step(batch.terminations, batch.truncations, batch.infos)
        self.episode_options.stepped(batch.env_ids, batch.terminations, batch.truncations,
                                     batch.infos, restarted)
        if broken:
            self.recovery.episodes.failed(len(broken) - len(refused))
            # A refused send never reached its sub-env: it can step as it was.
            self.health.need_reset([index for index in broken if index not in refused])
            failures = sorted((reply for reply in replies if type(reply) is Failure
                               and reply.env_index in broken),
                              key=lambda failure: failure.env_index)
            error: EnvTimeoutError | SubEnvErrorGroup
            if all(type(failure.exception) is EnvTimeoutError for failure in failures):
                error = EnvTimeoutError("step", sorted(broken), max(
                    failure.exception.timeout or 0.0 for failure in failures
                    if isinstance(failure.exception, EnvTimeoutError)))
            else:
                error = error_group("step", failures)
            error.partial_result = batch
            raise self.recovery.spent(error)
        self.counters.steps += 1
        self.recovery.env_steps.add(env_ids)
        return batch

    def _settle_restart_extras(self, first: FirstReady, outcome: dict[int, tuple[Any, str]],
                               batch_ids: set[int]) -> None:
        """Sub-envs restarted along with this batch's (same worker) but not in it: a failed
        result still waiting is replaced by the restart; otherwise their next result says so."""
        first.collect()
        for env_index, (reply, reason) in outcome.items():
            if env_index in batch_ids:
                continue
            waiting = first.ready.get(env_index)
            if type(waiting) is Failure:
                first.ready[env_index] = Restarted(reply, reason)
            else:
                self.restart_notes[env_index] = reason
                self.recovery.episodes.failed(1)  # its episode is lost now (next result: new)

    # ------------------------------------------------------------------ first-ready: abort

    def abort(self, env_ids: Any) -> None:
        """``abort``: forget what sub-envs ``env_ids`` owe and stop their steps where the
        backend can (those it cannot keep their room under the cap until they end); each
        one that owed anything then needs a reset."""
        self.check_not_closed("abort")
        ids = check_can_abort(env_ids, self.num_envs, running=self._holds_all(),
                              held=self._holds)
        first = self.first_ready
        if first is None or not first or not ids:
            return
        first.collect()
        owed, steps = first.abort(ids)
        if not owed:
            return
        if steps:
            first.running_on.update(self.backend.abort_steps(steps))
        self.health.need_reset(owed)
        self.counters.aborts += len(owed)
        self.recovery.episodes.abort(len(owed))
        if first.receiving:  # it may wait for what was aborted: it counts again
            first.arrivals.wake()
            self.signal_changed()
        self._dispatch_queued()


def _no_pump() -> None:
    """``Engine._pump`` until the first-ready bookkeeping is opened."""


def _still_broken(broken: dict[int, str], restarted: Restarts) -> dict[int, str]:
    """The broken sub-envs a restart left broken: those that missed the caller's deadline."""
    return {index: why for index, why in broken.items() if index not in restarted}
