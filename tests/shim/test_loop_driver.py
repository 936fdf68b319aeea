"""Where the sync shims' event loop runs: in the caller's own thread during each call (no
thread hop), borrowed from an outer event loop where one runs there; calls from several
threads one at a time; Ctrl-C handling that leaves a program's own SIGINT handler be."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from types import FrameType
from typing import Any

import numpy as np
import pytest
import sniffio
import trio
import trio.lowlevel

import aiovec
from aiovec._internals import INTERNALS, look_up
from aiovec._shim._loop_driver import LoopDriver
from aiovec.testing import CountingEnv
from tests.envs import GatedEnv


def loop_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "aiovec-loop"]


def test_a_script_runs_the_loop_in_its_own_thread() -> None:
    """On the inline backend the sub-env runs on the loop: here, the caller's thread."""
    gated = GatedEnv(gated=False)
    shim = aiovec.VectorEnv([lambda: gated, CountingEnv], backend="inline")
    try:
        shim.reset()
        shim.step(np.ones(2, np.int64))
        assert gated.thread_ids == {threading.get_ident()}
        assert loop_threads() == []
    finally:
        shim.close()
    assert gated.closed


def test_a_caller_inside_an_event_loop_lends_its_thread() -> None:
    """From asyncio, uvloop or trio code (a notebook cell, an async handler) the call blocks
    the caller's loop anyway: the shim's loop runs in that thread meanwhile (no thread hop),
    and the outer loop finds itself as it was: running, its library known, its tasks going.
    Where asyncio's running loop cannot be set aside (``AIOVEC_PRIVATE_INTERNALS=0``), the
    call runs in a thread of its own beside an asyncio loop, and all the same after it."""
    import uvloop

    gated = GatedEnv(gated=False)

    async def handler() -> set[int]:
        library = sniffio.current_async_library()
        shim = aiovec.VectorEnv([lambda: gated], backend="inline")
        try:
            shim.reset()
            shim.step(np.ones(1, np.int64))
        finally:
            shim.close()
        assert sniffio.current_async_library() == library  # the outer loop's marks are back
        if library == "asyncio":
            assert asyncio.get_running_loop() is not None
            await asyncio.sleep(0)
        else:
            await trio.lowlevel.checkpoint()
        assert loop_threads() == []
        return gated.thread_ids

    runs = {"asyncio": lambda: asyncio.run(handler()), "uvloop": lambda: uvloop.run(handler()),
            "trio": lambda: trio.run(handler)}
    for name, run in runs.items():
        gated.thread_ids.clear()
        lends = INTERNALS.borrows_threads or name == "trio"  # trio sets no asyncio loop
        assert (run() == {threading.get_ident()}) is lends, name


def test_a_shim_made_in_a_script_can_be_stepped_from_async_code_and_back() -> None:
    shim = aiovec.VectorEnv([CountingEnv] * 2, backend="thread")
    try:
        shim.reset()

        async def step_once() -> list[int]:
            obs, *_ = shim.step(np.ones(2, np.int64))
            return obs[:, 0].tolist()

        assert asyncio.run(step_once()) == [1, 1]
        obs, *_ = shim.step(np.ones(2, np.int64))
        assert obs[:, 0].tolist() == [2, 2]
    finally:
        shim.close()
    assert loop_threads() == []


def test_calls_from_two_threads_run_one_after_the_other() -> None:
    gated = GatedEnv()
    shim = aiovec.VectorEnv([lambda: gated, CountingEnv], backend="thread")
    try:
        shim.reset()
        stepped: list[object] = []
        stepping = threading.Thread(target=lambda: stepped.append(
            shim.step(np.ones(2, np.int64))[0][:, 0].tolist()))
        stepping.start()
        assert gated.entered.wait(timeout=30)
        counts: list[object] = []
        reading = threading.Thread(target=lambda: counts.append(shim.get_attr("steps")))
        reading.start()
        reading.join(timeout=0.5)
        assert reading.is_alive()  # it waits for the step, which waits for the gate
        gated.release.set()
        stepping.join(timeout=30)
        reading.join(timeout=30)
        assert stepped == [[1, 1]]
        assert counts == [(1, 1)]  # read after the step, not during it
    finally:
        gated.release.set()
        shim.close()


def test_a_programs_own_sigint_handler_is_left_in_place() -> None:
    seen: list[int] = []

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, on_sigint)
    shim = aiovec.VectorEnv([CountingEnv] * 2, backend="inline")
    try:
        shim.reset()
        shim.step(np.ones(2, np.int64))
        assert signal.getsignal(signal.SIGINT) is on_sigint
    finally:
        shim.close()
        signal.signal(signal.SIGINT, previous)
    assert seen == []


def test_python_s_own_sigint_handler_is_back_after_every_call(ctrl_c: None) -> None:
    shim = aiovec.VectorEnv([CountingEnv] * 2, backend="inline")
    try:
        shim.reset()
        shim.step(np.ones(2, np.int64))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        shim.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_received_by_another_thread_still_cancels_the_call(ctrl_c: None) -> None:
    """The kernel may hand SIGINT to any thread; Python runs the handler in the main thread,
    asleep in the loop's selector, which must be woken. It had slept on until the step ended
    by itself (here: the gate's 60 s), seen once in CI."""
    gated = GatedEnv()
    shim = aiovec.VectorEnv([lambda: gated, CountingEnv], backend="thread")
    try:
        shim.reset()

        def interrupt_from_this_thread() -> None:
            assert gated.entered.wait(timeout=30)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        interrupter = threading.Thread(target=interrupt_from_this_thread)
        interrupter.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            shim.step(np.ones(2, np.int64))
        assert time.monotonic() - started < 30  # not the gate's 60 s
        interrupter.join()
        assert shim.unusable_envs == (0, 1)
    finally:
        gated.release.set()
        shim.close()


