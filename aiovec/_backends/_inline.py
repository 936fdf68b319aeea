"""The inline backend: every sub-env runs in the event loop's thread, one after another.

It is the reference oracle every other backend is tested against, and a debugging aid (plain
stack traces, breakpoints work). A request runs when it is awaited, so it blocks the event loop
for the duration of the sub-envs' work: use it for cheap envs or for debugging.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import anyio.lowlevel
import gymnasium as gym
from gymnasium.vector import AutoresetMode

from aiovec._backends._slot import EnvSlot
from aiovec._core._backend import Arrivals, Backend, Pending, Waited
from aiovec._core._cleanups import hosted
from aiovec._core._requests import Op, Remade
from aiovec._core._statistics import LatencyLog
from aiovec._limits._shared import SharedLimits
from aiovec._limits._take import bound
from aiovec._limits._takers import Taker

__all__ = ["InlineBackend"]


class _InlinePending(Pending):
    """Runs the request on the sub-envs when first awaited."""

    __slots__ = ("_payloads", "_slots", "_taker", "skipped", "started")

    def __init__(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
                 slots: list[EnvSlot], arrivals: Arrivals | None = None,
                 taker: Taker | None = None) -> None:
        super().__init__(op, env_indices, arrivals)
        self._payloads = payloads
        self._slots = slots
        self._taker = taker
        self.started = False
        #: Sub-envs given up on before the request ran (a first-ready deadline): not run.
        self.skipped: set[int] = set()

    async def wait(self) -> None:
        # The one cancellation point: a request cancelled here never touched a sub-env.
        await anyio.lowlevel.checkpoint()
        self.run()

    def wait_here(self, timeout: float | None) -> Waited:
        self.run()  # to its end: a deadline cannot cut an inline request short
        return Waited.DONE

    def run(self) -> None:
        """Serve the request now, if it has not been served yet."""
        if self.started:
            return
        self.started = True
        hosting = hosted.set(True)  # their cleanups outlive this process (its keeper's)
        try:
            if self._taker is None:
                self._run()
            else:  # the sub-envs' aiovec.limit takes from the vector env's limits
                with bound(self._taker):
                    self._run()
        finally:
            hosted.reset(hosting)

    def _run(self) -> None:
        slots, op, replies, arrivals = self._slots, self.op, self.replies, self.arrivals
        skipped, stepping = self.skipped, op is Op.STEP
        for position, (env_index, payload) in enumerate(zip(self.env_indices, self._payloads)):
            if skipped and env_index in skipped:
                continue
            slot = slots[env_index]  # (a step without the dispatch: the hot path)
            replies[position] = slot.step(payload) if stepping else slot.run(op, payload)
            if arrivals is not None:
                arrivals.land(self, position)
        self._payloads = ()


class InlineBackend(Backend):
    """Sub-envs stepped sequentially in the calling thread."""

    name: ClassVar[str] = "inline"
    in_process: ClassVar[bool] = True
    serves_in_caller: ClassVar[bool] = True
    waits_in_caller: bool = True

    def __init__(self, env_fns: Sequence[Any], autoreset_mode: AutoresetMode, *,
                 max_concurrency: int | None = None, limits: SharedLimits | None = None,
                 episode_timeout: float | None = None) -> None:
        # One sub-env at a time whatever ``max_concurrency`` says: accepted, so switching a
        # vector env to "inline" for debugging needs no other change.
        super().__init__(env_fns, autoreset_mode, limits=limits,
                         episode_timeout=episode_timeout)
        #: Sub-envs run in the loop's thread, where a take cannot wait for a holder.
        self._taker = None if limits is None else limits.local_taker(can_wait=False)
        self.max_concurrency = max_concurrency

    _slots: list[EnvSlot]
    #: First-ready requests not served yet: they run when ``recv`` waits for them.
    _unserved: list[_InlinePending]

    async def start(self) -> Pending:
        self._unserved = []
        self.latencies = LatencyLog.allocate(self.num_envs)
        self._slots = [EnvSlot(index, self.autoreset_mode, self.latencies.timer(index),
                               self.cleanups, self.episode_timeout)
                       for index in range(self.num_envs)]
        indices = range(self.num_envs)
        return self.submit(Op.MAKE, indices, self.env_fns)

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        pending = self.submit(Op.MAKE, env_indices, [self.env_fns[i] for i in env_indices])
        await pending.wait()
        return Remade(list(env_indices), pending.failures())

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
               arrivals: Arrivals | None = None) -> Pending:
        if arrivals is None:  # requests run in the order they were made
            self._run_sent()
        pending = _InlinePending(op, env_indices, payloads, self._slots, arrivals, self._taker)
        if arrivals is not None:
            self._unserved.append(pending)
        return pending

    def queue_options(self, queued: dict[int, tuple[Any, ...]]) -> None:
        # A request here runs only when awaited: set now (the sub-envs run nothing).
        for env_index, options in queued.items():
            self._slots[env_index].autoreset.queue_options(options)

    def _run_sent(self) -> None:
        unserved, self._unserved = self._unserved, []
        for pending in unserved:
            pending.run()

    def discard(self, env_indices: Sequence[int]) -> None:
        # Only a first-ready step can miss a deadline here (its clock starts at send, it runs
        # at recv): it must then never run.
        for pending in self._unserved:
            pending.skipped.update(env_indices)

    def abort_steps(self, steps: Sequence[tuple[Pending, int]]) -> list[tuple[Pending, int]]:
        # A first-ready step runs when recv waits for it: one aborted before then never runs.
        for pending, position in steps:
            if isinstance(pending, _InlinePending):
                pending.skipped.add(pending.env_indices[position])
        return []

    async def wait_arrivals(self, arrivals: Arrivals, count: int) -> None:
        # Everything sent runs now, in order: each reply lands as its sub-env finishes.
        await anyio.lowlevel.checkpoint()
        self._run_sent()

    def hosts_started(self) -> bool:
        return hasattr(self, "_slots")

    async def release_hosts(self, pending: Pending) -> None:
        # An inline sub-env cannot be stopped from outside: its close runs in full, deadline
        # or not (a no-op when the close ran already).
        assert isinstance(pending, _InlinePending)
        pending.run()

    def close_nowait(self) -> None:
        self.closing = True
        for slot in getattr(self, "_slots", ()):
            slot.run(Op.CLOSE, None)

    def local_env(self, env_index: int) -> gym.Env[Any, Any]:
        env = self._slots[env_index].env
        if env is None:
            raise RuntimeError(f"sub-env {env_index} is not running")
        return env
