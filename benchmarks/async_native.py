"""aiovec's async-native figures: coroutine envs, first-ready batches and event-loop lag.

1. I/O-bound latency: 256 sub-envs sleeping 5 ms per step. Median ms per ``await envs.step``
   on the thread backend (``time.sleep``) and the async backend (``AsyncEnv`` awaiting
   ``anyio.sleep``), as a ratio to one env's own step timed by the same loop (target ≤ 1.2x).
   Peers: Gymnasium ``AsyncVectorEnv`` (one process per env; 32 and 256 of them by default,
   ``--gym-envs``), a naive ``asyncio.gather`` over the coroutine envs, and ``SyncVectorEnv``
   with 256 (1.3 s per step: ``--sync-steps`` steps only). Floor for threads: as many plain
   threads sleeping and counting down, no vectorizer.
2. Scale: 10,000 coroutine envs awaiting 1 ms per step on one event loop, ``backend="async"``,
   against the naive baseline (``asyncio.gather`` over every env's step, per vector step), on
   asyncio and uvloop: sub-env steps/s, and the lag of a 1 ms probe coroutine meanwhile.
3. First-ready batches: 32 envs whose steps take 1-20 ms (log-normal, drawn from each env's
   ``np_random``), ``batch_size=16``: steps/s of ``send``/``recv`` against full-batch
   ``step`` on the same envs, thread and async backends (target ≥ 1.5x).
4. Loop lag while 32 process-backed CartPole envs step continuously: p99 lateness of a 1 ms
   probe coroutine on the same loop (target ≤ 5 ms) and the steps/s meanwhile; Gymnasium's
   vector envs stepped through ``asyncio.to_thread`` as peers, and the idle loop for scale.
5. Coroutine envs against a bare gather: 500 envs awaiting 5 ms and 10,000 awaiting 1 ms per
   step, on asyncio and uvloop, ``await envs.step`` on ``backend="async"`` against a bare
   ``asyncio.gather(*(env.step(a) for env, a in zip(envs, actions)))`` (nothing stacked).
   Two ways: in one process, where one event loop holds the envs, an ``AsyncVectorEnv`` over
   those very instances and the gather, stepped alternately (the order swapped every step,
   so both see the same machine; but they share a heap, and the garbage collector's work);
   and each in a fresh process of its own, one after the other (the order swapped every
   repeat). Figures: the median wall time per vector step of each and their ratio (target
   ≤ 1.05x), and the same for process CPU time.

Run it (about 7 minutes; ``--quick`` for a ~35 s smoke run)::

    .venv/bin/python benchmarks/async_native.py [--quick] [--repeats N] [--seconds S]
        [--sections 1,2,3,4,5] [--gym-envs 32,256] [--coroutine-envs N] [--loop uvloop|asyncio]
        [--paired-envs 500,10000]

Before/after in one run, with this script measuring the old checkout's aiovec too::

    .venv/bin/python benchmarks/compare.py --old /tmp/old --same-script --rounds 3 -- \
        async_native.py --sections 5 --repeats 3 --output /tmp/async-native

Method: every measurement builds its contender on a fresh event loop, resets it, warms it up,
steps it for ``--seconds`` of wall time, then closes it. Repeats are interleaved (every
measurement once per repeat, shuffled within each section); tables give medians over repeats
and ratios of medians. Lag is how late a coroutine looping on ``anyio.sleep(0.001)`` wakes,
recorded during the timed window only. A contender that raises becomes an error row.

Output: markdown tables printed and written to ``benchmarks/results/async_native.md``, with
PASS/MISS lines for the targets (reported, never asserted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import gc
import importlib
import importlib.util
import json
import operator
import os
import platform
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import anyio
import gymnasium as gym
import numpy as np
import numpy.typing as npt
from bench_envs import SLEEP_SECONDS_PER_STEP, SleepEnv, make_cartpole
from harness import describe, stamped, stamped_async, watchdog

import aiovec

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULTS_FILE = "async_native.md"
HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
NO_LOOP = "—"  # the loop column of plain synchronous code
ACTION_BATCHES = 64  # distinct action batches, drawn up front and cycled through
PROBE_INTERVAL = 0.001  # the lag probe sleeps this long, over and over

IO_ENVS = 256  # section 1
SCALE_STEP_SECONDS = 0.001  # section 2: each coroutine env's step
FIRST_READY_ENVS, FIRST_READY_BATCH = 32, 16  # section 3
HEAVY_TAIL_MEDIAN, HEAVY_TAIL_SIGMA = 0.003, 0.8  # log-normal step time, seconds...
HEAVY_TAIL_CLIP = (0.001, 0.020)  # ...clipped to 1-20 ms
LAG_ENVS = 32  # section 4
#: Section 5: how long each coroutine env's step awaits, by number of envs.
PAIRED_SECONDS = {500: 0.005, 10_000: 0.001}

# Targets (reported, never asserted).
LATENCY_TARGET = 1.2  # section 1: vector step / one env's step, at most
FIRST_READY_TARGET = 1.5  # section 3: send/recv steps/s / full-batch steps/s, at least
LAG_P99_TARGET = 0.005  # section 4: p99 probe lateness with the process backend, at most
GATHER_TARGET = 1.05  # section 5: aiovec's vector step / a bare gather's, at most

SECTION_TITLES = {
    1: f"1. I/O-bound latency: {IO_ENVS} sub-envs sleeping "
       f"{SLEEP_SECONDS_PER_STEP * 1e3:g} ms per step",
    2: f"2. Scale: coroutine envs awaiting {SCALE_STEP_SECONDS * 1e3:g} ms per step, one loop",
    3: f"3. First-ready batches: {FIRST_READY_ENVS} envs with 1-20 ms heavy-tailed steps, "
       f"batch_size={FIRST_READY_BATCH}",
    4: f"4. Event-loop lag while {LAG_ENVS} CartPole-v1 envs step continuously",
    5: "5. Coroutine envs: aiovec's async backend against a bare asyncio.gather, step by step",
}

T = TypeVar("T")
Actions = npt.NDArray[np.int64]
Key = tuple[int, str, int, str]  # (section, contender name, num_envs, loop)


# ---------------------------------------------------------------------------------- envs


OBSERVATION_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


class AsyncSleepEnv(aiovec.AsyncEnv[np.ndarray, np.int64]):
    """A coroutine env whose step awaits ``anyio.sleep(seconds)``: I/O-bound, never ends."""

    def __init__(self, seconds: float = SLEEP_SECONDS_PER_STEP) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE
        self.seconds = seconds
        self._obs = np.zeros(4, np.float32)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[np.ndarray, dict[str, Any]]:
        await super().reset(seed=seed)
        return self._obs.copy(), {}

    async def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(self.seconds)
        return self._obs.copy(), 1.0, False, False, {}


def heavy_tail_seconds(rng: np.random.Generator) -> float:
    """A step time: log-normal around 3 ms, clipped to 1-20 ms (a remote service's long tail)."""
    return float(np.clip(rng.lognormal(np.log(HEAVY_TAIL_MEDIAN), HEAVY_TAIL_SIGMA),
                         *HEAVY_TAIL_CLIP))


class HeavyTailEnv(gym.Env[np.ndarray, np.int64]):
    """Sleeps (``time.sleep``, GIL released) a heavy-tailed time per step: for threads."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(heavy_tail_seconds(self.np_random))
        return np.zeros(4, np.float32), 1.0, False, False, {}


class AsyncHeavyTailEnv(aiovec.AsyncEnv[np.ndarray, np.int64]):
    """Awaits ``anyio.sleep`` for a heavy-tailed time per step: the coroutine twin."""

    def __init__(self) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[np.ndarray, dict[str, Any]]:
        await super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    async def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(heavy_tail_seconds(self.np_random))
        return np.zeros(4, np.float32), 1.0, False, False, {}


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


# ---------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Plan:
    """How long each measurement runs."""

    seconds: float  # timed stepping per measurement (wall time)
    warmup_steps: int = 20  # warm up with at most this many vector steps...
    warmup_seconds: float = 0.3  # ...or for this long, whichever ends first (at least 2 steps)
    min_steps: int = 3  # timed vector steps (or recv batches), at least
    cell_timeout: float = 120.0  # a measurement taking longer than this is an error


@dataclass(frozen=True)
class Lag:
    """How late the probe woke during one measurement, seconds."""

    p50: float
    p99: float
    max: float
    samples: int

    @classmethod
    def of(cls, lateness: Sequence[float]) -> Lag | None:
        if not lateness:
            return None
        values = np.asarray(lateness)
        return cls(float(np.percentile(values, 50)), float(np.percentile(values, 99)),
                   float(values.max()), len(values))


@dataclass(frozen=True)
class Sample:
    """One measurement of one contender."""

    steps_per_second: float | None  # sub-env steps per wall second (None: nothing stepped)
    latency: float | None  # median seconds per vector step (or per recv batch)
    lag: Lag | None = None
    repeat: int = 0  # which repeat measured it (set by ``measure``)
    paired: Paired | None = None  # section 5: the reference measured step by step beside it


@dataclass(frozen=True)
class Paired:
    """Section 5: medians over the steps of one measurement, seconds per vector step, of the
    contender and of the reference it alternated with (wall and process CPU time)."""

    wall: float
    reference_wall: float
    cpu: float
    reference_cpu: float
    pairs: int

    @property
    def ratio(self) -> float:
        return self.wall / self.reference_wall

    @property
    def cpu_ratio(self) -> float:
        return self.cpu / self.reference_cpu


Runner = Callable[[Plan], Sample]


@dataclass(frozen=True)
class Contender:
    section: int
    name: str
    num_envs: int
    loop: str  # the event loop it runs on, or NO_LOOP
    run: Runner = field(compare=False)

    @property
    def key(self) -> Key:
        return (self.section, self.name, self.num_envs, self.loop)


@dataclass
class Results:
    samples: dict[Key, list[Sample]] = field(default_factory=dict)
    errors: dict[Key, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def values(self, key: Key, metric: Callable[[Sample], float | None]) -> dict[int, float]:
        """``metric`` of each repeat's sample of ``key``, by repeat."""
        found = {sample.repeat: metric(sample) for sample in self.samples.get(key, [])}
        return {repeat: value for repeat, value in found.items() if value is not None}

    def median(self, key: Key, metric: Callable[[Sample], float | None]) -> float | None:
        values = self.values(key, metric)
        return statistics.median(values.values()) if values else None


def rate(sample: Sample) -> float | None:
    return sample.steps_per_second


def latency(sample: Sample) -> float | None:
    return sample.latency


def lag_p50(sample: Sample) -> float | None:
    return sample.lag.p50 if sample.lag else None


def lag_p99(sample: Sample) -> float | None:
    return sample.lag.p99 if sample.lag else None


def lag_max(sample: Sample) -> float | None:
    return sample.lag.max if sample.lag else None


def paired_ratio(sample: Sample) -> float | None:
    return sample.paired.ratio if sample.paired else None


def paired_cpu_ratio(sample: Sample) -> float | None:
    return sample.paired.cpu_ratio if sample.paired else None


def reference_latency(sample: Sample) -> float | None:
    return sample.paired.reference_wall if sample.paired else None


# --------------------------------------------------------------------------- timed loops


@functools.cache
def action_batches(num_envs: int) -> list[Actions]:
    """Random Discrete(2) action batches, the same for every contender of a size."""
    rng = np.random.default_rng(num_envs)
    return list(rng.integers(0, 2, size=(ACTION_BATCHES, num_envs), dtype=np.int64))


class LagProbe:
    """A coroutine sleeping ``interval`` over and over on the loop under test; while
    ``recording``, it notes how late each wake-up came (the loop's responsiveness)."""

    def __init__(self, interval: float = PROBE_INTERVAL) -> None:
        self.interval = interval
        self.recording = False
        self.lateness: list[float] = []

    async def run(self) -> None:
        interval, clock = self.interval, time.perf_counter
        while True:
            due = clock() + interval
            await anyio.sleep(interval)
            if self.recording:
                self.lateness.append(clock() - due)


@contextlib.asynccontextmanager
async def probing(probe: LagProbe | None) -> AsyncIterator[None]:
    """Run ``probe`` (if any) on this loop for the duration of the block."""
    if probe is None:
        yield
        return
    async with anyio.create_task_group() as group:
        group.start_soon(probe.run)
        yield
        group.cancel_scope.cancel()


def _sample(stamps: list[float], num_envs: int, probe: LagProbe | None = None,
            steps: int | None = None) -> Sample:
    """From the wall time after each vector step (``steps``: sub-env steps, if not all)."""
    elapsed = stamps[-1] - stamps[0]
    done = num_envs * (len(stamps) - 1) if steps is None else steps
    return Sample(steps_per_second=done / elapsed, latency=float(np.median(np.diff(stamps))),
                  lag=Lag.of(probe.lateness) if probe else None)


def time_steps(step: Callable[[Any], object], actions: Sequence[Any], num_envs: int,
               plan: Plan) -> Sample:
    """Warm up, then call ``step`` for ``plan.seconds``, stamping every vector step."""
    return _sample(stamped(step, actions, plan), num_envs)


async def time_steps_async(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                           num_envs: int, plan: Plan, probe: LagProbe | None = None) -> Sample:
    """``time_steps`` for ``await step(actions)``, with ``probe`` on the loop meanwhile
    (recording during the timed window only)."""

    def recording(timed: bool) -> None:
        if probe:
            probe.recording = timed

    async with probing(probe):
        stamps = await stamped_async(step, actions, plan, recording)
    return _sample(stamps, num_envs, probe)


async def time_first_ready(envs: aiovec.AsyncVectorEnv, plan: Plan) -> Sample:
    """Keep every sub-env busy with ``send``/``recv`` for ``plan.seconds``: sub-env steps
    per second, and the median time per received batch."""
    actions = action_batches(envs.num_envs)
    envs.send(actions[0])
    received = 0

    async def recv_and_resend() -> int:
        nonlocal received
        batch = await envs.recv()
        received += 1
        count = len(batch.env_ids)
        envs.send(actions[received % len(actions)][:count], batch.env_ids)
        return count

    warmup_deadline = time.perf_counter() + plan.warmup_seconds
    for index in range(plan.warmup_steps):
        await recv_and_resend()
        if index >= 1 and time.perf_counter() >= warmup_deadline:
            break
    stamps = [time.perf_counter()]
    deadline = stamps[0] + plan.seconds
    steps = 0
    while True:
        steps += await recv_and_resend()
        stamps.append(time.perf_counter())
        if stamps[-1] >= deadline and len(stamps) > plan.min_steps:
            break
    async for _ in envs.batches():  # drain what is still in flight, untimed
        pass
    return _sample(stamps, envs.num_envs, steps=steps)


async def time_paired(step: Callable[[Any], Awaitable[object]],
                      reference: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                      num_envs: int, plan: Plan) -> Sample:
    """Alternate ``step`` and ``reference`` step by step (which goes first swaps every step)
    for ``plan.seconds``, after ``plan.warmup_steps`` pairs: wall and process CPU time of
    each vector step. The sample's rate and latency are ``step``'s."""
    contenders = (step, reference)
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    warmup = min(plan.warmup_steps, 3)
    deadline = None
    index = 0
    while deadline is None or time.perf_counter() < deadline or index - warmup < plan.min_steps:
        if index == warmup:
            deadline = time.perf_counter() + plan.seconds
        for which in ((0, 1) if index % 2 == 0 else (1, 0)):
            started, started_cpu = time.perf_counter(), time.process_time()
            await contenders[which](actions[index % len(actions)])
            if index >= warmup:
                wall[which].append(time.perf_counter() - started)
                cpu[which].append(time.process_time() - started_cpu)
        index += 1
    medians = [statistics.median(values) for values in (*wall, *cpu)]
    paired = Paired(medians[0], medians[1], medians[2], medians[3], len(wall[0]))
    return Sample(steps_per_second=num_envs / medians[0], latency=medians[0], paired=paired)


async def time_each_step(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                         plan: Plan) -> tuple[float, float, int]:
    """``step`` alone, after 3 warm-up steps, for ``plan.seconds`` (at least
    ``plan.min_steps``): the median wall and process CPU time per step, and the step count."""
    wall: list[float] = []
    cpu: list[float] = []
    for index in range(3):
        await step(actions[index % len(actions)])
    deadline = time.perf_counter() + plan.seconds
    while time.perf_counter() < deadline or len(wall) < plan.min_steps:
        started, started_cpu = time.perf_counter(), time.process_time()
        await step(actions[len(wall) % len(actions)])
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu), len(wall)


