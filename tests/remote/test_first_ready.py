"""First-ready batches on a remote session (``send``/``recv``/``batches``, and the sync
client's two-phase calls) against a real uvicorn on 127.0.0.1, compared with a local
``AsyncVectorEnv`` of the same sub-envs: the same results, refusals and deadlines."""

from __future__ import annotations

import random
import time
from typing import Any

import anyio
import anyio.lowlevel
import gymnasium as gym
import httpx
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import aiovec
from aiovec._remote import _vector_env as remote_module
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from aiovec.testing import release_hangs
from tests.leaks import wait_until
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


def test_an_answer_that_came_while_the_caller_worked_is_not_lost(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``step_wait`` waits from its own call: the server answered by the deadline from when
    the request reached it, so an answer that came while the caller did other work (longer
    than the deadline and the grace) is there, not a timeout (the step was taken)."""
    monkeypatch.setattr(remote_module, "TRANSPORT_GRACE", 0.05)
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "CartPole-v1", 2, timeout=0.2)
    local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        remote.reset(seed=1)
        local.reset(seed=1)
        for step in range(3):
            remote.step_async(np.array([step % 2, 1]))
            time.sleep(0.5)  # the caller's own work, past the deadline and the grace
            got = remote.step_wait()
            expected = local.step(np.array([step % 2, 1]))
            assert np.array_equal(got[0], expected[0]), step
    finally:
        remote.close()
        local.close()


async def test_a_sends_deadline_runs_from_when_it_went_out(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued ``send`` goes out with ``recv``; its sub-envs' deadlines run on the server
    from then, and the client waits for them accordingly (it had counted from ``send``)."""
    monkeypatch.setattr(remote_module, "TRANSPORT_GRACE", 0.05)
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Waiting1s-v0", 1, timeout=1.8) as remote:
        await remote.reset(seed=0)
        remote.send(np.array([1]))
        await anyio.sleep(1.0)  # the caller's own work: the request has not gone out yet
        batch = await remote.recv()  # 1 s of stepping from now, within its 1.8 s
        assert batch.env_ids.tolist() == [0]


async def test_a_cancelled_recv_whose_answer_was_coming_loses_nothing(serve: Any) -> None:
    """The recv is cancelled after the server answered it (the client, blocked meanwhile,
    had not read the answer): the batch waits for the next recv instead of being skipped."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "CartPole-v1", 2) as remote:
        await remote.reset(seed=0)
        remote.send(np.array([0, 1]))
        async with anyio.create_task_group() as group:
            cancelled = anyio.CancelScope()

            async def receive() -> None:
                with cancelled:
                    await remote.recv(batch_size=2)
                    raise AssertionError("the recv should have been cancelled")

            group.start_soon(receive)
            with anyio.fail_after(30):
                while remote._running != "recv" or remote._queued:
                    await anyio.lowlevel.checkpoint()
            # Blocking (no checkpoint): the recv task cannot read the answer meanwhile.
            with httpx.Client(base_url=server.url) as client:
                wait_until(lambda: client.get(f"/sessions/{remote.session_id}").json()[
                    "steps"] == 1, 30, "the server to answer the recv")
            cancelled.cancel()
        with anyio.fail_after(30):
            batch = await remote.recv()
        assert sorted(batch.env_ids.tolist()) == [0, 1]
        with pytest.raises(aiovec.NothingSentError):
            await remote.recv()
        remote.send(np.array([1, 1]))  # nothing owed any more
        assert len((await remote.recv(batch_size=2)).env_ids) == 2


async def test_a_failed_reset_drops_what_the_server_dropped(serve: Any) -> None:
    """A reset that fails for one sub-env (past the client's deadline) still resets the
    others, and the server drops their waiting results: so does the client."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "SeedHanging-v0", 2, timeout=0.5) as remote:
        await remote.reset(seed=0)
        remote.send(np.array([0]), [0])
        failed: list[aiovec.EnvTimeoutError] = []
        with anyio.fail_after(30):
            while not failed:
                try:
                    await remote.reset(seed=[1, 666])  # sub-env 1 hangs (its seed)
                except aiovec.BusyError:  # sub-env 0 was still stepping: not yet
                    await anyio.sleep(0.01)
                except aiovec.EnvTimeoutError as error:
                    failed.append(error)
        assert failed[0].env_ids == (1,)
        with pytest.raises(aiovec.NothingSentError):  # as the server: nothing is owed
            await remote.recv()
        await remote.reset(seed=2)
        remote.send(np.array([0]), [0])
        assert (await remote.recv()).env_ids.tolist() == [0]


async def test_a_refused_send_is_the_error_of_the_recv_it_went_out_with(serve: Any) -> None:
    """After a step past the client's deadline the sub-env needs a reset, which the client
    cannot know of before the server says so: the send is refused there, and the recv that
    carried it raises that refusal (ResetNeededError), not the server's 'nothing sent'."""
    server: Server = serve("open")
    try:
        async with AsyncRemoteVectorEnv(server.url, "Hung-v0", 1, timeout=0.5) as remote:
            await remote.reset(seed=0)
            with pytest.raises(aiovec.EnvTimeoutError):
                await remote.step(np.zeros(1))
            remote.send(np.zeros(1))
            with pytest.raises(aiovec.ResetNeededError):
                await remote.recv()
            with pytest.raises(aiovec.NothingSentError):
                await remote.recv()
    finally:
        release_hangs()


async def test_a_reset_mask_the_server_refuses_leaves_the_env_usable(serve: Any) -> None:
    """A ragged ``reset_mask`` is the server's to refuse (``invalid``); reading it here must
    not leave the client claimed (every later call was refused as busy)."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Options-v0", 2) as remote:
        await remote.reset(seed=0)
        with pytest.raises(aiovec.RemoteError) as refused:
            await remote.reset(options={"reset_mask": [[True, False], [True]]})
        assert refused.value.code == "invalid"
        obs, _ = await remote.reset(seed=1, options={"reset_mask": np.array([True, False])})
        assert obs.shape[0] == 2
