"""``abort(env_ids)`` on a remote session (a real uvicorn on 127.0.0.1), against a local
``AsyncVectorEnv`` of the same coroutine sub-envs: the server cancels the aborted steps,
nothing of them is received, they need a reset; the same refusals, made before anything
is sent."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import numpy as np
import pytest

import aiovec
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from tests.serve.apps import SleepyEnv
from tests.serve.conftest import Server
from tests.serve.test_http import create, refused

pytestmark = pytest.mark.anyio

#: A step that would outlast every test: only an abort (or the close) ends it.
LONG = 30.0


def mask(num_envs: int, *env_ids: int) -> dict[str, Any]:
    reset_mask = np.zeros(num_envs, dtype=np.bool_)
    reset_mask[list(env_ids)] = True
    return {"reset_mask": reset_mask}


def sorted_rows(batch: aiovec.StepBatch) -> list[tuple[int, float, float]]:
    """(sub-env, steps it started, reward) per row, by sub-env."""
    return sorted(zip(batch.env_ids.tolist(), batch.observations[:, 0].tolist(),
                      batch.rewards.tolist()))


@pytest.mark.parametrize("encoding", ["binary", "json"])
async def test_aborted_steps_are_never_received_remote_as_local(serve: Any,
                                                                encoding: str) -> None:
    """Sub-env 0 stepping (a long tool call), 2 stepping or landed and waiting, 3's send not
    yet out (remotely): aborted, none of them comes back; they need a reset, which runs at
    once (sub-env 0's step was cancelled on the server, or its reset would be refused as
    busy)."""
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([SleepyEnv] * 4, backend="async")
    async with local, AsyncRemoteVectorEnv(server.url, "Sleepy-v0", 4,
                                           encoding=encoding) as remote:  # type: ignore[arg-type]
        outcomes = []
        for envs in (local, remote):
            await envs.reset(seed=0)
            envs.send(np.array([LONG, 0.0, 0.5]), [0, 1, 2])
            with anyio.fail_after(30):
                assert (await envs.recv(batch_size=1)).env_ids.tolist() == [1]
            envs.send(np.array([0.0]), [3])
            envs.abort([0, 2, 3])
            with pytest.raises(aiovec.NothingSentError):
                await envs.recv()
            with pytest.raises(aiovec.ResetNeededError, match=r"\[0\]"):
                envs.send(np.array([0.0]), [0])
            with anyio.fail_after(10):
                await envs.reset(options=mask(4, 0, 2, 3))
            envs.send(np.array([0.0, 0.0, 0.0, 0.0]))
            with anyio.fail_after(30):
                outcomes.append(sorted_rows(await envs.recv(batch_size=4)))
        # The reset sub-envs start again at one step; sub-env 1 went on to two.
        assert outcomes[0] == outcomes[1] == [(0, 1.0, 0.0), (1, 2.0, 0.0), (2, 1.0, 0.0),
                                              (3, 1.0, 0.0)]
        assert local.statistics().aborts == 3


async def test_abort_refusals_are_the_local_ones(serve: Any) -> None:
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([SleepyEnv] * 3, backend="async")
    remote = AsyncRemoteVectorEnv(server.url, "Sleepy-v0", 3)
    for envs in (local, remote):
        envs.abort([1])  # not started: nothing owed
    async with local, remote:
        for envs in (local, remote):
            await envs.reset(seed=0)
            envs.send(np.array([0.0, 0.0]), [0, 1])
            for bad, message in (([3], r"must lie in \[0, 3\)"),
                                 ([1, 1], "lists a sub-env twice"),
                                 ([[0]], "1-D sequence"), (["a"], "1-D sequence")):
                with pytest.raises(ValueError, match=message) as locally:
                    local.abort(bad)
                with pytest.raises(ValueError, match=message) as remotely:
                    remote.abort(bad)
                assert str(remotely.value) == str(locally.value)
            envs.abort([])  # none
            envs.abort([2])  # owes nothing: left alone
            with pytest.raises(aiovec.BusyError):  # still owed: nothing was dropped
                envs.send(np.array([0.0]), [0])
            with anyio.fail_after(30):
                assert sorted((await envs.recv(batch_size=3)).env_ids.tolist()) == [0, 1]
            envs.abort(None)  # all: nothing owed any more
            envs.send(np.array([0.0]), [2])  # and nothing needs a reset
            with anyio.fail_after(30):
                assert (await envs.recv()).env_ids.tolist() == [2]
        assert local.statistics().aborts == 0
    for envs in (local, remote):
        with pytest.raises(aiovec.ClosedError):
            envs.abort([0])


async def test_abort_waits_for_a_remote_recv_to_end(serve: Any) -> None:
    """The session answers one request at a time: ``abort`` is refused while this client's
    ``recv`` waits (locally it would be taken at once), and nothing is dropped."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Sleepy-v0", 2) as remote:
        await remote.reset(seed=0)
        remote.send(np.array([LONG, 0.0]))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                started = anyio.Event()

                @group.start_soon
                async def receive() -> None:
                    started.set()
                    await remote.recv(batch_size=2)

                await started.wait()  # (the recv claimed the env before its first await)
                with pytest.raises(aiovec.BusyError, match=r"cannot abort: .* running recv"):
                    remote.abort([0])
                group.cancel_scope.cancel()
        remote.abort([0])
        with anyio.fail_after(30):
            assert (await remote.recv()).env_ids.tolist() == [1]


