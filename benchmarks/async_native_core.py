"""What the sections of ``async_native.py`` share: the data they record, the timed loops,
the lag probe, the coroutine env, the runners more than one section uses, the table cells and
the target-line format.

Not a script: ``async_native.py`` runs the sections (``async_native_*.py``, one module per
family) and reports them. ``benchmarks/`` is ``sys.path[0]`` when it runs, so these modules
import each other, ``bench_envs`` and ``harness`` by name.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import gymnasium as gym
import numpy as np
import numpy.typing as npt
from bench_envs import SLEEP_SECONDS_PER_STEP
from harness import Check, Plan, stamped, stamped_async
from harness import spread_cell as harness_spread_cell

import aiovec

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
NO_LOOP = "—"  # the loop column of plain synchronous code
ACTION_BATCHES = 64  # distinct action batches, drawn up front and cycled through
PROBE_INTERVAL = 0.001  # the lag probe sleeps this long, over and over

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


# ---------------------------------------------------------------------------------- data


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


def to_sample(stamps: list[float], num_envs: int, probe: LagProbe | None = None,
              steps: int | None = None) -> Sample:
    """From the wall time after each vector step (``steps``: sub-env steps, if not all)."""
    elapsed = stamps[-1] - stamps[0]
    done = num_envs * (len(stamps) - 1) if steps is None else steps
    return Sample(steps_per_second=done / elapsed, latency=float(np.median(np.diff(stamps))),
                  lag=Lag.of(probe.lateness) if probe else None)


def time_steps(step: Callable[[Any], object], actions: Sequence[Any], num_envs: int,
               plan: Plan) -> Sample:
    """Warm up, then call ``step`` for ``plan.seconds``, stamping every vector step."""
    return to_sample(stamped(step, actions, plan), num_envs)


async def time_steps_async(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                           num_envs: int, plan: Plan, probe: LagProbe | None = None) -> Sample:
    """``time_steps`` for ``await step(actions)``, with ``probe`` on the loop meanwhile
    (recording during the timed window only)."""

    def recording(timed: bool) -> None:
        if probe:
            probe.recording = timed

    async with probing(probe):
        stamps = await stamped_async(step, actions, plan, recording)
    return to_sample(stamps, num_envs, probe)


# ----------------------------------------------------------------------------- runners


def on_loop(loop: str, main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` on a fresh asyncio event loop (uvloop's if ``loop == "uvloop"``)."""
    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": loop == "uvloop"})


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


def gym_sync(env_fn: Callable[[], gym.Env[Any, Any]], num_envs: int
             ) -> Callable[[], gym.vector.VectorEnv[Any, Any, Any]]:
    return lambda: gym.vector.SyncVectorEnv([env_fn] * num_envs)


def gym_async(env_fn: Callable[[], gym.Env[Any, Any]], num_envs: int
              ) -> Callable[[], gym.vector.VectorEnv[Any, Any, Any]]:
    return lambda: gym.vector.AsyncVectorEnv([env_fn] * num_envs, shared_memory=True)


# ---------------------------------------------------------------------- names and notes


IDLE = "idle loop (probe only)"  # sections 2 and 4: the probe on an idle loop
UVLOOP_NOTE = ("Lag on uvloop can be slightly negative (the probe wakes early): libuv reads "
               "its clock once per loop iteration and times a sleep from that reading, so a "
               "sleep started late in a busy iteration ends early; p50 can read low there, "
               "compare the p99 and max")


# ------------------------------------------------------------------------------ report


def ms_cell(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.2f}"


def rate_cell(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def spread_cell(results: Results, key: Key, metric: Callable[[Sample], float | None]) -> str:
    return harness_spread_cell(list(results.values(key, metric).values()))


def worst_lag(results: Results, key: Key) -> float | None:
    values = results.values(key, lag_max).values()
    return max(values) if values else None


def first_cell(results: Results, key: Key, text: str) -> str:
    """``text``, or the error if the contender never produced a sample."""
    if key in results.samples:
        return text + (f" (then error: {results.errors[key]})" if key in results.errors else "")
    return f"error: {results.errors.get(key, 'no result')}"


def show_ms(value: float) -> str:
    """A lag target's figures: ms, two decimals (as this script's lines have always read)."""
    return f"{value * 1e3:.2f} ms"


def show_x(value: float) -> str:
    """A ratio target's figures: two decimals, target and repeats alike."""
    return f"{value:.2f}x"


def ratio_check(results: Results, label: str, key: Key, base: Key,
                metric: Callable[[Sample], float | None], target: float,
                at_most: bool) -> Check:
    """``key`` over ``base`` on ``metric``: the ratio of medians, and within each repeat."""
    ours, theirs = results.values(key, metric), results.values(base, metric)
    value, reference = results.median(key, metric), results.median(base, metric)
    paired = [ours[r] / theirs[r] for r in sorted(ours) if theirs.get(r)]
    ratio = None if value is None or not reference else value / reference
    return Check(label, ratio, target, at_most=at_most, per_repeat=paired, show=show_x)


@dataclass(frozen=True)
class Section:
    """One section of the benchmark: the contenders it adds (``contenders(args, notes)``,
    which may append notes to the report), its table, its target checks (if any)."""

    number: int
    title: str
    contenders: Callable[[argparse.Namespace, list[str]], list[Contender]]
    table: Callable[[Sequence[Contender], Results], list[str]]
    #: ``checks(its contenders, results, loop)``: its PASS/MISS lines.
    checks: Callable[[Sequence[Contender], Results, str], list[Check]] | None = None
