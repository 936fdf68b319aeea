"""What the backends share beyond the interface they implement (``aiovec._core._backend``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel

from aiovec._core._backend import Arrivals, Pending
from aiovec._core._requests import Failure, Op

__all__ = ["CountdownPending", "given_up_reply", "split_into_shares", "workers_within"]


class CountdownPending(Pending):
    """A request whose replies are handed in (by tasks, threads or completion callbacks)
    rather than read by the task that waits: it counts what is still owed, and the hand-in
    that pays the last of it wakes that task.

    ``owed`` counts replies, or whatever unit a backend hands them in by (a Ray actor's
    batch); it changes only in the event loop's thread. The event is made on first need:
    most requests are answered before anyone waits.
    """

    __slots__ = ("_done", "owed")

    def __init__(self, op: Op, env_indices: Sequence[int], arrivals: Arrivals | None = None,
                 *, owed: int | None = None) -> None:
        super().__init__(op, env_indices, arrivals)
        self.owed = len(self.env_indices) if owed is None else owed
        self._done: anyio.Event | None = None

    def paid(self, count: int = 1) -> None:
        """``count`` more of what is owed came in (call in the event loop's thread)."""
        self.owed -= count
        if self.owed <= 0 and self._done is not None:
            self._done.set()

    def paid_in_full(self) -> None:
        """Everything owed came in (call in the event loop's thread)."""
        self.paid(self.owed)

    async def wait(self) -> None:
        if self.owed <= 0:
            await anyio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = anyio.Event()
        await self._done.wait()

    def abort(self) -> None:
        self.paid_in_full()


def given_up_reply(env_index: int, op: Op, why: str) -> Any:
    """The reply of a sub-env that has no host any more (given up on after a deadline and not
    remade yet, or the vector env is closing): a failure, except for ``Op.CLOSE``, where
    there is nothing left to close."""
    if op is Op.CLOSE:
        return None
    return Failure(env_index, op.value, None, why, "")


def workers_within(num_workers: int | None, max_concurrency: int | None, default: int) -> int:
    """How many workers (or actors) to start so that at most ``max_concurrency`` sub-envs
    execute at once, as Gymnasium's ``max_concurrency`` means: a worker steps its sub-envs
    one at a time, so that is at most one sub-env per worker."""
    if max_concurrency is None:
        return num_workers or default
    if num_workers is None:
        return min(default, max_concurrency)
    if num_workers > max_concurrency:
        raise ValueError(
            f"num_workers={num_workers} exceeds max_concurrency={max_concurrency}: each worker "
            "steps one sub-env at a time, so at most num_workers sub-envs execute at once; "
            "leave num_workers out (aiovec then starts at most max_concurrency workers) or "
            "pass one no larger")
    return num_workers


def split_into_shares(num_envs: int, num_hosts: int) -> list[range]:
    """Sub-envs ``0..num_envs-1`` split into ``num_hosts`` contiguous shares, as even as can be
    (sizes differ by at most one): each worker process or Ray actor hosts one share."""
    bounds = [num_envs * index // num_hosts for index in range(num_hosts + 1)]
    return [range(bounds[index], bounds[index + 1]) for index in range(num_hosts)]
