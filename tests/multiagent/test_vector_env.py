"""AsyncParallelVectorEnv: the per-agent API, bad input, and the engine's failure semantics
(errors naming the sub-env, timeouts, cancellation, restarts) seen through dicts of agents."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from pettingzoo.utils.conversions import parallel_to_aec

import aiovec
from tests.backends_matrix import IN_AND_OUT_OF_PROCESS, LOCAL_SYNC_BACKENDS
from tests.multiagent.envs import Arena

pytestmark = pytest.mark.anyio

SCOUTS = ("scout_0", "scout_1")


class Renamed(Arena):
    """Arena whose agents go by other names."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b", "c"]


def scout_actions(num_envs: int, value: int = 1) -> dict[str, Any]:
    return {agent: np.full(num_envs, value, dtype=np.int64) for agent in SCOUTS}


async def test_agents_and_spaces_are_described() -> None:
    envs = aiovec.AsyncParallelVectorEnv([Arena] * 3, backend="inline")
    with pytest.raises(RuntimeError, match="known once the vector env has started"):
        _ = envs.possible_agents
    async with envs:
        assert envs.possible_agents == ("scout_0", "scout_1", "late")
        assert (envs.num_envs, envs.num_agents, envs.total_agents) == (3, 3, 9)
        assert envs.single_observation_space("late") == spaces.Box(-1000, 1000, (2,), np.int64)
        assert envs.single_action_space("scout_0") == spaces.Discrete(3)
        assert envs.observation_space("scout_1").shape == (3, 3)
        assert envs.action_space("scout_0") == spaces.MultiDiscrete([3, 3, 3])
        with pytest.raises(KeyError, match="'nobody' is not one of possible_agents"):
            envs.single_action_space("nobody")
        assert envs.metadata["name"] == "arena_v0"
        assert repr(envs) == "<AsyncParallelVectorEnv 3 envs x 3 agents, inline backend>"
        obs, infos = await envs.reset(seed=3)
        assert list(obs) == list(envs.possible_agents)
        assert obs["scout_0"].shape == (3, 3) and obs["scout_0"].dtype == np.float32
        # "late" has not spawned: explicit placeholders, marked absent.
        assert infos["active"]["late"].tolist() == [False] * 3
        assert obs["late"].tolist() == [[0, 0]] * 3
        states = await envs.call("state")  # reaches the ParallelEnv itself
        assert len(states) == 3 and states[0].shape == (3,)
        await envs.set_attr("max_steps", 2)
        assert await envs.get_attr("max_steps") == (2, 2, 2)


async def test_spawned_and_dead_agents_never_show_stale_data() -> None:
    async with aiovec.AsyncParallelVectorEnv(
            [functools.partial(Arena, max_steps=50, health=4)] * 2, backend="thread") as envs:
        await envs.reset(seed=0)
        seen_dead = False
        for _ in range(40):
            actions = {**scout_actions(2, 2), "late": np.full((2, 2), 0.5, dtype=np.float32)}
            obs, rewards, terminations, truncations, infos = await envs.step(actions)
            for agent in envs.possible_agents:
                absent = ~infos["active"][agent]
                assert not obs[agent][absent].any(), f"{agent}: stale observation"
                assert not rewards[agent][absent].any()
                assert not (terminations[agent] | truncations[agent])[absent].any()
                seen_dead |= bool(absent.any()) and agent != "late"
            # The step counter each present agent echoes is the same: nothing is left over.
            counters = obs["scout_0"][:, 2]
            present = infos["active"]["late"]
            assert (obs["late"][present, 0] == counters[present]).all()
        assert seen_dead


async def test_bad_actions_are_refused_and_nothing_steps() -> None:
    async with aiovec.AsyncParallelVectorEnv([Arena] * 2, backend="inline") as envs:
        await envs.reset(seed=0)
        good = scout_actions(2)
        with pytest.raises(ValueError, match=r"actions\['scout_1'\]: expected shape \(2,\)"):
            await envs.step({**good, "scout_1": np.zeros(3, dtype=np.int64)})
        with pytest.raises(ValueError, match=r"actions\['scout_0'\]: expected dtype int64"):
            await envs.step({**good, "scout_0": np.zeros(2, dtype=np.float32)})
        with pytest.raises(ValueError, match=r"actions for \['ghost'\], not in possible_agents"):
            await envs.step({**good, "ghost": np.zeros(2)})
        with pytest.raises(ValueError, match=r"no actions for 'scout_1', which acts in "
                                             r"sub-envs \[0, 1\]"):
            await envs.step({"scout_0": good["scout_0"]})
        with pytest.raises(TypeError, match="actions must be a dict of agents"):
            await envs.step(np.zeros(2))  # type: ignore[arg-type]
        assert await envs.get_attr("steps_taken") == (0, 0)
        # "late" acts nowhere yet: it may be left out.
        obs, *_ = await envs.step(good)
        assert obs["scout_0"][:, 2].tolist() == [1, 1]


@pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)
async def test_a_failing_sub_env_is_named_with_its_traceback(backend: str, no_leaks: None) -> None:
    env_fns = [Arena, functools.partial(Arena, fail_at=2), Arena]
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend=backend) as envs:
        await envs.reset(seed=0)
        await envs.step(scout_actions(3))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(scout_actions(3, 2))
        group = caught.value
        assert isinstance(group, RuntimeError) and group.env_ids == (1,)
        error = group.exceptions[0]
        assert isinstance(error, aiovec.SubEnvError) and error.phase == "step"
        assert "arena failed in step 2" in error.remote_traceback
        # The healthy sub-envs' results, in the multi-agent layout.
        obs, rewards, terminations, truncations, infos = group.partial_result
        assert obs["scout_0"][[0, 2], 1].tolist() == [2.0, 2.0]
        assert rewards["scout_1"][[0, 2]].tolist() == [-1.5, -1.5]
        # The failed one keeps its last observation, with reward 0 and no episode end (its
        # packed result is last step's: its rewards of -0.5 must not count twice).
        assert obs["scout_0"][1, 1:].tolist() == [1.0, 1.0]
        for agent in SCOUTS:
            assert rewards[agent][1] == 0.0
            assert not terminations[agent][1] and not truncations[agent][1]
        assert infos["active"]["scout_0"].tolist() == [True, True, True]
        with pytest.raises(aiovec.ResetNeededError):
            await envs.step(scout_actions(3))
        await envs.reset(options={"reset_mask": np.array([False, True, False])})
        obs, *_ = await envs.step(scout_actions(3))
        assert obs["scout_0"][:, 2].tolist() == [3, 1, 3]


async def test_a_dead_worker_is_restarted_and_its_agents_truncated(no_leaks: None) -> None:
    env_fns = [Arena, functools.partial(Arena, exit_at=3)]
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend="process", num_workers=2,
                                             restart=True) as envs:
        await envs.reset(seed=0)
        for _ in range(2):
            await envs.step(scout_actions(2))
        actions = {**scout_actions(2), "late": np.zeros((2, 2), dtype=np.float32)}
        obs, rewards, terminations, truncations, infos = await envs.step(actions)
        assert infos["_restart"].tolist() == [False, True]
        assert "died" in infos["restart"][1]
        for agent in SCOUTS:
            assert truncations[agent].tolist() == [False, True]
            assert rewards[agent][1] == 0.0 and not terminations[agent][1]
        assert obs["scout_0"][1, 2] == 2  # the last observation stands
        obs, _, _, _, infos = await envs.step(actions)  # sub-env 1 starts a new episode
        assert obs["scout_0"][:, 2].tolist() == [4, 0]
        assert infos["active"]["late"].tolist() == [True, False]
        assert envs.statistics().restarts == 1


def _seed_where_scout_0_dies_first(health: int) -> tuple[int, int]:
    """A seed for which, in a lone ``Arena(health=health)`` stepped with scout_0 pushing
    hard (2) and scout_1 resting (0), scout_0 dies at some step while scout_1 lives on past
    the next one: ``(seed, that step)``."""
    for seed in range(200):
        arena = Arena(health=health)
        arena.reset(seed=seed)
        for step in range(1, 10):
            _, _, terminations, _, _ = arena.step({"scout_0": 2, "scout_1": 0})
            if terminations.get("scout_0") and not terminations.get("scout_1"):
                if "scout_1" in arena.agents:
                    arena.step({"scout_1": 0})
                    if "scout_1" in arena.agents:
                        return seed, step
                break
            if terminations.get("scout_0") or terminations.get("scout_1"):
                break
    raise AssertionError("no such seed")


@pytest.mark.parametrize("backend", IN_AND_OUT_OF_PROCESS)
async def test_a_restart_truncates_only_the_agents_still_in_the_episode(
        backend: str, no_leaks: None) -> None:
    """scout_0 died a step before its sub-env failed and was restarted: only scout_1, still
    in the episode, reads as present and truncated (scout_0 had read present and truncated
    again)."""
    seed, death = _seed_where_scout_0_dies_first(health=4)
    env_fns = [functools.partial(Arena, health=4, fail_at=death + 1)]
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend=backend, restart=True) as envs:
        await envs.reset(seed=seed)
        actions = {"scout_0": np.array([2]), "scout_1": np.array([0])}
        for _ in range(death):
            _, _, terminations, _, infos = await envs.step(actions)
        assert terminations["scout_0"].tolist() == [True]  # died here
        _, rewards, terminations, truncations, infos = await envs.step({"scout_1": np.array([0])})
        assert infos["_restart"].tolist() == [True]
        assert truncations["scout_1"].tolist() == [True] and rewards["scout_1"][0] == 0.0
        assert truncations["scout_0"].tolist() == [False]
        assert terminations["scout_0"].tolist() == [False] and rewards["scout_0"][0] == 0.0
        assert infos["active"]["scout_0"].tolist() == [False]
        assert infos["active"]["scout_1"].tolist() == [True]


