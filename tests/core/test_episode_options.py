"""A task per episode: each sub-env's reset takes its own options (``reset(options=[...])``,
or ``{index: options}`` for some), and ``episode_options`` gives every new episode its own,
automatic resets included; each episode's options are named in the infos of its first and
last rows, and an episode lost to a restart is reported with its task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import aiovec
from tests.backends_matrix import ALL_BACKENDS, LOCAL_BACKENDS
from tests.envs import task_envs

pytestmark = pytest.mark.anyio


class Tasks:
    """``episode_options``: sub-env ``i``'s k-th task is ``100 i + k``; what was drawn."""

    def __init__(self, num_envs: int) -> None:
        self.drawn: list[list[int]] = [[] for _ in range(num_envs)]

    def __call__(self, env_index: int) -> dict[str, Any]:
        task = 100 * env_index + len(self.drawn[env_index])
        self.drawn[env_index].append(task)
        return {"task": task}


def _task(options: Any) -> int:
    return int(options["task"])


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_each_sub_env_resets_with_its_own_options(backend: str, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(task_envs(backend, 3), backend=backend) as envs:
        obs, infos = await envs.reset(seed=0, options=[{"task": 10}, None, {"task": 30}])
        assert obs[:, 0].tolist() == [10, -1, 30]
        assert infos["task"].tolist() == [10, -1, 30]  # what each sub-env's reset saw
        assert infos["_episode_options"].tolist() == [True, False, True]
        assert infos["episode_options"][0] == {"task": 10}
        assert infos["episode_options"][2] == {"task": 30}
        # Some sub-envs, each with its own: a dict from their indices.
        obs, infos = await envs.reset(options={1: {"task": 21}})
        assert obs[:, 0].tolist() == [10, 21, 30]
        assert infos["_episode_options"].tolist() == [False, True, False]
        # Gymnasium's one dict for all still goes to every sub-env, and names no episode.
        obs, infos = await envs.reset(options={"task": 5})
        assert obs[:, 0].tolist() == [5, 5, 5] and "episode_options" not in infos


async def test_options_that_mean_nothing_are_refused_before_anything_is_sent(
        no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(task_envs("inline", 2), backend="inline") as envs:
        with pytest.raises(ValueError, match="one per sub-env"):
            await envs.reset(options=[{"task": 1}])
        with pytest.raises(TypeError, match="sub-env 1 must be None or a dict"):
            await envs.reset(options=[{"task": 1}, "task 2"])
        with pytest.raises(ValueError, match="sub-env 5"):
            await envs.reset(options={5: {"task": 1}})
        with pytest.raises(TypeError, match="mixes sub-env indices"):
            await envs.reset(options={0: {"task": 1}, "reset_mask": np.ones(2, bool)})
        with pytest.raises(TypeError, match="episode_options must be a function"):
            envs.episode_options = {"task": 1}  # type: ignore[assignment]
        assert envs.statistics().resets == 0
        obs, _ = await envs.reset(options=[{"task": 1}, {"task": 2}])
        # A source that returns what reset cannot take: refused at the step that drew it.
        answers: list[Any] = ["not a dict"]
        envs.episode_options = lambda env_index: answers[0]
        with pytest.raises(TypeError, match="episode_options returned for sub-env 0"):
            await envs.step(np.zeros(2, dtype=np.int64))
        assert envs.statistics().steps == 0
        answers[0] = {"task": 3}
        obs, *_ = await envs.step(np.zeros(2, dtype=np.int64))
        assert obs.tolist() == [[1, 1], [2, 1]] and envs.statistics().steps == 1


def _play(mode: str, obs: Any, terminations: Any, infos: dict[str, Any],
          played: list[list[int]], ended: list[list[int]]) -> None:
    """Record the episodes one step's rows end and start, checking each is named."""
    for env_index in np.flatnonzero(terminations).tolist():
        final = infos["final_info"] if mode == "SameStep" else infos
        ended[env_index].append(_task(final["episode_options"][env_index]))
    starting = (terminations if mode == "SameStep" else obs[:, 1] == 0)
    for env_index in np.flatnonzero(starting).tolist():
        assert _task(infos["episode_options"][env_index]) == obs[env_index, 0]
        played[env_index].append(int(obs[env_index, 0]))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_every_episode_plays_the_task_drawn_for_it(backend: str, mode: str,
                                                        no_leaks: None) -> None:
    """Automatic resets take ``episode_options``'s tasks in order, none skipped or played
    twice; each is drawn at most one episode ahead."""
    tasks = Tasks(2)
    played: list[list[int]] = [[], []]
    ended: list[list[int]] = [[], []]
    async with aiovec.AsyncVectorEnv(task_envs(backend, 2), backend=backend,
                                     autoreset_mode=mode, episode_options=tasks) as envs:
        obs, infos = await envs.reset(seed=0)
        for env_index in range(2):
            assert _task(infos["episode_options"][env_index]) == obs[env_index, 0]
            played[env_index].append(int(obs[env_index, 0]))
        for _ in range(7):
            obs, _, terminations, _, infos = await envs.step(np.zeros(2, dtype=np.int64))
            _play(mode, obs, terminations, infos, played, ended)
    for env_index in range(2):
        count = len(played[env_index])
        assert count == (4 if mode == "SameStep" else 3)
        assert played[env_index] == [100 * env_index + k for k in range(count)]
        assert ended[env_index] == played[env_index][:len(ended[env_index])]
        assert count <= len(tasks.drawn[env_index]) <= count + 1


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_first_ready_episodes_play_their_tasks_in_order(backend: str,
                                                             no_leaks: None) -> None:
    """The same in a first-ready loop (same-step mode): sub-envs of episodes of different
    lengths end at different times, each taking its next task without stopping the
    others."""
    tasks = Tasks(3)
    played: list[list[int]] = [[], [], []]
    async with aiovec.AsyncVectorEnv(task_envs(backend, 3, length=3), backend=backend,
                                     autoreset_mode=AutoresetMode.SAME_STEP,
                                     episode_options=tasks) as envs:
        obs, _ = await envs.reset(seed=0)
        for env_index in range(3):
            played[env_index].append(int(obs[env_index, 0]))
        envs.send(np.zeros(3, dtype=np.int64))
        for turn in range(20):
            batch = await envs.recv(batch_size=1)
            env_index = int(batch.env_ids[0])
            if batch.terminations[0]:
                assert (_task(batch.infos["final_info"]["episode_options"][0])
                        == played[env_index][-1])
                assert _task(batch.infos["episode_options"][0]) == batch.observations[0, 0]
                played[env_index].append(int(batch.observations[0, 0]))
            if turn < 17:  # (20 results in all: nothing is owed at the end)
                envs.send(np.zeros(1, dtype=np.int64), batch.env_ids)
    for env_index in range(3):
        assert played[env_index] == [100 * env_index + k
                                     for k in range(len(played[env_index]))]
    # 20 results, 3 steps an episode: at least (20 - 3 * 2) / 3 episodes ended.
    assert sum(len(tasks_played) for tasks_played in played) >= 3 + 5


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_an_episode_lost_to_a_restart_is_reported_with_its_task(
        backend: str, mode: str, no_leaks: None) -> None:
    """Sub-env 0's tool crashes mid-episode: its restart row names the lost episode's task
    (so the trainer can run it again), and the sub-env goes on with the next one."""
    tasks = Tasks(2)
    workers = {"num_workers": 2} if backend == "process" else {}
    async with aiovec.AsyncVectorEnv(task_envs(backend, 2, length=3), backend=backend,
                                     autoreset_mode=mode, episode_options=tasks,
                                     restart=aiovec.RestartPolicy(backoff=0.0),
                                     **workers) as envs:
        await envs.reset(seed=0)
        await envs.step(np.zeros(2, dtype=np.int64))
        obs, rewards, _, truncations, infos = await envs.step(np.array([7, 0]))
        assert truncations.tolist() == [True, False] and rewards.tolist() == [0.0, 1.0]
        assert "the tool crashed in task 0" in infos["restart"][0]
        ending = infos["final_info"] if mode == "SameStep" else infos
        assert ending["episode_options"][0] == {"task": 0}
        assert aiovec.episode_outcomes(np.zeros(2, bool), truncations, infos)[0] == "lost"
        if mode == "NextStep":  # the last observation stands; the next step starts task 1
            obs, _, _, _, infos = await envs.step(np.zeros(2, dtype=np.int64))
        assert obs[0].tolist() == [1, 0]
        assert infos["episode_options"][0] == {"task": 1}
        assert obs[1].tolist() == [100, 2 if mode == "SameStep" else 3]
        assert envs.statistics().restarts == 1


@pytest.mark.parametrize("backend", ["inline", "process"])
async def test_a_masked_reset_in_a_first_ready_loop_keeps_the_others_stepping(
        backend: str, no_leaks: None) -> None:
    """Autoreset off: a sub-env whose episode ended is reset alone, with its next task,
    while another one's step is still owed."""
    factories: list[Callable[[], Any]] = task_envs(backend, 2, length=1)
    async with aiovec.AsyncVectorEnv(factories, backend=backend,
                                     autoreset_mode=AutoresetMode.DISABLED) as envs:
        await envs.reset(options=[{"task": 1}, {"task": 2}])
        envs.send(np.zeros(2, dtype=np.int64))
        batch = await envs.recv(batch_size=1)
        done = int(batch.env_ids[0])
        assert batch.terminations[0]
        assert batch.infos["episode_options"][0] == {"task": done + 1}
        obs, infos = await envs.reset(options={done: {"task": 10 + done}})
        assert obs[done].tolist() == [10 + done, 0]
        assert infos["episode_options"][done] == {"task": 10 + done}
        other = 1 - done
        batch = await envs.recv()
        assert batch.env_ids.tolist() == [other] and batch.terminations[0]


@pytest.mark.parametrize("backend", ["inline", "async", "process"])
async def test_a_masked_reset_draws_from_the_source(backend: str, no_leaks: None) -> None:
    """Gymnasium's ``reset_mask`` (no options of their own): the sub-envs it resets take
    their next tasks from ``episode_options``; the others keep theirs."""
    tasks = Tasks(2)
    async with aiovec.AsyncVectorEnv(task_envs(backend, 2), backend=backend,
                                     episode_options=tasks) as envs:
        obs, _ = await envs.reset(seed=0)
        assert obs[:, 0].tolist() == [0, 100]
        obs, infos = await envs.reset(options={"reset_mask": np.array([False, True])})
        assert obs[:, 0].tolist() == [0, 101]
        assert infos["_episode_options"].tolist() == [False, True]


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_next_step_mode_in_a_first_ready_loop_plays_the_tasks_in_order(
        backend: str, no_leaks: None) -> None:
    tasks = Tasks(2)
    played: list[list[int]] = [[0], [100]]
    async with aiovec.AsyncVectorEnv(task_envs(backend, 2), backend=backend,
                                     episode_options=tasks, max_in_flight=1) as envs:
        await envs.reset(seed=0)
        envs.send(np.zeros(2, dtype=np.int64))  # one steps, one waits under the cap
        for turn in range(16):
            batch = await envs.recv(batch_size=1)
            env_index = int(batch.env_ids[0])
            if batch.observations[0, 1] == 0:  # the reset step: an episode begins
                assert _task(batch.infos["episode_options"][0]) == batch.observations[0, 0]
                played[env_index].append(int(batch.observations[0, 0]))
            if turn < 14:
                envs.send(np.zeros(1, dtype=np.int64), batch.env_ids)
    for env_index in range(2):
        assert played[env_index] == [100 * env_index + k
                                     for k in range(len(played[env_index]))]
        assert len(played[env_index]) >= 2


async def test_options_already_drawn_are_played_after_the_source_is_removed(
        no_leaks: None) -> None:
    tasks = Tasks(1)
    async with aiovec.AsyncVectorEnv(task_envs("thread", 1), backend="thread",
                                     autoreset_mode=AutoresetMode.SAME_STEP,
                                     episode_options=tasks) as envs:
        await envs.reset(seed=0)  # task 0
        await envs.step(np.zeros(1, dtype=np.int64))  # task 1 drawn, waiting
        envs.episode_options = None
        obs, _, terminations, _, infos = await envs.step(np.zeros(1, dtype=np.int64))
        assert terminations[0] and obs[0].tolist() == [1, 0]
        assert infos["episode_options"][0] == {"task": 1}
        await envs.step(np.zeros(1, dtype=np.int64))
        obs, _, terminations, _, infos = await envs.step(np.zeros(1, dtype=np.int64))
        assert terminations[0] and obs[0].tolist() == [-1, 0]  # none drawn: no options
        assert "episode_options" not in infos
        assert tasks.drawn == [[0, 1]]


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_a_neighbour_restarted_with_a_crashed_sub_env_keeps_its_tasks(
        mode: str, no_leaks: None) -> None:
    """Process backend, both sub-envs in one worker: sub-env 0 takes the worker down, so
    sub-env 1 loses its episode too; each is reported with its task, and each goes on with
    its next one."""
    tasks = Tasks(2)
    async with aiovec.AsyncVectorEnv(task_envs("process", 2, length=3), backend="process",
                                     num_workers=1, autoreset_mode=mode,
                                     episode_options=tasks,
                                     restart=aiovec.RestartPolicy(backoff=0.0)) as envs:
        await envs.reset(seed=0)
        await envs.step(np.zeros(2, dtype=np.int64))
        obs, _, _, truncations, infos = await envs.step(np.array([8, 0]))
        assert truncations.tolist() == [True, True]
        ending = infos["final_info"] if mode == "SameStep" else infos
        assert [ending["episode_options"][i] for i in range(2)] == [{"task": 0}, {"task": 100}]
        if mode == "NextStep":
            obs, _, _, _, infos = await envs.step(np.zeros(2, dtype=np.int64))
        assert obs.tolist() == [[1, 0], [101, 0]]
        assert [infos["episode_options"][i] for i in range(2)] == [{"task": 1}, {"task": 101}]
        for _ in range(3):  # each plays its episode to the end: the next tasks follow
            obs, _, terminations, _, infos = await envs.step(np.zeros(2, dtype=np.int64))
        if mode == "NextStep":
            assert terminations.all()
            obs, *_ = await envs.step(np.zeros(2, dtype=np.int64))
        assert obs.tolist() == [[2, 0], [102, 0]]
