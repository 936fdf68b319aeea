"""First-ready sends alongside other calls: a masked ``reset`` leaves the other sub-envs'
sends, aborts and queue alone; a ``recv`` whose sends wait on a remake waits without
spinning; a ``reset`` that fails or is cancelled loses no step unseen; a queued action that
cannot be sent is the caller's mistake, reported by ``recv``."""

from __future__ import annotations

import functools
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec.testing import FaultLedger
from tests.core.held import HOLD_LIMIT, POLL, AsyncHeldEnv, Gates, HeldEnv
from tests.core.test_recv_bounds import ids
from tests.faults.envs import faulty

pytestmark = pytest.mark.anyio


@pytest.fixture
def ledger(tmp_path: Path) -> FaultLedger:
    """Where this test's ``FaultyEnv`` instances record what they did."""
    return FaultLedger(tmp_path / "ledger")


def _hold_reset(directory: Path, index: int) -> None:
    (directory / f"reset-held-{index}").touch()


def _reset_held(directory: Path) -> bool:
    return (directory / "hold-reset").exists()


class ResetHeldEnv(HeldEnv):
    """``HeldEnv`` whose reset with ``options={"hold": True}`` waits until the test removes
    the ``hold-reset`` gate (a sandbox's slow reset)."""

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if options and options.get("hold"):
            _hold_reset(self.directory, self.index)
            deadline = time.monotonic() + HOLD_LIMIT
            while _reset_held(self.directory) and time.monotonic() < deadline:
                time.sleep(POLL)
        return super().reset(seed=seed)


class AsyncResetHeldEnv(AsyncHeldEnv):
    """``ResetHeldEnv`` as a coroutine env."""

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if options and options.get("hold"):
            _hold_reset(self.directory, self.index)
            with anyio.move_on_after(HOLD_LIMIT):
                while _reset_held(self.directory):  # noqa: ASYNC110
                    await anyio.sleep(POLL)  # the same file gate as the thread backend's
        return await super().reset(seed=seed)


@pytest.mark.parametrize("backend", ["thread", "async"])
async def test_a_long_masked_reset_leaves_the_others_queue_sends_and_aborts_alone(
        anyio_backend: Any, backend: str, gates: Gates) -> None:
    """Cap 1 while sub-env 0's reset is held: the step queued behind 1 goes out as 1 lands,
    ``send`` and ``abort`` of other sub-envs are accepted, and those of 0 refused."""
    env_class = AsyncResetHeldEnv if backend == "async" else ResetHeldEnv
    factories = [functools.partial(env_class, str(gates.directory), index)
                 for index in range(4)]
    async with aiovec.AsyncVectorEnv(factories, backend=backend, max_in_flight=1) as envs:
        await envs.reset()
        gates.hold(1, 2)
        envs.send(np.array([10]), [1])
        envs.send(np.array([20]), [2])
        (gates.directory / "hold-reset").touch()
        mask = np.array([True, False, False, False])
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(
                envs.reset, options={"reset_mask": mask, "hold": True}))
            await gates.until(lambda: (gates.directory / "reset-held-0").exists())
            envs.send(np.array([30]), [3])  # queued behind 2
            gates.release(1)
            with anyio.fail_after(30):
                first = await envs.recv(batch_size=1)
            assert ids(first) == [1]
            await gates.until(gates.entered, 2, 1)  # the queue moved during the reset
            assert (envs.num_stepping, envs.num_queued) == (1, 1)
            envs.abort([3])
            assert envs.num_queued == 0
            with pytest.raises(aiovec.BusyError, match="reset"):
                envs.send(np.array([40]), [0])
            with pytest.raises(aiovec.BusyError, match="reset"):
                envs.abort([0, 1])
            assert envs.unusable_envs == (3,)
            (gates.directory / "hold-reset").unlink()
        gates.release(2)
        with anyio.fail_after(30):
            second = await envs.recv(batch_size=1)
        assert ids(second) == [2] and second.rewards.tolist() == [20.0]
        assert envs.unusable_envs == (3,)
        assert gates.most_at_once() == 1
        assert envs.statistics().aborts == 1


class FailingResetEnv(HeldEnv):
    """``HeldEnv`` whose reset with ``options={"fail_times": n}`` raises the first ``n``
    times (counted in a file: a restart makes a new instance)."""

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        failures = self.directory / f"reset-failures-{self.index}"
        if options and options.get("fail_times", 0) > _reset_failures(failures):
            with open(failures, "a") as ledger:
                ledger.write("failed\n")
            raise RuntimeError(f"sub-env {self.index}'s reset failed (on purpose)")
        return super().reset(seed=seed)


