"""A task per episode through a served session: each sub-env's own reset options (a list,
or a dict from sub-env indices) go over the wire and come back named in the infos, as
locally (``tests/core/test_episode_options.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("encoding", ["binary", "json"])
async def test_each_sub_env_resets_with_its_own_options_remotely(serve: Any,
                                                                 encoding: str) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Tasks-v0", 3,
                                    encoding=encoding) as remote:  # type: ignore[arg-type]
        obs, infos = await remote.reset(seed=0, options=[{"task": 1}, None, {"task": 3}])
        assert obs[:, 0].tolist() == [1, -1, 3]
        assert infos["_episode_options"].tolist() == [True, False, True]
        assert infos["episode_options"][0] == {"task": 1}
        obs, infos = await remote.reset(options={1: {"task": 22}})
        assert obs[:, 0].tolist() == [1, 22, 3]
        assert infos["_episode_options"].tolist() == [False, True, False]
        with pytest.raises(ValueError, match="one per sub-env"):  # refused here, unsent
            await remote.reset(options=[{"task": 1}])
        obs, *_ = await remote.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[1, 1], [22, 1], [3, 1]]  # nothing else was reset


def test_the_sync_client_takes_each_sub_envs_options(serve: Any) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "Tasks-v0", 2)
    try:
        obs, infos = remote.reset(options=[{"task": 4}, {"task": 5}])
        assert obs[:, 0].tolist() == [4, 5]
        assert infos["episode_options"][1] == {"task": 5}
    finally:
        remote.close()
