"""Every episode counted once, by how it ended (``aiovec.episode_outcomes`` per row, the same
rule as ``statistics().episodes``), and the restart policy's failure budget
(``max_failures``, ``max_failure_fraction``), which raises ``FailureBudgetError`` instead of
restarting forever."""

from __future__ import annotations

import collections
import functools
import os
import pickle
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import aiovec
from tests.backends_matrix import LOCAL_BACKENDS

pytestmark = pytest.mark.anyio

GO_ON, TERMINATE, TRUNCATE, RAISE, HANG = range(5)


class OutcomeEnv(gym.Env[np.ndarray, int]):
    """Ends its episode, raises or hangs as its action says."""

    observation_space = spaces.Box(0, 1e6, (1,), np.float32)
    action_space = spaces.Discrete(5)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == RAISE:
            raise RuntimeError("the tool call failed")
        if action == HANG:
            time.sleep(30)
        return np.ones(1, np.float32), 1.0, action == TERMINATE, action == TRUNCATE, {}


class AsyncOutcomeEnv(aiovec.AsyncEnv[np.ndarray, int]):
    observation_space = OutcomeEnv.observation_space
    action_space = OutcomeEnv.action_space

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.zeros(1, np.float32), {}

    async def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == RAISE:
            raise RuntimeError("the tool call failed")
        if action == HANG:
            await anyio.sleep(30)
        return np.ones(1, np.float32), 1.0, action == TERMINATE, action == TRUNCATE, {}


def outcome_envs(backend: str, num_envs: int) -> list[Any]:
    return [AsyncOutcomeEnv if backend == "async" else OutcomeEnv] * num_envs