async def test_spaces_are_the_same_objects_and_seed_their_samples() -> None:
    """PettingZoo's API asks ``action_space(agent) is action_space(agent)``: seeding it then
    fixes its samples (a new space per call had sampled the same batch every time)."""
    async with aiovec.AsyncParallelVectorEnv([Arena] * 4, backend="inline") as envs:
        for agent in envs.possible_agents:
            assert envs.action_space(agent) is envs.action_space(agent)
            assert envs.observation_space(agent) is envs.observation_space(agent)
        space = envs.action_space("scout_0")
        space.seed(7)
        first = [space.sample().tolist() for _ in range(5)]
        assert len({tuple(sample) for sample in first}) > 1  # successive samples differ
        space.seed(7)
        assert [space.sample().tolist() for _ in range(5)] == first


async def test_a_hung_sub_env_times_out_and_is_named(no_leaks: None) -> None:
    env_fns = [Arena, functools.partial(Arena, hang_at=2)]
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend="process", num_workers=2,
                                             timeout=1.0) as envs:
        await envs.reset(seed=0)
        _, rewards, *_ = await envs.step(scout_actions(2))
        assert rewards["scout_0"].tolist() == [-0.5, -0.5]
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            await envs.step(scout_actions(2))
        assert caught.value.env_ids == (1,)
        obs, rewards, terminations, truncations, _ = caught.value.partial_result
        assert obs["scout_0"][0, 2] == 2  # the punctual sub-env's step is kept
        for agent in SCOUTS:  # the late one: its last observation, reward 0 (not last
            # step's -0.5 again), no episode end
            assert obs[agent][1, 2] == 1 and rewards[agent][1] == 0.0
            assert not terminations[agent][1] and not truncations[agent][1]


async def test_a_cancelled_step_leaves_the_env_usable_after_reset(no_leaks: None) -> None:
    env_fns = [Arena, functools.partial(Arena, hang_at=2)]
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend="process", num_workers=2,
                                             timeout=30.0, close_timeout=1.0) as envs:
        await envs.reset(seed=0)
        await envs.step(scout_actions(2))
        with anyio.move_on_after(0.5) as scope:
            await envs.step(scout_actions(2))
        assert scope.cancelled_caught
        with pytest.raises(aiovec.ResetNeededError):
            await envs.step(scout_actions(2))
        # Sub-env 1 is still in its hung step: a reset with a deadline gives up on it (its
        # worker is ended), the next one makes it afresh, and both step on from the start.
        with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
            await envs.reset(seed=0, timeout=1.0)
        assert timed_out.value.env_ids == (1,)
        await envs.reset(seed=0)
        obs, *_ = await envs.step(scout_actions(2))
        assert obs["scout_0"][:, 2].tolist() == [1, 1]


