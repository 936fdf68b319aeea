"""``statistics()``: counters and each sub-env's step latency, on every backend."""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec._backends import _slot
from aiovec._core import _statistics
from aiovec._core._statistics import RING_SIZE, SAMPLE_EVERY, LatencyLog
from aiovec.testing import AsyncAdapter, FaultyEnv
from tests.backends_matrix import (
    ALL_BACKENDS,
    LOCAL_BACKENDS,
    LOCAL_SYNC_BACKENDS,
    for_backend,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)
async def test_statistics_count_steps_and_time_each_sub_env(backend: str) -> None:
    envs = aiovec.AsyncVectorEnv([lambda: FaultyEnv(episode_length=4)] * 3, backend=backend)
    before = envs.statistics()
    assert before.steps == 0 and all(math.isnan(entry.mean) for entry in before.step_latency)
    async with envs:
        await envs.reset()
        for _ in range(300):
            await envs.step(np.ones(3))
        statistics = envs.statistics()
    assert (statistics.steps, statistics.resets, statistics.errors, statistics.timeouts,
            statistics.restarts, statistics.abandoned_threads) == (300, 1, 0, 0, 0, 0)
    for entry in statistics.step_latency:
        assert entry.count == 300  # autoreset steps included
        assert 0 < entry.p50 <= entry.p99 and 0 < entry.mean < 1
    assert envs.statistics() == statistics  # still readable once closed
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.steps = 0  # type: ignore[misc]


class SleepyEnv(gym.Env[np.ndarray, np.ndarray]):
    """Never ends an episode; every step sleeps ``delay`` seconds (the GIL is released)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (), np.float64)

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.delay:
            time.sleep(self.delay)
        return np.zeros(1), 0.0, False, False, {}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_step_counts_are_exact_on_every_backend_and_kept_after_close(
        backend: str) -> None:
    """Every step counts, full batches (autoresets included) and first-ready ones alike,
    and the counts and durations outlive the vector env (the process backend's lived in
    shared memory). Ray counts but does not time."""
    factories = for_backend(backend, [functools.partial(FaultyEnv, episode_length=4)] * 3)
    envs = aiovec.AsyncVectorEnv(factories, backend=backend)
    async with envs:
        await envs.reset(seed=0)
        for _ in range(50):
            await envs.step(np.ones(3))
        for _ in range(7):  # sub-envs 0 and 2 only
            envs.send(np.ones(2), env_ids=[0, 2])
            await envs.recv(batch_size=2)
        envs.send(np.ones(1), env_ids=[1])
        await envs.recv(batch_size=1)
        running = envs.statistics()
    closed = envs.statistics()
    assert [entry.count for entry in closed.step_latency] == [57, 51, 57]
    assert closed == running
    for entry in closed.step_latency:
        if backend == "ray":
            assert math.isnan(entry.mean) and math.isnan(entry.p99)
        else:  # sampled: the first step is always timed
            assert 0 < entry.p50 <= entry.p99 and 0 < entry.mean < 1


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_each_sub_env_times_its_own_steps(backend: str) -> None:
    delay = 0.01
    factories: list[Any] = [SleepyEnv, functools.partial(SleepyEnv, delay)]
    if backend == "async":  # a coroutine env awaits its delay (a sleep would block the loop)
        factories = [functools.partial(AsyncAdapter, SleepyEnv),
                     functools.partial(AsyncAdapter, SleepyEnv, delay=delay)]
    async with aiovec.AsyncVectorEnv(factories, backend=backend) as envs:
        await envs.reset(seed=0)
        for _ in range(40):
            await envs.step(np.zeros(2))
        fast, slow = envs.statistics().step_latency
    assert (fast.count, slow.count) == (40, 40)
    assert slow.p50 >= delay > fast.p50


class _FakeClock:
    """``time.perf_counter`` for the step timing code: steps move it by what they claim."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _ClockedEnv(SleepyEnv):
    """Each step takes ``FAST`` seconds on ``clock``, or ``SLOW`` every ``slow_every``-th."""

    FAST, SLOW = 0.001, 0.05

    def __init__(self, clock: _FakeClock, slow_every: int = 0) -> None:
        super().__init__()
        self.clock = clock
        self.slow_every = slow_every
        self.steps = 0

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        slow = self.slow_every and self.steps % self.slow_every == 0
        self.clock.now += self.SLOW if slow else self.FAST
        return super().step(action)