def test_the_sync_client_aborts_at_once(serve: Any) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "Sleepy-v0", 2)
    try:
        remote.reset(seed=0)
        remote.send(np.array([LONG, 0.0]))
        assert remote.recv(batch_size=1).env_ids.tolist() == [1]
        remote.abort([0])
        remote.reset(options=mask(2, 0))  # refused as busy had the step not been cancelled
        remote.send(np.array([0.0, 0.0]))
        assert sorted(remote.recv(batch_size=2).env_ids.tolist()) == [0, 1]
    finally:
        remote.close()


async def test_the_server_aborts_and_moves_the_cap_over_http(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "Sleepy-v0", 2)
        await client.post(f"/sessions/{session}/reset", json={"seed": 3})
        sent = await client.post(f"/sessions/{session}/send", json={"actions": [LONG, 0.0]})
        assert sent.status_code == 200, sent.text
        assert (await client.post(f"/sessions/{session}/abort",
                                  json={"env_ids": []})).status_code == 200  # none
        for body in ({"env_ids": [2]}, {"env_ids": [0, 0]}, {"env_ids": "all"}):
            refused(await client.post(f"/sessions/{session}/abort", json=body), 422,
                    "invalid")
        aborted = await client.post(f"/sessions/{session}/abort", json={"env_ids": [0]})
        assert aborted.status_code == 200, aborted.text
        refused(await client.post(f"/sessions/{session}/send",
                                  json={"actions": [0.0], "env_ids": [0]}), 409,
                "reset_needed")
        with anyio.fail_after(30):
            batch = (await client.post(f"/sessions/{session}/recv", json={})).json()
        assert batch["env_ids"] == [1]
        for value in (0, 1.5, "2", True):
            refused(await client.post(f"/sessions/{session}/max_in_flight",
                                      json={"max_in_flight": value}), 422, "invalid")
        refused(await client.post(f"/sessions/{session}/max_in_flight", json={}), 422,
                "invalid")
        moved = await client.post(f"/sessions/{session}/max_in_flight",
                                  json={"max_in_flight": 2})
        assert moved.status_code == 200, moved.text
        assert (await client.get(f"/sessions/{session}")).json()["max_in_flight"] == 2
        await client.delete(f"/sessions/{session}")


async def test_a_masked_reset_goes_over_json(serve: Any) -> None:
    """JSON has no arrays: the server makes the mask's list one, as the local env wants it
    (before, every masked reset in JSON was refused, ``reset_mask must be a numpy array``)."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Sleepy-v0", 2, encoding="json") as remote:
        await remote.reset(seed=0)
        remote.send(np.array([0.0, 0.0]))
        with anyio.fail_after(30):
            await remote.recv()
            observations, _ = await remote.reset(options=mask(2, 1))
        assert observations[:, 0].tolist() == [1.0, 0.0]  # sub-env 0 kept its step
        with pytest.raises(aiovec.RemoteError, match=r"dtype=np\.bool_"):
            await remote.reset(options={"reset_mask": [1, 0]})
