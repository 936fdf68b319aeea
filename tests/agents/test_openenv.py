"""``aiovec.openenv.OpenEnvEnv`` against a real OpenEnv server (``openenv_server.py``, started
by the fixture): each episode's task reaches the server's ``reset``, its reward comes back, a
server error names its sub-env, a cut call or a killed worker costs a session and leaks none.

OpenEnv's client runs on asyncio only: on trio the async backend refuses it by name, and the
process backend (whose workers run asyncio) hosts it.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from typing import Any

import anyio
import pytest
import sniffio
from gymnasium.vector import AutoresetMode

import aiovec
from aiovec.openenv import OpenEnvEnv
from tests.agents.conftest import OpenEnvServer
from tests.leaks import wait_until, worker_processes_of

pytestmark = pytest.mark.anyio

BACKENDS = ["async", "process"]


class Tasks:
    """``episode_options``: sub-env ``i``'s k-th task is ``100 i + k``."""

    def __init__(self) -> None:
        self.drawn: dict[int, int] = {}

    def __call__(self, env_index: int) -> dict[str, Any]:
        count = self.drawn[env_index] = self.drawn.get(env_index, -1) + 1
        return {"task": 100 * env_index + count}


def openenv_envs(server: OpenEnvServer, num_envs: int) -> list[Any]:
    return [functools.partial(OpenEnvEnv, server.url)] * num_envs


def one_worker_each(backend: str) -> dict[str, Any]:
    """A worker per sub-env on the process backend: a restart is the failed one's only."""
    return {"num_workers": 2} if backend == "process" else {}


def on_trio_async(backend: str) -> bool:
    return backend == "async" and sniffio.current_async_library() == "trio"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
