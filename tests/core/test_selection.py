"""``backend="auto"``: the rule of thumb, the probe, and the cost model that picks from it."""

from __future__ import annotations

import logging
import os
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec._core._probe import Workload, measure_workload
from aiovec._core._selection import choose_by_workload, estimate_step_seconds, rule_of_thumb
from aiovec.testing import CountingEnv
from tests.envs import BusyEnv, CrashingEnv, HeavyEnv, SleepingEnv

pytestmark = pytest.mark.anyio

TWO_CPUS = len(os.sched_getaffinity(0)) >= 2


def _workload(step: float, cpu: float, round_trip: float = 60e-6,
              nbytes: int = 16) -> Workload:
    """A step of ``step`` seconds that computes for ``cpu`` and waits the rest."""
    return Workload(step, cpu, step - cpu, round_trip, nbytes, steps=20)


# ---------------------------------------------------------------------- the cost model

def test_waiting_envs_go_to_threads() -> None:
    choice = choose_by_workload(_workload(5e-3, 5e-5), 32, cpus=2)
    assert choice.name == "thread"
    assert choice.estimates["thread"] < choice.estimates["process"] / 10
    assert "99% of it waiting" in choice.reason


def test_cpu_bound_envs_go_to_processes() -> None:
    for num_envs in (8, 32, 256):
        assert choose_by_workload(_workload(1e-3, 1e-3), num_envs, cpus=2).name == "process"


def test_tiny_envs_stay_inline_only_when_few_and_without_a_deadline() -> None:
    tiny = _workload(5e-6, 5e-6)
    assert choose_by_workload(tiny, 8, cpus=2).name == "inline"
    assert choose_by_workload(tiny, 256, cpus=2).name == "process"
    # Inline cannot interrupt a hung step: with a timeout, the process backend keeps them.
    assert choose_by_workload(tiny, 8, cpus=2, timeout=5.0).name == "process"


def test_the_process_backend_keeps_near_ties() -> None:
    workload = _workload(5e-6, 5e-6, round_trip=29e-6)
    estimates = estimate_step_seconds(workload, 8, 2, None)
    assert estimates["process"] / 1.1 < estimates["inline"] < estimates["process"]
    assert choose_by_workload(workload, 8, cpus=2).name == "process"


def test_max_concurrency_limits_the_overlap_threads_can_give() -> None:
    sleeping = _workload(5e-3, 5e-5)
    free = estimate_step_seconds(sleeping, 32, 2, None)["thread"]
    capped = estimate_step_seconds(sleeping, 32, 2, 4)["thread"]
    assert capped > 7 * free
    assert choose_by_workload(sleeping, 32, cpus=2, max_concurrency=4).name == "thread"
    # One at a time, every backend steps them in turn: the process backend keeps the tie.
    assert choose_by_workload(sleeping, 32, cpus=2, max_concurrency=1).name == "process"


def test_waiting_for_a_cpu_counts_as_computing() -> None:
    # A computing env on a busy machine: 2 ms of CPU, 3 ms more spent waiting for a core.
    busy_machine = Workload(5e-3, 2e-3, 0.0, 60e-6, 16, steps=20)
    assert choose_by_workload(busy_machine, 4, cpus=2).name == "process"


def test_big_observations_weigh_on_every_backend() -> None:
    small = estimate_step_seconds(_workload(2e-6, 2e-6), 32, 2, None)
    pixels = estimate_step_seconds(_workload(2e-6, 2e-6, nbytes=84 * 84 * 4), 32, 2, None)
    assert all(pixels[name] > small[name] for name in small)


def test_the_rule_of_thumb_says_why() -> None:
    assert rule_of_thumb([CountingEnv], {}).name == "thread"
    assert "one sub-env" in rule_of_thumb([CountingEnv], {}).reason
    given = rule_of_thumb([CountingEnv] * 4, {"num_workers": 2})
    assert (given.name, given.reason) == ("process",
                                          "process options (num_workers, start_method) were given")


# ---------------------------------------------------------------------- the probe

async def test_the_probe_tells_waiting_from_computing(anyio_backend: Any,
                                                      no_leaks: None) -> None:
    sleeping = await measure_workload(SleepingEnv)
    busy = await measure_workload(BusyEnv)
    # Wide margins: the sleep may overshoot, and on a saturated machine waiting for a CPU
    # (which is neither) may take most of a step's wall time, so the shares are not compared.
    assert 0.015 < sleeping.step_seconds < 1.0
    assert sleeping.waiting_seconds > 0.015 and sleeping.cpu_seconds < sleeping.waiting_seconds
    assert busy.cpu_seconds >= 0.0015 and busy.waiting_seconds < busy.cpu_seconds
    assert sleeping.observation_bytes == busy.observation_bytes == 16  # [steps, resets], int64
    assert sleeping.steps >= 3 and busy.steps >= 3
    assert busy.round_trip_seconds >= 0