async def test_a_raising_sub_env_is_restarted_with_its_agents_truncated(no_leaks: None) -> None:
    env_fns = [functools.partial(Arena, fail_at=1)] * 2
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend="thread", restart=True) as envs:
        await envs.reset(seed=0)
        *_, truncations, infos = await envs.step(scout_actions(2))
        assert infos["_restart"].all()
        assert truncations["scout_0"].all() and not truncations["late"].any()


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
@pytest.mark.parametrize(("options", "message"), [
    ({"autoreset_mode": AutoresetMode.SAME_STEP}, "is not offered for multi-agent envs"),
    ({"backend": "async"}, "cannot host ParallelEnv sub-envs"),
])
async def test_unsupported_configurations_are_refused(anyio_backend: Any, options: Any,
                                                      message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aiovec.AsyncParallelVectorEnv([Arena], **options)


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_wrong_factories_are_refused(anyio_backend: Any) -> None:
    with pytest.raises(TypeError, match=r"env_fns\[1\] is Arena, not a callable"):
        aiovec.AsyncParallelVectorEnv([Arena, Arena()], backend="inline")
    with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
        async with aiovec.AsyncParallelVectorEnv([lambda: parallel_to_aec(Arena())],
                                                 backend="inline"):
            pass
    assert "AEC env: wrap it with pettingzoo.utils.aec_to_parallel" in str(
        caught.value.exceptions[0])
    with pytest.raises(RuntimeError, match=r"Sub-env 1's observation space differs from "
                                           r"sub-env 0's at \['active'\]: keys \['a', 'b', 'c'\] "
                                           r"vs \['late', 'scout_0', 'scout_1'\]"):
        async with aiovec.AsyncParallelVectorEnv([Arena, Renamed], backend="inline"):
            pass


async def test_the_sync_shim_steps_and_closes_twice() -> None:
    envs = aiovec.ParallelVectorEnv([Arena] * 2, backend="thread")
    with envs:
        obs, _ = envs.reset(seed=0)
        assert obs["scout_0"].shape == (2, 3) and envs.total_agents == 6
        _, rewards, *_ = envs.step(scout_actions(2))
        assert rewards["scout_1"].tolist() == [-0.5, -0.5]
        assert envs.call("state")[0].shape == (3,)
        assert "ParallelVectorEnv(num_envs=2" in repr(envs)
    envs.close()  # again: nothing happens
    with pytest.raises(aiovec.ClosedError, match="calling `step`"):
        envs.step(scout_actions(2))


def _trajectories(results: list[tuple[Any, ...]], num_envs: int) -> list[list[Any]]:
    """Each sub-env's sequence of (agent → obs row, reward, ends, active) from per-env rows."""
    per_env: list[list[Any]] = [[] for _ in range(num_envs)]
    for obs, rewards, terminations, truncations, infos, env_ids in results:
        for row, env_id in enumerate(env_ids):
            per_env[env_id].append({agent: (obs[agent][row].tolist(), float(rewards[agent][row]),
                                            bool(terminations[agent][row]),
                                            bool(truncations[agent][row]),
                                            bool(infos["active"][agent][row]))
                                    for agent in obs})
    return per_env


def _constant_actions(envs: Any, rows: int) -> dict[str, Any]:
    return {"scout_0": np.full(rows, 1), "scout_1": np.full(rows, 2),
            "late": np.full((rows, 2), 0.5, dtype=np.float32)}


@pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)
async def test_first_ready_batches_equal_full_steps_per_sub_env(backend: str,
                                                                no_leaks: None) -> None:
    """send/recv/batches in batches of 1 give every sub-env the trajectory full-batch steps
    give it (autoresets, dead and spawning agents included), with ``env_ids`` saying whose."""
    steps = 30
    async with aiovec.AsyncParallelVectorEnv([Arena] * 3, backend="inline") as reference:
        await reference.reset(seed=5)
        expected = []
        for _ in range(steps):
            result = await reference.step(_constant_actions(reference, 3))
            expected.append((*result, np.arange(3)))
    async with aiovec.AsyncParallelVectorEnv([Arena] * 3, backend=backend,
                                             num_workers=3 if backend == "process" else None
                                             ) as envs:
        await envs.reset(seed=5)
        received = []
        sent = dict.fromkeys(range(3), 1)
        envs.send(_constant_actions(envs, 3))
        async for batch in envs.batches(batch_size=1):
            assert isinstance(batch, aiovec.ParallelStepBatch) and len(batch.env_ids) == 1
            received.append(tuple(batch))
            env_id = int(batch.env_ids[0])
            if sent[env_id] < steps:
                sent[env_id] += 1
                envs.send({agent: rows[:1] for agent, rows in
                           _constant_actions(envs, 1).items()}, [env_id])
    assert _trajectories(received, 3) == _trajectories(expected, 3)


def test_the_sync_shim_has_two_phase_steps_and_first_ready_batches() -> None:
    with aiovec.ParallelVectorEnv([Arena] * 2, backend="thread") as envs:
        envs.reset(seed=0)
        envs.step_async(scout_actions(2))
        with pytest.raises(AlreadyPendingCallError):
            envs.step_async(scout_actions(2))
        obs, *_ = envs.step_wait()
        assert obs["scout_0"][:, 2].tolist() == [1, 1]
        with pytest.raises(NoAsyncCallError):
            envs.step_wait()
        envs.send(scout_actions(1), [1])
        batch = envs.recv()
        assert batch.env_ids.tolist() == [1] and batch.observations["scout_0"][0, 2] == 2
        obs, *_ = envs.step(scout_actions(2))
        assert obs["scout_0"][:, 2].tolist() == [2, 3]


@pytest.mark.parametrize("timeout", [True, 0, float("nan")])
async def test_a_refused_step_timeout_sends_nothing(timeout: Any) -> None:
    """The one timeout rule, checked before the step goes out: no sub-env steps, and the
    next step is the first."""
    async with aiovec.AsyncParallelVectorEnv([Arena] * 2, backend="thread") as envs:
        await envs.reset(seed=0)
        actions = {**scout_actions(2), "late": np.full((2, 2), 0.5, dtype=np.float32)}
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            await envs.step(actions, timeout=timeout)
        assert await envs.get_attr("steps_taken") == (0, 0)
        await envs.step(actions)
        assert await envs.get_attr("steps_taken") == (1, 1)
        assert envs.statistics().steps == 1
