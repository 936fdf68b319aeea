"""Gymnasium's autoreset rule for one sub-env, written once for every host.

The sync slot (``_slot.EnvSlot``: inline, thread, process, Ray) and the coroutine slot
(``_async``) differ only in whether they ``await`` the env, so the decisions live here and
each host does the calls its own way::

    if autoreset.reset_instead_of_step():     # the episode ended on the previous step
        obs, info = env.reset()                # -> obs, 0.0, False, False, info, None
    else:
        obs, reward, terminated, truncated, info = env.step(action)
        if autoreset.reset_now(terminated, truncated):   # same-step mode only
            final = {"final_obs": obs, "final_info": info}
            obs, info = env.reset()

In ``DISABLED`` mode neither says reset: the core refuses to step an env that needs one.

With an episode timeout (``episode_timeout=``), each episode's clock starts as its reset
begins; a step that ends past it without ending the episode is cut: ``truncated`` with
``info["episode_timeout"] = True`` (``cut``), and the rule above then resets as after any
truncation. If that step was already running when the time ran out (a tool still working,
not a policy late with its action), ``info["step_in_flight"]`` says for how many seconds.

An automatic reset takes the oldest of the options queued for the sub-env
(``queue_options``: drawn ahead from the vector env's ``episode_options``, one per episode),
else none.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

from gymnasium.vector import AutoresetMode

__all__ = ["EPISODE_TIMEOUT", "STEP_IN_FLIGHT", "Autoreset"]

#: The info key of a step truncated by its episode's timeout (not by the env itself).
EPISODE_TIMEOUT = "episode_timeout"
#: The info key, beside ``EPISODE_TIMEOUT``, of a cut step that was running when its
#: episode's time ran out: the seconds it had run by then.
STEP_IN_FLIGHT = "step_in_flight"


class Autoreset:
    """Whether the next step of one sub-env is a reset, and whether an ending step resets;
    with ``episode_timeout`` seconds, whether a step ended its episode's time."""

    __slots__ = ("_next_step", "_same_step", "episode_started", "episode_timeout", "pending",
                 "queued")

    def __init__(self, mode: AutoresetMode, episode_timeout: float | None = None) -> None:
        self._next_step = mode is AutoresetMode.NEXT_STEP
        self._same_step = mode is AutoresetMode.SAME_STEP
        #: True when the next step must reset the env instead of stepping it (next-step mode).
        self.pending = False
        #: Seconds an episode may last (``None``: no limit), and when this one began.
        self.episode_timeout = episode_timeout
        self.episode_started = 0.0
        #: Options queued for the next automatic resets, oldest first (``None``: none yet).
        self.queued: collections.deque[dict[str, Any] | None] | None = None

    def _episode_begins(self) -> None:
        if self.episode_timeout is not None:
            self.episode_started = time.monotonic()

    def episode_time_left(self) -> float:
        """Seconds until this episode's timeout (needs one)."""
        assert self.episode_timeout is not None
        return self.episode_started + self.episode_timeout - time.monotonic()

    def cut(self, terminated: bool, truncated: bool, info: dict[str, Any],
            step_started: float) -> tuple[bool, dict[str, Any]]:
        """``(truncated, info)`` of a step that began at ``step_started`` (``time.monotonic``)
        and ended now: cut if its episode's time ran out (needs an episode timeout; an episode
        the env ended itself is left as it is)."""
        if terminated or truncated or self.episode_time_left() > 0:
            return truncated, info
        return True, {**info, **self.timed_out(step_started)}

    def timed_out(self, step_started: float) -> dict[str, Any]:
        """The info of a step cut by its episode's timeout, begun at ``step_started``."""
        assert self.episode_timeout is not None
        in_flight = self.episode_started + self.episode_timeout - step_started
        if in_flight > 0:  # begun before the time ran out: running when it did
            return {EPISODE_TIMEOUT: True, STEP_IN_FLIGHT: in_flight}
        return {EPISODE_TIMEOUT: True}

    def made(self) -> None:
        """A fresh env: in next-step mode its first step starts its first episode, exactly as
        after an episode end (the core refuses steps before the first explicit reset). Nothing
        is queued for it (the vector env queues again what the old one had not used)."""
        self.pending = self._next_step
        self.queued = None

    def explicitly_reset(self) -> None:
        """``reset`` was called: nothing is owed any more."""
        self.pending = False
        self._episode_begins()

    def queue_options(self, queued: Sequence[dict[str, Any] | None]) -> None:
        """The options of the next episodes' automatic resets, oldest first, in place of what
        was queued (the vector env sends its whole view each time, so a host that used an
        option unseen, in a step that was aborted, cannot drift from it)."""
        self.queued = collections.deque(queued)

    def next_reset(self) -> dict[str, Any]:
        """An automatic reset begins: the keywords of its ``env.reset`` call, the oldest options
        queued if any (``{}``: a plain ``env.reset()``, as Gymnasium's own autoreset makes)."""
        queued = self.queued
        options = queued.popleft() if queued else None
        return {} if options is None else {"options": options}

    def reset_instead_of_step(self) -> bool:
        """True (once) when this step resets the env instead of stepping it."""
        if self.pending:
            self.pending = False
            self._episode_begins()
            return True
        return False

    def reset_now(self, terminated: bool, truncated: bool) -> bool:
        """After a step: True when the episode ended and this very step must reset (same-step
        mode); in next-step mode, the next step will."""
        if terminated or truncated:
            if self._same_step:
                self._episode_begins()
                return True
            self.pending = self._next_step
        return False
