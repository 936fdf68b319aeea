"""What ``AsyncVectorEnv.statistics()`` reports, and the per-sub-env step counts and latency
samples behind it.

Both are kept off the hot path. Step counts are kept by the engine per call, not per
sub-env (``StepCounts``: a full vector step adds one to a tally every sub-env shares). Step
durations are sampled where the sub-env runs (its thread, its worker process): each sub-env
times about one step in ``SAMPLE_EVERY``, at pseudo-random gaps so that a sub-env slow on a
regular beat (every episode's reset, say) cannot fall between samples, and an untimed step
costs one counter decrement. The samples go into a small ring per sub-env; for worker
processes the ring lives in the shared memory block, so reading statistics never asks a
worker anything.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aiovec._core._episodes import EpisodeCounts
from aiovec._core._requests import NO_REPLY, Failure
from aiovec._exceptions import EnvTimeoutError, WorkerDiedError
from aiovec._limits._limit import LimitUsage

__all__ = ["RING_SIZE", "SAMPLE_EVERY", "Counters", "LatencyLog", "LatencySummary",
           "Statistics", "StepCounts", "StepTimer"]

#: How many timed steps each sub-env's latency summary covers (its most recent ones).
RING_SIZE = 256
#: Each sub-env times one step in this many, on average.
SAMPLE_EVERY = 16


def _shuffled_gaps(rounds: int = 8) -> tuple[int, ...]:
    """Untimed steps between two timed ones: each of 0 to ``2 * (SAMPLE_EVERY - 1)`` once
    per round (so one step in ``SAMPLE_EVERY`` is timed), each round in its own order.
    Shuffled by a private generator: timing never draws on the ``random`` module users seed.
    """
    generator = random.Random(19)
    gaps = list(range(2 * SAMPLE_EVERY - 1))
    return tuple(gap for _ in range(rounds) for gap in generator.sample(gaps, len(gaps)))


#: The gaps every sub-env goes through, each entering the sequence at its own index.
_GAPS = _shuffled_gaps()


@dataclass
class Counters:
    """The running counts behind ``Statistics`` (see there for what each counts)."""

    steps: int = 0
    resets: int = 0
    errors: int = 0
    timeouts: int = 0
    restarts: int = 0
    aborts: int = 0


@dataclass(frozen=True)
class LatencySummary:
    """One sub-env's step latency in seconds: ``mean``, ``p50`` and ``p99`` of its recent
    steps, sampled (each sub-env times about one step in 16, at irregular gaps, and the
    summary covers its last 256 timed steps, so roughly its last 4,000 steps); ``nan``
    before its first timed step, and on the Ray backend, which does not time steps.

    ``count`` is exact: every step the sub-env answered (returned, or raised), autoreset
    and first-ready (``recv``) steps included; a step it never answered (it missed the
    deadline, or its worker died) is not counted.
    """

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
    restarted by the restart policy or remade by a reset (one remade with its worker while
    the caller must still reset it is not counted);
    ``abandoned_threads`` is how many hung sub-env threads are still running (thread backend);
    ``descendants_reaped`` counts processes the sub-envs had started that aiovec ended when
    their sub-env closed, restarted or died (process backend, Linux); ``cleanups_run`` and
    ``cleanups_failed`` count the sub-envs' registered cleanups (``aiovec.register_cleanup``)
    that completed, and that raised or overran their bound; ``step_latency`` has one
    ``LatencySummary`` per sub-env (an exact step count, sampled durations); ``backend`` and
    ``backend_reason`` say where the sub-envs run and why (what ``"auto"`` measured);
    ``aborts`` counts sub-envs whose first-ready step (queued, stepping or waiting for
    ``recv``) was dropped by ``abort`` (not errors, timeouts nor restarts); ``limits`` has one
    ``LimitUsage`` per named limit (``limits=``): held and waiting now, taken and waited so far;
    ``episodes`` counts the episodes ended, by how (``aiovec.episode_outcomes``).
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
    backend: str = ""
    backend_reason: str = ""
    aborts: int = 0
    limits: Mapping[str, LimitUsage] = field(default_factory=dict)
    episodes: EpisodeCounts = field(default_factory=EpisodeCounts)


class StepCounts:
    """Steps per sub-env, kept per call rather than per sub-env: a vector step that counts
    for every sub-env adds one to a tally they all share, and only a partial batch
    (first-ready, or a step some sub-env never answered) counts sub-env by sub-env."""

    __slots__ = ("_each", "_everyone")

    def __init__(self, num_envs: int) -> None:
        self._everyone = 0
        self._each = [0] * num_envs

    def add_all(self) -> None:
        """Every sub-env answered one more step."""
        self._everyone += 1

    def add(self, env_indices: Iterable[int]) -> None:
        """Each of ``env_indices`` answered one more step."""
        each = self._each
        for env_index in env_indices:
            each[env_index] += 1

    def add_answered(self, env_indices: Sequence[int], replies: Sequence[Any]) -> None:
        """Count the sub-envs of a step whose reply came from the sub-env itself."""
        self.add(env_index for env_index, reply in zip(env_indices, replies)
                 if _answered(reply))

    def __getitem__(self, env_index: int) -> int:
        return self._everyone + self._each[env_index]


def _answered(reply: Any) -> bool:
    """False for a step the sub-env never answered: no reply (it missed the deadline), a
    deadline given up on, a host that died or that it no longer has."""
    if type(reply) is not Failure:
        return reply is not NO_REPLY
    exception = reply.exception
    return exception is not None and not isinstance(exception,
                                                    (EnvTimeoutError, WorkerDiedError))


class LatencyLog:
    """Rings of sampled step durations, one per sub-env, over two arrays it does not own.

    ``durations`` has shape ``(num_envs, RING_SIZE)`` (float64) and ``samples``
    ``(num_envs,)`` (int64, how many durations each sub-env has recorded); they may be shared
    memory written by worker processes.
    """

    __slots__ = ("_durations", "_samples", "durations", "samples")

    def __init__(self, durations: np.ndarray[Any, Any], samples: np.ndarray[Any, Any]) -> None:
        self.durations = durations
        self.samples = samples
        # Item access on flat memoryviews is several times cheaper than on numpy arrays.
        self._durations: Any = durations.reshape(-1).data
        self._samples: Any = samples.data

    @classmethod
    def allocate(cls, num_envs: int) -> LatencyLog:
        """A log in this process's own memory (for in-process backends)."""
        return cls(np.zeros((num_envs, RING_SIZE)), np.zeros(num_envs, dtype=np.int64))

    def timer(self, env_index: int) -> StepTimer:
        """The recorder a sub-env's host calls around each timed step."""
        return StepTimer(self, env_index)

    def summaries(self, counts: Sequence[int]) -> tuple[LatencySummary, ...]:
        """Every sub-env's summary, ``counts[i]`` being how many steps sub-env ``i`` answered
        (NaN figures for one that timed none).

        The sub-envs are grouped by how many durations their ring holds, and each group takes
        one percentile call along its rows: a call per sub-env cost about 0.1 ms, half a
        second for 4,096 sub-envs at every ``statistics()`` and at every close.
        """
        held = np.minimum(self.samples, RING_SIZE)  # read once: workers may be writing
        means, p50s, p99s = (np.full(len(held), math.nan) for _ in range(3))
        for size in np.unique(held).tolist():
            if size:
                rows = np.flatnonzero(held == size)
                recent = self.durations[rows, :size]
                means[rows] = recent.mean(axis=1)
                p50s[rows], p99s[rows] = np.percentile(recent, [50, 99], axis=1)
        return tuple(LatencySummary(count, mean, p50, p99) for count, mean, p50, p99
                     in zip(counts, means.tolist(), p50s.tolist(), p99s.tolist()))

    def release(self) -> None:
        """Drop the views, so shared memory under them can be unmapped (the log reads as
        empty afterwards)."""
        self._durations.release()
        self._samples.release()
        self.durations = np.zeros((len(self.samples), RING_SIZE))
        self.samples = np.zeros(len(self.samples), dtype=np.int64)
        self._durations = self.durations.reshape(-1).data
        self._samples = self.samples.data


class StepTimer:
    """Times one sub-env's sampled steps into a ``LatencyLog``.

    A host keeps a countdown of untimed steps beside it; when the countdown is at zero it
    reads ``time.perf_counter()`` before the step and calls the timer after it, which
    returns the next countdown::

        if untimed_steps:
            untimed_steps -= 1      # most steps: nothing else
        else:
            started = time.perf_counter()
            ... the step ...
            untimed_steps = timer(started)
    """

    __slots__ = ("_offset", "env_index", "log")

    def __init__(self, log: LatencyLog, env_index: int) -> None:
        self.log = log
        self.env_index = env_index
        self._offset = env_index * RING_SIZE

    def __call__(self, started: float) -> int:
        """Record the step that began at ``started``; how many steps to leave untimed next."""
        seconds = time.perf_counter() - started
        log, env_index = self.log, self.env_index
        samples: int = log._samples[env_index]
        log._durations[self._offset + samples % RING_SIZE] = seconds
        log._samples[env_index] = samples + 1
        return _GAPS[(samples + env_index) % len(_GAPS)]
