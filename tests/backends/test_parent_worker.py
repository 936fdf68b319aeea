"""The process backend's parent worker (``parent_worker=True``): one share of the sub-envs on a
thread of this process, served and recovered exactly as a worker process's share.

The whole differential, fault, cancellation and loop-citizenship suite also runs with every
process-backed vector env given a parent worker (``AIOVEC_PARENT_WORKER=1``: ``make unit``'s
second pass); these tests cover what only a parent worker has.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec.testing import EpisodeEnv, Fault, FaultLedger, release_hangs
from tests.envs import CountingEnv
from tests.faults.envs import faulty
from tests.helpers import assert_identical

DEADLINE = 0.5
MARGIN = 5.0  # seconds of slack for a loaded machine


@pytest.fixture
def ledger(tmp_path: Path) -> FaultLedger:
    """Where this test's ``FaultyEnv`` instances record what they did."""
    return FaultLedger(tmp_path / "ledger")


class WhereEnv(CountingEnv):
    """Says which process and thread it runs on."""

    def where(self) -> tuple[int, str]:
        return os.getpid(), threading.current_thread().name


async def test_the_last_share_runs_on_a_thread_of_this_process(anyio_backend: Any,
                                                               no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([WhereEnv] * 4, backend="process", num_workers=2,
                                     parent_worker=True) as envs:
        places = await envs.call("where")
        assert "the last a thread of this process" in repr(envs)
    assert [pid == os.getpid() for pid, _ in places] == [False, False, True, True]
    assert places[0][0] == places[1][0]
    assert all(name.startswith("aiovec-parent-worker-1") for _, name in places[2:])


async def test_one_worker_in_the_parent_hosts_every_sub_env(anyio_backend: Any,
                                                            no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([WhereEnv] * 3, backend="process", num_workers=1,
                                     parent_worker=True) as envs:
        await envs.reset(seed=1)
        obs, *_ = await envs.step(np.ones(3, np.int64))
        assert {pid for pid, _ in await envs.call("where")} == {os.getpid()}
    assert obs[:, 0].tolist() == [1, 1, 1]


def _cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1", max_episode_steps=20)


@pytest.mark.parametrize("factory", [_cartpole, lambda: EpisodeEnv("dict")],
                         ids=["cartpole", "dict"])
@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP,
                                  gym.vector.AutoresetMode.SAME_STEP])
async def test_rollouts_equal_the_inline_backend(anyio_backend: Any, no_leaks: None,
                                                 factory: Any,
                                                 mode: gym.vector.AutoresetMode) -> None:
    """Bit for bit, infos included (a parent worker packs its infos as a worker does)."""
    records = []
    for options in ({"backend": "inline"},
                    {"backend": "process", "num_workers": 2, "parent_worker": True}):
        async with aiovec.AsyncVectorEnv([factory] * 4, autoreset_mode=mode,
                                         **options) as envs:
            envs.action_space.seed(3)
            record: list[Any] = [await envs.reset(seed=7)]
            for _ in range(60):
                record.append(await envs.step(envs.action_space.sample()))
            records.append(record)
    assert_identical(records[0], records[1])


async def test_a_raising_sub_env_is_named_with_its_traceback(anyio_backend: Any,
                                                             ledger: FaultLedger,
                                                             no_leaks: None) -> None:
    faults = {3: [Fault("raise", "step", at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     num_workers=2, parent_worker=True) as envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(4))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.ones(4))
        (error,) = caught.value.exceptions
        assert error.env_id == 3
        assert "InjectedFault" in error.remote_traceback
        partial_obs = caught.value.partial_result[0]
        assert partial_obs[:3, 0].tolist() == [2, 2, 2]  # the healthy ones' results
        obs, _ = await envs.reset()
        assert obs[:, 0].tolist() == [0, 0, 0, 0]


