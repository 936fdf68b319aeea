"""What ``backend="auto"`` measures before it picks: one extra sub-env, stepped a few times.

The probe makes one instance of the first factory in a worker process of its own (so a
sub-env that crashes, hangs or starts processes harms nothing but the probe), resets it, steps
it with random actions for a fraction of a second, and reports how long a step takes, how much
of that is CPU, how big an observation is, and what one round trip to a worker costs here.
``_selection.choose_by_workload`` turns those figures into a backend.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

__all__ = ["PROBE_TIMEOUT", "Workload", "measure_workload"]

#: Most steps the probe takes, and the stepping time after which it stops early (seconds;
#: it takes at least ``_MIN_STEPS`` whatever they cost).
PROBE_STEPS = 64
PROBE_SECONDS = 0.3
_MIN_STEPS = 3
#: The first steps only warm up (caches, a worker's first wake-ups): not counted where more
#: were taken. Counted, they made cheap envs' steps look 1.5-3x their steady cost.
_WARMUP_STEPS = 8
#: Seconds the whole probe may take, the factory and the first reset included; past this,
#: "auto" gives up measuring and keeps its rule of thumb.
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Workload:
    """One sub-env's step, as measured by the probe (medians over its steps, in seconds)."""

    #: Wall time of ``env.step`` where the sub-env runs.
    step_seconds: float
    #: CPU time its worker process spent in ``env.step`` (all threads).
    cpu_seconds: float
    #: The part of the step spent neither computing nor waiting for a CPU: sleeping, waiting
    #: on I/O or on another process. Threads overlap this part; nothing overlaps the rest.
    waiting_seconds: float
    #: The rest of a vector step on the process backend: a round trip to a worker and back.
    round_trip_seconds: float
    #: Bytes of one observation (0 when it is not an array).
    observation_bytes: int
    steps: int

    @property
    def waiting_share(self) -> float:
        """How much of a step is spent waiting (see ``waiting_seconds``), 0 to 1."""
        return self.waiting_seconds / self.step_seconds if self.step_seconds > 0 else 0.0

    def describe(self) -> str:
        return (f"{_seconds(self.step_seconds)} per step, {self.waiting_share:.0%} of it "
                f"waiting, {_seconds(self.round_trip_seconds)} per round trip to a worker, "
                f"{self.observation_bytes:,} B observations")


def _seconds(value: float) -> str:
    return f"{value * 1e3:.2f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} µs"


def _run_delay() -> float:
    """Seconds this thread has spent ready to run but waiting for a CPU (Linux; else 0)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return 0.0


class _TimedSteps(gym.Wrapper[Any, Any, Any, Any]):
    """Records the wall time, CPU time and run-queue delay of each ``step`` of its env."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.readings: list[tuple[float, float, float]] = []

    def step(self, action: Any) -> Any:
        delay, cpu, wall = _run_delay(), time.process_time(), time.perf_counter()
        result = self.env.step(action)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.readings.append((wall, cpu, _run_delay() - delay))
        return result

    def probe_readings(self) -> list[tuple[float, float, float]]:
        return self.readings


def _timed(env_fn: Callable[[], gym.Env[Any, Any]]) -> gym.Env[Any, Any]:
    env = env_fn()
    return _TimedSteps(env) if isinstance(env, gym.Env) else env


async def measure_workload(env_fn: Callable[[], Any], *,
                           timeout: float = PROBE_TIMEOUT) -> Workload:
    """Make, reset and step one instance of ``env_fn`` in a worker process of its own.

    Raises whatever the factory or the sub-env raised, ``TimeoutError`` past ``timeout``
    seconds; the probe's worker is closed in every case.
    """
    from aiovec._core._vector_env import AsyncVectorEnv  # the probe is a vector env itself

    with anyio.fail_after(timeout):
        async with AsyncVectorEnv([functools.partial(_timed, env_fn)], backend="process",
                                  num_workers=1, parent_worker=False) as envs:
            observations, _ = await envs.reset(seed=0)
            envs.action_space.seed(0)
            round_trips: list[float] = []
            stop_after = time.perf_counter() + PROBE_SECONDS
            while len(round_trips) < PROBE_STEPS and (
                    len(round_trips) < _MIN_STEPS or time.perf_counter() < stop_after):
                actions = envs.action_space.sample()
                started = time.perf_counter()
                await envs.step(actions)
                round_trips.append(time.perf_counter() - started)
            (readings,) = await envs.call("probe_readings")
    # Readings skip autoreset steps: each list sheds its warm-up only when long enough.
    if len(round_trips) > 2 * _WARMUP_STEPS:
        round_trips = round_trips[_WARMUP_STEPS:]
    if len(readings) > 2 * _WARMUP_STEPS:
        readings = readings[_WARMUP_STEPS:]
    if not readings:  # every step was an autoreset: time the round trips only
        readings = [(0.0, 0.0, 0.0)]
    step_seconds = statistics.median(wall for wall, _, _ in readings)
    cpu_seconds = min(step_seconds, statistics.median(cpu for _, cpu, _ in readings))
    waiting = statistics.median(max(0.0, wall - cpu - delay) for wall, cpu, delay in readings)
    round_trip = max(0.0, statistics.median(round_trips) - step_seconds)
    nbytes = observations.nbytes if isinstance(observations, np.ndarray) else 0
    return Workload(step_seconds, cpu_seconds, min(waiting, step_seconds), round_trip, nbytes,
                    len(round_trips))
