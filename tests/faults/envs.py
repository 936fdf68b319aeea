"""Factories of ``FaultyEnv`` sub-envs for the fault-injection tests, on every backend.

The fault suite runs on ``ALL_BACKENDS`` (tests/backends_matrix.py) wherever a fault means the
same on each: a sub-env that raises, returns what cannot travel, is cancelled, restarted or
given a bad argument; hangs and deadlines on ``DEADLINE_BACKENDS`` (not inline, which blocks
the loop); a worker that dies on ``WORKER_BACKENDS``.

On the async backend the sub-envs are coroutine envs: ``AsyncFaultyEnv``, the same
``FaultyEnv`` behind ``AsyncAdapter``, whose ``hang`` awaits instead of blocking (a blocking
hang would block the event loop, and every sub-env and the test with it). Its ``exit`` and
``kill`` faults would end the test process itself: ``FaultyEnv`` raises ``InjectedFault``
instead outside a worker process, so the tests of dying workers leave the async backend out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import anyio
import anyio.lowlevel

from aiovec.testing import AsyncAdapter, Fault, FaultLedger, FaultyEnv, InjectedFault
from tests.backends_matrix import WORKER_BACKENDS


class HangDue(Exception):
    """A ``hang`` fault struck a ``LoopFaultyEnv``: its caller awaits it (``wait``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"hang for {seconds} s")
        self.seconds = seconds

    async def wait(self) -> NoReturn:
        """Hang as a coroutine does: await (cancellable, as any I/O is), then fail as
        ``FaultyEnv``'s blocking hang does once it ends."""
        await anyio.sleep(self.seconds)
        raise InjectedFault("a hang fault ended (timed out)")


class LoopFaultyEnv(FaultyEnv):
    """``FaultyEnv`` whose ``hang`` is recorded, then raised as ``HangDue`` for its caller to
    await, where ``FaultyEnv`` would block its thread. Everything else is ``FaultyEnv``'s:
    the same schedule, draws and ledger."""

    def _due(self, phase: str) -> str | None:
        kind = super()._due(phase)
        if kind == "hang":
            self._record(f"fault hang {phase}")  # as FaultyEnv._strike records every fault
            raise HangDue(self.hang_seconds)
        return kind


async def _hanging(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except HangDue as due:
        await due.wait()


class AsyncFaultyEnv(AsyncAdapter):
    """A ``LoopFaultyEnv`` as a coroutine env (``backend="async"``): each call yields to the
    loop first (so it can be cancelled before it starts), and a hang awaits."""

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await anyio.lowlevel.checkpoint()
        result: tuple[Any, dict[str, Any]] = await _hanging(self.env.reset, seed=seed,
                                                            options=options)
        return result

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await anyio.lowlevel.checkpoint()
        obs, reward, terminated, truncated, info = await _hanging(self.env.step, action)
        return obs, float(reward), terminated, truncated, info

    async def close(self) -> None:
        await _hanging(self.env.close)


async def make_async_faulty(env_id: int, **options: Any) -> AsyncFaultyEnv:
    """The async backend's factory (an async one: a hang in ``init`` awaits too)."""
    try:
        env = LoopFaultyEnv(env_id, **options)
    except HangDue as due:
        await due.wait()
    return AsyncFaultyEnv(lambda: env)


def faulty(num_envs: int, ledger: FaultLedger | None = None,
           faults: dict[int, Sequence[Fault]] | None = None, *, backend: str = "inline",
           **options: Any) -> list[Callable[[], Any]]:
    """``num_envs`` factories for ``backend``; sub-env ``i`` gets ``faults[i]`` and the other
    ``options`` (``FaultyEnv``'s)."""
    directory = None if ledger is None else str(ledger.directory)
    make: Callable[..., Any] = make_async_faulty if backend == "async" else FaultyEnv
    return [functools.partial(make, index, ledger=directory,
                              faults=(faults or {}).get(index, ()), **options)
            for index in range(num_envs)]


def one_per_worker(backend: str, num_envs: int) -> dict[str, Any]:
    """Options giving each sub-env its own worker process or actor (so a fault hits only its
    env)."""
    return {"num_workers": num_envs} if backend in WORKER_BACKENDS else {}
