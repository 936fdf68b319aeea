"""The chaos run: 20,000 vector steps of 16 sub-envs with random crashes, hangs and raises
under the restart policy (in the suite compressed to 5,000 steps at four times the fault rate;
``make soak`` runs the full length: tests/soak.py). Every call
returns a full batch; what the vector env reported reconciles exactly with what the sub-envs
recorded; the healthy sub-envs' trajectories equal a fault-free run; nothing leaks."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import pytest

import aiovec
from aiovec.testing import FaultLedger, ProcessTreeEnv, tagged_processes
from tests.faults.envs import faulty, one_per_worker
from tests.soak import FULL_LENGTH, soak_length, soak_rates

# Minutes of chaos in all: make unit runs it, the quick tier (make check) does not.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NUM_ENVS = 16
NUM_STEPS = 20_000
#: The loops each backend's chaos runs on: the process backend on both (its replies are read
#: by the waiting task, on the loop); each other backend on one, so that every backend and
#: both loops are covered without running each soak twice (uvloop: too slow a tier for it).
LOOPS = {"inline": ["trio"], "thread": ["trio"], "async": ["asyncio"],
         "process": ["asyncio", "trio"]}
EPISODE_LENGTH = 25
#: Far above any healthy step here (microseconds), so only injected hangs time out.
DEADLINE = 1.5


@dataclass(frozen=True)
class Chaos:
    backend: str
    probabilities: dict[str, float]


CHAOS = [
    # About 40 faults in a run; hangs are rarer, each costs a deadline.
    Chaos("inline", {"raise": 1.2e-4}),
    Chaos("thread", {"raise": 1e-4, "hang": 1.5e-5}),
    # Coroutine envs: a hang awaits (cancelled at the deadline); no process of its own to end.
    Chaos("async", {"raise": 1e-4, "hang": 1.5e-5}),
    Chaos("process", {"raise": 5e-5, "exit": 3e-5, "kill": 3e-5, "hang": 1.5e-5}),
]


def actions_at(step: int) -> np.ndarray:
    """Distinct per step and per sub-env, so a stale or misplaced result cannot pass."""
    return step + np.arange(NUM_ENVS) / 100


async def rollout(envs: aiovec.AsyncVectorEnv,
                  num_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(observations, restarted, reset step) per step and sub-env."""
    observations = np.zeros((num_steps, NUM_ENVS, 4))
    restarted = np.zeros((num_steps, NUM_ENVS), bool)
    reset_step = np.zeros((num_steps, NUM_ENVS), bool)
    obs, _ = await envs.reset(seed=list(range(100, 100 + NUM_ENVS)))
    done = np.zeros(NUM_ENVS, bool)
    for step in range(num_steps):
        obs, _, terminations, truncations, infos = await envs.step(actions_at(step))
        observations[step] = obs
        reset_step[step] = done
        restarted[step] = infos.get("_restart", False)
        done = terminations | truncations
    return observations, restarted, reset_step


# A full-length run takes ~100 s on a quiet 2-core machine: room for a noisy one.
@pytest.mark.timeout(480 if FULL_LENGTH else 240)
@pytest.mark.parametrize(("anyio_backend", "chaos"), [
    pytest.param(loop, chaos, id=f"{loop}-{chaos.backend}")
    for chaos in CHAOS for loop in LOOPS[chaos.backend]])
@pytest.mark.hangs_on_purpose(
    "hang faults at random: a thread-backend sub-env abandoned at its deadline stays "
    "blocked")
