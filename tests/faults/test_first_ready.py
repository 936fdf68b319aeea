"""Faults during first-ready batches: restarts, worker deaths and deadlines lose nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import aiovec
from aiovec.testing import Fault, FaultLedger
from tests.backends_matrix import EVENT_LOOPS, WORKER_BACKENDS
from tests.faults.envs import faulty

pytestmark = pytest.mark.anyio


async def test_a_worker_death_restarts_its_idle_neighbour_too(
        anyio_backend: Any, ledger: FaultLedger) -> None:
    """Sub-env 1 kills its worker while sub-env 0 (same worker) waits for its next action:
    both are made afresh; 1 comes back restarted in its batch, 0's next result says so."""
    factories = faulty(4, ledger, faults={1: [Fault("exit", "step", at=1, instance=0)]})
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        envs.send(np.ones(4, dtype=np.int64))
        await envs.recv()
        envs.send(np.ones(3, dtype=np.int64), [1, 2, 3])
        batch = await envs.recv()
        row = int(np.flatnonzero(batch.env_ids == 1)[0])
        assert batch.truncations[row] and batch.rewards[row] == 0.0
        assert "died" in batch.infos["restart"][row]
        envs.send(np.ones(1, dtype=np.int64), [0])
        neighbour = await envs.recv()
        assert neighbour.env_ids.tolist() == [0]
        assert "restarted with sub-env(s) [1]" in neighbour.infos["restart"][0]
        assert envs.statistics().restarts == 2
    assert ledger.count(0, "new") == 2 and ledger.count(1, "new") == 2


FIRST_READY_CHAOS = [
    ("thread", {"raise": 0.01, "hang": 0.003}),
    ("process", {"raise": 0.01, "exit": 0.003, "kill": 0.003, "hang": 0.002}),
    ("inline", {"raise": 0.02}),  # a hang would block the loop (no deadline can fire)
    ("async", {"raise": 0.01, "hang": 0.003}),  # no process of its own to end
    ("ray", {"raise": 0.01, "exit": 0.003, "kill": 0.003, "hang": 0.002}),
]


# Every backend on every loop, except Ray on asyncio only: its actors answer the same way
# whatever loop the caller runs, and each Ray chaos run costs ~10 s of the suite's budget.
@pytest.mark.parametrize(("anyio_backend", "backend", "probabilities"), [
    pytest.param(EVENT_LOOPS[loop], backend, probabilities, id=f"{loop}-{backend}")
    for loop in EVENT_LOOPS for backend, probabilities in FIRST_READY_CHAOS
    if backend != "ray" or loop == "asyncio"
])
@pytest.mark.hangs_on_purpose(
    "hang faults at random: an in-process sub-env abandoned at its deadline stays blocked")
async def test_chaos_with_first_ready_batches_loses_nothing(
        anyio_backend: Any, ledger: FaultLedger, backend: str,
        probabilities: dict[str, float]) -> None:
    """Random faults under random batch sizes: every action sent is answered exactly once
    (a result, or a restart of its sub-env), and every injected fault led to a restart."""
    num_envs, rounds = 8, 200
    factories = faulty(num_envs, ledger, probabilities=probabilities, hang_seconds=30.0,
                       backend=backend)
    kwargs: dict[str, Any] = {"num_workers": 4} if backend in WORKER_BACKENDS else {}
    rng = np.random.default_rng(5)
    async with aiovec.AsyncVectorEnv(factories, backend=backend, restart=100, timeout=1.0,
                                     **kwargs) as envs:
        await envs.reset(seed=0)
        envs.send(np.ones(num_envs, dtype=np.int64))
        outstanding = set(range(num_envs))
        answered = 0
        for _ in range(rounds):
            batch = await envs.recv(batch_size=int(rng.integers(1, num_envs + 1)))
            ids = batch.env_ids.tolist()
            assert outstanding.issuperset(ids) and len(set(ids)) == len(ids)
            outstanding.difference_update(ids)
            answered += len(ids)
            envs.send(np.ones(len(ids), dtype=np.int64), ids)
            outstanding.update(ids)
        async for batch in envs.batches():
            outstanding.difference_update(batch.env_ids.tolist())
        assert not outstanding
        restarts = envs.statistics().restarts
    faults = ledger.faults(range(num_envs))
    assert faults > 0, "the chaos run injected nothing: raise the probabilities"
    assert restarts >= faults, (restarts, faults)
