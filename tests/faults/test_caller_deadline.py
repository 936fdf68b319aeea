"""The caller's deadline (``CallerDeadline``: a remote client's, which ``aiovec.serve`` applies)
and restarts: one rule in ``step``, ``reset`` and ``recv``, on every backend that has deadlines.

The sub-envs that missed the caller's deadline are reported (``EnvTimeoutError`` naming them)
and never restarted, not even when their worker is made afresh to restart a neighbour: only
the caller's reset brings them back. Every other broken sub-env (it raised, or its worker was
killed to stop a late one) is restarted by the policy, as without a caller's deadline.

On the process backend sub-envs share workers here: a worker answers a lockstep call for its
whole share, so a late sub-env's neighbours are late with it; in first-ready batches a
neighbour stepping on its own request dies with the worker and is restarted. A remote client's
deadline is where the server applies the rule (the last test).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
from aiovec._core._in_flight import CallerDeadline
from aiovec.remote import AsyncRemoteVectorEnv
from aiovec.testing import Fault, FaultLedger
from tests.backends_matrix import LOCAL_DEADLINE_BACKENDS
from tests.faults.envs import faulty
from tests.serve.conftest import Server
from tests.serve.conftest import serve as serve

pytestmark = pytest.mark.anyio

DEADLINE = 0.5
#: Generous: a worker process remade to restart a neighbour starts an interpreter, on shared,
#: loaded machines. The hung sub-envs hang for an hour: only the deadline ends the call.
MARGIN = 10.0


def shared_workers(backend: str, num_workers: int) -> dict[str, Any]:
    """Several sub-envs per worker process (the other backends have no workers)."""
    return {"num_workers": num_workers} if backend == "process" else {}


def caller_deadline_envs(backend: str, ledger: FaultLedger, faults: dict[int, list[Fault]],
                         num_envs: int, num_workers: int) -> aiovec.AsyncVectorEnv:
    return aiovec.AsyncVectorEnv(faulty(num_envs, ledger, faults, backend=backend),
                                 backend=backend, restart=True,
                                 **shared_workers(backend, num_workers))


def on_local_backends(test: Callable[..., Any]) -> Callable[..., Any]:
    """A test of a hanging sub-env on each local backend with deadlines."""
    hangs = pytest.mark.hangs_on_purpose(
        "a sub-env hangs for good: its thread is abandoned at the caller's deadline")
    return pytest.mark.parametrize("backend", LOCAL_DEADLINE_BACKENDS)(hangs(test))


@contextlib.asynccontextmanager
async def hang_and_raise(backend: str, ledger: FaultLedger, operation: str
                         ) -> AsyncIterator[tuple[aiovec.AsyncVectorEnv, tuple[int, ...]]]:
    """Four sub-envs, two to a worker, that have stepped once: at its next ``operation``
    sub-env 0 hangs and sub-env 2 raises. Yields the env and the sub-envs that will be late
    (on processes, 0's worker neighbour too)."""
    faults = {0: [Fault("hang", operation, at=1, instance=0)],
              2: [Fault("raise", operation, at=1, instance=0)]}
    async with caller_deadline_envs(backend, ledger, faults, 4, 2) as envs:
        await envs.reset(seed=0)
        await envs.step(np.full(4, 1.0))
        yield envs, (0, 1) if backend == "process" else (0,)


def assert_late_and_one_restart(envs: aiovec.AsyncVectorEnv, ledger: FaultLedger,
                                late: tuple[int, ...]) -> None:
    """Sub-env 2, which raised, was the one restart; the ``late`` ones timed out and wait for
    the caller's reset, sub-env 0 not made afresh."""
    statistics = envs.statistics()
    assert (statistics.restarts, statistics.timeouts) == (1, len(late))
    assert envs.unusable_envs == late
    assert ledger.count(0, "new") == 1


@on_local_backends
async def test_step_restarts_what_broke_but_not_what_was_late_for_the_caller(
        backend: str, ledger: FaultLedger, no_leaks: None) -> None:
    """Sub-env 0 hangs (on processes with sub-env 1, its worker's other sub-env) and sub-env
    2 raises: 2 is restarted, the late ones are reported and wait for the caller's reset."""
    async with hang_and_raise(backend, ledger, "step") as (envs, late):
        started = anyio.current_time()
        with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
            await envs.step(np.full(4, 2.0), timeout=CallerDeadline(DEADLINE))
        assert anyio.current_time() - started < DEADLINE + MARGIN
        assert timed_out.value.env_ids == late
        obs, rewards, _, truncations, infos = timed_out.value.partial_result
        assert infos["_restart"].tolist() == [False, False, True, False]
        assert truncations[2] and rewards[2] == 0.0
        assert obs[3, :2].tolist() == [2.0, 2.0] and rewards[3] == 2.0  # kept
        if backend != "process":
            assert obs[1, :2].tolist() == [2.0, 2.0] and rewards[1] == 2.0
        assert_late_and_one_restart(envs, ledger, late)
        assert ledger.count(0, "reset") == 1  # nor reset
        obs, _ = await envs.reset(seed=1)  # the caller's reset brings them back
        assert obs[:, 3].tolist() == [1, len(late) - 1, 1, 0]  # fresh instances
        obs, *_ = await envs.step(np.full(4, 3.0))
        assert obs[:, :2].tolist() == [[1, 3]] * 4


@on_local_backends
async def test_reset_restarts_what_broke_but_not_what_was_late_for_the_caller(
        backend: str, ledger: FaultLedger, no_leaks: None) -> None:
    async with hang_and_raise(backend, ledger, "reset") as (envs, late):
        started = anyio.current_time()
        with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
            await envs.reset(seed=1, timeout=CallerDeadline(DEADLINE))
        assert anyio.current_time() - started < DEADLINE + MARGIN
        assert timed_out.value.env_ids == late
        obs, infos = timed_out.value.partial_result
        assert infos["_restart"].tolist() == [False, False, True, False]
        assert obs[2, 3] == 1 and obs[3, :2].tolist() == [0.0, 0.0]  # reset, 2 afresh
        assert_late_and_one_restart(envs, ledger, late)
        await envs.reset(seed=2)
        obs, *_ = await envs.step(np.full(4, 3.0))
        assert obs[:, :2].tolist() == [[1, 3]] * 4


@on_local_backends
async def test_recv_reports_the_late_sub_env_and_restarts_only_its_neighbour(
        backend: str, ledger: FaultLedger, no_leaks: None) -> None:
    """One worker for both sub-envs: sub-env 0 hangs past the caller's deadline, its worker
    is killed, and sub-env 1, stepping on its own request there, dies with it. The batch
    reports 0 late and 1 restarted; remaking the worker for 1 does not restart 0."""
    faults = {0: [Fault("hang", "step", at=0, instance=0)]}
    async with caller_deadline_envs(backend, ledger, faults, 2, 1) as envs:
        await envs.reset(seed=0)
        started = anyio.current_time()
        envs.send(np.full(1, 2.0), [0], timeout=CallerDeadline(DEADLINE))
        envs.send(np.full(1, 2.0), [1])
        with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
            await envs.recv(batch_size=2)
        assert anyio.current_time() - started < DEADLINE + MARGIN
        assert timed_out.value.env_ids == (0,)
        batch = timed_out.value.partial_result
        assert sorted(batch.env_ids.tolist()) == [0, 1]
        row = batch.env_ids.tolist().index(1)
        restarted = backend == "process"  # its worker was killed under it
        assert bool(batch.infos.get("_restart", [False] * 2)[row]) == restarted
        assert batch.truncations[row] == restarted
        if not restarted:
            assert batch.observations[row, :2].tolist() == [1.0, 2.0]
            assert batch.rewards[row] == 2.0
        statistics = envs.statistics()
        assert (statistics.restarts, statistics.timeouts) == (int(restarted), 1)
        assert envs.unusable_envs == (0,)
        await check_usable_after(envs, ledger)


@on_local_backends
async def test_a_late_sub_env_received_alone_stays_unrestarted_when_its_worker_is_remade(
        backend: str, ledger: FaultLedger, no_leaks: None) -> None:
    """As above, one result at a time. On processes the late sub-env's timeout comes first
    (its deadline passed before its neighbour died of it), and restarting the neighbour in
    the next ``recv`` remakes their worker: the late one still waits for the caller's reset."""
    faults = {0: [Fault("hang", "step", at=0, instance=0)]}
    async with caller_deadline_envs(backend, ledger, faults, 2, 1) as envs:
        await envs.reset(seed=0)
        envs.send(np.full(1, 2.0), [0], timeout=CallerDeadline(DEADLINE))
        envs.send(np.full(1, 2.0), [1])
        outcomes: list[aiovec.StepBatch | aiovec.EnvTimeoutError] = []
        for _ in range(2):
            try:
                outcomes.append(await envs.recv(batch_size=1))
            except aiovec.EnvTimeoutError as timed_out:
                outcomes.append(timed_out)
        [late] = [item for item in outcomes if isinstance(item, aiovec.EnvTimeoutError)]
        [batch] = [item for item in outcomes if isinstance(item, aiovec.StepBatch)]
        assert late.env_ids == (0,) and batch.env_ids.tolist() == [1]
        restarted = backend == "process"
        assert ("_restart" in batch.infos) == restarted
        if restarted:  # the other backends answer for sub-env 1 at once, most likely first
            assert outcomes == [late, batch]
        assert envs.unusable_envs == (0,)
        assert envs.statistics().restarts == int(restarted)
        await check_usable_after(envs, ledger)


async def check_usable_after(envs: aiovec.AsyncVectorEnv, ledger: FaultLedger) -> None:
    """Sub-env 1 steps on; sub-env 0 is refused until the caller resets it, and then steps."""
    assert ledger.count(0, "reset") == 1  # never reset after its hang
    with pytest.raises(aiovec.ResetNeededError):
        envs.send(np.full(1, 3.0), [0])
    envs.send(np.full(1, 3.0), [1])
    assert (await envs.recv()).env_ids.tolist() == [1]
    obs, _ = await envs.reset(seed=1, options={"reset_mask": np.array([True, False])})
    assert obs[0, 3] == 1  # a fresh instance
    envs.send(np.full(2, 4.0))
    batch = await envs.recv(batch_size=2)
    assert sorted(batch.env_ids.tolist()) == [0, 1] and "_restart" not in batch.infos


async def test_a_remote_client_hears_of_its_late_sub_env_beside_a_restarted_neighbour(
        serve: Any) -> None:
    """Served on one worker process for both sub-envs: sub-env 0's step (action 666) hangs
    past the client's 0.5 s, sub-env 1 dies with the killed worker and is restarted on the
    server, and the client hears ``EnvTimeoutError`` for sub-env 0, which then needs its
    reset, as locally."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "SharedWorkerHang-v0", 2,
                                    timeout=30.0) as remote:
        await remote.reset(seed=0)
        started = anyio.current_time()
        remote.send(np.array([666.0]), [0], timeout=DEADLINE)
        remote.send(np.array([1.0]), [1])
        with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
            await remote.recv(batch_size=2)
        assert anyio.current_time() - started < DEADLINE + MARGIN
        assert timed_out.value.env_ids == (0,)
        with pytest.raises(aiovec.NothingSentError):  # both were received
            await remote.recv()
        remote.send(np.array([2.0]), [1])  # restarted: it steps on
        assert (await remote.recv()).env_ids.tolist() == [1]
        remote.send(np.array([2.0]), [0])
        with pytest.raises(aiovec.ResetNeededError):
            await remote.recv()
        await remote.reset(seed=1)
        remote.send(np.array([3.0, 3.0]))
        assert sorted((await remote.recv(batch_size=2)).env_ids.tolist()) == [0, 1]
