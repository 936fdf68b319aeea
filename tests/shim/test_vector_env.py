"""aiovec.VectorEnv: a real Gymnasium VectorEnv with AsyncVectorEnv's call protocol."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import trio
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import aiovec
from aiovec.testing import CountingEnv, EpisodeEnv
from tests.backends.test_process import wait_for_exit
from tests.backends_matrix import LOCAL_SYNC_BACKENDS
from tests.envs import (
    FifoStepEnv,
    GatedEnv,
    PidEnv,
    SleepingEnv,
    ctrl_c_once,
    wait_for_fifo,
)

backends = pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)


@pytest.fixture
def shim(request: pytest.FixtureRequest) -> Iterator[aiovec.VectorEnv]:
    envs = aiovec.VectorEnv([CountingEnv] * 3, backend=getattr(request, "param", "thread"))
    yield envs
    envs.close()


@backends
def test_is_a_gymnasium_vector_env(backend: str) -> None:
    envs = aiovec.VectorEnv([lambda: EpisodeEnv("dict")] * 2, backend=backend)
    try:
        assert isinstance(envs, gym.vector.VectorEnv)
        assert envs.unwrapped is envs
        assert envs.num_envs == 2 and envs.backend_name == backend
        assert envs.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
        obs, _ = envs.reset(seed=3)
        assert envs.observation_space.contains(obs)
        assert envs.np_random_seed == (3, 4)
        assert all(isinstance(rng, np.random.Generator) for rng in envs.np_random)
        result = envs.step(envs.action_space.sample())
        assert len(result) == 5 and envs.observation_space.contains(result[0])
        assert "VectorEnv" in repr(envs) and backend in repr(envs)
    finally:
        envs.close()


def test_async_wait_pairs(shim: aiovec.VectorEnv) -> None:
    shim.reset_async(seed=1)
    obs, _ = shim.reset_wait()
    assert obs.tolist() == [[0, 1]] * 3
    shim.step_async(np.ones(3, np.int64))
    obs, rewards, *_ = shim.step_wait()
    assert obs[:, 0].tolist() == [1, 1, 1] and rewards.tolist() == [1.0] * 3
    shim.call_async("_observation")
    assert len(shim.call_wait()) == 3
    assert shim.get_attr("steps") == (1, 1, 1)
    shim.set_attr("steps", [5, 6, 7])
    assert shim.call("_observation")[2].tolist() == [7, 1]


def test_out_of_order_calls_raise_gymnasiums_errors(shim: aiovec.VectorEnv) -> None:
    with pytest.raises(NoAsyncCallError):
        shim.step_wait()
    with pytest.raises(NoAsyncCallError):
        shim.reset_wait()
    shim.reset_async()
    with pytest.raises(AlreadyPendingCallError):
        shim.step_async(np.zeros(3, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        shim.reset()
    with pytest.raises(NoAsyncCallError):
        shim.call_wait()
    shim.reset_wait()
    with pytest.raises(ValueError, match="expected shape"):
        shim.step_async(np.zeros(4, np.int64))
    shim.step_async(np.zeros(3, np.int64))  # a rejected step_async left nothing pending
    shim.step_wait()


@pytest.mark.parametrize("timeout", [True, 0, -1.0, float("nan"), "1"])
def test_a_refused_wait_timeout_leaves_the_call_pending(shim: aiovec.VectorEnv,
                                                        timeout: object) -> None:
    """A ``*_wait`` with a timeout the one rule refuses raises before it takes the pending
    call: the same ``*_wait`` then collects it, nothing lost."""
    shim.reset_async(seed=1)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        shim.reset_wait(timeout=timeout)  # type: ignore[arg-type]
    obs, _ = shim.reset_wait()
    assert obs.tolist() == [[0, 1]] * 3
    shim.step_async(np.ones(3, np.int64))
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        shim.step_wait(timeout=timeout)  # type: ignore[arg-type]
    obs, rewards, *_ = shim.step_wait()
    assert obs[:, 0].tolist() == [1, 1, 1] and rewards.tolist() == [1.0] * 3
    shim.call_async("_observation")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        shim.call_wait(timeout=timeout)  # type: ignore[arg-type]
    assert len(shim.call_wait()) == 3


def test_close_is_idempotent_and_final() -> None:
    shim = aiovec.VectorEnv([CountingEnv] * 2)
    shim.reset()
    shim.step_async(np.zeros(2, np.int64))
    with pytest.warns(UserWarning, match="pending call to `step`"):
        shim.close()  # waits for the pending step first
    shim.close()
    assert shim.closed
    with pytest.raises(ClosedEnvironmentError):
        shim.reset()
    with pytest.raises(aiovec.ClosedError):
        shim.step(np.zeros(2, np.int64))


def test_step_wait_timeout_then_reset_recovers() -> None:
    made: list[CountingEnv] = []

    def hangs_first() -> CountingEnv:
        env = GatedEnv() if not made else CountingEnv()
        made.append(env)
        return env

    shim = aiovec.VectorEnv([hangs_first, CountingEnv], backend="thread")
    try:
        shim.reset()
        shim.step_async(np.ones(2, np.int64))
        with pytest.raises(multiprocessing.TimeoutError) as caught:
            shim.step_wait(timeout=0.2)
        assert isinstance(caught.value, aiovec.EnvTimeoutError)
        assert caught.value.env_ids == (0,)
        with pytest.raises(gym.error.ResetNeeded):
            shim.step(np.ones(2, np.int64))
        shim.reset()  # sub-env 0 is made afresh on a new thread
        obs, *_ = shim.step(np.ones(2, np.int64))
        assert obs[:, 0].tolist() == [1, 2] and len(made) == 2
    finally:
        made[0].release.set()  # type: ignore[attr-defined]
        shim.close()


def test_construction_timeout_is_the_default_deadline() -> None:
    gated = GatedEnv()
    shim = aiovec.VectorEnv([lambda: gated], backend="thread", timeout=0.2)
    try:
        shim.reset()
        with pytest.raises(aiovec.EnvTimeoutError):
            shim.step(np.ones(1, np.int64))
        gated.release.set()
    finally:
        shim.close()


def test_works_from_inside_a_running_event_loop() -> None:
    async def handler_calling_sync_code() -> list[int]:
        shim = aiovec.VectorEnv([CountingEnv] * 2)
        try:
            shim.reset()
            obs, *_ = shim.step(np.ones(2, np.int64))
            return [int(value) for value in obs[:, 0]]
        finally:
            shim.close()

    assert asyncio.run(handler_calling_sync_code()) == [1, 1]
    assert trio.run(handler_calling_sync_code) == [1, 1]


def test_ctrl_c_cancels_the_blocking_call(ctrl_c: None) -> None:
    gated = GatedEnv()
    shim = aiovec.VectorEnv([lambda: gated, CountingEnv], backend="thread")
    try:
        shim.reset()

        with (ctrl_c_once(lambda: gated.entered.wait(timeout=30)),
              pytest.raises(KeyboardInterrupt)):
            shim.step(np.ones(2, np.int64))
        # The async step was cancelled, not left running: the shim takes a new call at once,
        # and the sub-envs that may have stepped unseen wait for a reset.
        assert "in flight" not in repr(shim.async_env)
        assert shim.unusable_envs == (0, 1)
        gated.gated = False
        gated.release.set()
        shim.reset()
        obs, *_ = shim.step(np.ones(2, np.int64))
        assert obs.tolist() == [[2, 2], [2, 2]]  # [steps, resets]
    finally:
        shim.close()


def test_gymnasium_vector_wrappers_work() -> None:
    """Gymnasium's RecordEpisodeStatistics on the shim reports every episode that ended, with
    the length and return counted here (CartPole pays 1 a step; the autoreset step after an
    episode's end is no step of either episode)."""
    shim = aiovec.VectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(shim)
    try:
        envs.reset(seed=0)
        envs.action_space.seed(0)
        lengths, ended, episodes = np.zeros(2, int), np.zeros(2, bool), np.zeros(2, int)
        for _ in range(300):
            *_, terminations, truncations, infos = envs.step(envs.action_space.sample())
            lengths += ~ended  # the step after an end is the autoreset step
            ended = terminations | truncations
            reported = infos.get("_episode", np.zeros(2, bool))
            assert reported.tolist() == ended.tolist()
            if ended.any():
                assert infos["episode"]["l"][ended].tolist() == lengths[ended].tolist()
                assert infos["episode"]["r"][ended].tolist() == lengths[ended].tolist()
            episodes += ended
            lengths[ended] = 0
        assert (episodes >= 3).all(), episodes  # CartPole's random episodes are short
    finally:
        envs.close()
    assert shim.closed


def test_start_failure_leaves_no_thread() -> None:
    def explode() -> gym.Env[np.ndarray, int]:
        raise RuntimeError("no simulator licence")

    with pytest.raises(aiovec.SubEnvErrorGroup, match="sub-env\\(s\\) 1 failed"):
        aiovec.VectorEnv([CountingEnv, explode])


def test_custom_worker_is_refused() -> None:
    with pytest.raises(ValueError, match="custom `worker`"):
        aiovec.VectorEnv([CountingEnv], worker=lambda *args: None)  # type: ignore[arg-type]


@pytest.mark.worker_processes
def test_ctrl_c_with_process_workers_reaps_them_quietly(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], ctrl_c: None
) -> None:
    fifo = tmp_path / "in-step"
    os.mkfifo(fifo)
    shim = aiovec.VectorEnv([PidEnv, lambda: FifoStepEnv(str(fifo))], backend="process",
                            num_workers=2, close_timeout=1.0)
    try:
        shim.reset()
        workers = sorted(set(shim.get_attr("pid")))

        # (once sub-env 1 is inside step)
        with ctrl_c_once(lambda: wait_for_fifo(str(fifo), 30)), pytest.raises(KeyboardInterrupt):
            shim.step(np.zeros(2, np.int64))
    finally:
        shim.close()  # the hung worker is terminated after close_timeout
    assert wait_for_exit(workers, 10) == []
    errors = capfd.readouterr().err
    assert "Traceback" not in errors, errors  # no worker printed anything


def test_a_with_block_closes_the_shim() -> None:
    """As Gymnasium's envs (and ParallelVectorEnv) allow: ``with ... as envs``."""
    with aiovec.VectorEnv([CountingEnv] * 2, backend="thread") as envs:
        envs.reset()
        obs, *_ = envs.step(np.ones(2, np.int64))
        assert obs[:, 0].tolist() == [1, 1]
    assert envs.closed
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.ones(2, np.int64))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="on one CPU the rule of thumb picks threads without measuring")
def test_the_shim_says_where_auto_put_the_sub_envs() -> None:
    with aiovec.VectorEnv([SleepingEnv] * 3) as envs:  # waits 20 ms per step: threads
        assert envs.backend_name == "thread"
        assert "measured one sub-env" in envs.backend_reason
        envs.reset(seed=0)
        obs, *_ = envs.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[1, 1]] * 3