async def test_a_probe_that_crashes_leaves_the_caller_and_nothing_else_behind(
        anyio_backend: Any, no_leaks: None) -> None:
    with pytest.raises(aiovec.WorkerDiedError) as raised:
        await measure_workload(CrashingEnv)
    cause = raised.value.exceptions[0].__cause__  # type: ignore[attr-defined]
    assert isinstance(cause, aiovec.WorkerDiedError) and cause.exitcode == 7


# ---------------------------------------------------------------------- "auto" end to end

# The probe measures the machine: on a saturated one, a sleeping env's step is mostly waiting
# for a CPU, which threads cannot overlap (processes are then the right pick), so it runs alone.
@pytest.mark.serial
@pytest.mark.skipif(not TWO_CPUS, reason="the rule of thumb picks threads on one CPU")
async def test_auto_runs_waiting_envs_on_threads_and_says_why(
        anyio_backend: Any, no_leaks: None, caplog: pytest.LogCaptureFixture) -> None:
    envs = aiovec.AsyncVectorEnv([SleepingEnv] * 4)
    assert envs.backend_name == "process"  # provisional: nothing measured yet
    with caplog.at_level(logging.INFO, logger="aiovec"):
        async with envs:
            assert envs.backend_name == "thread"
            assert "thread backend" in repr(envs)
            assert "measured one sub-env" in envs.backend_reason
            statistics = envs.statistics()
            assert (statistics.backend, statistics.backend_reason) == ("thread",
                                                                      envs.backend_reason)
            await envs.reset(seed=1)
            obs, *_ = await envs.step(np.zeros(4, dtype=np.int64))
            assert obs.tolist() == [[1, 1]] * 4
    assert any("picked 'thread'" in record.getMessage() for record in caplog.records)


@pytest.mark.skipif(not TWO_CPUS, reason="the rule of thumb picks threads on one CPU")
async def test_auto_runs_computing_envs_in_processes(anyio_backend: Any,
                                                      no_leaks: None) -> None:
    # 8 x 20 ms of CPU a step: threads take 160 ms, two workers ~80 ms plus a round trip,
    # which a loaded machine would have to slow beyond 64 ms to change the pick.
    async with aiovec.AsyncVectorEnv([HeavyEnv] * 8, timeout=60) as envs:
        assert envs.backend_name == "process", envs.backend_reason
        assert "estimated per vector step" in envs.backend_reason


async def test_a_pinned_backend_is_never_second_guessed(anyio_backend: Any) -> None:
    async with aiovec.AsyncVectorEnv([SleepingEnv] * 2, backend="process") as envs:
        assert envs.backend_name == "process"
        assert envs.backend_reason == "backend='process' was given"


@pytest.mark.skipif(not TWO_CPUS, reason="the rule of thumb picks threads on one CPU")
async def test_when_the_probe_crashes_the_rule_of_thumb_stands_and_the_crash_is_reported(
        anyio_backend: Any, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([CrashingEnv] * 2) as envs:
        assert envs.backend_name == "process"
        assert "measuring a sub-env failed (WorkerDiedError" in envs.backend_reason
        await envs.reset(seed=0)
        for _ in range(2):
            await envs.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(aiovec.WorkerDiedError) as raised:
            await envs.step(np.zeros(2, dtype=np.int64))
        assert raised.value.env_ids == (0, 1)  # type: ignore[attr-defined]


@pytest.mark.skipif(not TWO_CPUS, reason="the rule of thumb picks threads on one CPU")
async def test_a_factory_that_raises_fails_start_as_with_any_backend(
        anyio_backend: Any, no_leaks: None) -> None:
    def broken() -> gym.Env[Any, Any]:
        raise RuntimeError("no simulator licence")

    envs = aiovec.AsyncVectorEnv([broken] * 2)
    with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
        await envs.start()
    assert raised.value.env_ids == (0, 1)
    assert "no simulator licence" in str(raised.value.exceptions[0].__cause__)
    assert envs.closed
    assert "RuntimeError: no simulator licence" in envs.backend_reason
