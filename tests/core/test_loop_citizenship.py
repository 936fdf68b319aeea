"""Event-loop citizenship: nothing aiovec does blocks the event loop it runs on.

Two checks, on asyncio, uvloop and trio:

- a **probe** coroutine on the same loop sleeps 1 ms at a time and records how late it wakes,
  while sub-envs whose steps take 50 ms work on threads, processes or the loop itself. Had
  aiovec blocked the loop for a step, the probe would be ≥ 50 ms late; the inline backend,
  which steps sub-envs in the loop's thread by design, shows exactly that;
- a **blocking-call detector**: on asyncio and uvloop ``blockbuster`` turns any blocking call
  (sleep, blocking socket or file I/O, lock waits, ...) made from aiovec's code in the loop's
  thread into an error; on trio an instrument times every task step, so any code holding the
  loop for long is caught whatever it calls.
"""

from __future__ import annotations

import functools
import gc
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest
import sniffio

import aiovec
from tests.backends_matrix import LOCAL_DEADLINE_BACKENDS

# Timing of the loop itself: a loaded machine delays it as a blocked loop would, so these run
# alone (make unit runs the serial tests after the parallel run).
pytestmark = [pytest.mark.anyio, pytest.mark.serial]

STEP_SECONDS = 0.05
#: A loop blocked for one sub-env step would make the probe at least this late.
BLOCKED = STEP_SECONDS * 0.8
#: The probe's median lateness allowed when nothing blocks: far above scheduling noise on a
#: loaded 2-core machine (a few ms), far below one blocked step.
NOISE = 0.025


class SlowEnv(gym.Env[Any, Any]):
    """Takes ``STEP_SECONDS`` per step, holding its thread (as CPU-bound or blocking code)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        time.sleep(STEP_SECONDS)
        return np.zeros(2, np.float32), 1.0, False, False, {"at": time.monotonic()}


class SlowAsyncEnv(aiovec.AsyncEnv[Any, Any]):
    """Takes ``STEP_SECONDS`` per step, awaiting (as I/O-bound code)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(STEP_SECONDS)
        return np.zeros(2, np.float32), 1.0, False, False, {"at": time.monotonic()}




def vector_env(backend: str, num_envs: int = 4) -> aiovec.AsyncVectorEnv:
    env_class = SlowAsyncEnv if backend == "async" else SlowEnv
    return aiovec.AsyncVectorEnv([env_class] * num_envs, backend=backend)


async def workload(envs: aiovec.AsyncVectorEnv) -> None:
    """Everything a training loop does: start, reset, steps, first-ready batches, close."""
    async with envs:
        await envs.reset(seed=0)
        actions = np.zeros(envs.num_envs, dtype=np.int64)
        for _ in range(6):
            await envs.step(actions)
        envs.send(actions)
        batches = 0
        async for batch in envs.batches(batch_size=2):
            batches += 1
            if batches < 8:
                envs.send(np.zeros(len(batch.env_ids), dtype=np.int64), batch.env_ids)
        await envs.get_attr("observation_space")


async def probe_lateness(work: Callable[[], Awaitable[None]]) -> np.ndarray[Any, Any]:
    """Run ``work`` while a probe sleeps 1 ms at a time → how late each wake-up was (s)."""
    lateness: list[float] = []
    done = anyio.Event()

    async def probe() -> None:
        while not done.is_set():
            before = anyio.current_time()
            await anyio.sleep(0.001)
            lateness.append(anyio.current_time() - before - 0.001)

    async with anyio.create_task_group() as group:
        group.start_soon(probe)
        try:
            await work()
        finally:
            done.set()
    return np.array(lateness)


@pytest.mark.parametrize("backend", LOCAL_DEADLINE_BACKENDS)
async def test_a_probe_on_the_loop_keeps_ticking(anyio_backend: Any, backend: str) -> None:
    envs = vector_env(backend)
    lateness = await probe_lateness(functools.partial(workload, envs))
    assert len(lateness) > 100, "the probe hardly ran"
    # A loop blocked by each sub-env step would make a dozen wake-ups a whole step late; a
    # shared machine taking the core away now and then makes one or two.
    stalls = int((lateness >= BLOCKED).sum())
    assert stalls <= 2, f"{stalls} probe wake-ups a whole step late with the {backend} backend"
    median = float(np.median(lateness))
    assert median < NOISE, f"probe median lateness {median * 1000:.1f} ms ({backend})"


async def test_the_inline_backend_does_block_the_loop(anyio_backend: Any) -> None:
    """The control: sub-envs stepped in the loop's thread hold the probe up for whole steps
    (the documented contract of the inline backend, and proof the probe can fail)."""
    envs = vector_env("inline", num_envs=2)
    lateness = await probe_lateness(functools.partial(workload, envs))
    assert (lateness >= BLOCKED).sum() > 2


@asynccontextmanager
async def no_blocking_calls() -> AsyncIterator[list[float]]:
    """Fail on a blocking call made by aiovec in the loop's thread (asyncio, uvloop), or on
    any trio task step that holds the loop ``BLOCKED`` seconds or more.

    On trio a step's hold is its wall time if the thread slept in the kernel during it (a
    voluntary context switch: a blocking sleep, read or lock wait), else its CPU time: time
    the machine took the core away from us (preemption on a shared host) is not aiovec
    holding the loop. The garbage collector is paused for the same reason.
    """
    if sniffio.current_async_library() == "asyncio":
        from blockbuster import blockbuster_ctx

        with blockbuster_ctx(["aiovec"]):
            yield []
        return
    import trio

    def now() -> tuple[float, float, int]:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return time.perf_counter(), time.thread_time(), usage.ru_nvcsw

    class StepTimer(trio.abc.Instrument):
        def __init__(self) -> None:
            self.started: tuple[float, float, int] | None = None  # added mid-step: unpaired
            self.longest: list[float] = [0.0]

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            self.started = now()

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            if self.started is None:
                return
            (wall0, cpu0, slept0), (wall1, cpu1, slept1) = self.started, now()
            held = wall1 - wall0 if slept1 > slept0 else cpu1 - cpu0
            self.longest[0] = max(self.longest[0], held)

    timer = StepTimer()
    gc.disable()
    trio.lowlevel.add_instrument(timer)
    try:
        yield timer.longest
    finally:
        trio.lowlevel.remove_instrument(timer)
        gc.enable()
    assert timer.longest[0] < BLOCKED, f"a task step held the loop {timer.longest[0]:.3f} s"


@pytest.mark.parametrize("backend", LOCAL_DEADLINE_BACKENDS)
async def test_no_blocking_call_on_the_loop(anyio_backend: Any, backend: str) -> None:
    async with no_blocking_calls():
        await workload(vector_env(backend))


async def test_the_detector_catches_a_blocked_loop(anyio_backend: Any) -> None:
    """The control: the inline backend steps a sleeping env in the loop's thread."""
    if sniffio.current_async_library() == "asyncio":
        from blockbuster import BlockingError

        with pytest.raises(BlockingError):
            async with no_blocking_calls():
                await workload(vector_env("inline", num_envs=2))
    else:
        with pytest.raises(AssertionError, match="held the loop"):
            async with no_blocking_calls():
                await workload(vector_env("inline", num_envs=2))