async def test_a_hung_sub_env_is_abandoned_at_the_deadline_and_remade(
        anyio_backend: Any, ledger: FaultLedger, no_leaks: None) -> None:
    """The thread cannot be killed: it is given up on (counted as abandoned), its sub-envs
    are remade on a fresh thread, and once its hung call returns it writes nothing over the
    rows its replacement serves, then ends."""
    faults = {3: [Fault("hang", "step", at=1, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     num_workers=2, parent_worker=True, copy=False,
                                     timeout=DEADLINE) as envs:
        await envs.reset(seed=0)
        await envs.step(np.full(4, 2.0))
        started = time.monotonic()
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            await envs.step(np.full(4, 3.0))
        assert time.monotonic() - started < DEADLINE + MARGIN
        assert caught.value.env_ids == (2, 3)  # its neighbour on the same thread too
        del caught  # its partial result holds views of the shared memory (copy=False)
        assert envs.unusable_envs == (2, 3)
        assert envs.statistics().abandoned_threads == 1
        old = [thread for thread in threading.enumerate()
               if thread.name == "aiovec-parent-worker-1"]
        obs, _ = await envs.reset(seed=5)
        assert envs.statistics().abandoned_threads == 1  # remade: the old thread still runs
        fresh = obs.copy()
        assert fresh[:, 0].tolist() == [0, 0, 0, 0]
        assert ledger.count(3, "new") == 2  # remade
        release_hangs()  # the abandoned thread's step returns now ...
        for thread in old:
            thread.join(10)
            assert not thread.is_alive()
        assert np.array_equal(obs, fresh)  # ... and wrote nothing into shared memory
        assert envs.statistics().abandoned_threads == 0
        obs, *_ = await envs.step(np.full(4, 4.0))
        assert obs[:, :2].tolist() == [[1, 4]] * 4


async def test_a_sub_env_that_ends_its_host_fails_like_a_dead_worker(
        anyio_backend: Any, ledger: FaultLedger, no_leaks: None) -> None:
    """``exit`` ends a worker process; on a parent worker it ends the thread (SystemExit)."""
    faults = {2: [Fault("exit", "step", at=0, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     num_workers=2, parent_worker=True) as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.ones(4))
        assert sorted(error.env_id for error in caught.value.exceptions) == [2, 3]
        assert all(isinstance(error.__cause__, aiovec.WorkerDiedError)
                   for error in caught.value.exceptions)
        assert "parent worker 1 (a thread of this process) died" in str(caught.value)
        obs, _ = await envs.reset()
        assert obs[:, 0].tolist() == [0, 0, 0, 0]
        obs, *_ = await envs.step(np.ones(4))
        assert obs[:, 0].tolist() == [1, 1, 1, 1]


async def test_a_restart_policy_remakes_a_failed_parent_share(anyio_backend: Any,
                                                              ledger: FaultLedger,
                                                              no_leaks: None) -> None:
    faults = {3: [Fault("exit", "step", at=1, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     num_workers=2, parent_worker=True,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(4))
        obs, _, _, _, infos = await envs.step(np.ones(4))
        assert envs.statistics().restarts == 2  # sub-envs 2 and 3: one thread
        assert infos["_restart"].tolist() == [False, False, True, True]
        assert obs[:2, 0].tolist() == [2, 2]
        obs, *_ = await envs.step(np.ones(4))  # the restarted ones begin a new episode
        assert obs[:, 0].tolist() == [3, 3, 0, 0]


@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: the parent share's thread is abandoned at the reset's "
    "deadline")
async def test_a_cancelled_caller_leaves_what_a_worker_process_leaves(
        anyio_backend: Any, ledger: FaultLedger, no_leaks: None) -> None:
    faults = {3: [Fault("hang", "step", at=0, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     num_workers=2, parent_worker=True) as envs:
        await envs.reset(seed=0)
        with anyio.move_on_after(DEADLINE):
            await envs.step(np.ones(4))
        assert envs.unusable_envs == (0, 1, 2, 3)
        with pytest.raises(aiovec.EnvTimeoutError):
            await envs.reset(timeout=DEADLINE)  # the hung one is given up on
        obs, _ = await envs.reset()
        obs, *_ = await envs.step(np.full(4, 2.0))
        assert obs[:, :2].tolist() == [[1, 2]] * 4


@pytest.mark.hangs_on_purpose(
    "a sub-env's close hangs for good: closing abandons the parent share's thread")
async def test_closing_with_a_hung_parent_share_is_bounded(anyio_backend: Any,
                                                           ledger: FaultLedger,
                                                           no_leaks: None) -> None:
    faults = {1: [Fault("hang", "close")]}
    envs = aiovec.AsyncVectorEnv(faulty(2, ledger, faults), backend="process", num_workers=1,
                                 parent_worker=True, close_timeout=DEADLINE)
    await envs.reset()
    started = time.monotonic()
    await envs.aclose()
    assert time.monotonic() - started < DEADLINE + MARGIN
    assert envs.closed


def test_ctrl_c_in_the_shim_during_a_parent_share_step(ctrl_c: None,
                                                       ledger: FaultLedger) -> None:
    """Ctrl-C cancels the step; the sub-envs then need a reset, which gives up on the hung
    one and remakes it, as with a worker process."""
    faults = {1: [Fault("hang", "step", at=0, instance=0)]}
    shim = aiovec.VectorEnv(faulty(2, ledger, faults), backend="process", num_workers=1,
                            parent_worker=True)
    try:
        shim.reset(seed=0)
        timer = threading.Timer(DEADLINE, os.kill, (os.getpid(), 2))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            shim.step(np.ones(2))
        timer.join()
        shim.reset_async()
        with pytest.raises(aiovec.EnvTimeoutError):
            shim.reset_wait(timeout=DEADLINE)
        obs, _ = shim.reset()
        obs, *_ = shim.step(np.full(2, 3.0))
        assert obs[:, :2].tolist() == [[1, 3], [1, 3]]
    finally:
        shim.close()
        release_hangs()  # the abandoned thread ends once its hung call returns


def test_parent_worker_refuses_the_fork_start_method() -> None:
    with pytest.raises(ValueError, match="does not go with start_method='fork'"):
        aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="process", start_method="fork",
                              parent_worker=True)


def test_parent_worker_is_a_process_backend_option() -> None:
    with pytest.raises(ValueError, match="parent_worker applies to the process backend"):
        aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="thread", parent_worker=True)
    envs = aiovec.AsyncVectorEnv([CountingEnv] * 2, parent_worker=True)
    assert envs.backend_name == "process"
