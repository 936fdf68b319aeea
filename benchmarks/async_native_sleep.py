"""Sections 1 and 2 of ``async_native.py``: sub-envs that sleep.

1. I/O-bound latency: 256 sub-envs sleeping 5 ms per step, aiovec's thread and async backends
   against one env's own step, Gymnasium, a naive ``asyncio.gather`` and raw threads.
2. Scale: 10,000 coroutine envs awaiting 1 ms per step on one event loop, against the naive
   gather, with the event-loop lag meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from async_native_core import (
    HAVE_UVLOOP,
    IDLE,
    NO_LOOP,
    UVLOOP_NOTE,
    Actions,
    AsyncSleepEnv,
    Contender,
    LagProbe,
    Results,
    Runner,
    Sample,
    Section,
    action_batches,
    first_cell,
    gym_async,
    gym_sync,
    lag_p50,
    lag_p99,
    latency,
    ms_cell,
    on_loop,
    rate,
    rate_cell,
    ratio_check,
    run_aiovec,
    run_idle_probe,
    spread_cell,
    time_steps,
    time_steps_async,
    worst_lag,
)
from bench_envs import SLEEP_SECONDS_PER_STEP, SleepEnv
from harness import Check, Plan, ratio_cell

IO_ENVS = 256  # section 1
SCALE_STEP_SECONDS = 0.001  # section 2: each coroutine env's step
LATENCY_TARGET = 1.2  # vector step / one env's step, at most

ONE_SLEEP_ENV = "one SleepEnv: env.step() (time.sleep)"
ONE_ASYNC_ENV = "one AsyncSleepEnv: await env.step() (anyio.sleep)"
RAW_THREADS = "raw threads: sleep + countdown (no vectorizer)"
AIOVEC_THREAD = "aiovec thread (await envs.step)"
AIOVEC_ASYNC = "aiovec async (await envs.step)"
GYM_ASYNC = "Gymnasium AsyncVectorEnv (shm, fork)"
GYM_SYNC = "Gymnasium SyncVectorEnv"
NAIVE_GATHER = "naive: asyncio.gather per vector step"


# ---------------------------------------------------------------------------------- envs


class GatherVectorEnv:
    """The naive baseline of section 2: ``asyncio.gather`` over every env's step, then the
    results stacked into arrays (what a hand-written coroutine vector env does)."""

    def __init__(self, envs: Sequence[AsyncSleepEnv]) -> None:
        self.envs = envs

    async def reset(self, seed: int) -> np.ndarray:
        results = await asyncio.gather(*(env.reset(seed=seed + index)
                                         for index, env in enumerate(self.envs)))
        return np.stack([obs for obs, _ in results])

    async def step(self, actions: Actions) -> tuple[Any, ...]:
        results = await asyncio.gather(*(env.step(action)
                                         for env, action in zip(self.envs, actions)))
        observations, rewards, terminations, truncations, infos = zip(*results)
        return (np.stack(observations), np.array(rewards), np.array(terminations),
                np.array(truncations), infos)

    async def close(self) -> None:
        await asyncio.gather(*(env.close() for env in self.envs))


class RawThreads:
    """Section 1's floor for threads: ``num_envs`` plain threads; a round wakes each through
    its own queue, each sleeps 5 ms and counts down under a lock, the last sets an event. No
    env, no batching: what any thread-per-env vectorizer pays at least, on this machine."""

    def __init__(self, num_envs: int) -> None:
        self._inboxes: list[queue.SimpleQueue[bool]] = [queue.SimpleQueue()
                                                         for _ in range(num_envs)]
        self._lock = threading.Lock()
        self._remaining = 0
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._serve, args=(inbox,), daemon=True)
                         for inbox in self._inboxes]
        for thread in self._threads:
            thread.start()

    def _serve(self, inbox: queue.SimpleQueue[bool]) -> None:
        while inbox.get():
            time.sleep(SLEEP_SECONDS_PER_STEP)
            with self._lock:
                self._remaining -= 1
                if not self._remaining:
                    self._done.set()

    def step(self, actions: object) -> None:
        self._done.clear()
        self._remaining = len(self._inboxes)
        for inbox in self._inboxes:
            inbox.put(True)
        self._done.wait()

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(False)
        for thread in self._threads:
            thread.join()


# ----------------------------------------------------------------------------- runners


def run_one_sleep_env(plan: Plan) -> Sample:
    """One ``SleepEnv`` stepped directly in a plain loop: the thread rows' reference."""
    env = SleepEnv()
    try:
        env.reset(seed=0)
        return time_steps(env.step, [0, 1], 1, plan)
    finally:
        env.close()


