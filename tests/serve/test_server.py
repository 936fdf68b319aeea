"""EnvServer's own parts, in-process: the in-loop turns its inline sessions take, and what
``run`` sets for the process while it serves."""

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


def test_serving_collects_the_young_generation_less_often_then_restores_it() -> None:
    """``run`` raises the youngest generation's threshold while it serves (full collections
    over thousands of sessions stalled every connection), never lowers it, and restores
    what was there."""
    import gc

    from aiovec._serve._run import GC_THRESHOLD, collecting_less_often

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with collecting_less_often():
            assert gc.get_threshold() == (GC_THRESHOLD, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(50_000, 5, 5)
        with collecting_less_often():
            assert gc.get_threshold() == (50_000, 5, 5)
        assert gc.get_threshold() == (50_000, 5, 5)
    finally:
        gc.set_threshold(*before)
