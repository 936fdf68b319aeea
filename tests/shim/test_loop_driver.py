"""Where the sync shims' event loop runs: in the caller's own thread during each call (no
thread hop), on a helper thread only for callers inside an event loop; calls from several
threads one at a time; Ctrl-C handling that leaves a program's own SIGINT handler be."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from types import FrameType

import numpy as np
import pytest
import trio

import aiovec
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


def test_a_caller_inside_an_event_loop_gets_a_helper_thread() -> None:
    """No thread may run two event loops: from asyncio or trio code the shim's loop runs on a
    helper thread, which is gone once the shim is closed."""
    gated = GatedEnv(gated=False)

    async def handler() -> set[int]:
        shim = aiovec.VectorEnv([lambda: gated], backend="inline")
        try:
            shim.reset()
            shim.step(np.ones(1, np.int64))
            assert len(loop_threads()) == 1
            return gated.thread_ids - {threading.get_ident()}
        finally:
            shim.close()

    for run in (lambda: asyncio.run(handler()), lambda: trio.run(handler)):
        gated.thread_ids.clear()
        elsewhere = run()
        assert len(elsewhere) == 1 and threading.get_ident() not in elsewhere
        assert loop_threads() == []


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