def run_raw_threads(num_envs: int) -> Runner:
    def run(plan: Plan) -> Sample:
        threads = RawThreads(num_envs)
        try:
            return time_steps(threads.step, action_batches(num_envs), num_envs, plan)
        finally:
            threads.close()

    return run


def run_one_async_env(loop: str) -> Runner:
    """One ``AsyncSleepEnv`` awaited directly on ``loop``: the async rows' reference."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            env = AsyncSleepEnv()
            try:
                await env.reset(seed=0)
                return await time_steps_async(env.step, [0, 1], 1, plan)
            finally:
                await env.close()

        return on_loop(loop, main)

    return run


def run_naive_gather(num_envs: int, seconds_per_step: float, loop: str, *,
                     probe: bool = False) -> Runner:
    """The naive baseline: ``GatherVectorEnv`` over ``num_envs`` coroutine envs."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            with anyio.fail_after(plan.cell_timeout):
                envs = GatherVectorEnv([AsyncSleepEnv(seconds_per_step)
                                        for _ in range(num_envs)])
                try:
                    await envs.reset(seed=0)
                    return await time_steps_async(envs.step, action_batches(num_envs),
                                                  num_envs, plan, LagProbe() if probe else None)
                finally:
                    await envs.close()

        return on_loop(loop, main)

    return run


def run_gym_vector(make_envs: Callable[[], gym.vector.VectorEnv[Any, Any, Any]],
                   num_envs: int, *, steps: int | None = None) -> Runner:
    """A Gymnasium vector env stepped synchronously; with ``steps``, exactly that many timed
    steps and no warm-up (for the 1.3 s steps of ``SyncVectorEnv`` over 256 sleeping envs)."""

    def run(plan: Plan) -> Sample:
        if steps is not None:
            plan = dataclasses.replace(plan, seconds=0.0, warmup_steps=0, min_steps=steps)
        envs = make_envs()
        try:
            envs.reset(seed=0)
            return time_steps(envs.step, action_batches(num_envs), num_envs, plan)
        finally:
            envs.close()

    return run


# --------------------------------------------------------------------------- contenders


