"""First-ready bookkeeping: which sub-envs step on their own, and results waiting for ``recv``.

``send`` hands some sub-envs an action each; each then steps on its own and its result lands
(``Arrivals``) whenever it is done. ``recv`` takes the results in landing order, so a sub-env
that finished first is received first: none is starved, none is stepped twice without a new
action, and a result is removed only once the batch that carries it is complete.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from aiovec._core._backend import Arrivals, Pending
from aiovec._core._requests import NO_REPLY

__all__ = ["FirstReady", "Restarted", "StepBatch"]


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


class FirstReady:
    """The sub-envs sent an action and not received yet, and their results."""

    __slots__ = ("arrivals", "deadlines", "in_flight", "ready", "receiving")

    def __init__(self, arrivals: Arrivals) -> None:
        self.arrivals = arrivals
        #: env index -> (its request, its position there), until its result lands.
        self.in_flight: dict[int, tuple[Pending, int]] = {}
        #: env index -> (deadline on the loop's clock, the timeout it came from).
        self.deadlines: dict[int, tuple[float, float]] = {}
        #: env index -> its reply, in landing order, until a ``recv`` returns it.
        self.ready: dict[int, Any] = {}
        self.receiving = False

    def __len__(self) -> int:
        """How many sub-envs ``recv`` can still return without a new ``send``."""
        return len(self.in_flight) + len(self.ready)

    def owed(self, env_ids: list[int]) -> list[int]:
        """Those of ``env_ids`` still stepping or with a result not received yet."""
        in_flight, ready = self.in_flight, self.ready
        return [env for env in env_ids if env in in_flight or env in ready]

    def sent(self, pending: Pending, deadline: float | None, timeout: float | None) -> None:
        """The sub-envs of ``pending`` are stepping, each due by ``deadline`` if given."""
        in_flight = self.in_flight
        for position, env_index in enumerate(pending.env_indices):
            in_flight[env_index] = (pending, position)
        if deadline is not None and timeout is not None:
            for env_index in pending.env_indices:
                self.deadlines[env_index] = (deadline, timeout)

    def collect(self) -> None:
        """Move the results that landed into ``ready`` (stale ones, of sub-envs given up on,
        are dropped)."""
        landed, in_flight, ready = self.arrivals.landed, self.in_flight, self.ready
        while landed:
            pending, position = landed.popleft()
            env_index = pending.env_indices[position]
            entry = in_flight.get(env_index)
            if entry is not None and entry[0] is pending and entry[1] == position:
                del in_flight[env_index]
                self.deadlines.pop(env_index, None)
                ready[env_index] = pending.replies[position]

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
            del self.deadlines[env_index]
            del self.in_flight[env_index]
        return late

    def _landed(self, env_index: int) -> bool:
        pending, position = self.in_flight[env_index]
        return pending.replies[position] is not NO_REPLY

    def first(self, count: int) -> list[int]:
        """The ``count`` earliest results (left in ``ready``)."""
        ids: list[int] = []
        for env_index in self.ready:
            if len(ids) == count:
                break
            ids.append(env_index)
        return ids

    def forget(self, env_ids: Any) -> None:
        """Drop the waiting results of ``env_ids`` (they were received, or reset)."""
        ready = self.ready
        for env_index in env_ids:
            ready.pop(env_index, None)
