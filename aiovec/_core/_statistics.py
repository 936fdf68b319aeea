"""What ``AsyncVectorEnv.statistics()`` reports, and the per-sub-env step-latency log behind it.

Each sub-env's step durations are measured where the sub-env runs (its thread, its worker
process) and kept in a small ring per sub-env: for worker processes the ring lives in the
shared memory block, so reading statistics never asks a worker anything.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["RING_SIZE", "Counters", "LatencyLog", "LatencySummary", "Statistics"]

#: How many of its most recent steps each sub-env's latency summary covers.
RING_SIZE = 256


@dataclass
class Counters:
    """The running counts behind ``Statistics`` (see there for what each counts)."""

    steps: int = 0
    resets: int = 0
    errors: int = 0
    timeouts: int = 0
    restarts: int = 0


@dataclass(frozen=True)
class LatencySummary:
    """One sub-env's step latency in seconds, over its last ``RING_SIZE`` steps (``nan``
    before its first step); ``count`` is every step it has taken."""

    count: int
    mean: float
    p50: float
    p99: float


@dataclass(frozen=True)
class Statistics:
    """A snapshot of a vector env's activity since it was created.

    ``steps`` and ``resets`` count vector calls that returned (with or without restarted
    sub-envs; a ``recv`` batch counts as a step); ``errors`` counts sub-env failures (raised
    or recovered), ``timeouts`` sub-envs that missed a deadline, ``restarts`` sub-envs
    recreated by the restart policy or a reset;
    ``abandoned_threads`` is how many hung sub-env threads are still running (thread backend);
    ``descendants_reaped`` counts processes the sub-envs had started that aiovec ended when
    their sub-env closed, restarted or died (process backend, Linux); ``cleanups_run`` and
    ``cleanups_failed`` count the sub-envs' registered cleanups (``aiovec.register_cleanup``)
    that completed, and that raised or overran their bound.
    """

    steps: int
    resets: int
    errors: int
    timeouts: int
    restarts: int
    abandoned_threads: int
    step_latency: tuple[LatencySummary, ...]
    descendants_reaped: int = 0
    cleanups_run: int = 0
    cleanups_failed: int = 0


class LatencyLog:
    """Rings of recent step durations, one per sub-env, over two arrays it does not own.

    ``durations`` has shape ``(num_envs, RING_SIZE)`` (float64) and ``counts`` ``(num_envs,)``
    (int64); they may be shared memory written by worker processes.
    """

    __slots__ = ("_counts", "_durations", "counts", "durations")

    def __init__(self, durations: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]) -> None:
        self.durations = durations
        self.counts = counts
        # Item access on flat memoryviews is several times cheaper than on numpy arrays.
        self._durations: Any = durations.reshape(-1).data
        self._counts: Any = counts.data

    @classmethod
    def allocate(cls, num_envs: int) -> LatencyLog:
        """A log in this process's own memory (for in-process backends)."""
        return cls(np.zeros((num_envs, RING_SIZE)), np.zeros(num_envs, dtype=np.int64))

    def timer(self, env_index: int) -> StepTimer:
        """The recorder a sub-env's host calls around each step."""
        return StepTimer(self, env_index)

    def summary(self, env_index: int) -> LatencySummary:
        count = int(self.counts[env_index])
        if not count:
            return LatencySummary(0, math.nan, math.nan, math.nan)
        recent = self.durations[env_index, : min(count, RING_SIZE)]
        p50, p99 = np.percentile(recent, [50, 99])
        return LatencySummary(count, float(recent.mean()), float(p50), float(p99))

    def release(self) -> None:
        """Drop the views, so shared memory under them can be unmapped (the log reads as
        empty afterwards)."""
        self._durations.release()
        self._counts.release()
        self.durations = np.zeros((len(self.counts), RING_SIZE))
        self.counts = np.zeros(len(self.counts), dtype=np.int64)
        self._durations = self.durations.reshape(-1).data
        self._counts = self.counts.data


class StepTimer:
    """Times one sub-env's steps into a ``LatencyLog``."""

    __slots__ = ("_offset", "env_index", "log")

    def __init__(self, log: LatencyLog, env_index: int) -> None:
        self.log = log
        self.env_index = env_index
        self._offset = env_index * RING_SIZE

    def __call__(self, started: float) -> None:
        # Written here, not through a LatencyLog method: this runs once per sub-env step.
        seconds = time.perf_counter() - started
        log, env_index = self.log, self.env_index
        count = log._counts[env_index]
        log._durations[self._offset + count % RING_SIZE] = seconds
        log._counts[env_index] = count + 1