def section_1(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loop = args.loop
    contenders = [
        Contender(1, ONE_SLEEP_ENV, 1, NO_LOOP, run_one_sleep_env),
        Contender(1, ONE_ASYNC_ENV, 1, loop, run_one_async_env(loop)),
    ]
    for num_envs in sorted({IO_ENVS, *args.gym_envs}):
        contenders += [
            Contender(1, RAW_THREADS, num_envs, NO_LOOP, run_raw_threads(num_envs)),
            Contender(1, AIOVEC_THREAD, num_envs, loop,
                      run_aiovec(SleepEnv, num_envs, "thread", loop)),
            Contender(1, AIOVEC_ASYNC, num_envs, loop,
                      run_aiovec(AsyncSleepEnv, num_envs, "async", loop)),
            Contender(1, NAIVE_GATHER, num_envs, loop,
                      run_naive_gather(num_envs, SLEEP_SECONDS_PER_STEP, loop)),
        ]
        if num_envs in args.gym_envs:
            contenders.append(Contender(1, GYM_ASYNC, num_envs, NO_LOOP, run_gym_vector(
                gym_async(SleepEnv, num_envs), num_envs)))
    if IO_ENVS not in args.gym_envs:
        notes.append(f"Section 1: Gymnasium AsyncVectorEnv ran with "
                     f"{', '.join(map(str, args.gym_envs)) or 'no'} sub-envs (one process "
                     f"each), not {IO_ENVS}: `--gym-envs 32,{IO_ENVS}` adds the full size")
    if args.sync_steps:
        contenders.append(Contender(1, GYM_SYNC, IO_ENVS, NO_LOOP,
                                    run_gym_vector(gym_sync(SleepEnv, IO_ENVS), IO_ENVS,
                                                   steps=args.sync_steps)))
        notes.append(f"Section 1: Gymnasium SyncVectorEnv with {IO_ENVS} envs ran "
                     f"{args.sync_steps} timed vector steps per repeat, no warm-up")
    return contenders


def section_2(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loops = ["asyncio", "uvloop"] if HAVE_UVLOOP else ["asyncio"]
    if HAVE_UVLOOP:
        notes.append(UVLOOP_NOTE)
    else:
        notes.append("Section 2: uvloop is not installed; asyncio rows only")
    num_envs = args.coroutine_envs
    contenders = []
    for loop in loops:
        contenders += [
            Contender(2, IDLE, 0, loop, run_idle_probe(loop)),
            Contender(2, AIOVEC_ASYNC, num_envs, loop,
                      run_aiovec(functools.partial(AsyncSleepEnv, SCALE_STEP_SECONDS),
                                 num_envs, "async", loop, probe=True)),
            Contender(2, NAIVE_GATHER, num_envs, loop,
                      run_naive_gather(num_envs, SCALE_STEP_SECONDS, loop, probe=True)),
        ]
    return contenders


# ------------------------------------------------------------------------------ report


def table_1(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | ms per vector step (median) | vs one env's step "
             "| steps/s | spread |", "|---|---:|---|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        async_like = contender.name in (ONE_ASYNC_ENV, AIOVEC_ASYNC, NAIVE_GATHER)
        reference = (1, ONE_ASYNC_ENV if async_like else ONE_SLEEP_ENV, 1,
                     contender.loop if async_like else NO_LOOP)
        value = results.median(key, latency)
        ratio = ratio_cell(value, results.median(reference, latency))
        lines.append(f"| {contender.name} | {contender.num_envs} | {contender.loop} | "
                     f"{first_cell(results, key, ms_cell(value))} | {ratio} | "
                     f"{rate_cell(results.median(key, rate))} | "
                     f"{spread_cell(results, key, latency)} |")
    return lines


def table_2(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | steps/s (median) | vs naive gather | ms per "
             "vector step | lag p50 ms | lag p99 ms | lag max ms (worst repeat) | spread |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        value = results.median(key, rate)
        naive = results.median((2, NAIVE_GATHER, contender.num_envs, contender.loop), rate)
        lines.append(
            f"| {contender.name} | {contender.num_envs or '—'} | {contender.loop} | "
            f"{first_cell(results, key, rate_cell(value))} | {ratio_cell(value, naive)} | "
            f"{ms_cell(results.median(key, latency))} | {ms_cell(results.median(key, lag_p50))} | "
            f"{ms_cell(results.median(key, lag_p99))} | {ms_cell(worst_lag(results, key))} | "
            f"{spread_cell(results, key, rate if value is not None else lag_p99)} |")
    return lines


def checks_1(contenders: Sequence[Contender], results: Results, loop: str) -> list[Check]:
    keys = {c.key for c in contenders}
    checks = []
    if (1, AIOVEC_ASYNC, IO_ENVS, loop) in keys:
        checks += [
            ratio_check(results, f"{IO_ENVS} sleeping envs, aiovec async: vector step / one "
                        "env's step", (1, AIOVEC_ASYNC, IO_ENVS, loop),
                        (1, ONE_ASYNC_ENV, 1, loop), latency, LATENCY_TARGET, at_most=True),
            ratio_check(results, f"{IO_ENVS} sleeping envs, aiovec thread: vector step / one "
                        "env's step", (1, AIOVEC_THREAD, IO_ENVS, loop),
                        (1, ONE_SLEEP_ENV, 1, NO_LOOP), latency, LATENCY_TARGET, at_most=True),
        ]
    return checks


LATENCY_SECTION = Section(
    1, f"1. I/O-bound latency: {IO_ENVS} sub-envs sleeping "
       f"{SLEEP_SECONDS_PER_STEP * 1e3:g} ms per step", section_1, table_1, checks_1)
SCALE_SECTION = Section(
    2, f"2. Scale: coroutine envs awaiting {SCALE_STEP_SECONDS * 1e3:g} ms per step, one loop",
    section_2, table_2)