#: Each step's actions for 4 sub-envs, and how each row's episode ends.
SCRIPT = [
    ([GO_ON, TERMINATE, TRUNCATE, RAISE], ["", "finished", "truncated", "lost"]),
    ([GO_ON, GO_ON, GO_ON, GO_ON], ["", "", "", ""]),  # 1, 2 reset (next step mode)
    ([TERMINATE, RAISE, GO_ON, TRUNCATE], ["finished", "lost", "", "truncated"]),
]


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_every_episode_is_counted_once_by_how_it_ended(backend: str,
                                                             no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(outcome_envs(backend, 4), backend=backend,
                                     restart=True, timeout=60) as envs:
        await envs.reset(seed=0)
        seen: collections.Counter[str] = collections.Counter()
        for actions, expected in SCRIPT:
            _, _, terminations, truncations, infos = await envs.step(np.array(actions))
            outcomes = aiovec.episode_outcomes(terminations, truncations, infos)
            assert outcomes.tolist() == expected
            seen.update(outcome for outcome in outcomes.tolist() if outcome)
        counts = envs.statistics().episodes
    assert counts == aiovec.EpisodeCounts(finished=seen["finished"],
                                          truncated=seen["truncated"], lost=seen["lost"])
    assert (counts.finished, counts.truncated, counts.lost) == (2, 2, 2)


@pytest.mark.parametrize("backend", ["process", "async"])
async def test_a_step_past_its_deadline_loses_its_episode(backend: str,
                                                          no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(outcome_envs(backend, 2), backend=backend, restart=True,
                                     timeout=1.0, num_workers=2 if backend == "process"
                                     else None) as envs:
        await envs.reset(seed=0)
        _, _, terminations, truncations, infos = await envs.step(np.array([HANG, TERMINATE]))
        assert aiovec.episode_outcomes(terminations, truncations, infos).tolist() == [
            "lost", "finished"]
        assert envs.statistics().episodes == aiovec.EpisodeCounts(finished=1, lost=1)


async def test_first_ready_batches_and_aborts_are_counted(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(outcome_envs("async", 3), backend="async",
                                     restart=True, timeout=60) as envs:
        await envs.reset(seed=0)
        envs.send(np.array([TERMINATE, RAISE, HANG]))
        batch = await envs.recv(batch_size=2)
        outcomes = aiovec.episode_outcomes(batch.terminations, batch.truncations, batch.infos)
        assert dict(zip(batch.env_ids.tolist(), outcomes.tolist())) == {0: "finished",
                                                                        1: "lost"}
        envs.abort([2])  # the hung one: dropped, its episode lost but not to a failure
        assert envs.statistics().episodes == aiovec.EpisodeCounts(finished=1, lost=2,
                                                                  aborted=1)


async def test_without_a_policy_a_raised_failure_loses_its_episode() -> None:
    async with aiovec.AsyncVectorEnv(outcome_envs("inline", 2), backend="inline") as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.SubEnvErrorGroup):
            await envs.step(np.array([RAISE, TERMINATE]))
        assert envs.statistics().episodes == aiovec.EpisodeCounts(finished=1, lost=1)


@pytest.mark.parametrize("backend", ["inline", "process"])
async def test_past_max_failures_the_policy_raises_instead_of_restarting(
        backend: str, no_leaks: None) -> None:
    policy = aiovec.RestartPolicy(max_failures=2, backoff=0)
    async with aiovec.AsyncVectorEnv(outcome_envs(backend, 2), backend=backend,
                                     restart=policy, timeout=60) as envs:
        await envs.reset(seed=0)
        for _ in range(2):  # within the budget: restarted (then reset by the next step)
            _, _, _, _, infos = await envs.step(np.array([RAISE, GO_ON]))
            assert infos["_restart"].tolist() == [True, False]
            await envs.step(np.array([GO_ON, GO_ON]))
        with pytest.raises(aiovec.FailureBudgetError) as raised:
            await envs.step(np.array([GO_ON, RAISE]))
        assert raised.value.failures.keys() == {1}
        assert "max_failures=2" in str(raised.value) and "the tool call failed" in str(
            raised.value)
        assert 1 in envs.unusable_envs
        assert envs.statistics().episodes.lost == 3
        # Still usable once reset; and every later failure raises too (the budget is spent).
        await envs.reset(seed=1)
        await envs.step(np.array([GO_ON, GO_ON]))
        with pytest.raises(aiovec.FailureBudgetError):
            await envs.step(np.array([RAISE, GO_ON]))


async def test_past_max_failure_fraction_of_a_window_the_policy_raises(
        no_leaks: None) -> None:
    """Window 4, fraction 0.5: two episodes finish, then failures; the third failure would
    make 3 of the last 4 episodes lost."""
    policy = aiovec.RestartPolicy(max_failure_fraction=0.5, failure_window=4, backoff=0)
    async with aiovec.AsyncVectorEnv(outcome_envs("async", 2), backend="async",
                                     restart=policy, timeout=60) as envs:
        await envs.reset(seed=0)
        await envs.step(np.array([TERMINATE, TERMINATE]))
        await envs.step(np.array([GO_ON, GO_ON]))  # (the autoresets, here and below)
        await envs.step(np.array([RAISE, GO_ON]))  # 1 of 3: restarted
        await envs.step(np.array([GO_ON, GO_ON]))
        await envs.step(np.array([RAISE, GO_ON]))  # 2 of the last 4: still within
        await envs.step(np.array([GO_ON, GO_ON]))
        with pytest.raises(aiovec.FailureBudgetError, match="3 of the last 4 episodes"):
            await envs.step(np.array([RAISE, GO_ON]))


@pytest.mark.parametrize(("arguments", "message"), [
    ({"max_failures": -1}, "max_failures"),
    ({"max_failure_fraction": 1.0}, "max_failure_fraction"),
    ({"max_failure_fraction": -0.1}, "max_failure_fraction"),
    ({"failure_window": 0}, "failure_window"),
    ({"failure_window": True}, "failure_window"),
])
def test_a_failure_budget_that_means_nothing_is_refused(arguments: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aiovec.RestartPolicy(**arguments)


def test_episode_outcomes_reads_same_step_infos_and_pickles_its_error() -> None:
    infos = {"final_info": {"episode_timeout": np.array([True, False]),
                            "_episode_timeout": np.array([True, False])}}
    outcomes = aiovec.episode_outcomes(np.array([False, False]), np.array([True, True]),
                                       infos)
    assert outcomes.tolist() == ["episode_timeout", "truncated"]
    error = aiovec.FailureBudgetError("3 failures, max_failures=2", {1: "RuntimeError: x"})
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.failures == {1: "RuntimeError: x"}


def test_the_counts_start_at_zero() -> None:
    envs = aiovec.AsyncVectorEnv([functools.partial(OutcomeEnv)], backend="inline")
    assert envs.statistics().episodes == aiovec.EpisodeCounts()


class CrashEnv(OutcomeEnv):
    """Action 4 ends its worker process at once."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == HANG:
            os._exit(3)
        return super().step(action)


async def test_a_sub_env_restarted_while_idle_loses_its_episode_then(no_leaks: None) -> None:
    """Sub-env 1 shares the worker sub-env 0 kills: it is made afresh while idle, so its
    episode is lost then; its next result notes the restart but starts a new episode."""
    async with aiovec.AsyncVectorEnv([CrashEnv] * 2, backend="process", num_workers=1,
                                     restart=True, timeout=60) as envs:
        await envs.reset(seed=0)
        envs.send(np.array([HANG]), env_ids=[0])
        batch = await envs.recv(batch_size=1)
        assert aiovec.episode_outcomes(batch.terminations, batch.truncations,
                                       batch.infos).tolist() == ["lost"]
        assert envs.statistics().episodes.lost == 2  # both episodes ended with the worker
        envs.send(np.array([GO_ON]), env_ids=[1])
        batch = await envs.recv(batch_size=1)
        assert "restart" in batch.infos and not batch.truncations.any()
        assert aiovec.episode_outcomes(batch.terminations, batch.truncations,
                                       batch.infos).tolist() == [""]
        assert envs.statistics().episodes.lost == 2


class ClashingInfoEnv(OutcomeEnv):
    """Its infos use aiovec's own key names, with values of its own."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"restart": False, "episode_timeout": False}


async def test_an_envs_own_info_keys_are_not_taken_for_aiovecs() -> None:
    async with aiovec.AsyncVectorEnv([ClashingInfoEnv] * 3, backend="inline") as envs:
        await envs.reset(seed=0)
        _, _, terminations, truncations, infos = await envs.step(
            np.array([GO_ON, TERMINATE, TRUNCATE]))
        assert aiovec.episode_outcomes(terminations, truncations, infos).tolist() == [
            "", "finished", "truncated"]
        assert envs.statistics().episodes == aiovec.EpisodeCounts(finished=1, truncated=1)


async def test_a_spent_budget_keeps_the_healthy_rows_and_counts_each_failure_once(
        no_leaks: None) -> None:
    policy = aiovec.RestartPolicy(max_failures=0, backoff=0)
    async with aiovec.AsyncVectorEnv(outcome_envs("async", 3), backend="async",
                                     restart=policy, timeout=60) as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.FailureBudgetError) as raised:
            await envs.step(np.array([RAISE, TERMINATE, GO_ON]))
        assert isinstance(raised.value.__cause__, aiovec.SubEnvErrorGroup)
        _, _, terminations, _, _ = raised.value.partial_result
        assert terminations.tolist() == [False, True, False]
        assert envs.unusable_envs == (0,)  # only the failed one needs a reset
        assert envs.statistics().episodes == aiovec.EpisodeCounts(finished=1, lost=1)
        # First-ready: raised once, with the batch; the failure is not charged again.
        await envs.reset(seed=1)
        envs.send(np.array([RAISE, GO_ON, GO_ON]))
        with pytest.raises(aiovec.FailureBudgetError) as raised:
            await envs.recv(batch_size=3)
        assert sorted(raised.value.partial_result.env_ids.tolist()) == [0, 1, 2]  # (any order)
        assert envs.statistics().episodes.lost == 2 and envs.statistics().errors == 2
        assert envs.num_ready == 0


def test_the_counts_fast_path_agrees_with_episode_outcomes() -> None:
    """``EpisodeTally.step`` counts a step with no restart or timeout note without
    ``episode_outcomes``: on the same rows (both flags set on some), the two agree."""
    from aiovec._core._episodes import EpisodeTally

    generator = np.random.default_rng(7)
    fast, full = EpisodeTally(None), EpisodeTally(None)
    for _ in range(300):
        size = int(generator.integers(1, 40))
        terminations = generator.random(size) < 0.2
        truncations = generator.random(size) < 0.2
        fast.step(terminations, truncations, {})
        full.outcomes(aiovec.episode_outcomes(terminations, truncations, {}))
    assert fast.counts() == full.counts()
    assert fast.counts().finished > 0 and fast.counts().truncated > 0