async def test_chaos_run(anyio_backend: str, chaos: Chaos, tmp_path: object,
                         no_leaks: None) -> None:
    num_steps = soak_length(NUM_STEPS)
    ledger = FaultLedger(f"{tmp_path}/ledger")
    policy = aiovec.RestartPolicy(max_restarts=None, backoff=0.01)
    probabilities = soak_rates(chaos.probabilities)
    factories = faulty(NUM_ENVS, ledger, probabilities=probabilities,
                       episode_length=EPISODE_LENGTH, backend=chaos.backend)
    async with aiovec.AsyncVectorEnv(factories, backend=chaos.backend, restart=policy,
                                     timeout=DEADLINE,
                                     **one_per_worker(chaos.backend, NUM_ENVS)) as envs:
        observations, restarted, reset_step = await rollout(envs, num_steps)
        statistics = envs.statistics()

    faults = [ledger.count(env, "fault") for env in range(NUM_ENVS)]
    assert sum(faults) >= 10, faults  # the run really was chaotic
    assert statistics.steps == num_steps and statistics.restarts == sum(faults)
    for env in range(NUM_ENVS):
        # One restart per fault; every env.step and env.reset the sub-envs did is accounted
        # for by exactly one result the caller saw (nothing lost, nothing duplicated).
        assert restarted[:, env].sum() == faults[env]
        ordinary = ~restarted[:, env] & ~reset_step[:, env]
        assert ledger.count(env, "step") == ordinary.sum()
        assert ledger.count(env, "reset") == 1 + reset_step[:, env].sum()
        # Each ordinary result answers this step's action: no stale or misplaced reply.
        expected = np.arange(num_steps) + env / 100  # actions_at(step)[env]
        assert np.array_equal(observations[ordinary, env, 1], expected[ordinary])

    # The sub-envs that never failed follow exactly the trajectory of a fault-free run.
    async with aiovec.AsyncVectorEnv(faulty(NUM_ENVS, episode_length=EPISODE_LENGTH),
                                     backend="inline") as reference:
        clean, _, _ = await rollout(reference, num_steps)
    healthy = [env for env in range(NUM_ENVS) if faults[env] == 0]
    assert healthy, faults
    assert np.array_equal(observations[:, healthy], clean[:, healthy])


TREE_STEPS = 5_000
#: Every this many steps, the helpers of every sub-env are counted.
TREE_CHECKS = 500
#: Living processes each sub-env keeps: a plain child and a double-forked daemon.
TREE_HELPERS = ("child", "double_fork")


@pytest.mark.worker_processes
@pytest.mark.timeout(480 if FULL_LENGTH else 240)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_chaos_run_with_helper_processes(anyio_backend: str, tmp_path: object,
                                               no_leaks: None) -> None:
    """Every sub-env keeps helper processes, as a simulator-backed env does; 5,000 steps of
    random crashes, kills, hangs and raises. Between steps every live sub-env has exactly its
    own helpers (the old ones gone before a restart made new ones); at the end, none is left;
    every fault was restarted and nothing was lost (compressed in the suite: tests/soak.py)."""
    ledger = FaultLedger(f"{tmp_path}/ledger")
    tag = f"chaos-{os.getpid()}"
    probabilities = soak_rates({"raise": 2e-4, "exit": 1.2e-4, "kill": 1.2e-4, "hang": 4e-5})
    factories = [functools.partial(ProcessTreeEnv, index, tag=f"{tag}-{index}",
                                   helpers=TREE_HELPERS, ledger=str(ledger.directory),
                                   probabilities=probabilities, episode_length=EPISODE_LENGTH)
                 for index in range(NUM_ENVS)]
    policy = aiovec.RestartPolicy(max_restarts=None, backoff=0.01)
    restarted = np.zeros(NUM_ENVS, int)
    done = np.zeros(NUM_ENVS, bool)
    async with aiovec.AsyncVectorEnv(factories, backend="process", restart=policy,
                                     timeout=DEADLINE, num_workers=NUM_ENVS) as envs:
        await envs.reset(seed=list(range(NUM_ENVS)))
        for step in range(soak_length(TREE_STEPS)):
            obs, _, terminations, truncations, infos = await envs.step(actions_at(step))
            restart = infos.get("_restart", np.zeros(NUM_ENVS, bool))
            restarted += restart
            ordinary = ~restart & ~done  # neither restarted nor the first step of an episode
            assert np.array_equal(obs[ordinary, 1], actions_at(step)[ordinary])
            done = terminations | truncations
            if step % soak_length(TREE_CHECKS) == 0:
                counts = [len(tagged_processes(f"{tag}-{index}")) for index in range(NUM_ENVS)]
                assert counts == [len(TREE_HELPERS)] * NUM_ENVS, (step, counts)
    statistics = envs.statistics()  # after close: its counts are in
    faults = [ledger.count(env, "fault") for env in range(NUM_ENVS)]
    assert sum(faults) >= 10, faults
    assert restarted.tolist() == faults and statistics.restarts == sum(faults)
    # Each instance's helpers were ended once: at its restart, or at close.
    instances = sum(ledger.count(env, "new") for env in range(NUM_ENVS))
    assert statistics.descendants_reaped == instances * len(TREE_HELPERS)
    assert [tagged_processes(f"{tag}-{index}") for index in range(NUM_ENVS)] == [[]] * NUM_ENVS
