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

from aiovec._backends._base import Backend, Pending, Remade
from aiovec._core._slot import EnvSlot, Op
from aiovec._core._statistics import LatencyLog

__all__ = ["InlineBackend"]


class _InlinePending(Pending):
    """Runs the request on the sub-envs when first awaited."""

    __slots__ = ("_payloads", "_slots", "started")

    def __init__(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any],
                 slots: list[EnvSlot]) -> None:
        super().__init__(op, env_indices)
        self._payloads = payloads
        self._slots = slots
        self.started = False

    async def wait(self) -> None:
        # The one cancellation point: a request cancelled here never touched a sub-env.
        await anyio.lowlevel.checkpoint()
        self.started = True
        slots, op, replies = self._slots, self.op, self.replies
        for position, (env_index, payload) in enumerate(zip(self.env_indices, self._payloads)):
            replies[position] = slots[env_index].run(op, payload)
        self._payloads = ()


class InlineBackend(Backend):
    """Sub-envs stepped sequentially in the calling thread."""

    name: ClassVar[str] = "inline"
    in_process: ClassVar[bool] = True

    _slots: list[EnvSlot]

    async def start(self) -> Pending:
        self.latencies = LatencyLog.allocate(self.num_envs)
        self._slots = [EnvSlot(index, self.autoreset_mode, self.latencies.timer(index))
                       for index in range(self.num_envs)]
        indices = range(self.num_envs)
        return self.submit(Op.MAKE, indices, self.env_fns)

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        pending = self.submit(Op.MAKE, env_indices, [self.env_fns[i] for i in env_indices])
        await pending.wait()
        return Remade(list(env_indices), pending.failures())

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Sequence[Any]) -> Pending:
        return _InlinePending(op, env_indices, payloads, self._slots)

    async def aclose(self, timeout: float) -> Pending | None:
        slots = getattr(self, "_slots", None)
        if slots is None:
            return None
        pending = self.submit(Op.CLOSE, range(self.num_envs), [None] * self.num_envs)
        with anyio.CancelScope(shield=True):
            await pending.wait()
        return pending

    def close_nowait(self) -> None:
        for slot in getattr(self, "_slots", ()):
            slot.run(Op.CLOSE, None)

    def local_env(self, env_index: int) -> gym.Env[Any, Any]:
        env = self._slots[env_index].env
        if env is None:
            raise RuntimeError(f"sub-env {env_index} is not running")
        return env
