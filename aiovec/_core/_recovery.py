"""Restarts: broken sub-envs made afresh under the ``RestartPolicy`` (and reset, when the
call was a reset or autoreset is same-step), with the counts that cap and space them.

The caller's deadline (``CallerDeadline``) has one rule, kept here for ``step``, ``reset`` and
``recv`` alike: a sub-env that missed it is never restarted, not even when its worker is made
afresh to restart a neighbour; the caller hears ``EnvTimeoutError`` for it and resets it. Every
other broken sub-env (it raised, or died, or shared a worker killed to stop a late one) is
restarted by the policy as under any other deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import numpy as np
from gymnasium.vector import AutoresetMode

from aiovec._core._backend import Backend
from aiovec._core._episodes import EpisodeTally
from aiovec._core._health import Health
from aiovec._core._in_flight import START_TIMEOUT, CallerDeadline
from aiovec._core._requests import Failure, Op, Remade
from aiovec._core._restart import RestartPolicy
from aiovec._core._results import Restarts
from aiovec._core._statistics import Counters, StepCounts
from aiovec._exceptions import FailureBudgetError, add_note

__all__ = ["Recovery"]

logger = logging.getLogger("aiovec")


class Recovery:
    """Remakes sub-envs for one vector env under its restart policy (and the lost ones a
    reset finds), counting each sub-env's restarts.

    It holds no reference to the vector env itself, so an unclosed vector env is still freed
    (and warned about) as soon as its last reference goes.
    """

    def __init__(self, backend: Backend, policy: RestartPolicy | None, num_envs: int,
                 counters: Counters, health: Health) -> None:
        #: Replaced when ``backend="auto"`` switches to the async backend at start.
        self.backend = backend
        self.policy = policy
        self._counters = counters
        self._health = health
        self._consecutive_restarts = np.zeros(num_envs, dtype=np.int64)
        self._last_restart_at = np.full(num_envs, -2, dtype=np.int64)
        #: Sub-envs that missed the caller's own deadline, until the caller resets them.
        self._spared: set[int] = set()
        #: Steps each sub-env returned (``step`` and ``recv`` calls that returned), to tell
        #: restarts in a row.
        self.env_steps = StepCounts(num_envs)
        #: How episodes ended (``statistics().episodes``), and the failures the policy's
        #: budget counts.
        self.episodes = EpisodeTally(
            None if policy is None or policy.max_failure_fraction is None
            else policy.failure_window)
        self.failures = 0
        #: Set when a restart found the failure budget spent: the caller raises it (``spent``)
        #: from the error it raises for the failed sub-envs, as when one is out of restarts.
        self._spent: FailureBudgetError | None = None
        #: Set when a sub-env was past ``max_restarts``: noted on the error raised (``spent``).
        self._capped: str | None = None

    def make_deadline(self) -> float | None:
        """How long making sub-envs may take: the policy's ``make_timeout``, else
        ``START_TIMEOUT``."""
        return START_TIMEOUT if self.policy is None else self.policy.make_timeout

    def note_late(self, env_indices: Iterable[int], deadline: float | None) -> None:
        """Sub-envs ``env_indices`` missed ``deadline``. If it was the caller's own
        (``CallerDeadline``), the caller gave up on them: no restart brings them back, only
        the caller's reset (``reset_sent``)."""
        if type(deadline) is CallerDeadline:
            self._spared.update(env_indices)

    def reset_sent(self, env_indices: Iterable[int]) -> None:
        """The caller is resetting these sub-envs: from now on they are restarted as any."""
        if self._spared:
            self._spared.difference_update(env_indices)

    def restartable(self, broken: dict[int, str]) -> dict[int, str]:
        """Those of ``broken`` (sub-env: why) that the policy restarts: all but the ones that
        missed the caller's deadline; none without a policy."""
        if not broken or self.policy is None:
            return {}
        spared = self._spared
        return {index: why for index, why in broken.items() if index not in spared}

    def note_remade(self, remade: Remade) -> None:
        """Sub-envs made afresh need a reset; those whose factory failed stay unmade."""
        self._health.remade(remade.env_indices,
                            {failure.env_index for failure in remade.failures})

    async def restart(
        self, broken: dict[int, str], reset_payloads: dict[int, Any] | None,
        check_open: Callable[[str], None],
        previous: dict[int, Any] | None = None,
        observation_row: Callable[[int], Any] | None = None,
        reset_options: Callable[[int], Any] | None = None,
    ) -> Restarts | None:
        """Recreate the broken sub-envs under the restart policy (and reset them, with
        ``reset_payloads``) → ``{env_index: (reset reply or None, why)}``, or ``None`` when a
        sub-env is out of restarts (the caller then raises as without a policy). ``broken``
        holds only sub-envs the policy restarts (``restartable``).

        In a step (``previous`` given), sub-envs remade only because they share a worker with
        a broken one are restarted too (their observation, ``observation_row``, is saved in
        ``previous`` first); in a reset they are left needing a reset (``unusable_envs``), as
        is, always, one that missed the caller's deadline: made afresh with its worker, but
        not restarted (no new episode, not counted).
        A reset with no payload in ``reset_payloads`` takes no seed and the options
        ``reset_options(env_index)`` gives (default: none).
        ``check_open`` raises if the vector env was closed during an await. Whether the
        restarted sub-envs can step afterwards is the caller's to set.
        """
        policy = self.policy
        assert policy is not None
        if not self._within_budget(policy, broken):
            return None
        reasons = dict(broken)
        restarted: Restarts = {}
        while reasons:
            envs = sorted(reasons)
            cap = policy.max_restarts
            capped = [] if cap is None else [
                index for index in envs if self._in_a_row(index) > cap]
            if cap is not None and capped:
                self._capped = _past_the_cap(capped, cap)
                logger.warning("%s", self._capped)
                return None
            delay = policy.delay(max(self._count_restart(index) for index in envs))
            if delay:
                await anyio.sleep(delay)
            self._counters.restarts += len(envs)
            failed: dict[int, str] = {}
            with anyio.move_on_after(policy.make_timeout) as scope:
                check_open("restart")
                remade = await self.backend.remake(envs)
                check_open("restart")
                self.note_remade(remade)
                for failure in remade.failures:
                    failed[failure.env_index] = failure.description
                made = [index for index in envs if index not in failed]
                if previous is not None and observation_row is not None:
                    for index in remade.env_indices:
                        if (index not in reasons and index not in restarted
                                and index not in self._spared):
                            previous[index] = observation_row(index)
                            reasons[index] = (f"restarted with sub-env(s) {envs} "
                                              "(same worker process)")
                            self._counters.restarts += 1
                            made.append(index)
                if reset_payloads is None:
                    restarted.update((index, (None, reasons[index])) for index in made)
                elif made:
                    pending = self.backend.submit(Op.RESET, made, [
                        reset_payloads[index] if index in reset_payloads
                        else (None, None if reset_options is None else reset_options(index))
                        for index in made])
                    try:
                        await pending.wait()
                    except BaseException:  # cancelled: what still arrives is nobody's
                        pending.abandon()
                        raise
                    check_open("restart")
                    for index, reply in zip(made, pending.replies):
                        if type(reply) is Failure:
                            failed[index] = reply.description
                        else:
                            restarted[index] = (reply, reasons[index])
            if scope.cancelled_caught:
                late = [index for index in reasons
                        if index not in restarted and index not in failed]
                self.backend.discard(late)
                self._counters.timeouts += len(late)
                failed.update((index, "restart timed out") for index in late)
            self._counters.errors += len(failed)
            for index in failed:
                restarted.pop(index, None)
            reasons = {index: reasons[index] for index in failed}
        return restarted

    def _within_budget(self, policy: RestartPolicy, broken: dict[int, str]) -> bool:
        """Count ``broken`` against the policy's failure budget; past it, note the error for
        the caller to raise (``spent``) and restart nothing."""
        self.failures += len(broken)
        why = policy.budget_spent(self.failures, [*self.episodes.recent, *[True] * len(broken)])
        if why is not None:
            self._spent = FailureBudgetError(why, broken)
        return why is None

    def spent(self, error: BaseException) -> BaseException:
        """The error to raise for a call whose failed sub-envs were not restarted: ``error``
        (with a note naming the cap, if a sub-env was past ``max_restarts``), or the
        ``FailureBudgetError`` that stopped the restarts (caused by it, carrying its
        ``partial_result``)."""
        spent, self._spent = self._spent, None
        capped, self._capped = self._capped, None
        if capped is not None:
            add_note(error, capped)
        if spent is None:
            return error
        spent.__cause__ = error
        spent.partial_result = getattr(error, "partial_result", None)
        return spent

    def _in_a_row(self, env_index: int) -> int:
        """How many restarts in a row one more restart of ``env_index`` makes: 1 if the
        sub-env completed a step of its own since its last restart, else one more than then.

        After a restart, the call that reports it returns one step for the sub-env (its cut
        episode); in next-step mode, so does the next one (the reset that starts its new
        episode). A step returned after those is the sub-env's own.
        """
        since = self.env_steps[env_index] - self._last_restart_at[env_index]
        owed = 2 if self.backend.autoreset_mode is AutoresetMode.NEXT_STEP else 1
        return int(self._consecutive_restarts[env_index]) + 1 if since <= owed else 1

    def _count_restart(self, env_index: int) -> int:
        """Count one restart of ``env_index`` → how many it has had in a row."""
        in_a_row = self._consecutive_restarts[env_index] = self._in_a_row(env_index)
        self._last_restart_at[env_index] = self.env_steps[env_index]
        return in_a_row


def _past_the_cap(env_indices: list[int], max_restarts: int) -> str:
    """What the error raised for sub-envs past ``max_restarts`` says of it."""
    if not max_restarts:
        return (f"sub-env(s) {env_indices} not restarted: RestartPolicy.max_restarts=0 "
                "allows no restart")
    return (f"sub-env(s) {env_indices} not restarted: they broke again after "
            f"{max_restarts} restart(s) in a row with no step of their own between "
            f"(RestartPolicy.max_restarts={max_restarts}, restarts in a row)")
