"""``recv(min_size=, wait=)`` on a remote session (a real uvicorn on 127.0.0.1): the bounds
travel to the server's vector env, which applies them; bad ones are refused, by the client
before anything is sent and by the server for a client that did not check."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import numpy as np
import pytest

import aiovec
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from aiovec.testing import release_hangs
from tests.serve.conftest import Server
from tests.serve.test_http import create, refused

pytestmark = pytest.mark.anyio

#: The wait asked of the server; short, yet far from none.
WAIT = 0.5


@pytest.mark.parametrize("encoding", ["binary", "json"])
async def test_the_server_returns_what_is_ready_once_the_wait_passed(serve: Any,
                                                                     encoding: str) -> None:
    """Sub-env 1 hangs (by its action): ``min_size=1`` gets sub-env 0 once ``wait``
    passed; sub-env 1 then times out on the server, as its send said."""
    server: Server = serve("open")
    try:
        async with AsyncRemoteVectorEnv(server.url, "ActionHanging-v0", 2,
                                        encoding=encoding) as remote:  # type: ignore[arg-type]
            await remote.reset(seed=0)
            remote.send(np.array([0.0]), [0])
            remote.send(np.array([666.0]), [1], timeout=3.0)
            started = time.monotonic()
            with anyio.fail_after(30):
                batch = await remote.recv(batch_size=2, min_size=1, wait=WAIT)
            assert time.monotonic() - started >= WAIT
            assert batch.env_ids.tolist() == [0]
            with anyio.fail_after(30), pytest.raises(aiovec.EnvTimeoutError):
                await remote.recv(batch_size=2, wait=0)
            for bounds, message in (({"min_size": 3}, "min_size must be at most num_envs"),
                                    ({"batch_size": 1, "min_size": 2},
                                     "min_size must be at most batch_size=1"),
                                    ({"wait": -1.0}, "wait must be a number of seconds")):
                with pytest.raises(ValueError, match=message):
                    await remote.recv(**bounds)
    finally:
        release_hangs()


def test_the_sync_client_passes_the_bounds(serve: Any) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "CartPole-v1", 3)
    try:
        remote.reset(seed=0)
        remote.send(np.ones(3, dtype=np.int64))
        received: list[int] = []
        while len(received) < 3:
            batch = remote.recv(batch_size=3, min_size=1, wait=0)
            received += batch.env_ids.tolist()
        assert sorted(received) == [0, 1, 2]
        with pytest.raises(ValueError, match="min_size must be a positive int"):
            remote.recv(min_size=0)
    finally:
        remote.close()


async def test_the_server_refuses_bad_bounds(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
        await client.post(f"/sessions/{session}/reset", json={"seed": 3})
        sent = await client.post(f"/sessions/{session}/send", json={"actions": [1, 0]})
        assert sent.status_code == 200, sent.text
        for bounds in ({"min_size": "1"}, {"wait": "soon"}, {"min_size": 0},
                       {"batch_size": 1, "min_size": 2}, {"wait": -1}):
            refused(await client.post(f"/sessions/{session}/recv", json=bounds), 422,
                    "invalid")
        batch = (await client.post(f"/sessions/{session}/recv",
                                   json={"min_size": 2, "wait": 0})).json()
        assert sorted(batch["env_ids"]) == [0, 1]  # nothing was taken by a refused one
        await client.delete(f"/sessions/{session}")
