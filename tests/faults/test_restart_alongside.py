"""A restart in ``recv`` while another call runs: it waits for that call to end, so two
restarts never remake one worker at once, and the call's claim holds throughout."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest

import aiovec
from tests.core.held import HOLD_LIMIT, POLL

pytestmark = pytest.mark.anyio


class DyingEnv(gym.Env[Any, Any]):
    """Action 1 ends its worker process once the test touches the ``go`` gate;
    a reset with ``options={"hold": True}`` waits while the ``hold-reset`` gate exists."""

    observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, directory: str, index: int) -> None:
        self.directory = Path(directory)
        self.index = index

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if options and options.get("hold"):
            (self.directory / f"reset-held-{self.index}").touch()
            self._wait(lambda: not (self.directory / "hold-reset").exists())
        return np.zeros(1), {}

    def step(self, action: Any) -> Any:
        if action == 1:
            (self.directory / f"dying-{self.index}").touch()
            self._wait(lambda: (self.directory / "go").exists())
            os._exit(1)  # the worker dies (as if OOM-killed) with every sub-env it hosts
        return np.ones(1), 1.0, False, False, {}

    @staticmethod
    def _wait(condition: Any) -> None:
        deadline = time.monotonic() + HOLD_LIMIT
        while not condition() and time.monotonic() < deadline:
            time.sleep(POLL)


async def _until(condition: Any) -> None:
    with anyio.fail_after(30):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(POLL)  # a marker a worker process writes: no event to await


async def test_a_recv_restart_waits_for_a_masked_reset_on_the_same_worker(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    """One worker hosts sub-envs 0 and 1. It dies while 0 steps and 1's masked reset waits
    behind that step. The reset restarts 1 (remaking the worker); the ``recv`` owed 0's
    failure waits for the reset to end before it restarts 0, instead of remaking the same
    dead worker at once (which left a second worker process running, never closed). While
    the restarted reset runs, its claim holds: another call is refused."""
    factories = [functools.partial(DyingEnv, str(tmp_path), index) for index in range(2)]
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=1,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        envs.send(np.array([1]), [0])
        await _until(lambda: (tmp_path / "dying-0").exists())
        (tmp_path / "hold-reset").touch()
        received: list[Any] = []
        reset: list[Any] = []

        async def receive(*, task_status: Any) -> None:
            task_status.started()
            received.append(await envs.recv())

        async def reset_one(*, task_status: Any) -> None:
            task_status.started()
            reset.append(await envs.reset(options={"reset_mask": np.array([False, True]),
                                                   "hold": True}))

        async with anyio.create_task_group() as group:
            await group.start(reset_one)
            await group.start(receive)
            (tmp_path / "go").touch()
            await _until(lambda: (tmp_path / "reset-held-1").exists())
            with pytest.raises(aiovec.BusyError, match="reset"):
                await envs.call("reset")
            assert "reset in flight" in repr(envs)
            (tmp_path / "hold-reset").unlink()
        (batch,) = received
        assert batch.env_ids.tolist() == [0] and batch.truncations.tolist() == [True]
        assert "died" in batch.infos["restart"][0]
        _obs, infos = reset[0]
        assert "died" in infos["restart"][1]
        assert envs.statistics().restarts == 2
        envs.send(np.zeros(2, dtype=np.int64))
        after = await envs.recv()
        # 0 was cut short (truncated): its next step is the autoreset one, rewarded 0.
        assert dict(zip(after.env_ids.tolist(), after.rewards.tolist())) == {0: 0.0, 1: 1.0}
