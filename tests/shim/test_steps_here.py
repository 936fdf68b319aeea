"""The sync shim on a backend that serves steps in the caller's thread (inline): a step runs
there with no event loop, under the same rules as every other step."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sniffio

import aiovec
from aiovec._core._engine import PausedStep
from aiovec.testing import CountingEnv
from tests.envs import RaisingEnv

ACTIONS = np.ones(3, np.int64)
FAST = aiovec.RestartPolicy(backoff=0.01)


class LoopProbeEnv(CountingEnv):
    """Records, at each step, the event loop (asyncio's or any sniffio knows) running there."""

    def __init__(self) -> None:
        super().__init__()
        self.loops_seen: list[Any] = []

    def step(self, action: int) -> Any:
        try:
            library: str | None = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = None
        self.loops_seen.append((asyncio._get_running_loop(), library))
        return super().step(action)


class InterruptedEnv(CountingEnv):
    """Its step number ``at`` is interrupted by Ctrl-C (a real SIGINT to this process)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def step(self, action: int) -> Any:
        if self.steps == self.at:
            self.steps += 1
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs before the next line
        return super().step(action)


def test_an_inline_shim_step_runs_in_the_callers_thread_with_no_event_loop() -> None:
    probe = LoopProbeEnv()
    with aiovec.VectorEnv([lambda: probe, CountingEnv, CountingEnv], backend="inline") as envs:
        envs.reset(seed=0)
        for _ in range(3):
            obs, rewards, _, _, infos = envs.step(ACTIONS)
        assert obs.tolist() == [[3, 1]] * 3  # [steps, resets]
        assert rewards.tolist() == [1.0] * 3 and infos == {}
        assert probe.loops_seen == [(None, None)] * 3
        assert envs.statistics().steps == 3


def test_a_sub_env_that_raises_in_an_inline_shim_step_is_named_and_its_neighbours_kept() -> None:
    with aiovec.VectorEnv([CountingEnv, lambda: RaisingEnv("step", after=1), CountingEnv],
                          backend="inline") as envs:
        envs.reset(seed=0)
        envs.step(ACTIONS)
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            envs.step(ACTIONS)
        assert caught.value.env_ids == (1,)
        assert "injected failure in step" in str(caught.value.exceptions[0])
        obs = caught.value.partial_result[0]
        assert obs[0].tolist() == [2, 1] and obs[2].tolist() == [2, 1]
        assert envs.unusable_envs == (1,)
        assert "in flight" not in repr(envs.async_env)  # the claim was released
        envs.reset(seed=1)
        obs, *_ = envs.step(ACTIONS)
        assert obs[:, 0].tolist() == [3, 3, 3]


def test_a_sub_env_restarted_in_an_inline_shim_step_says_so_and_the_step_returns() -> None:
    with aiovec.VectorEnv([CountingEnv, lambda: RaisingEnv("step", after=1), CountingEnv],
                          backend="inline", restart=FAST) as envs:
        envs.reset(seed=0)
        envs.step(ACTIONS)
        obs, rewards, _, _, infos = envs.step(ACTIONS)
        assert infos["_restart"].tolist() == [False, True, False]
        assert "injected failure in step" in infos["restart"][1]
        assert obs[1].tolist() == [1, 1]  # its last observation (next-step autoreset)...
        assert rewards.tolist() == [1.0, 0.0, 1.0]
        assert envs.statistics().restarts == 1
        obs, *_ = envs.step(ACTIONS)  # ...then the new sub-env's first, no reset asked
        assert obs.tolist() == [[3, 1], [0, 1], [3, 1]]


def test_a_paused_step_never_resumed_leaves_its_sub_envs_for_a_reset() -> None:
    # The shim resumes a step that must restart a sub-env on its event loop; a Ctrl-C before
    # that loop starts the resumption drops it: nothing is left claimed, and the sub-envs
    # that moved unseen wait for a reset.
    with aiovec.VectorEnv([CountingEnv, lambda: RaisingEnv("step", after=0), CountingEnv],
                          backend="inline", restart=FAST) as envs:
        envs.reset(seed=0)
        outcome = envs.async_env._step_here(ACTIONS)
        assert isinstance(outcome, PausedStep)
        assert "in flight" in repr(envs.async_env)
        envs.async_env._drop_paused(outcome)
        assert "in flight" not in repr(envs.async_env)
        assert envs.unusable_envs == (0, 1, 2)
        envs.async_env._drop_paused(outcome)  # twice: nothing more
        envs.reset(seed=0)
        obs, *_ = envs.step(ACTIONS)
        assert obs.tolist() == [[2, 2]] * 3


def test_ctrl_c_inside_an_inline_sub_env_interrupts_the_step_and_leaves_it_for_a_reset(
    ctrl_c: None,
) -> None:
    interrupted = InterruptedEnv(at=1)
    with aiovec.VectorEnv([CountingEnv, lambda: interrupted, CountingEnv],
                          backend="inline") as envs:
        envs.reset(seed=0)
        envs.step(ACTIONS)
        with pytest.raises(KeyboardInterrupt):
            envs.step(ACTIONS)
        # Sub-env 0 stepped and 1 was cut short, unseen: the whole batch waits for a reset.
        assert "in flight" not in repr(envs.async_env)
        assert envs.unusable_envs == (0, 1, 2)
        with pytest.raises(aiovec.ResetNeededError):
            envs.step(ACTIONS)
        envs.reset(seed=0)
        obs, *_ = envs.step(ACTIONS)
        assert obs.tolist() == [[3, 2], [3, 2], [2, 2]]


def test_inline_shim_steps_from_two_threads_run_one_at_a_time() -> None:
    with aiovec.VectorEnv([CountingEnv] * 3, backend="inline") as envs:
        envs.reset(seed=0)
        errors: list[BaseException] = []

        def stepper() -> None:
            try:
                for _ in range(200):
                    envs.step(ACTIONS)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=stepper) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors
        assert envs.get_attr("steps") == (400, 400, 400)
        assert envs.statistics().steps == 400


def test_an_inline_shim_matches_gymnasiums_sync_vector_env_step_for_step() -> None:
    def make() -> gym.Env[Any, Any]:
        return gym.make("CartPole-v1")

    reference = gym.vector.SyncVectorEnv([make] * 4)
    actions = np.random.default_rng(0).integers(0, 2, (300, 4))
    with aiovec.VectorEnv([make] * 4, backend="inline") as envs:
        for result, expected in zip(envs.reset(seed=7), reference.reset(seed=7)):
            np.testing.assert_equal(result, expected)
        for batch in actions:
            for result, expected in zip(envs.step(batch), reference.step(batch)):
                np.testing.assert_equal(result, expected)
    reference.close()