def _reset_failures(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


async def test_recv_waits_without_spinning_while_its_sends_wait_on_a_remake(
        anyio_backend: Any, gates: Gates, no_leaks: None) -> None:
    """Process backend, cap 1: sub-env 0's masked reset fails, and so does the reset of its
    first restart, so its restart backs off for a second while hosts are remade: the queue
    waits. A ``recv`` owed a landed result and a queued step waits for the remake to end
    and polls the backend a handful of times, not in a loop; then both arrive."""
    factories = [functools.partial(FailingResetEnv, str(gates.directory), index)
                 for index in range(3)]
    policy = aiovec.RestartPolicy(backoff=1.0)
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=3,
                                     max_in_flight=1, restart=policy) as envs:
        await envs.reset(seed=0)
        backend = envs._engine.backend
        real_wait = backend.wait_arrivals
        polls = 0

        async def counted_wait(arrivals: Any, count: int) -> None:
            nonlocal polls
            polls += 1
            await real_wait(arrivals, count)

        backend.wait_arrivals = counted_wait  # type: ignore[method-assign]
        gates.hold(1)
        envs.send(np.array([10]), [1])
        envs.send(np.array([20]), [2])
        await gates.until(gates.entered, 1, 1)
        failures = gates.directory / "reset-failures-0"
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(envs.reset, options={
                "reset_mask": np.array([True, False, False]), "fail_times": 2}))
            await gates.until(lambda: _reset_failures(failures) == 2)
            gates.release(1)  # lands while the restart backs off
            with anyio.fail_after(30):
                while envs.num_ready < 1:  # noqa: ASYNC110
                    await anyio.sleep(POLL)  # a reply read from a socket: nothing to await
            assert (envs.num_ready, envs.num_stepping, envs.num_queued) == (1, 0, 1)
            polls = 0
            with anyio.fail_after(30):
                batch = await envs.recv(batch_size=2)
        assert ids(batch) == [1, 2] and batch.rewards.tolist() == [10.0, 20.0]
        assert polls < 50, f"recv polled the backend {polls} times while dispatch waited"
        assert envs.statistics().restarts == 2


async def test_a_reset_refused_at_submit_keeps_the_waiting_results(
        anyio_backend: Any, ledger: FaultLedger, no_leaks: None) -> None:
    """Process backend: reset options that do not pickle are refused before anything is
    sent; the masked sub-env's step result, waiting for ``recv``, is still received."""
    async with aiovec.AsyncVectorEnv(faulty(2, ledger), backend="process",
                                     num_workers=1) as envs:
        await envs.reset(seed=0)
        envs.send(np.ones(2, dtype=np.int64))
        first = await envs.recv(batch_size=1)
        waiting = 1 - int(first.env_ids[0])
        with anyio.fail_after(30):
            while envs.num_ready < 1:  # noqa: ASYNC110
                await anyio.sleep(POLL)  # the reply is read from a socket: nothing to await
        mask = np.arange(2) == waiting
        with pytest.raises((TypeError, pickle.PicklingError)):
            await envs.reset(options={"reset_mask": mask, "tool": threading.Lock()})
        assert envs.num_ready == 1 and envs.unusable_envs == ()
        batch = await envs.recv()
        assert ids(batch) == [waiting]


async def test_a_reset_cancelled_before_it_starts_loses_no_step_unseen(
        anyio_backend: Any, ledger: FaultLedger) -> None:
    """Inline: a masked reset cancelled before it ran dropped the sub-env's waiting result;
    that sub-env then needs a reset, and is not left steppable one step ahead."""
    async with aiovec.AsyncVectorEnv(faulty(2, ledger), backend="inline") as envs:
        await envs.reset(seed=0)
        envs.send(np.ones(2, dtype=np.int64))
        first = await envs.recv(batch_size=1)  # inline ran both: one result waits
        waiting = 1 - int(first.env_ids[0])
        assert envs.num_ready == 1
        with anyio.move_on_after(0) as scope:
            await envs.reset(options={"reset_mask": np.arange(2) == waiting})
        assert scope.cancelled_caught
        assert ledger.count(waiting, "reset") == 1  # the cancelled reset never ran
        assert envs.num_ready == 0 and envs.unusable_envs == (waiting,)
        with pytest.raises(aiovec.ResetNeededError):
            envs.send(np.ones(1, dtype=np.int64), [waiting])


class Unpicklable:
    """A tool client that copies but cannot travel to another process."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Unpicklable:
        return Unpicklable()

    def __reduce_ex__(self, protocol: object) -> Any:
        raise pickle.PicklingError("a tool client cannot be pickled")


class ToolCallEnv(gym.Env[Any, Any]):
    """Takes any dict as its action (``ObjectSpace(dict)``); its reward is the step count."""

    observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
    action_space = aiovec.ObjectSpace(dict)

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action: Any) -> Any:
        self.steps += 1
        return np.array([self.steps], dtype=np.float64), float(self.steps), False, False, {}


async def test_a_queued_action_that_cannot_travel_is_the_callers_mistake(
        anyio_backend: Any, no_leaks: None) -> None:
    """Process backend, cap 1: sub-env 1's queued action does not pickle. ``recv`` raises
    for it (naming it) instead of hanging; not counted as a failure of the sub-env nor
    restarted: it never got the action and steps on as it was."""
    async with aiovec.AsyncVectorEnv([ToolCallEnv] * 2, backend="process", num_workers=1,
                                     max_in_flight=1, restart=True) as envs:
        await envs.reset(seed=0)
        envs.send([{"tool": "search"}], [0])
        envs.send([{"tool": Unpicklable()}], [1])
        assert envs.num_queued == 1
        with anyio.fail_after(30), pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.recv(batch_size=2)
        (error,) = caught.value.exceptions
        assert isinstance(error, aiovec.SubEnvError) and error.env_id == 1
        assert isinstance(error.__cause__, pickle.PicklingError)
        assert "sub-env 1" in str(error)
        assert ids(caught.value.partial_result) == [0, 1]
        stats = envs.statistics()
        assert (stats.errors, stats.restarts) == (0, 0)
        assert envs.unusable_envs == ()
        envs.send([{"tool": "search"}], [1])
        batch = await envs.recv()
        assert ids(batch) == [1] and batch.rewards.tolist() == [1.0]
