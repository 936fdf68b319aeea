"""The sync shim on a backend that serves steps in the caller's thread (inline): a step runs
there with no event loop, under the same rules as every other step."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sniffio

import aiovec
from aiovec._core._engine import PausedStep
from aiovec.testing import CountingEnv
from tests.envs import (
    CrashingEnv,
    FifoStepEnv,
    PidEnv,
    RaisingEnv,
    ctrl_c_once,
    wait_for_fifo,
)

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
    """Ctrl-C (a real SIGINT to this process) strikes in its step number ``at``, which
    counts one step more."""

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
        outcome = envs.async_env._engine.step_here(ACTIONS)
        assert isinstance(outcome, PausedStep)
        assert "in flight" in repr(envs.async_env)
        envs.async_env._engine.drop_paused(outcome)
        assert "in flight" not in repr(envs.async_env)
        assert envs.unusable_envs == (0, 1, 2)
        envs.async_env._engine.drop_paused(outcome)  # twice: nothing more
        envs.reset(seed=0)
        obs, *_ = envs.step(ACTIONS)
        assert obs.tolist() == [[2, 2]] * 3


def test_ctrl_c_inside_an_inline_sub_env_ends_the_step_then_interrupts_it(
    ctrl_c: None,
) -> None:
    # As on the shim's event loop: the first press lets the step end (nothing is left half
    # done), then raises; the batch, stepped unseen, waits for a reset.
    interrupted = InterruptedEnv(at=1)
    with aiovec.VectorEnv([CountingEnv, lambda: interrupted, CountingEnv],
                          backend="inline") as envs:
        envs.reset(seed=0)
        envs.step(ACTIONS)
        with pytest.raises(KeyboardInterrupt):
            envs.step(ACTIONS)
        assert envs.get_attr("steps") == (2, 3, 2)  # (sub-env 1 counts its interrupt too)
        assert "in flight" not in repr(envs.async_env)
        assert envs.unusable_envs == (0, 1, 2)
        with pytest.raises(aiovec.ResetNeededError):
            envs.step(ACTIONS)
        envs.reset(seed=0)
        obs, *_ = envs.step(ACTIONS)
        assert obs.tolist() == [[3, 2], [4, 2], [3, 2]]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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


# ------------------------------------------------------------------ the process backend
# The shim reads the workers' replies from their sockets itself, its event loop standing
# still: the same deadline, failures and restarts as a step on the loop.

TWO_WORKERS = {"backend": "process", "num_workers": 2}


@pytest.mark.worker_processes
def test_a_process_shim_step_past_its_deadline_names_the_late_sub_env_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "in-step"
    os.mkfifo(fifo)
    with aiovec.VectorEnv([CountingEnv, lambda: FifoStepEnv(str(fifo), block_at=2)],
                          timeout=2.0, **TWO_WORKERS) as envs:
        envs.reset(seed=0)
        envs.step(np.ones(2, np.int64))
        started = time.monotonic()
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            envs.step(np.ones(2, np.int64))
        assert 1.5 < time.monotonic() - started < 30
        assert caught.value.env_ids == (1,)
        assert caught.value.partial_result[0][0].tolist() == [2, 1]  # sub-env 0 stepped
        assert envs.statistics().timeouts == 1
        assert envs.unusable_envs == (1,)
        envs.reset(seed=0)  # remakes sub-env 1 (its worker was killed)
        obs, *_ = envs.step(np.ones(2, np.int64))
        assert obs.tolist() == [[3, 2], [1, 1]]


@pytest.mark.worker_processes
def test_a_worker_dying_in_a_process_shim_step_is_named_with_its_exit_status() -> None:
    with aiovec.VectorEnv([CountingEnv, CrashingEnv], **TWO_WORKERS) as envs:
        envs.reset(seed=0)
        envs.step(np.ones(2, np.int64))
        envs.step(np.ones(2, np.int64))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            envs.step(np.ones(2, np.int64))
        assert caught.value.env_ids == (1,)
        died = caught.value.exceptions[0].__cause__
        assert isinstance(died, aiovec.WorkerDiedError) and "exit code 7" in str(died)
        assert caught.value.partial_result[0][0].tolist() == [3, 1]
        assert "in flight" not in repr(envs.async_env)


@pytest.mark.worker_processes
def test_a_worker_dying_in_a_process_shim_step_is_restarted_under_a_policy() -> None:
    with aiovec.VectorEnv([CountingEnv, CrashingEnv], restart=FAST, **TWO_WORKERS) as envs:
        envs.reset(seed=0)
        for _ in range(2):
            envs.step(np.ones(2, np.int64))
        _, _, _, _, infos = envs.step(np.ones(2, np.int64))
        assert infos["_restart"].tolist() == [False, True]
        assert "exit code 7" in infos["restart"][1]
        assert envs.statistics().restarts == 1
        for _ in range(2):  # the new sub-env's first observation, then its first step
            obs, *_ = envs.step(np.ones(2, np.int64))
        assert obs.tolist() == [[5, 1], [1, 1]]


@pytest.mark.worker_processes
def test_ctrl_c_during_a_process_shim_step_leaves_the_workers_in_step(
    tmp_path: Path, ctrl_c: None,
) -> None:
    # Ctrl-C while the shim waits on the workers' sockets: the wait is given up, nothing
    # read is lost, and the same workers serve the next reset and steps.
    fifo = tmp_path / "in-step"
    os.mkfifo(fifo)
    with aiovec.VectorEnv([PidEnv, lambda: FifoStepEnv(str(fifo), block_at=2)],
                          timeout=3.0, restart=FAST, **TWO_WORKERS) as envs:
        envs.reset(seed=0)
        pids = envs.get_attr("pid")
        envs.step(np.ones(2, np.int64))

        started = time.monotonic()
        # (once sub-env 1 hangs in its step)
        with ctrl_c_once(lambda: wait_for_fifo(str(fifo), 30)), pytest.raises(KeyboardInterrupt):
            envs.step(np.ones(2, np.int64))
        assert time.monotonic() - started < 30  # not the hang's 120 s, nor the deadline
        assert "in flight" not in repr(envs.async_env)
        assert envs.unusable_envs == (0, 1)
        envs.reset(seed=0)  # sub-env 1 still hangs: past the deadline, it is restarted
        assert envs.get_attr("pid")[0] == pids[0]  # worker 0 kept its stream in step
        obs, *_ = envs.step(np.ones(2, np.int64))
        assert obs[0].tolist() == [3, 2]


class HandlerSettingEnv(CountingEnv):
    """Sets a SIGINT handler of its own at its first step (a library imported lazily)."""

    def step(self, action: int) -> Any:
        if not self.steps:
            signal.signal(signal.SIGINT, _own_handler)
        return super().step(action)


def _own_handler(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def test_a_sigint_handler_set_during_a_shim_step_is_left_in_place() -> None:
    try:
        with aiovec.VectorEnv([HandlerSettingEnv], backend="inline") as envs:
            envs.reset(seed=0)
            envs.step(np.ones(1, np.int64))
            assert signal.getsignal(signal.SIGINT) is _own_handler
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.worker_processes
def test_replies_waiting_in_the_sockets_at_the_deadline_are_not_late() -> None:
    # The shim's wait reads what arrived before it gives up: a deadline that passes while
    # the replies sit unread in the sockets (a busy machine) loses no sub-env.
    from aiovec._backends._readable import readable
    from aiovec._core._backend import Waited

    with aiovec.VectorEnv([CountingEnv] * 4, **TWO_WORKERS) as envs:
        envs.reset(seed=0)
        core = envs.async_env
        in_flight = core._engine.submit_step(np.ones(4, np.int64), None, True)
        try:
            sockets = {worker.sock.fileno() for worker in core._engine.backend._workers}
            deadline = time.monotonic() + 30
            while readable(sockets, 0.1) != sockets and time.monotonic() < deadline:
                pass
            assert in_flight.pending.wait_here(1e-9) is Waited.DONE
        finally:
            core._engine.release(in_flight)
        obs, *_ = envs.step(np.ones(4, np.int64))
        assert obs[:, 0].tolist() == [2] * 4