async def test_a_sub_env_slow_once_in_a_while_shows_in_its_p99(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Durations are sampled, yet a sub-env slow on 2% of its steps, or on a beat as long as
    the mean gap between samples, shows in its p99. Timing draws nothing from ``random``."""
    clock = _FakeClock()
    for module in (_slot, _statistics):
        monkeypatch.setattr(module, "time", clock)
    factories = [functools.partial(_ClockedEnv, clock, slow_every)
                 for slow_every in (0, 50, SAMPLE_EVERY)]
    random_state = random.getstate()
    async with aiovec.AsyncVectorEnv(factories, backend="inline") as envs:
        await envs.reset(seed=0)
        steps = RING_SIZE * SAMPLE_EVERY
        for _ in range(steps):
            await envs.step(np.zeros(3))
        steady, rare, beat = envs.statistics().step_latency
    assert random.getstate() == random_state
    assert steady.count == rare.count == beat.count == steps
    assert (steady.p50, steady.p99) == pytest.approx((_ClockedEnv.FAST, _ClockedEnv.FAST))
    for slow in (rare, beat):
        assert slow.p50 == pytest.approx(_ClockedEnv.FAST)
        assert slow.p99 > _ClockedEnv.SLOW / 2
    samples = envs._engine.backend.latencies
    assert samples is not None  # each timed about one step in SAMPLE_EVERY
    assert all(steps / SAMPLE_EVERY / 2 < count < steps / SAMPLE_EVERY * 2
               for count in samples.samples.tolist())


def test_sampling_leaves_no_beat_unseen() -> None:
    """Whatever its index, a sub-env slow on a regular beat of up to 32 steps, at any phase,
    has slow steps among its first 300 samples; one step in ``SAMPLE_EVERY`` is timed."""
    log = LatencyLog.allocate(64)
    for env_index in range(64):
        timer = log.timer(env_index)
        step, sampled = 0, []
        for _ in range(300):
            sampled.append(step)
            step += timer(time.perf_counter()) + 1
        for beat in range(2, 33):
            assert {number % beat for number in sampled} == set(range(beat)), (env_index, beat)
        assert step / 300 == pytest.approx(SAMPLE_EVERY, rel=0.1)


def test_summaries_of_many_sub_envs_match_each_ring_on_its_own() -> None:
    """The summaries of sub-envs with empty, partly filled, full and wrapped rings (computed a
    group of equal fills at a time) equal each ring's own mean and percentiles."""
    rng = np.random.default_rng(7)
    held = [0, 1, 2, 3, 3, 17, RING_SIZE - 1, RING_SIZE, RING_SIZE + 5, 10 * RING_SIZE, 1, 0]
    log = LatencyLog.allocate(len(held))
    log.durations[:] = rng.lognormal(-7, 1, size=log.durations.shape)
    log.samples[:] = held
    counts = [3 * index for index in range(len(held))]
    summaries = log.summaries(counts)
    assert [summary.count for summary in summaries] == counts
    for samples, summary, durations in zip(held, summaries, log.durations):
        if not samples:
            assert math.isnan(summary.mean) and math.isnan(summary.p50)
            assert math.isnan(summary.p99)
            continue
        recent = durations[: min(samples, RING_SIZE)]
        assert summary.mean == pytest.approx(float(recent.mean()), rel=1e-12)
        assert summary.p50 == pytest.approx(float(np.percentile(recent, 50)), rel=1e-12)
        assert summary.p99 == pytest.approx(float(np.percentile(recent, 99)), rel=1e-12)