def test_ctrl_c_cancels_a_call_made_from_inside_an_event_loop(ctrl_c: None) -> None:
    """A sync call from async code (here a loop with no SIGINT handler of its own, so Ctrl-C
    is Python's ``KeyboardInterrupt``): the call is cancelled, and the interrupt reaches the
    outer loop's code, whether the call borrowed the thread or ran beside it."""
    gated = GatedEnv()
    shim = aiovec.VectorEnv([lambda: gated, CountingEnv], backend="thread")
    outer = asyncio.new_event_loop()

    async def handler() -> None:
        shim.step(np.ones(2, np.int64))

    def interrupt() -> None:
        assert gated.entered.wait(timeout=30)
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    try:
        shim.reset()
        interrupter.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            outer.run_until_complete(handler())
        assert time.monotonic() - started < 30  # not the gate's 60 s
        assert shim.unusable_envs == (0, 1)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        interrupter.join()
        gated.release.set()
        shim.close()
        outer.close()


def test_ctrl_c_before_the_call_started_interrupts_without_running_it(ctrl_c: None) -> None:
    """SIGINT between the handler's install and the call's first step: the call is cancelled
    before its coroutine ever ran, which must still end the call (a task cancelled that early
    never runs the code that would stop the loop; this hung), and nothing of it runs."""
    driver = LoopDriver()
    ran: list[str] = []

    async def record(word: str) -> str:
        ran.append(word)
        return word

    def interrupt_then_make(loop: asyncio.AbstractEventLoop,
                            coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        signal.raise_signal(signal.SIGINT)  # the handler runs here, before the task exists
        return asyncio.Task(coro, loop=loop)

    # Should the call hang, this stops the loop (the task is long done) and ends it late.
    watchdog = threading.Timer(5, lambda: driver._loop.call_soon_threadsafe(driver._loop.stop))
    try:
        driver._loop.set_task_factory(interrupt_then_make)
        watchdog.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            driver.run(record, "interrupted")
        assert time.monotonic() - started < 4
        driver._loop.set_task_factory(None)
        assert driver.run(record, "next") == "next"  # the loop takes the next call
        assert ran == ["next"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        watchdog.cancel()
        driver._loop.set_task_factory(None)
        driver.stop()


def test_calls_leave_nothing_scheduled_on_the_loop() -> None:
    """Between calls the loop stands still with nothing queued: each call's task is done and
    no callback of it is left to run in a later call."""
    driver = LoopDriver()

    async def checkpoints(count: int) -> int:
        for _ in range(count):
            await asyncio.sleep(0)
        return count

    try:
        for count in range(4):
            assert driver.run(checkpoints, count) == count
            assert asyncio.all_tasks(driver._loop) == set()
            assert not driver._loop.is_running()
            assert len(driver._loop._ready) == 0  # type: ignore[attr-defined]
    finally:
        driver.stop()


@pytest.mark.parametrize("steps_the_loop_itself", [True, False])
def test_each_call_runs_with_the_loop_running_and_leaves_it_stopped(
        steps_the_loop_itself: bool) -> None:
    """During a call the loop is the running one, in this thread, with its async generator
    hooks; after it, none of that remains, and a sleeping call's timer fires. Both ways of
    running the loop: stepping asyncio's loop directly (``run_forever`` never called), or
    ``run_forever`` (``aiovec._internals``' fallback)."""
    driver = LoopDriver()
    loop = driver._loop
    if not steps_the_loop_itself:
        driver._run_until_task_done = look_up(False).runner_for(loop)
    run_forever = loop.run_forever
    run_forever_calls = 0

    def counted_run_forever() -> None:
        nonlocal run_forever_calls
        run_forever_calls += 1
        run_forever()

    loop.run_forever = counted_run_forever  # type: ignore[method-assign]
    hooks_before = sys.get_asyncgen_hooks()
    seen: list[Any] = []

    async def inside() -> str:
        seen.append(asyncio.get_running_loop())
        seen.append(sys.get_asyncgen_hooks().firstiter)
        await asyncio.sleep(0.01)

        async def numbers() -> Any:
            yield 1

        return str(await numbers().__anext__())

    try:
        for _ in range(3):
            assert driver.run(inside) == "1"
            assert not loop.is_running()
            assert sys.get_asyncgen_hooks() == hooks_before
            with pytest.raises(RuntimeError):
                asyncio.get_running_loop()
        stepped = steps_the_loop_itself and INTERNALS.found["BaseEventLoop._run_once"]
        assert (run_forever_calls == 0) is stepped
    finally:
        driver.stop()
    assert seen[0] is loop
    assert seen[1] is not None and seen[1] == loop._asyncgen_firstiter_hook  # type: ignore[attr-defined]


def test_debug_mode_runs_as_run_forever_runs_it() -> None:
    """asyncio's debug mode (``PYTHONASYNCIODEBUG``, ``-X dev``): a call tracks where each
    coroutine was made, as ``run_forever`` sets it up, and stops tracking after it."""
    driver = LoopDriver()
    driver._loop.set_debug(True)
    depth_before = sys.get_coroutine_origin_tracking_depth()

    async def tracking_depth() -> int:
        return sys.get_coroutine_origin_tracking_depth()

    try:
        assert driver.run(tracking_depth) > 0
        assert sys.get_coroutine_origin_tracking_depth() == depth_before
    finally:
        driver.stop()
