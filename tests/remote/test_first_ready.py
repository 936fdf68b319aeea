"""First-ready batches on a remote session (``send``/``recv``/``batches``, and the sync
client's two-phase calls) against a real uvicorn on 127.0.0.1, compared with a local
``AsyncVectorEnv`` of the same sub-envs: the same results, refusals and deadlines."""

from __future__ import annotations

import random
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import aiovec
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from aiovec.testing import release_hangs
from tests.serve.apps import ENVS
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio

NUM_ENVS = 5


def rows_by_env(batch: Any) -> dict[int, tuple[Any, ...]]:
    """A batch's rows keyed by sub-env (landing order is the machine's, not the env's)."""
    rows = {}
    for row, env_index in enumerate(batch.env_ids.tolist()):
        infos = batch.infos
        restarted = bool(infos["_restart"][row]) if "_restart" in infos else False
        reason = str(infos["restart"][row]) if restarted else None
        rows[env_index] = (batch.observations[row].tolist(), float(batch.rewards[row]),
                           bool(batch.terminations[row]), bool(batch.truncations[row]),
                           restarted, reason)
    return rows


async def collect(envs: Any, owed: int, batch_size: int | None) -> dict[int, tuple[Any, ...]]:
    """Receive until ``owed`` results came, in batches of at most ``batch_size``."""
    received: dict[int, tuple[Any, ...]] = {}
    while len(received) < owed:
        batch = await envs.recv(batch_size=min(batch_size or owed, owed - len(received)))
        assert batch.env_ids.dtype == np.intp
        assert not set(batch.env_ids.tolist()) & set(received)
        received.update(rows_by_env(batch))
    return received


@pytest.mark.parametrize("encoding", ["binary", "json"])
async def test_first_ready_batches_equal_local_ones(serve: Any, encoding: str) -> None:
    """Random splits of the sub-envs into sends, received in batches of random sizes, over
    episodes that end (autoreset) and sub-envs that fail and are restarted (the server's
    restart policy, and the same policy locally): every sub-env's results are the local
    ones."""
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([ENVS["Flaky-v0"].env_fn] * NUM_ENVS, backend="thread",
                                  restart=True)
    draw = random.Random(29)
    restarts = autoresets = 0
    async with local, AsyncRemoteVectorEnv(server.url, "Flaky-v0", NUM_ENVS,
                                           encoding=encoding) as remote:  # type: ignore[arg-type]
        assert remote.metadata["autoreset_mode"] == local.metadata["autoreset_mode"]
        obs, _ = await remote.reset(seed=3)
        expected, _ = await local.reset(seed=3)
        assert np.array_equal(obs, expected)
        for _ in range(25):
            envs = list(range(NUM_ENVS))
            draw.shuffle(envs)
            cut = draw.randint(1, NUM_ENVS)
            sends = [sorted(envs[:cut]), sorted(envs[cut:])]
            batch_size = draw.choice([None, 1, 2, 3])
            results = []
            for vector_env in (local, remote):
                for env_ids in sends:
                    if env_ids:
                        actions = np.array([(step + index) % 2 for step, index
                                            in enumerate(env_ids)], dtype=np.int64)
                        vector_env.send(actions, env_ids)
                results.append(await collect(vector_env, NUM_ENVS, batch_size))
            assert results[1] == results[0]
            restarts += sum(row[4] for row in results[0].values())
            autoresets += sum(row[3] and not row[4] for row in results[0].values())
            assert not remote._owed
    assert restarts > 0 and autoresets > 0, (restarts, autoresets)


