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
PROBE_STEPS = 24
PROBE_SECONDS = 0.2
_MIN_STEPS = 3
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
    #: The rest of a vector step on the process backend: a round trip to a worker and back.
    round_trip_seconds: float
    #: Bytes of one observation (0 when it is not an array).
    observation_bytes: int
    steps: int

    @property
    def waiting_share(self) -> float:
        """How much of a step is spent not computing (sleeping, waiting on I/O), 0 to 1."""
        if self.step_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - self.cpu_seconds / self.step_seconds)

    def describe(self) -> str:
        return (f"{_seconds(self.step_seconds)} per step, {1 - self.waiting_share:.0%} of it CPU, "
                f"{_seconds(self.round_trip_seconds)} per round trip to a worker, "
                f"{self.observation_bytes:,} B observations")


def _seconds(value: float) -> str:
    return f"{value * 1e3:.2f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} µs"


class _TimedSteps(gym.Wrapper[Any, Any, Any, Any]):
    """Records the wall and CPU time of each ``step`` of the env it wraps."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.readings: list[tuple[float, float]] = []

    def step(self, action: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        result = self.env.step(action)
        self.readings.append((time.perf_counter() - wall, time.process_time() - cpu))
        return result

    def probe_readings(self) -> list[tuple[float, float]]:
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
                                  num_workers=1) as envs:
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
    if not readings:  # every step was an autoreset: time the round trips only
        readings = [(0.0, 0.0)]
    step_seconds = statistics.median(wall for wall, _ in readings)
    cpu_seconds = statistics.median(cpu for _, cpu in readings)
    round_trip = max(0.0, statistics.median(round_trips) - step_seconds)
    nbytes = observations.nbytes if isinstance(observations, np.ndarray) else 0
    return Workload(step_seconds, min(cpu_seconds, step_seconds), round_trip, nbytes,
                    len(round_trips))
