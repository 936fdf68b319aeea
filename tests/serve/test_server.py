"""EnvServer's own parts, in-process: the in-loop turns its inline sessions take."""

from __future__ import annotations

import anyio
import pytest

from aiovec._serve._server import _InLoopTurn

pytestmark = pytest.mark.anyio


async def test_a_free_in_loop_turn_is_taken_without_giving_up_the_loop() -> None:
    """A step that finds a place free keeps running: nothing else runs in between."""
    limiter = anyio.CapacityLimiter(2)
    ran: list[str] = []
    async with anyio.create_task_group() as group:
        async def other() -> None:
            ran.append("other")

        group.start_soon(other)
        async with _InLoopTurn(limiter):
            assert ran == [] and limiter.borrowed_tokens == 1
        await anyio.wait_all_tasks_blocked()
        assert ran == ["other"]
    assert limiter.borrowed_tokens == 0


async def test_an_in_loop_turn_waits_for_a_place_then_takes_it() -> None:
    """With every place taken, a step waits until one is given back; a cancelled wait
    takes none."""
    limiter = anyio.CapacityLimiter(1)
    holder = _InLoopTurn(limiter)
    await holder.__aenter__()
    order: list[str] = []

    async def step(name: str) -> None:
        async with _InLoopTurn(limiter):
            order.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(step, "waiting")
        with anyio.CancelScope() as cancelled:
            cancelled.cancel()
            await step("cancelled")
        await anyio.wait_all_tasks_blocked()
        assert order == [] and limiter.borrowed_tokens == 1
        await holder.__aexit__(None, None, None)
    assert order == ["waiting"] and limiter.borrowed_tokens == 0