async def test_batches_and_refusals_are_the_local_ones(serve: Any) -> None:
    server: Server = serve("open")
    # Served sessions check action values (validate_actions=True): so does this local env.
    local = aiovec.AsyncVectorEnv([ENVS["CartPole-v1"].env_fn] * 3, backend="thread",
                                  validate_actions=True)
    async with local, AsyncRemoteVectorEnv(server.url, "CartPole-v1", 3) as remote:
        for envs in (local, remote):
            with pytest.raises(aiovec.ResetNeededError):  # before the first reset
                envs.send(np.zeros(3, dtype=np.int64))
            await envs.reset(seed=0)
            with pytest.raises(aiovec.NothingSentError):
                await envs.recv()
            for env_ids, error in (([3], ValueError), ([0, 0], ValueError), ([], ValueError),
                                   ([[0]], ValueError)):
                with pytest.raises(error):
                    envs.send(np.zeros(max(len(env_ids), 1), dtype=np.int64), env_ids)
            with pytest.raises(ValueError, match="sub-env 1's action 5 is outside"):
                envs.send(np.array([5]), [1])
            envs.send(np.array([1, 0]), [0, 2])
            with pytest.raises(aiovec.BusyError):  # sub-env 2 owes its result
                envs.send(np.array([1]), [2])
            with pytest.raises(aiovec.BusyError):
                await envs.step(np.zeros(3, dtype=np.int64))
            envs.send(np.array([1]), [1])
            seen = []
            async for batch in envs.batches(batch_size=2):
                seen.extend(batch.env_ids.tolist())
                assert len(batch.observations) == len(batch.env_ids) <= 2
            assert sorted(seen) == [0, 1, 2]
            with pytest.raises(aiovec.NothingSentError):
                await envs.recv()
            await envs.step(np.zeros(3, dtype=np.int64))  # free to step again


async def test_a_late_sub_env_in_a_batch_times_out_as_locally(serve: Any) -> None:
    """``send(timeout=...)``: the server gives up on the hung sub-env at the client's
    deadline; ``recv`` raises ``EnvTimeoutError`` for it, as locally, and a reset makes it
    afresh at once."""
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([ENVS["Hung-v0"].env_fn] * 2, backend="thread")
    try:
        async with local, AsyncRemoteVectorEnv(server.url, "Hung-v0", 2, timeout=10) as remote:
            for envs in (local, remote):
                await envs.reset(seed=0)
                envs.send(np.zeros(2), timeout=0.5)
                with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
                    with anyio.fail_after(10):
                        await envs.recv()
                assert timed_out.value.env_ids == (0, 1), envs
                with pytest.raises(aiovec.NothingSentError):  # given up on: owed no more
                    await envs.recv()
                with anyio.fail_after(10):
                    await envs.reset(seed=1, timeout=0.5)
    finally:
        release_hangs()


async def test_a_cancelled_recv_loses_nothing(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Waiting-v0", 2) as remote:
        await remote.reset(seed=0)
        remote.send(np.array([0, 1]))
        with anyio.move_on_after(0.3) as scope:
            await remote.recv()
        assert scope.cancelled_caught
        with anyio.fail_after(30):
            batch = await remote.recv(batch_size=2)  # the steps went on meanwhile
        assert sorted(batch.env_ids.tolist()) == [0, 1]


def test_the_sync_client_has_two_phase_and_first_ready_calls(serve: Any) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "CartPole-v1", 3)
    local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    try:
        with pytest.raises(NoAsyncCallError):
            remote.step_wait()
        remote.reset_async(seed=6)
        with pytest.raises(AlreadyPendingCallError):
            remote.step(np.zeros(3, dtype=np.int64))
        obs, _ = remote.reset_wait()
        assert np.array_equal(obs, local.reset(seed=6)[0])
        for step in range(20):
            actions = np.array([step % 2, 1, 0])
            remote.step_async(actions)
            got = remote.step_wait(timeout=30)
            expected = local.step(actions)
            for mine, theirs in zip(got[:4], expected[:4]):
                assert np.array_equal(mine, theirs), step
        remote.send(np.array([1, 0]), [2, 0])
        remote.send(np.array([1]), [1])
        seen = []
        while len(seen) < 3:
            seen.extend(remote.recv().env_ids.tolist())
        assert sorted(seen) == [0, 1, 2]
        remote.step_async(np.zeros(3, dtype=np.int64))  # closed while pending: abandoned
    finally:
        remote.close()
        local.close()
    with pytest.raises(aiovec.ClosedError):
        remote.send(np.zeros(3, dtype=np.int64))