async def test_each_episode_plays_its_task_for_the_servers_reward(
        backend: str, mode: AutoresetMode, openenv_server: OpenEnvServer) -> None:
    if on_trio_async(backend):
        with pytest.raises(aiovec.SubEnvErrorGroup, match="OpenEnv's client runs on asyncio"):
            async with aiovec.AsyncVectorEnv(openenv_envs(openenv_server, 2), backend=backend,
                                             episode_options=Tasks()) as envs:
                await envs.reset()
        return
    async with aiovec.AsyncVectorEnv(openenv_envs(openenv_server, 3), backend=backend,
                                     autoreset_mode=mode, episode_options=Tasks(),
                                     timeout=60) as envs:
        obs, infos = await envs.reset(seed=1)
        assert [row["task"] for row in obs] == [0, 100, 200]
        wrong = [{"guess": -1}] * 3
        obs, rewards, terminations, _, infos = await envs.step(wrong)
        assert rewards.tolist() == [0.0] * 3 and not terminations.any()
        played: list[tuple[int, float]] = []
        for _ in range(4):  # right guesses end episodes: each next one plays the next task
            if mode is AutoresetMode.NEXT_STEP and terminations.any():
                obs, rewards, terminations, _, infos = await envs.step(wrong)  # the resets
                assert [row["task"] % 100 for row in obs] == [len(played) // 3] * 3
            tasks = [row["task"] for row in obs]
            obs, rewards, terminations, _, infos = await envs.step(
                [{"guess": task} for task in tasks])
            assert terminations.all() and rewards.tolist() == [1.0] * 3
            ended = (infos["final_info"] if mode is AutoresetMode.SAME_STEP else infos)
            assert [options["task"] for options in ended["episode_options"]] == tasks
            played += [(task, reward) for task, reward in zip(tasks, rewards.tolist())]
        assert sorted(task for task, _ in played) == [
            100 * env + episode for env in range(3) for episode in range(4)]
        assert openenv_server.sessions() >= 3
    wait_until(lambda: openenv_server.sessions() == 0, 60, "the sessions to end")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_server_error_names_its_sub_env_and_a_restart_opens_a_new_session(
        backend: str, openenv_server: OpenEnvServer) -> None:
    if on_trio_async(backend):
        return  # (refused by name: the test above)
    async with aiovec.AsyncVectorEnv(openenv_envs(openenv_server, 2), backend=backend,
                                     episode_options=Tasks(), timeout=60) as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step([{"guess": -1}, {"guess": -7}])
        (error,) = caught.value.exceptions
        assert isinstance(error, aiovec.SubEnvError) and error.env_id == 1
        assert "the tool crashed in task 100" in str(error.__cause__)
    async with aiovec.AsyncVectorEnv(openenv_envs(openenv_server, 2), backend=backend,
                                     episode_options=Tasks(), timeout=60, restart=True,
                                     **one_worker_each(backend)) as envs:
        await envs.reset(seed=0)
        _, _, _, truncations, infos = await envs.step([{"guess": -1}, {"guess": -7}])
        assert infos["_restart"].tolist() == [False, True] and truncations.tolist() == [
            False, True]
        assert infos["episode_options"][1] == {"task": 100}  # the lost episode's task
        obs, *_ = await envs.step([{"guess": -1}, {"guess": -1}])  # 1 resets (next-step mode)
        assert obs[1]["task"] == 101  # the restarted sub-env plays its next task
    wait_until(lambda: openenv_server.sessions() == 0, 60, "the sessions to end")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_step_past_its_deadline_costs_its_session_and_leaks_none(
        backend: str, openenv_server: OpenEnvServer) -> None:
    """Guess -8 takes 3 s on the server, the deadline is 1 s: the sub-env is restarted on a
    new session; the old one ends once the server's step returns and it sees the connection
    gone."""
    if on_trio_async(backend):
        return
    async with aiovec.AsyncVectorEnv(openenv_envs(openenv_server, 2), backend=backend,
                                     episode_options=Tasks(), restart=True,
                                     **one_worker_each(backend)) as envs:
        await envs.reset(seed=0)
        _, _, _, _, infos = await envs.step([{"guess": -1}, {"guess": -8}], timeout=1.0)
        assert infos["_restart"].tolist() == [False, True]
        # Sub-env 0 guesses right; the restarted 1 resets (next-step mode) on a new session.
        obs, rewards, *_ = await envs.step([{"guess": 0}, {"guess": -1}], timeout=60)
        assert rewards.tolist() == [1.0, 0.0] and obs[1]["task"] == 101
        _, rewards, *_ = await envs.step([{"guess": -1}, {"guess": 101}], timeout=60)
        assert rewards.tolist() == [0.0, 1.0]
        await anyio.to_thread.run_sync(wait_until, lambda: openenv_server.sessions() == 2, 60,
                                       "the cut session to end")
    wait_until(lambda: openenv_server.sessions() == 0, 60, "the sessions to end")


async def test_a_killed_worker_costs_its_sessions_and_leaks_none(
        openenv_server: OpenEnvServer) -> None:
    """A worker SIGKILLed between steps: the server ends its sessions (their connection
    dropped), the restart opens new ones, the count is back to one per sub-env."""
    async with aiovec.AsyncVectorEnv(openenv_envs(openenv_server, 4), backend="process",
                                     num_workers=2, episode_options=Tasks(), restart=True,
                                     timeout=60) as envs:
        await envs.reset(seed=0)
        assert openenv_server.sessions() == 4
        workers = sorted(worker_processes_of(os.getpid()))
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        started = time.monotonic()
        while True:  # the death is seen at the next step (or the one after: a race)
            _, _, _, _, infos = await envs.step([{"guess": -1}] * 4)
            if "_restart" in infos:
                break
            assert time.monotonic() - started < 60
        assert infos["_restart"].sum() == 2
        # The server ended the dead worker's sessions; the remade sub-envs open theirs as
        # they reset (their next step, in next-step mode).
        await anyio.to_thread.run_sync(wait_until, lambda: openenv_server.sessions() == 2, 60,
                                       "the dead worker's sessions to end")
        await envs.step([{"guess": -1}] * 4)
        assert openenv_server.sessions() == 4
    wait_until(lambda: openenv_server.sessions() == 0, 60, "the sessions to end")