# ----------------------------------------------------------------------------- runners


def on_loop(loop: str, main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` on a fresh asyncio event loop (uvloop's if ``loop == "uvloop"``)."""
    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": loop == "uvloop"})


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


def run_aiovec(env_fn: Callable[[], Any], num_envs: int, backend: str, loop: str, *,
               probe: bool = False, **options: Any) -> Runner:
    """``await envs.step()`` of ``aiovec.AsyncVectorEnv(backend=...)`` on ``loop``."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            with anyio.fail_after(plan.cell_timeout):
                async with aiovec.AsyncVectorEnv([env_fn] * num_envs, backend=backend,
                                                 **options) as envs:
                    await envs.reset(seed=0)
                    return await time_steps_async(envs.step, action_batches(num_envs),
                                                  num_envs, plan, LagProbe() if probe else None)

        return on_loop(loop, main)

    return run


def run_first_ready(env_fn: Callable[[], Any], backend: str, loop: str,
                    first_ready: bool) -> Runner:
    """Section 3: ``send``/``recv`` (``first_ready``) or full-batch ``step``, same envs."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            with anyio.fail_after(plan.cell_timeout):
                async with aiovec.AsyncVectorEnv([env_fn] * FIRST_READY_ENVS, backend=backend,
                                                 batch_size=FIRST_READY_BATCH) as envs:
                    await envs.reset(seed=0)
                    if first_ready:
                        return await time_first_ready(envs, plan)
                    return await time_steps_async(envs.step, action_batches(FIRST_READY_ENVS),
                                                  FIRST_READY_ENVS, plan)

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


def run_paired_with_gather(num_envs: int, seconds_per_step: float, loop: str) -> Runner:
    """Section 5: ``await envs.step`` on the async backend against a bare ``asyncio.gather``
    of the same envs' steps, alternating, on one loop."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            with anyio.fail_after(plan.cell_timeout):
                sub_envs = [AsyncSleepEnv(seconds_per_step) for _ in range(num_envs)]
                factories = [functools.partial(operator.getitem, sub_envs, index)
                             for index in range(num_envs)]

                async def bare_gather(actions: Actions) -> object:
                    return await asyncio.gather(*(env.step(action)
                                                  for env, action in zip(sub_envs, actions)))

                async with aiovec.AsyncVectorEnv(factories, backend="async") as envs:
                    await envs.reset(seed=0)
                    return await time_paired(envs.step, bare_gather,
                                             action_batches(num_envs), num_envs, plan)

        return on_loop(loop, main)

    return run


ALONE = ("aiovec", "gather")  # what a process of section 5's "alone" rows runs


def run_alone(which: str, num_envs: int, loop: str, plan: Plan) -> tuple[float, float, int]:
    """In this process: ``which`` of ``ALONE`` over ``num_envs`` coroutine envs, timed by
    ``time_each_step``."""
    seconds_per_step = paired_seconds(num_envs)

    async def main() -> tuple[float, float, int]:
        sub_envs = [AsyncSleepEnv(seconds_per_step) for _ in range(num_envs)]
        actions = action_batches(num_envs)
        if which == "gather":
            for index, env in enumerate(sub_envs):
                await env.reset(seed=index)
            return await time_each_step(
                lambda batch: asyncio.gather(*(env.step(action)
                                               for env, action in zip(sub_envs, batch))),
                actions, plan)
        async with aiovec.AsyncVectorEnv([lambda env=env: env for env in sub_envs],
                                         backend="async") as envs:
            await envs.reset(seed=0)
            return await time_each_step(envs.step, actions, plan)

    return on_loop(loop, main)


def run_alone_against_gather(num_envs: int, loop: str) -> Runner:
    """Section 5: aiovec and the bare gather each in a fresh process of its own (the order
    swapped every repeat), so neither pays for the other's objects."""
    order = list(ALONE)

    def run(plan: Plan) -> Sample:
        measured = {}
        for which in order:
            command = [sys.executable, str(Path(__file__).resolve()), "--alone", which,
                       "--paired-envs", str(num_envs), "--loop", loop,
                       "--seconds", str(plan.seconds), "--alone-min-steps", str(plan.min_steps)]
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=plan.cell_timeout)
            if done.returncode:
                raise RuntimeError(f"{which} alone failed: {done.stderr.strip()[-300:]}")
            measured[which] = json.loads(done.stdout.strip().splitlines()[-1])
        order.reverse()
        ours, theirs = measured["aiovec"], measured["gather"]
        paired = Paired(ours["wall"], theirs["wall"], ours["cpu"], theirs["cpu"],
                        min(ours["steps"], theirs["steps"]))
        return Sample(steps_per_second=num_envs / ours["wall"], latency=ours["wall"],
                      paired=paired)

    return run


def run_idle_probe(loop: str) -> Runner:
    """The probe alone on an idle loop: its own lateness, the floor of every lag figure."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            probe = LagProbe()
            async with probing(probe):
                probe.recording = True
                await anyio.sleep(plan.seconds)
            return Sample(steps_per_second=None, latency=None, lag=Lag.of(probe.lateness))

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


def run_gym_in_thread(make_envs: Callable[[], gym.vector.VectorEnv[Any, Any, Any]],
                      num_envs: int, loop: str) -> Runner:
    """A Gymnasium vector env stepped via ``asyncio.to_thread`` from ``loop``, probed."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            envs = make_envs()
            try:
                with anyio.fail_after(plan.cell_timeout):
                    await asyncio.to_thread(envs.reset, seed=0)

                    async def step(actions: Actions) -> object:
                        return await asyncio.to_thread(envs.step, actions)

                    return await time_steps_async(step, action_batches(num_envs), num_envs,
                                                  plan, LagProbe())
            finally:
                envs.close()

        return on_loop(loop, main)

    return run


def gym_sync(env_fn: Callable[[], gym.Env[Any, Any]], num_envs: int
             ) -> Callable[[], gym.vector.VectorEnv[Any, Any, Any]]:
    return lambda: gym.vector.SyncVectorEnv([env_fn] * num_envs)


def gym_async(env_fn: Callable[[], gym.Env[Any, Any]], num_envs: int
              ) -> Callable[[], gym.vector.VectorEnv[Any, Any, Any]]:
    return lambda: gym.vector.AsyncVectorEnv([env_fn] * num_envs, shared_memory=True)


# --------------------------------------------------------------------------- contenders

ONE_SLEEP_ENV = "one SleepEnv: env.step() (time.sleep)"
ONE_ASYNC_ENV = "one AsyncSleepEnv: await env.step() (anyio.sleep)"
RAW_THREADS = "raw threads: sleep + countdown (no vectorizer)"
AIOVEC_THREAD = "aiovec thread (await envs.step)"
AIOVEC_ASYNC = "aiovec async (await envs.step)"
GYM_ASYNC = "Gymnasium AsyncVectorEnv (shm, fork)"
GYM_SYNC = "Gymnasium SyncVectorEnv"
NAIVE_GATHER = "naive: asyncio.gather per vector step"
IDLE = "idle loop (probe only)"
FULL_STEP = "await envs.step (full batch)"
SEND_RECV = "send/recv (first-ready)"
AIOVEC_PROCESS = "aiovec process (await envs.step)"
GYM_ASYNC_THREAD = "Gymnasium AsyncVectorEnv (shm) via asyncio.to_thread"
GYM_SYNC_THREAD = "Gymnasium SyncVectorEnv via asyncio.to_thread"
AIOVEC_VS_GATHER = "aiovec async vs bare gather: one process, step by step"
AIOVEC_VS_GATHER_ALONE = "aiovec async vs bare gather: each in a process of its own"


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


UVLOOP_NOTE = ("Lag on uvloop can be slightly negative (the probe wakes early): libuv reads "
               "its clock once per loop iteration and times a sleep from that reading, so a "
               "sleep started late in a busy iteration ends early; p50 can read low there, "
               "compare the p99 and max")


def section_3(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loop = args.loop
    contenders = []
    for backend, env_fn in (("thread", HeavyTailEnv), ("async", AsyncHeavyTailEnv)):
        for name, first_ready in ((FULL_STEP, False), (SEND_RECV, True)):
            contenders.append(Contender(3, f"aiovec {backend}: {name}", FIRST_READY_ENVS, loop,
                                        run_first_ready(env_fn, backend, loop, first_ready)))
    return contenders


def section_4(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loop = args.loop
    if loop == "uvloop":
        notes.append(UVLOOP_NOTE)
    return [
        Contender(4, IDLE, 0, loop, run_idle_probe(loop)),
        Contender(4, AIOVEC_PROCESS, LAG_ENVS, loop,
                  run_aiovec(make_cartpole, LAG_ENVS, "process", loop, probe=True)),
        Contender(4, GYM_ASYNC_THREAD, LAG_ENVS, loop,
                  run_gym_in_thread(gym_async(make_cartpole, LAG_ENVS), LAG_ENVS, loop)),
        Contender(4, GYM_SYNC_THREAD, LAG_ENVS, loop,
                  run_gym_in_thread(gym_sync(make_cartpole, LAG_ENVS), LAG_ENVS, loop)),
    ]


def section_5(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loops = ["asyncio", "uvloop"] if HAVE_UVLOOP else ["asyncio"]
    if not HAVE_UVLOOP:
        notes.append("Section 5: uvloop is not installed; asyncio rows only")
    notes.append("Section 5, one process: the bare gather steps in the process that holds the "
                 "vector env, so it also pays for the garbage collector's passes over aiovec's "
                 "objects, and for collections aiovec's steps made due (at 10,000 envs the "
                 "collector takes about half of every step): that row flatters aiovec at "
                 "scale. The rows with each in a process of its own do not share a heap, but "
                 "time whole runs, not interleaved steps: their spread is wider")
    return [contender for num_envs in args.paired_envs for loop in loops
            for contender in (
                Contender(5, AIOVEC_VS_GATHER, num_envs, loop,
                          run_paired_with_gather(num_envs, paired_seconds(num_envs), loop)),
                Contender(5, AIOVEC_VS_GATHER_ALONE, num_envs, loop,
                          run_alone_against_gather(num_envs, loop)))]


def paired_seconds(num_envs: int) -> float:
    """Section 5's step time for ``num_envs``: as in ``PAIRED_SECONDS``, else 1 ms."""
    return PAIRED_SECONDS.get(num_envs, 0.001)


SECTIONS: dict[int, Callable[[argparse.Namespace, list[str]], list[Contender]]] = {
    1: section_1, 2: section_2, 3: section_3, 4: section_4, 5: section_5,
}


# --------------------------------------------------------------------------- orchestration


def progress(sample: Sample) -> str:
    parts = []
    if sample.steps_per_second is not None:
        parts.append(f"{sample.steps_per_second:>11,.0f} steps/s")
    if sample.latency is not None:
        parts.append(f"{sample.latency * 1e3:8.2f} ms/step")
    if sample.lag is not None:
        parts.append(f"lag p99 {sample.lag.p99 * 1e3:.2f} ms")
    return "  ".join(parts)


def measure(contender: Contender, plan: Plan, results: Results, repeat: int) -> str:
    """Run one contender once, record its sample or its error; the progress text."""
    gc.collect()
    started = time.perf_counter()
    try:
        with watchdog(plan.cell_timeout + 30.0):
            sample = contender.run(plan)
    except Exception as error:  # reported as an error row, and the run goes on
        results.errors[contender.key] = describe(error)
        return f"ERROR {results.errors[contender.key]}"
    results.samples.setdefault(contender.key, []).append(dataclasses.replace(sample,
                                                                             repeat=repeat))
    return f"{progress(sample)}  ({time.perf_counter() - started:.1f} s)"


def run_all(contenders: Sequence[Contender], repeats: int, plan: Plan,
            results: Results) -> None:
    """Every contender once per repeat, shuffled within each section."""
    sections = sorted({c.section for c in contenders})
    for repeat in range(repeats):
        print(f"\n== repeat {repeat + 1}/{repeats} ({len(contenders)} measurements)",
              flush=True)
        rng = random.Random(repeat)
        for section in sections:
            group = [c for c in contenders if c.section == section]
            rng.shuffle(group)
            for contender in group:
                if contender.key in results.errors:
                    continue  # it failed in an earlier repeat: reported once, not retried
                label = f"{section}  {contender.name[:52]:<52} n={contender.num_envs:<6}" \
                        f"{contender.loop:<8}"
                print(f"  {label}", end="", flush=True)
                print(measure(contender, plan, results, repeat), flush=True)


# ------------------------------------------------------------------------------ report


def machine_info(args: argparse.Namespace, plan: Plan, repeats: int,
                 load: tuple[float, float, float]) -> list[str]:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = [f"Python {platform.python_version()}"]
    for module in ("numpy", "gymnasium", "aiovec", "anyio", "uvloop"):
        with contextlib.suppress(Exception):
            versions.append(f"{module} {importlib.import_module(module).__version__}")
    revision = "unknown"
    with contextlib.suppress(Exception):
        root = Path(__file__).resolve().parent.parent
        revision = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                                  capture_output=True, text=True, check=True).stdout.strip()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# aiovec async-native benchmark", ""]
    if args.quick:
        lines += ["**Smoke run (`--quick`): one repeat of short measurements; it checks that "
                  "everything runs, do not quote its figures.**", ""]
    return [
        *lines,
        f"- date: {now}; aiovec revision {revision}",
        f"- machine: {model}, {os.cpu_count()} cores ({usable} usable), "
        f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}",
        f"- software: {', '.join(versions)}",
        f"- method: median of {repeats} interleaved repeats, {plan.seconds:g} s of stepping "
        f"each after up to {plan.warmup_steps} warm-up steps; sections 1, 3 and 4 on "
        f"{args.loop}; steps/s = sub-env steps per wall second; ratios are ratios of medians; "
        "spread = (max - min) / median over repeats; lag = how late a coroutine looping on "
        f"`anyio.sleep({PROBE_INTERVAL:g})` wakes, during the timed window; section 5: within "
        "each repeat the ratio of the two medians over steps taken alternately (after 3 "
        "warm-up pairs), then the median of those ratios over repeats",
    ]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.2f}"


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}x"


def _spread(results: Results, key: Key, metric: Callable[[Sample], float | None]) -> str:
    values = list(results.values(key, metric).values())
    if len(values) < 2 or not statistics.median(values):
        return "—"
    return f"{100 * (max(values) - min(values)) / statistics.median(values):.0f}%"


def _worst(results: Results, key: Key) -> float | None:
    values = results.values(key, lag_max).values()
    return max(values) if values else None


def _first_cell(results: Results, key: Key, text: str) -> str:
    """``text``, or the error if the contender never produced a sample."""
    if key in results.samples:
        return text + (f" (then error: {results.errors[key]})" if key in results.errors else "")
    return f"error: {results.errors.get(key, 'no result')}"


def table_1(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | ms per vector step (median) | vs one env's step "
             "| steps/s | spread |", "|---|---:|---|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        async_like = contender.name in (ONE_ASYNC_ENV, AIOVEC_ASYNC, NAIVE_GATHER)
        reference = (1, ONE_ASYNC_ENV if async_like else ONE_SLEEP_ENV, 1,
                     contender.loop if async_like else NO_LOOP)
        value = results.median(key, latency)
        ratio = _ratio(value, results.median(reference, latency))
        lines.append(f"| {contender.name} | {contender.num_envs} | {contender.loop} | "
                     f"{_first_cell(results, key, _ms(value))} | {ratio} | "
                     f"{_rate(results.median(key, rate))} | {_spread(results, key, latency)} |")
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
            f"{_first_cell(results, key, _rate(value))} | {_ratio(value, naive)} | "
            f"{_ms(results.median(key, latency))} | {_ms(results.median(key, lag_p50))} | "
            f"{_ms(results.median(key, lag_p99))} | {_ms(_worst(results, key))} | "
            f"{_spread(results, key, rate if value is not None else lag_p99)} |")
    return lines


def table_3(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | steps/s (median) | vs full batch | ms per batch "
             "| spread |", "|---|---:|---|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        value = results.median(key, rate)
        full_name = contender.name.split(":")[0] + f": {FULL_STEP}"
        full = results.median((3, full_name, contender.num_envs, contender.loop), rate)
        lines.append(f"| {contender.name} | {contender.num_envs} | {contender.loop} | "
                     f"{_first_cell(results, key, _rate(value))} | {_ratio(value, full)} | "
                     f"{_ms(results.median(key, latency))} | {_spread(results, key, rate)} |")
    return lines


def table_4(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | lag p50 ms | lag p99 ms (median) | lag max ms "
             "(worst repeat) | steps/s meanwhile | spread of p99 |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        p99 = _first_cell(results, key, _ms(results.median(key, lag_p99)))
        lines.append(f"| {contender.name} | {contender.num_envs or '—'} | {contender.loop} | "
                     f"{_ms(results.median(key, lag_p50))} | {p99} | "
                     f"{_ms(_worst(results, key))} | {_rate(results.median(key, rate))} | "
                     f"{_spread(results, key, lag_p99)} |")
    return lines


def table_5(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | each env's step | loop | aiovec ms per vector step "
             "| bare gather ms | time vs bare gather | per repeat | CPU time vs bare "
             "gather | steps per repeat |", "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for contender in contenders:
        key = contender.key
        ratios = results.values(key, paired_ratio)
        pairs = [sample.paired.pairs for sample in results.samples.get(key, [])
                 if sample.paired]
        ratio = results.median(key, paired_ratio)
        lines.append(
            f"| {contender.name} | {contender.num_envs} | "
            f"{paired_seconds(contender.num_envs) * 1e3:g} ms | {contender.loop} | "
            f"{_first_cell(results, key, _ms(results.median(key, latency)))} | "
            f"{_ms(results.median(key, reference_latency))} | "
            f"{'—' if ratio is None else f'{ratio:.2f}x'} | "
            f"{' '.join(f'{ratios[r]:.2f}' for r in sorted(ratios)) or '—'} | "
            f"{_x(results.median(key, paired_cpu_ratio))} | "
            f"{statistics.median(pairs) if pairs else '—'} |")
    return lines


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


TABLES = {1: table_1, 2: table_2, 3: table_3, 4: table_4, 5: table_5}


@dataclass(frozen=True)
class Check:
    label: str
    value: float | None
    target: float
    at_most: bool
    per_repeat: Sequence[float] = ()  # the same figure within each repeat, to judge the noise
    unit: str = "x"

    def _show(self, value: float) -> str:
        return f"{value * 1e3:.2f} ms" if self.unit == "ms" else f"{value:.2f}x"

    def line(self) -> str:
        if self.value is None:
            return f"n/a   {self.label}: no result"
        passed = self.value <= self.target if self.at_most else self.value >= self.target
        sign = "≤" if self.at_most else "≥"
        text = (f"{'PASS' if passed else 'MISS'}  {self.label}: {self._show(self.value)} "
                f"(target {sign} {self._show(self.target)})")
        if len(self.per_repeat) > 1:
            text += "; per repeat: " + " ".join(self._show(v) for v in self.per_repeat)
        return text


def ratio_check(results: Results, label: str, key: Key, base: Key,
                metric: Callable[[Sample], float | None], target: float,
                at_most: bool) -> Check:
    """``key`` over ``base`` on ``metric``: the ratio of medians, and within each repeat."""
    ours, theirs = results.values(key, metric), results.values(base, metric)
    value, reference = results.median(key, metric), results.median(base, metric)
    paired = [ours[r] / theirs[r] for r in sorted(ours) if theirs.get(r)]
    ratio = None if value is None or not reference else value / reference
    return Check(label, ratio, target, at_most, paired)


def target_checks(contenders: Sequence[Contender], results: Results, loop: str) -> list[Check]:
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
    for backend in ("thread", "async"):
        key = (3, f"aiovec {backend}: {SEND_RECV}", FIRST_READY_ENVS, loop)
        if key in keys:
            checks.append(ratio_check(
                results, f"first-ready, aiovec {backend}: send/recv / full-batch steps/s", key,
                (3, f"aiovec {backend}: {FULL_STEP}", FIRST_READY_ENVS, loop), rate,
                FIRST_READY_TARGET, at_most=False))
    for contender in contenders:
        if contender.section == 5:
            per_repeat = results.values(contender.key, paired_ratio)
            where = "one process" if contender.name == AIOVEC_VS_GATHER else "own processes"
            checks.append(Check(
                f"{contender.num_envs} coroutine envs on {contender.loop} ({where}), aiovec "
                "async: vector step / bare gather", results.median(contender.key, paired_ratio),
                GATHER_TARGET, True, [per_repeat[r] for r in sorted(per_repeat)]))
    key = (4, AIOVEC_PROCESS, LAG_ENVS, loop)
    if key in keys:
        per_repeat = results.values(key, lag_p99)
        checks.append(Check(f"loop lag p99 while {LAG_ENVS} CartPole envs step, aiovec process",
                            results.median(key, lag_p99), LAG_P99_TARGET, True,
                            [per_repeat[r] for r in sorted(per_repeat)], unit="ms"))
    return checks


def report(contenders: Sequence[Contender], results: Results, header: list[str],
           runtime: float, loop: str) -> str:
    lines = [*header, f"- total runtime: {runtime:.0f} s", ""]
    for section in sorted({c.section for c in contenders}):
        members = [c for c in contenders if c.section == section]
        lines += [f"## {SECTION_TITLES[section]}", "", *TABLES[section](members, results), ""]
    checks = target_checks(contenders, results, loop)
    if checks:
        lines += ["## Target checks (reported, never asserted)", "",
                  "Ratios of medians (lag: the median p99); *per repeat*: the same figure "
                  "within each repeat.", "", "```", *(c.line() for c in checks), "```", ""]
    lines += ["## Notes", ""]
    lines += [f"- {note}" for note in dict.fromkeys(results.notes)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 repeat, short measurements (~35 s)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (5)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of timed stepping per measurement (1.0)")
    parser.add_argument("--sections", default="1,2,3,4,5",
                        help="comma-separated subset of the sections to run (default: all)")
    parser.add_argument("--gym-envs", default=f"32,{IO_ENVS}",
                        help="comma-separated sizes (sub-envs = processes) of Gymnasium's "
                             f"AsyncVectorEnv in section 1; aiovec is measured at each too "
                             f"(32,{IO_ENVS}; '' for none)")
    parser.add_argument("--sync-steps", type=int, default=None,
                        help=f"timed steps of SyncVectorEnv over {IO_ENVS} sleeping envs "
                             "(3; 1.3 s each; 0: no such row)")
    parser.add_argument("--coroutine-envs", type=int, default=None,
                        help="coroutine envs in section 2 (10,000)")
    parser.add_argument("--paired-envs", default="500,10000",
                        help="comma-separated sizes of section 5 (500,10000; a size other than "
                             "those steps 1 ms)")
    parser.add_argument("--alone", choices=ALONE, help=argparse.SUPPRESS)  # section 5's child
    parser.add_argument("--alone-min-steps", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"],
                        default="uvloop" if HAVE_UVLOOP else "asyncio",
                        help="event loop of sections 1, 3 and 4 (uvloop when installed)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR,
                        help=f"directory for {RESULTS_FILE}")
    args = parser.parse_args(argv)
    if args.loop == "uvloop" and not HAVE_UVLOOP:
        parser.error("uvloop is not installed")
    args.gym_envs = sorted({int(part) for part in args.gym_envs.split(",") if part.strip()})
    if args.sync_steps is None:
        args.sync_steps = 2 if args.quick else 3
    if args.coroutine_envs is None:
        args.coroutine_envs = 10_000
    args.paired_envs = [int(part) for part in args.paired_envs.split(",") if part.strip()]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.alone:  # a child process of section 5: one measurement, printed as JSON
        plan = Plan(seconds=args.seconds or 1.0, min_steps=args.alone_min_steps)
        wall, cpu, steps = run_alone(args.alone, args.paired_envs[0], args.loop, plan)
        print(json.dumps({"wall": wall, "cpu": cpu, "steps": steps}))
        return
    repeats = args.repeats or (1 if args.quick else 5)
    plan = Plan(seconds=args.seconds or (0.3 if args.quick else 1.0))
    if args.quick:
        plan = dataclasses.replace(plan, warmup_steps=5, warmup_seconds=0.1, min_steps=2)
    chosen = {int(part) for part in args.sections.split(",") if part.strip()}
    results = Results()
    contenders = [contender for number, build in SECTIONS.items() if number in chosen
                  for contender in build(args, results.notes)]
    load = os.getloadavg()
    print(f"aiovec async-native benchmark: sections {sorted(chosen)}, {repeats} repeats, "
          f"{plan.seconds:g} s per measurement; load average {load[0]:.2f}", flush=True)
    started = time.perf_counter()

    run_all(contenders, repeats, plan, results)

    header = machine_info(args, plan, repeats, load)
    text = report(contenders, results, header, time.perf_counter() - started, args.loop)
    print("\n" + text, flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / RESULTS_FILE).write_text(text)
    print(f"wrote {args.output / RESULTS_FILE} in {time.perf_counter() - started:.0f} s total",
          flush=True)


if __name__ == "__main__":
    main()
