"""How a call on the vector env travels: claimed, submitted to the backend, gathered under
its deadline, recovered (restarts), assembled into a batch, and released.

``AsyncVectorEnv`` (``_vector_env``) is the public face: it checks the caller's arguments,
starts the sub-envs, and calls in here. The step path, for a full batch::

    step(actions)
      _submit_step  claim the vector env; check every sub-env can step (``Health``); check
                    the actions (``ActionChecker``); ``backend.submit(Op.STEP, ...)``
      _finish_step  _gather: await the replies under the deadline; late sub-envs are
                    discarded by the backend, failures collected
                    _restart_or_abandon: broken sub-envs remade under the restart policy
                    (``Recovery``)
                    ``BatchResults.store_steps``: replies into the reusable batch arrays
                    (already there, for in-place backends); copies for the caller
                    _fail: raise for the broken sub-envs, the healthy results attached
                    _release: the next call may start

``_submit_*`` and ``_finish_*`` are separate so the sync shim can offer Gymnasium's
``step_async``/``step_wait``; ``_finish_*`` releases the claim whatever happens. On a backend
whose replies can be waited for in the caller's thread (inline, process), the sync shim's
``_step_now`` takes the place of ``_finish_step`` with no event loop at all: the same
``_collect``, ``_store_step`` and ``_end_step``, and a loop only for what must be awaited (a
restart: ``_resume_step``). A first-ready
batch (``send``/``recv``) takes the same path per sub-env: ``_receive`` (the first-ready calls
themselves, the in-flight cap and ``abort`` are ``_first_ready_calls``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Container, Coroutine, Iterable, Sequence
from typing import Any, NoReturn

import anyio
import numpy as np
from gymnasium.vector import AutoresetMode

from aiovec._core._actions import ActionCheckers
from aiovec._core._arguments import check_timeout
from aiovec._core._backend import Backend, Waited
from aiovec._core._failures import call_error, error_group
from aiovec._core._first_ready import REFUSED, FirstReady, Restarted, StepBatch
from aiovec._core._health import Health
from aiovec._core._in_flight import USE_DEFAULT, InFlight, Timeout
from aiovec._core._infos import merge_info
from aiovec._core._observations import check_out, copy_into, copy_observations
from aiovec._core._recovery import Recovery
from aiovec._core._refusals import check_not_busy, check_nothing_owed
from aiovec._core._requests import NO_REPLY, BatchBuffers, Failure, Op
from aiovec._core._restart import RestartPolicy
from aiovec._core._results import BatchResults, Restarts
from aiovec._core._spaces import VectorSpaces
from aiovec._core._statistics import Counters, StepCounts
from aiovec._exceptions import (
    ClosedError,
    EnvTimeoutError,
    ResetNeededError,
    SubEnvErrorGroup,
)

__all__ = ["BoolArray", "Engine", "PausedStep", "State", "StepResult"]

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
StepResult = tuple[Any, np.ndarray[Any, Any], BoolArray, BoolArray, dict[str, Any]]
#: The claim of a ``recv`` while it restarts the failed sub-envs of its batch.
RESTARTING = "recv (restarting sub-envs)"


class PausedStep:
    """A step run with no event loop (``Engine._step_now``) that needs one to finish: a
    sub-env to restart, or a dead worker's exit status to wait for. It holds the claim until
    ``resume()`` is run on the loop (or ``Engine._drop_paused``)."""

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
    """The machinery behind ``AsyncVectorEnv``; the attributes below are set by it."""

    num_envs: int
    autoreset_mode: AutoresetMode
    copy: bool
    timeout: float | None
    _state: State
    _in_flight: InFlight | None
    _counters: Counters
    _step_counts: StepCounts
    _health: Health
    _recovery: Recovery
    _results: BatchResults
    validate_actions: bool
    _checkers: ActionCheckers
    _all_envs: range
    _first_ready: FirstReady | None
    _restart_notes: dict[int, str]
    #: True while sub-envs are being remade (a restart, or a reset's lost sub-envs): their
    #: hosts may be replaced, so nothing else may be submitted meanwhile.
    _remaking: bool = False
    #: Set (and dropped) when the claim is released, a remake ends, or first-ready sub-envs
    #: are aborted: what ``_until_changed`` awaits.
    _changed: anyio.Event | None = None

    def _check_not_closed(self, verb: str) -> None:
        if self._state is State.CLOSED:
            raise ClosedError(f"cannot {verb} the vector env: it was closed")

    def _check_open(self, operation: str) -> None:
        """After an await: another task may have closed the vector env meanwhile."""
        if self._state is State.CLOSED:
            raise ClosedError(f"the vector env was closed during {operation}")

    def _claim(self, operation: str, env_indices: Sequence[int] = ()) -> None:
        """Refuse a second concurrent call; the claim lasts until its ``_finish_*``.

        A ``step`` is refused while any sub-env owes a first-ready result; a ``reset`` only
        while one of its own sub-envs (``env_indices``) is queued or stepping (it drops
        their results waiting for ``recv``): the others step on meanwhile.
        """
        self._check_not_closed(operation)
        if self._in_flight is not None:
            check_not_busy(operation, self._in_flight.operation)
        if operation in ("step", "reset") and self._first_ready:
            first = self._first_ready
            first.collect()
            check_nothing_owed(operation, first.owed(self._all_envs) if operation == "step"
                               else first.stepping(env_indices))

    def _submit(
        self, op: Op, operation: str, env_indices: Sequence[int], payloads: Sequence[Any],
        out: Any = None,
    ) -> InFlight:
        pending = self._backend.submit(op, env_indices, payloads)
        in_flight = InFlight(operation, op, env_indices, payloads, pending, out=out)
        self._in_flight = in_flight
        return in_flight

    def _release(self, in_flight: InFlight) -> None:
        if self._in_flight is in_flight:
            self._in_flight = None
            self._unblocked()

    def _unblocked(self) -> None:
        """The claim was released or a remake ended: wake whoever waits for that."""
        self._signal_changed()

    def _signal_changed(self) -> None:
        """Wake whoever awaits ``_until_changed``."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    async def _until_changed(self) -> None:
        """Return at the next ``_unblocked`` (the caller checked, with no await since, that
        what it waits for is held)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _holds_all(self) -> str | None:
        """The call holding every sub-env now (the start, a call on all of them, or one
        remaking sub-envs), or ``None``."""
        claim = self._in_flight
        if claim is not None and (self._remaking or claim.op is Op.MAKE
                                  or len(claim.env_indices) == self.num_envs):
            return claim.operation
        return None

    def _restarting(self) -> bool:
        """A ``recv`` is restarting failed sub-envs: a ``send`` meanwhile waits in the queue
        (dispatched once they are remade), as it would for the in-flight cap."""
        claim = self._in_flight
        return claim is not None and claim.operation == RESTARTING

    def _holds(self, env_indices: Iterable[int]) -> str | None:
        """The call holding any of ``env_indices`` now (all of them while sub-envs are being
        remade), or ``None``: what ``send``, ``abort`` and the queue must leave alone."""
        claim = self._in_flight
        if claim is None:
            return None
        if self._remaking:
            return claim.operation
        held: Container[int] = claim.env_indices
        if not isinstance(held, range):
            held = set(claim.env_indices)
        return claim.operation if any(index in held for index in env_indices) else None

    async def _submit_step(self, actions: Any, out: Any = None) -> InFlight:
        return self._submit_step_now(actions, out)

    def _submit_step_now(self, actions: Any, out: Any = None,
                         served_now: bool = False) -> InFlight:
        """Claim, check the actions (and ``out``), submit: nothing here awaits.
        ``served_now``: the request is served before this call's caller returns (``_step_now``
        at once), so the backend may read the caller's actions, not a copy."""
        self._claim("step")
        if self._state is not State.RUNNING or not self._health.all_ready():
            raise ResetNeededError(self._reset_needed_message())
        backend, checker = self._backend, self._checkers.full
        batch = checker.check(actions, copy=backend.keeps_actions and not served_now)
        if out is not None:
            check_out(out, self._results.observations)
        payloads = batch if backend.takes_action_batches else checker.split(batch)
        return self._submit(Op.STEP, "step", self._all_envs, payloads, out)

    def _reset_needed_message(self) -> str:
        if self._state is not State.RUNNING or not self._health.has_reset:
            return "cannot step before reset: call `await envs.reset()` first"
        indices = self._health.needing_reset()
        return (f"cannot step: sub-env(s) {', '.join(map(str, indices))} need a reset first "
                "(never reset, failed, or done with autoreset disabled); reset them with "
                "`reset(options={'reset_mask': mask})`")

    def _drop_old_results(self, env_indices: Sequence[int]) -> None:
        """A reset of ``env_indices`` was submitted: their results still waiting for ``recv``
        belong to the old episodes and are dropped. Those sub-envs then need the reset to
        succeed before they step again: else (it failed, or was cancelled before it reached
        them) a step would be lost unseen."""
        first = self._first_ready
        if first:
            dropped = [env_index for env_index in env_indices if env_index in first.ready]
            if dropped:
                first.forget(dropped)
                self._health.need_reset(dropped)

    async def _finish_reset(
        self, in_flight: InFlight, timeout: Timeout
    ) -> tuple[Any, dict[str, Any]]:
        try:
            self._recovery.reset_sent(in_flight.env_indices)
            if in_flight.pending is None:
                await self._remake_lost(in_flight)
            replies, broken = await self._gather(in_flight, timeout)
            indices = list(in_flight.env_indices)
            restarted = None
            restartable = self._recovery.restartable(broken)
            if restartable:
                payloads = dict(zip(indices, in_flight.payloads))
                restarted = await self._restart_or_abandon(
                    in_flight, restartable, {index: payloads[index] for index in restartable})
                self._check_open("reset")
                if restarted is not None:
                    for env_index, (reply, _reason) in restarted.items():
                        replies[indices.index(env_index)] = reply
                    broken = _still_broken(broken, restarted)
            result = self._assemble_reset(indices, replies, broken, in_flight.out)
            if self._results.misfits:
                self._refuse_misfits(in_flight, replies, broken)
            for env_index, (_reply, reason) in (restarted or {}).items():
                if env_index not in broken:  # (its new observation may not have fitted)
                    merge_info(result[1], {"restart": reason}, env_index, self.num_envs)
            if broken:
                self._fail("reset", in_flight, broken, result)
            self._counters.resets += 1
            return result
        finally:
            self._release(in_flight)

    def _assemble_reset(self, indices: list[int], replies: list[Any], broken: dict[int, str],
                        out: Any) -> tuple[Any, dict[str, Any]]:
        healthy = [position for position, env_index in enumerate(indices)
                   if env_index not in broken] if broken else range(len(indices))
        infos = self._results.store_resets(indices, replies, healthy, out)
        done = [indices[position] for position in healthy]
        for env_index in done:
            self._restart_notes.pop(env_index, None)
        self._health.reset_done(done)
        self._health.has_reset = True
        return self._observations_for_caller(out), infos

    def _observations_for_caller(self, out: Any) -> Any:
        """The batch's observations as the caller gets them: in ``out`` (the caller's buffer,
        checked when the call was submitted; backends not in place concatenated into it
        already), else a copy unless ``copy=False``."""
        observations = self._results.observations
        if out is not None:
            return copy_into(out, observations) if self._results.in_place else out
        return copy_observations(observations) if self.copy else observations

    async def _finish_step(self, in_flight: InFlight, timeout: Timeout) -> StepResult:
        try:
            replies, broken = await self._gather(in_flight, timeout)
            infos, restartable = self._store_step(in_flight, replies, broken)
            if restartable:
                broken = await self._restart_step(in_flight, restartable, broken, infos)
            return self._end_step(in_flight, broken, infos)
        finally:
            self._release(in_flight)

    def _step_now(self, in_flight: InFlight, timeout: Timeout) -> StepResult | PausedStep:
        """``_finish_step`` with no event loop, for a backend that ``waits_in_caller``: this
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
                                    functools.partial(self._finish_step, in_flight, timeout))
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
                self._release(in_flight)

    async def _resume_step(self, in_flight: InFlight, restartable: dict[int, str],
                           broken: dict[int, str], infos: dict[str, Any]) -> StepResult:
        """Restart what ``_step_now`` found broken, then end the step as ``_finish_step``."""
        try:
            broken = await self._restart_step(in_flight, restartable, broken, infos)
            return self._end_step(in_flight, broken, infos)
        finally:
            self._release(in_flight)

    def _interrupted_step(self) -> None:
        """Ctrl-C struck during a step run with no event loop, or as it ended (its result
        never reached the caller): its sub-envs may have moved unseen, and need a reset. A
        step paused for the loop (``PausedStep``) lets go of its claim."""
        claim = self._in_flight
        if claim is not None and claim.operation == "step":  # this thread's, held by the lock
            self._abandon(claim)
            self._release(claim)
        if self._state is State.RUNNING:
            self._health.need_reset(list(self._all_envs))

    def _drop_paused(self, paused: PausedStep) -> None:
        """After ``paused.resume`` ran (its own to release the claim, even if left unfinished
        on a stopped loop) or never began (its caller interrupted first: the step is
        abandoned, its broken sub-envs need a reset)."""
        in_flight = paused.in_flight
        if not paused.resumed and self._in_flight is in_flight:
            self._abandon(in_flight)
            self._health.need_reset(list(paused.broken))
            self._release(in_flight)

    def _store_step(self, in_flight: InFlight, replies: list[Any],
                    broken: dict[int, str]) -> tuple[dict[str, Any], dict[int, str]]:
        """The step's replies into the batch → (its infos, the broken sub-envs the restart
        policy restarts)."""
        results = self._results
        pending = in_flight.pending
        infos = {} if in_flight.quiet() else results.store_steps(
            replies, broken, in_flight.out, () if pending is None else pending.packed_infos)
        if results.misfits:
            self._refuse_misfits(in_flight, replies, broken)
        if broken:
            self._step_counts.add_answered(in_flight.env_indices, replies)
            return infos, self._recovery.restartable(broken)
        self._step_counts.add_all()
        return infos, {}

    async def _restart_step(self, in_flight: InFlight, restartable: dict[int, str],
                            broken: dict[int, str], infos: dict[str, Any]) -> dict[int, str]:
        """Restart a step's broken sub-envs (their rows as the autoreset mode says: the new
        episode's first observation, or the last one until the next step) → the sub-envs
        still broken."""
        results = self._results
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        previous = {index: results.row(index) for index in restartable}
        restarted = await self._restart_or_abandon(
            in_flight, restartable, {} if same_step else None, previous)
        self._check_open("step")
        if restarted is None:
            return broken
        results.apply_restarts(restarted, previous, infos, out=in_flight.out)
        return _still_broken(broken, restarted)

    def _end_step(self, in_flight: InFlight, broken: dict[int, str],
                  infos: dict[str, Any]) -> StepResult:
        """The step's result for the caller; raise for its broken sub-envs."""
        results = self._results
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._health.ended(results.terminations, results.truncations)
        self._recovery.episodes.step(results.terminations, results.truncations, infos)
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
        self._counters.steps += 1
        self._recovery.env_steps.add_all()
        return result

    def _refuse_misfits(self, in_flight: InFlight, replies: list[Any],
                        broken: dict[int, str]) -> None:
        """Sub-envs whose observation did not fit the batch failed: as if they had raised."""
        misfits = self._results.misfits
        positions = {env_index: position for position, env_index
                     in enumerate(in_flight.env_indices)}
        for failure in misfits:
            replies[positions[failure.env_index]] = failure
            broken[failure.env_index] = failure.description
        in_flight.failed.extend(misfits)
        self._counters.errors += len(misfits)

    async def _finish_call(self, in_flight: InFlight, timeout: Timeout) -> tuple[Any, ...]:
        try:
            replies, broken = await self._gather(in_flight, timeout)
            result = tuple(None if reply is NO_REPLY or type(reply) is Failure else reply
                           for reply in replies)
            if broken:
                self._fail(in_flight.operation, in_flight, broken, result)
            return result
        finally:
            self._release(in_flight)

    def _restartable(self, first: FirstReady, env_ids: list[int]) -> dict[int, str]:
        """Those of ``env_ids`` whose result is a failure the restart policy restarts (not a
        send refused at dispatch: ``REFUSED``, the caller's own mistake)."""
        ready = first.ready
        return self._recovery.restartable({
            env_index: reply.description for env_index in env_ids
            if type(reply := ready[env_index]) is Failure and reply.phase != REFUSED})

    async def _receive(self, first: FirstReady, env_ids: list[int]) -> StepBatch:
        replies = [first.ready[env_index] for env_index in env_ids]
        broken = {env_index: reply.description for env_index, reply in zip(env_ids, replies)
                  if type(reply) is Failure}
        refused = [env_index for env_index, reply in zip(env_ids, replies)
                   if type(reply) is Failure and reply.phase == REFUSED]
        restartable = self._restartable(first, env_ids)
        if restartable and self._in_flight is not None:
            # Never over another call's claim (``_recv_some`` waits for it to end): both
            # would remake the same hosts. Nothing was touched: the results stay waiting.
            check_not_busy("recv", self._in_flight.operation)
        answered_all = not broken
        self._counters.errors += len(broken) - len(refused)
        restarted: dict[int, tuple[Any, str]] = {
            env_index: reply for env_index, reply in zip(env_ids, replies)
            if type(reply) is Restarted}
        previous: dict[int, Any] = {}
        if restartable:
            previous = {env_index: self._results.row(env_index) for env_index in restartable}
            same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
            # Claimed meanwhile: no send, step or reset may touch sub-envs being remade.
            claim = InFlight(RESTARTING, Op.STEP, list(broken), (), None)
            self._in_flight = claim
            try:
                outcome = await self._restart(restartable, {} if same_step else None,
                                              previous)
            except BaseException:  # the results stay waiting: the next recv retries
                self._health.need_reset(list(broken))
                raise
            finally:
                self._release(claim)
            self._check_open("recv")
            if outcome is not None:
                batch_ids = set(env_ids)
                self._settle_restart_extras(first, outcome, batch_ids)
                # Neighbours restarted with them (same worker) are cut short in this batch too.
                restarted.update((env_index, reason) for env_index, reason in outcome.items()
                                 if env_index in batch_ids)
                broken = _still_broken(broken, outcome)
        # No await from here on: the results leave `ready` only with the finished batch.
        if answered_all:
            self._step_counts.add(env_ids)
        else:
            self._step_counts.add_answered(env_ids, replies)
        batch = self._results.batch(env_ids, replies, broken, restarted, previous,
                                    self._restart_notes)
        for failure in self._results.misfits:  # as if they had raised
            replies[env_ids.index(failure.env_index)] = failure
            broken[failure.env_index] = failure.description
            self._counters.errors += 1
        first.forget(env_ids)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            done = batch.terminations | batch.truncations
            self._health.need_reset(batch.env_ids[done])
        self._recovery.episodes.step(batch.terminations, batch.truncations, batch.infos)
        if broken:
            self._recovery.episodes.failed(len(broken) - len(refused))
            # A refused send never reached its sub-env: it can step as it was.
            self._health.need_reset([index for index in broken if index not in refused])
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
            raise self._recovery.spent(error)
        self._counters.steps += 1
        self._recovery.env_steps.add(env_ids)
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
                self._restart_notes[env_index] = reason
                self._recovery.episodes.failed(1)  # its episode is lost now (next result: new)

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
        if self._state is State.CLOSED:  # another task closed the vector env meanwhile
            raise ClosedError(f"the vector env was closed during {in_flight.operation}")
        replies = in_flight.replies()
        broken: dict[int, str] = {}
        if in_flight.quiet():  # every reply is None: nothing failed, nothing to read
            return replies, broken
        deadline = in_flight.deadline
        if in_flight.late:
            self._counters.timeouts += len(in_flight.late)
            self._recovery.note_late(in_flight.late, deadline)
            self._backend.discard(in_flight.late)
            self._health.need_reset(self._backend.lost_envs())  # whatever the call was
            for env_index in in_flight.late:
                broken[env_index] = f"{in_flight.operation} timed out after {deadline:g} s"
        if Failure not in map(type, replies):  # (the common case, in one pass in C)
            return replies, broken
        in_flight.failed = [reply for reply in replies if type(reply) is Failure
                            and reply.env_index not in broken]
        for failure in in_flight.failed:
            broken[failure.env_index] = failure.description
        self._counters.errors += len(in_flight.failed)
        return replies, broken

    async def _remake_lost(self, in_flight: InFlight) -> None:
        """Make a reset's lost sub-envs afresh, then send the reset.

        Bounded by the make deadline (``RestartPolicy.make_timeout``, else ``START_TIMEOUT``),
        not the call's: starting a worker process may take longer than a reset should.
        """
        deadline = self._recovery.make_deadline()
        self._remaking = True
        try:
            with anyio.move_on_after(deadline) as scope:
                remade = await self._backend.remake(in_flight.remake)
        except BaseException:
            self._abandon(in_flight)
            raise
        finally:
            self._remaking = False
            self._unblocked()
        self._counters.restarts += len(in_flight.remake)
        if scope.cancelled_caught:
            self._backend.discard(in_flight.remake)
            self._counters.timeouts += len(in_flight.remake)
            self._health.need_reset(in_flight.remake)
            raise EnvTimeoutError("make", in_flight.remake, deadline)
        self._check_open("reset")
        self._recovery.note_remade(remade)
        for failure in remade.failures:
            in_flight.early[failure.env_index] = failure
        early = in_flight.early
        indices = [index for index in in_flight.env_indices if index not in early]
        payloads = [payload for index, payload in zip(in_flight.env_indices, in_flight.payloads)
                    if index not in early]
        in_flight.pending = self._backend.submit(in_flight.op, indices, payloads)

    def _abandon(self, in_flight: InFlight) -> None:
        """The caller gave up on ``in_flight``: sub-envs it may have moved need a reset."""
        pending = in_flight.pending
        if pending is not None and not pending.started:
            return  # it never reached a sub-env
        if pending is not None:
            pending.abandon()
        if in_flight.operation in ("step", "reset"):
            self._health.need_reset(list(in_flight.env_indices))

    def _fail(self, operation: str, in_flight: InFlight, broken: dict[int, str],
              partial_result: Any) -> NoReturn:
        """Raise for the broken sub-envs of a call; the healthy ones' results ride along."""
        if operation in ("step", "reset"):
            self._health.need_reset(list(broken))
        if operation == "step":  # (a reset that fails ends no episode: none had begun)
            self._recovery.episodes.failed(len(broken))
        raise self._recovery.spent(call_error(operation, in_flight, broken, partial_result))

    async def _restart(
        self, broken: dict[int, str], reset_payloads: dict[int, Any] | None,
        previous: dict[int, Any] | None = None,
    ) -> Restarts | None:
        """``Recovery.restart``; the restarted sub-envs can then step, unless autoreset is
        off (their new episode needs the caller's reset)."""
        self._remaking = True
        try:
            restarted = await self._recovery.restart(broken, reset_payloads, self._check_open,
                                                     previous, self._results.row)
        finally:
            self._remaking = False
            self._unblocked()
        if restarted is not None:
            if self.autoreset_mode is AutoresetMode.DISABLED:
                self._health.need_reset(list(restarted))
            else:
                self._health.reset_done(list(restarted))
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
            self._health.need_reset(list(broken))
            raise

    async def _collect_start(self, in_flight: InFlight, timeout: Timeout) -> list[Any]:
        """The sub-envs' descriptions; a factory that fails or hangs fails the start."""
        replies, broken = await self._gather(in_flight, timeout)
        if broken:
            self._fail("start", in_flight, broken, None)
        return replies

    @property
    def _backend(self) -> Backend:
        return self._recovery.backend

    @property
    def _restart_policy(self) -> RestartPolicy | None:
        return self._recovery.policy

    def _drop_buffers(self) -> None:
        """Let go of the batch arrays, so shared memory can be unmapped when closing."""
        results = self.__dict__.get("_results")
        if results is not None:
            results.drop()

    def _allocate_buffers(self, spaces: VectorSpaces, buffers: BatchBuffers | None) -> None:
        n = self.num_envs
        self._results = BatchResults(spaces, buffers, n, self.copy)
        self._checkers = ActionCheckers(spaces.single_action_space, n, self.validate_actions)
        self._all_envs = range(n)

    def _indices_in_range(self, env_ids: Sequence[int]) -> Sequence[int]:
        for index in env_ids:
            if not 0 <= index < self.num_envs:
                raise IndexError(f"sub-env index {index} is out of range for "
                                 f"{self.num_envs} sub-envs")
        return env_ids


def _still_broken(broken: dict[int, str], restarted: Restarts) -> dict[int, str]:
    """The broken sub-envs a restart left broken: those that missed the caller's deadline."""
    return {index: why for index, why in broken.items() if index not in restarted}
