"""A session's first-ready settings seen by the remote client (a real uvicorn on 127.0.0.1):
the served ``batch_size`` is the default ``recv``'s bounds are checked against, before
anything is sent, and under an in-flight cap (the served one, or one the client sets)
queued steps, whose deadlines start when the server dispatches them, are waited for."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import numpy as np
import pytest

import aiovec
from aiovec._remote._deadlines import latest_answer
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from tests.serve.apps import SleepyEnv
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio

#: Sub-envs stepped one at a time under the cap, each sleeping ``NAP`` within its ``TIMEOUT``:
#: the server needs ``NUM_ENVS * NAP`` seconds in all, longer than ``TIMEOUT`` plus the
#: client's ``TRANSPORT_GRACE`` (2 s), yet each step is well within its deadline.
NUM_ENVS, NAP, TIMEOUT = 8, 0.5, 1.0


@pytest.mark.parametrize("encoding", ["binary", "json"])
async def test_the_served_batch_size_bounds_recv_before_anything_is_sent(
        serve: Any, encoding: str) -> None:
    """``min_size`` above the served ``batch_size`` is refused by the client, in the local
    env's words, before the queued send goes out; the default batch is the served one."""
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([SleepyEnv] * 4, backend="async", batch_size=2)
    async with local, AsyncRemoteVectorEnv(server.url, "CappedSleepy-v0", 4,
                                           encoding=encoding) as remote:  # type: ignore[arg-type]
        assert (remote.batch_size, remote.max_in_flight) == (2, 1)
        await local.reset(seed=0)
        await remote.reset(seed=0)
        for envs in (local, remote):
            envs.send(np.zeros(3), [0, 1, 2])
        message = "min_size must be at most batch_size=2, got 3"
        with pytest.raises(ValueError, match=message) as locally:
            await local.recv(min_size=3)
        with pytest.raises(ValueError, match=message) as remotely:
            await remote.recv(min_size=3)
        assert str(remotely.value) == str(locally.value)
        with pytest.raises(ValueError, match="batch_size=2"):
            async for _ in remote.batches(min_size=3):
                pass
        assert len(remote._queued) == 1  # the send is still waiting to go out
        with anyio.fail_after(30):
            assert len((await remote.recv()).env_ids) == 2
            assert len((await remote.recv()).env_ids) == 1


@pytest.mark.parametrize(("env_id", "cap"), [("CappedSleepy-v0", None), ("Sleepy-v0", 1)],
                         ids=["served-cap", "client-cap"])
async def test_recv_waits_for_steps_queued_under_the_cap(serve: Any, env_id: str,
                                                         cap: int | None) -> None:
    """One step at a time: the last of eight goes out after the others, so the whole batch
    takes about ``NUM_ENVS * NAP`` seconds, past ``TIMEOUT + TRANSPORT_GRACE`` from the send,
    and comes whole, no sub-env late on the server."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, env_id, NUM_ENVS) as remote:
        if cap is not None:
            remote.max_in_flight = cap
        assert remote.max_in_flight == 1
        await remote.reset(seed=0)
        started = time.monotonic()
        remote.send(np.full(NUM_ENVS, NAP), timeout=TIMEOUT)
        with anyio.fail_after(60):
            batch = await remote.recv(batch_size=NUM_ENVS)
        elapsed = time.monotonic() - started
        assert sorted(batch.env_ids.tolist()) == list(range(NUM_ENVS))
        assert batch.rewards.tolist() == [NAP] * NUM_ENVS
        assert elapsed >= NUM_ENVS * NAP * 0.9  # (the cap held them back: one at a time)
        async with httpx.AsyncClient(base_url=server.url) as client:
            session = (await client.get(f"/sessions/{remote.session_id}")).json()
        assert session["max_in_flight"] == 1
        assert session["batch_size"] == (2 if cap is None else NUM_ENVS)
        remote.max_in_flight = None  # lifted: the next call takes it along
        remote.send(np.full(NUM_ENVS, NAP), timeout=TIMEOUT)
        started = time.monotonic()
        with anyio.fail_after(60):
            await remote.recv(batch_size=NUM_ENVS)
        assert time.monotonic() - started < NUM_ENVS * NAP * 0.9
        with pytest.raises(ValueError, match="max_in_flight must be a positive int"):
            remote.max_in_flight = 0


def test_the_sync_client_sets_the_cap(serve: Any) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "CappedSleepy-v0", 3)
    try:
        assert (remote.batch_size, remote.max_in_flight) == (2, 1)
        remote.max_in_flight = 3  # sent at once
        assert remote.max_in_flight == 3
        remote.reset(seed=0)  # answered after it: the server took the cap before
        session = httpx.get(f"{server.url}/sessions/{remote.async_env.session_id}").json()
        assert session["max_in_flight"] == 3
    finally:
        remote.close()


def test_the_wait_for_an_answer_covers_what_the_cap_can_delay() -> None:
    """Without a cap, the latest deadline; with one, every slot busy to its deadline, the
    queue in order; none for a sub-env without a deadline."""
    now = 100.0
    dues = [(101.0, 1.0), (103.0, 3.0), (102.0, 2.0)]
    assert latest_answer(dues, None, now) == 3.0
    assert latest_answer(dues, 1, now) == 6.0 + 3.0
    assert latest_answer(dues, 2, now) == 3.0 + 3.0
    assert latest_answer([(99.0, 1.0)], None, now) == 0.0  # past: the server answers now
    assert latest_answer([*dues, None], 2, now) is None
    assert latest_answer([], 2, now) == 0.0
