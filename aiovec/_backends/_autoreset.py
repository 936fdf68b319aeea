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
"""

from __future__ import annotations

from gymnasium.vector import AutoresetMode

__all__ = ["Autoreset"]


class Autoreset:
    """Whether the next step of one sub-env is a reset, and whether an ending step resets."""

    __slots__ = ("_next_step", "_same_step", "pending")

    def __init__(self, mode: AutoresetMode) -> None:
        self._next_step = mode is AutoresetMode.NEXT_STEP
        self._same_step = mode is AutoresetMode.SAME_STEP
        #: True when the next step must reset the env instead of stepping it (next-step mode).
        self.pending = False

    def made(self) -> None:
        """A fresh env: in next-step mode its first step starts its first episode, exactly as
        after an episode end (the core refuses steps before the first explicit reset)."""
        self.pending = self._next_step

    def explicitly_reset(self) -> None:
        """``reset`` was called: nothing is owed any more."""
        self.pending = False

    def reset_instead_of_step(self) -> bool:
        """True (once) when this step resets the env instead of stepping it."""
        if self.pending:
            self.pending = False
            return True
        return False

    def reset_now(self, terminated: bool, truncated: bool) -> bool:
        """After a step: True when the episode ended and this very step must reset (same-step
        mode); in next-step mode, the next step will."""
        if terminated or truncated:
            if self._same_step:
                return True
            self.pending = self._next_step
        return False
