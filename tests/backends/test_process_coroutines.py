"""Coroutine envs (``aiovec.AsyncEnv``) on the process backend: an event loop per worker,
many sub-envs per worker, with the async backend's guarantees (a missed deadline or an abort
cancels that sub-env's coroutine alone), on every event loop of the caller's."""

from __future__ import annotations

import asyncio
import functools
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import aiovec
from aiovec._backends._process import _backend as process_backend
from tests.backends_matrix import for_backend
from tests.core.test_cleanups import directories, directory_envs, record, wait_for_records
from tests.core.test_differential import (
    ENV_KINDS,
    NUM_ENVS,
    NUM_STEPS,
    Reference,
    check_rollout,
    env_factory,
    reference,  # noqa: F401 (the fixture: SyncVectorEnv's rollouts)
    rollout,
)
from tests.core.test_limits import (
    GIVE_BACK,
    HOLD_A_WHILE,
    KEEP,
    NOTHING,
    AsyncLeaseEnv,
    Holders,
    holders,
)
from tests.leaks import child_pids

pytestmark = pytest.mark.anyio

#: Seconds a test waits for what must happen at once (a machine can be slow, never this slow).
PROMPTLY = 10.0


async def logged(log: Path, line: str) -> None:
    """Return once ``line`` is in the file ``log``, which a worker process writes: nothing
    in this process can be awaited for it, so the file is looked at until it is there."""
    path = anyio.Path(log)
    with anyio.fail_after(PROMPTLY):
        while not await path.exists() or line not in (await path.read_text()).split("\n"):  # noqa: ASYNC110
            await anyio.sleep(0.01)


class WorkerEnv(aiovec.AsyncEnv[Any, Any]):
    """A coroutine env that says where it runs. Action ``a``: the step awaits ``a`` seconds
    (``inf``: until cancelled). It notes in ``log``, a file shared with the test, a step
    that hangs, a cancelled step and its close."""

    def __init__(self, index: int = 0, log: str | None = None,
                 rendezvous: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(-math.inf, math.inf, (2,), np.float64)
        self.action_space = gym.spaces.Box(0.0, math.inf, (), np.float64)
        self.index, self.log, self.rendezvous = index, log, rendezvous
        self.steps = 0
        self.token = int.from_bytes(os.urandom(4), "little")  # tells a remade env apart

    def _note(self, line: str) -> None:
        if self.log is not None:
            with open(self.log, "a") as file:
                file.write(f"{self.index} {line}\n")

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(seed=seed)
        self.steps = 0
        return np.array([self.index, 0.0]), {"pid": os.getpid(), "token": self.token}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.rendezvous is not None:  # every co-hosted sub-env must be in its step at once
            await _meet(self.rendezvous)
        if action == math.inf:
            self._note("hangs")
        try:
            await anyio.sleep(float(action))
        except anyio.get_cancelled_exc_class():
            self._note("cancelled")
            raise
        self.steps += 1
        return (np.array([self.index, self.steps]), 1.0, False, False,
                {"pid": os.getpid(), "token": self.token})

    async def close(self) -> None:
        self._note("closed")


_arrived: dict[int, anyio.Event] = {}
_count: dict[int, int] = {}


async def _meet(expected: int) -> None:
    """Wait until ``expected`` sub-envs of this process are in their step (fails if they
    are stepped one after another: the first would wait forever)."""
    event = _arrived.setdefault(expected, anyio.Event())
    _count[expected] = _count.get(expected, 0) + 1
    if _count[expected] == expected:
        event.set()
    with anyio.fail_after(PROMPTLY):
        await event.wait()


class BlocksTheLoop(WorkerEnv):
    """Its first step ever (of any instance: ``log`` remembers) blocks its worker's event
    loop, as synchronous code in a coroutine does."""

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.log is not None
        if not os.path.exists(self.log):  # noqa: ASYNC240 (what it does is the point)
            self._note("blocks")
            time.sleep(3600)  # noqa: ASYNC251
        return await super().step(action)


class Raises(WorkerEnv):
    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        raise ConnectionResetError("the tool server hung up")


class UnpicklableInfo(WorkerEnv):
    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = await super().step(action)
        return obs, reward, terminated, truncated, {"lock": threading.Lock()}


class PlainEnv(gym.Env[Any, Any]):
    """A plain gymnasium env with ``WorkerEnv``'s spaces."""

    observation_space = gym.spaces.Box(-math.inf, math.inf, (2,), np.float64)
    action_space = gym.spaces.Box(0.0, math.inf, (), np.float64)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros(2), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.zeros(2), 0.0, False, False, {}


def factories(count: int, **kwargs: Any) -> list[Any]:
    return [functools.partial(WorkerEnv, index, **kwargs) for index in range(count)]


def zeros(count: int) -> np.ndarray[Any, Any]:
    return np.zeros(count, dtype=np.float64)


async def test_coroutine_envs_run_in_worker_processes_many_at_once(
        anyio_backend: Any, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(factories(6, rendezvous=3), backend="process",
                                     num_workers=2) as envs:
        assert "process backend, 2/2 workers alive" in repr(envs)
        obs, infos = await envs.reset(seed=0)
        pids = set(infos["pid"].tolist())
        assert len(pids) == 2 and os.getpid() not in pids
        assert obs[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
        # Each worker's three sub-envs must all be inside their step at once to finish.
        obs, rewards, _, _, infos = await envs.step(zeros(6))
        assert obs.tolist() == [[index, 1] for index in range(6)]
        assert rewards.tolist() == [1.0] * 6
        # The workers time the steps into shared memory, as for plain envs.
        latencies = envs.statistics().step_latency
        assert [summary.count for summary in latencies] == [1] * 6
        assert all(0 < summary.mean < PROMPTLY for summary in latencies)
        assert await envs.get_attr("steps") == (1,) * 6
        await envs.set_attr("index", [10, 11, 12, 13, 14, 15])
        assert await envs.call("get_wrapper_attr", "index") == (10, 11, 12, 13, 14, 15)
        assert envs.np_random_seed == (0, 1, 2, 3, 4, 5)


async def test_first_ready_results_land_as_each_sub_env_finishes(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    log = tmp_path / "log"
    async with aiovec.AsyncVectorEnv(factories(4, log=str(log)), backend="process",
                                     num_workers=1) as envs:
        await envs.reset()
        envs.send(np.array([math.inf, 0.0, 0.0, 0.0]))  # sub-env 0 never finishes
        with anyio.fail_after(PROMPTLY):
            batch = await envs.recv(batch_size=3)
        assert sorted(batch.env_ids.tolist()) == [1, 2, 3]  # not held back by sub-env 0
        await logged(log, "0 hangs")
        envs.abort([0])
        await logged(log, "0 cancelled")  # the abort cancelled its coroutine in the worker
        await envs.reset(options={"reset_mask": np.array([True, False, False, False])})
        obs, *_ = await envs.step(zeros(4))
        assert obs[:, 1].tolist() == [1, 2, 2, 2]
        assert envs.statistics().aborts == 1


async def test_a_missed_deadline_cancels_that_sub_env_alone(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    log = tmp_path / "log"
    async with aiovec.AsyncVectorEnv(factories(3, log=str(log)), backend="process",
                                     num_workers=1, timeout=0.5) as envs:
        _, infos = await envs.reset()
        pid, tokens = infos["pid"][0], infos["token"].tolist()
        with pytest.raises(aiovec.EnvTimeoutError) as raised:
            await envs.step(np.array([0.0, math.inf, 0.0]))
        assert raised.value.env_ids == (1,)
        assert envs.unusable_envs == (1,)
        await logged(log, "1 cancelled")
        _, infos = await envs.reset()
        assert infos["pid"].tolist() == [pid] * 3  # the worker lived on
        new_tokens = infos["token"].tolist()
        assert new_tokens[0] == tokens[0] and new_tokens[2] == tokens[2]
        assert new_tokens[1] != tokens[1]  # remade
        await logged(log, "1 closed")  # the one given up on was closed
        obs, *_ = await envs.step(zeros(3))
        assert obs[:, 1].tolist() == [1, 1, 1]
        statistics = envs.statistics()
        assert (statistics.timeouts, statistics.restarts) == (1, 1)


async def test_a_worker_whose_loop_is_blocked_is_killed_and_replaced(
        anyio_backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        no_leaks: None) -> None:
    monkeypatch.setattr(process_backend, "_ACK_GRACE", 0.5)
    made = [functools.partial(WorkerEnv, 0),
            functools.partial(BlocksTheLoop, 1, log=str(tmp_path / "log"))]
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=1,
                                     timeout=0.5) as envs:
        _, infos = await envs.reset()
        pid = infos["pid"][0]
        with pytest.raises(aiovec.EnvTimeoutError):
            await envs.step(zeros(2))
        with anyio.fail_after(PROMPTLY):
            _, infos = await envs.reset()  # the worker never acknowledges: a new one
        assert infos["pid"].tolist()[0] != pid
        obs, *_ = await envs.step(zeros(2))
        assert obs[:, 1].tolist() == [1, 1]


async def test_a_raising_coroutine_env_is_named_with_its_traceback(
        anyio_backend: Any, no_leaks: None) -> None:
    made = [functools.partial(WorkerEnv, 0), functools.partial(Raises, 1),
            functools.partial(UnpicklableInfo, 2)]
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=1) as envs:
        await envs.reset()
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.step(zeros(3))
        errors = {error.env_id: error for error in raised.value.exceptions}
        assert sorted(errors) == [1, 2]
        assert isinstance(errors[1].__cause__, ConnectionResetError)
        assert "the tool server hung up" in errors[1].remote_traceback
        assert isinstance(errors[2].__cause__, aiovec.SerializationError)
        assert raised.value.partial_result[0][0].tolist() == [0, 1]


async def test_the_restart_policy_and_episode_timeouts_hold_in_workers(
        anyio_backend: Any, no_leaks: None) -> None:
    made = [functools.partial(WorkerEnv, 0), functools.partial(Raises, 1)]
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=1, restart=True,
                                     episode_timeout=0.3) as envs:
        await envs.reset()
        _, _, _, truncations, infos = await envs.step(zeros(2))
        assert truncations.tolist() == [False, True]
        assert "the tool server hung up" in infos["restart"][1]
        _, _, _, truncations, infos = await envs.step(np.array([2.0, 0.0]))
        assert truncations[0] and infos["episode_timeout"][0]


async def test_a_cancelled_caller_loses_nothing_and_reset_recovers(
        anyio_backend: Any, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(factories(3), backend="process", num_workers=2) as envs:
        await envs.reset()
        with anyio.move_on_after(0.1):  # the step runs on, as on the async backend
            await envs.step(np.full(3, 0.5))
        assert envs.unusable_envs == (0, 1, 2)
        obs, _ = await envs.reset()
        obs, *_ = await envs.step(zeros(3))
        assert obs[:, 1].tolist() == [1, 1, 1]


async def test_closing_during_a_hung_step_leaves_nothing_behind(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    log = tmp_path / "log"
    envs = aiovec.AsyncVectorEnv(factories(2, log=str(log)), backend="process",
                                 num_workers=1, close_timeout=0.5)
    await envs.reset()
    envs.send(np.array([math.inf, 0.0]))
    await logged(log, "0 hangs")
    with anyio.fail_after(PROMPTLY):
        await envs.aclose()
    await envs.aclose()
    # As on the async backend: the sub-env still stepping at the close's bound is cancelled.
    assert sorted(log.read_text().split("\n")[:-1]) == ["0 cancelled", "0 hangs", "1 closed"]


def test_the_sync_shim_runs_coroutine_envs_on_process_workers() -> None:
    children = child_pids()
    with aiovec.VectorEnv(factories(4), backend="process", num_workers=2) as envs:
        obs, infos = envs.reset(seed=1)
        assert len(set(infos["pid"].tolist())) == 2
        for step in range(1, 4):
            obs, *_ = envs.step(zeros(4))
            assert obs[:, 1].tolist() == [step] * 4
    assert child_pids() <= children


async def test_one_vector_env_runs_one_kind_of_env(anyio_backend: Any, no_leaks: None) -> None:
    made = [functools.partial(WorkerEnv, 0), PlainEnv]
    with pytest.raises(TypeError, match="one vector env runs one kind"):
        await aiovec.AsyncVectorEnv(made, backend="process", num_workers=2).start()


async def test_limits_are_taken_without_blocking_the_workers_loop(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    """Four sub-envs of one worker share a limit of one: a take that blocked the worker's
    event loop would never see the holder give back."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            [functools.partial(AsyncLeaseEnv, counter)] * 4, backend="process",
            num_workers=1, timeout=60,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        for _ in range(2):
            await envs.step(np.full(4, HOLD_A_WHILE))
        assert envs.statistics().limits["sandbox"].taken == 8
    assert counter.read() == (0, 1)
    assert envs.statistics().limits["sandbox"].in_use == 0


async def test_a_take_cut_by_a_deadline_leaves_the_line(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    """Sub-env 0 keeps the only hold; sub-env 1's take waits past the deadline and is
    cancelled with its step (its worker lives on); once 0 gives back, takes go on."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            [functools.partial(AsyncLeaseEnv, counter)] * 2, backend="process",
            num_workers=1, restart=True,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        await envs.step(np.array([KEEP, NOTHING]))
        _, _, _, _, infos = await envs.step(np.array([NOTHING, HOLD_A_WHILE]), timeout=0.5)
        assert infos["_restart"].tolist() == [False, True]
        with anyio.fail_after(60):
            await envs.step(np.array([GIVE_BACK, HOLD_A_WHILE]))
            await envs.step(np.array([HOLD_A_WHILE, HOLD_A_WHILE]))
        assert envs.statistics().limits["sandbox"].taken == 3
    assert counter.read()[1] == 1


async def _made_later(index: int) -> WorkerEnv:
    """An async factory: awaited on the worker's event loop."""
    await anyio.lowlevel.checkpoint()
    return WorkerEnv(index)


@pytest.mark.parametrize("kind", ["lambda", "async factory"])
async def test_any_factory_of_coroutine_envs_gets_a_coroutine_worker(
        anyio_backend: Any, kind: str, no_leaks: None) -> None:
    made = ([lambda index=index: WorkerEnv(index) for index in range(3)] if kind == "lambda"
            else [functools.partial(_made_later, index) for index in range(3)])
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=2) as envs:
        obs, _ = await envs.reset()
        obs, *_ = await envs.step(zeros(3))
        assert obs.tolist() == [[0, 1], [1, 1], [2, 1]]


async def test_cleanups_of_coroutine_envs_run_once_at_close_and_after_a_sigkill(
        tmp_path: Path, no_leaks: None) -> None:
    """Async cleanups, run on the worker's loop at a close, by its fork server once the
    worker is SIGKILLed (its sub-envs then restarted)."""
    made = for_backend("async", directory_envs(tmp_path, 2, cleanup="async"))
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=2,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        (_, second) = directories(tmp_path)
        os.kill(int(second.split("-")[1]), signal.SIGKILL)
        assert await anyio.to_thread.run_sync(wait_for_records, tmp_path, 1) == [second]
        _, _, _, truncated, _ = await envs.step(np.ones(2))
        assert truncated.tolist() == [False, True]
    assert directories(tmp_path) == [] and len(set(record(tmp_path))) == 3
    assert envs.statistics().cleanups_run == 3  # the fork server's, once reported, too


async def test_a_late_acknowledgement_waiting_to_be_read_keeps_its_worker(
        anyio_backend: Any, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """The worker acknowledged the sub-env given up on long before the restart: the
    restart reads that acknowledgement (on trio nothing reads in between) and keeps the
    worker, with its other sub-env."""
    monkeypatch.setattr(process_backend, "_ACK_GRACE", 0.2)
    async with aiovec.AsyncVectorEnv(factories(2), backend="process", num_workers=1,
                                     timeout=0.3) as envs:
        _, infos = await envs.reset()
        with pytest.raises(aiovec.EnvTimeoutError):
            await envs.step(np.array([0.0, math.inf]))
        await anyio.sleep(0.5)  # the scenario itself: the restart comes past the grace
        _, infos_after = await envs.reset()
        assert infos_after["pid"].tolist() == infos["pid"].tolist()
        assert infos_after["token"][0] == infos["token"][0]


async def test_a_worker_whose_sub_envs_are_all_lost_still_closes(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    log = tmp_path / "log"
    envs = aiovec.AsyncVectorEnv(factories(2, log=str(log)), backend="process",
                                 num_workers=2, timeout=0.3, close_timeout=30)
    await envs.reset()
    with pytest.raises(aiovec.EnvTimeoutError):
        await envs.step(np.array([0.0, math.inf]))
    await logged(log, "1 closed")  # given up on, and closed in its worker
    await envs.aclose()
    # Each worker was asked to close, and exited of itself (not terminated, not killed).
    assert [worker.process.exitcode() for worker in envs._engine.backend.workers] == [0, 0]


def flaky_factory(path: str, index: int) -> WorkerEnv:
    """A plain function (not a class): makes its env the first time, raises ever after."""
    if os.path.exists(path):
        raise ConnectionError("the tool server is down")
    Path(path).touch()
    return WorkerEnv(index)


async def test_a_restarted_worker_whose_first_factory_fails_reports_that_failure(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    made = [functools.partial(flaky_factory, str(tmp_path / "made"), 0),
            functools.partial(WorkerEnv, 1)]
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=1,
                                     parent_worker=False) as envs:  # a process, to SIGKILL
        _, infos = await envs.reset()
        os.kill(int(infos["pid"][0]), signal.SIGKILL)
        with pytest.raises(aiovec.SubEnvErrorGroup):
            await envs.step(zeros(2))  # the worker died
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.reset()  # a new worker: sub-env 0's factory fails there
        assert raised.value.env_ids == (0,)
        assert isinstance(raised.value.exceptions[0].__cause__, ConnectionError)
        assert raised.value.partial_result[0][1].tolist() == [1, 0]


async def test_a_first_factory_that_fails_at_start_fails_alone(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    (tmp_path / "made").touch()  # the flaky factory fails from the start
    log_path = tmp_path / "log"
    log = str(log_path)
    made = [functools.partial(flaky_factory, str(tmp_path / "made"), 0),
            lambda: WorkerEnv(1, log), lambda: WorkerEnv(2, log)]
    envs = aiovec.AsyncVectorEnv(made, backend="process", num_workers=1)
    with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
        await envs.start()
    assert raised.value.env_ids == (0,)  # not the coroutine envs after it
    assert isinstance(raised.value.exceptions[0].__cause__, ConnectionError)
    await envs.aclose()
    # The worker closed the others, and exited of itself (it was never attached).
    assert sorted(log_path.read_text().split("\n")[:-1]) == ["1 closed", "2 closed"]
    assert [worker.process.exitcode() for worker in envs._engine.backend.workers] == [0]


class Counted(WorkerEnv):
    """Counts, across processes (``counter``), the sub-envs inside their step at once."""

    def __init__(self, index: int, counter: Holders) -> None:
        super().__init__(index)
        self.counter = counter

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.counter.add(1)
        try:
            return await super().step(action)
        finally:
            self.counter.add(-1)


@pytest.mark.parametrize("cap", [2, 3])
async def test_max_concurrency_caps_the_sub_envs_at_work_across_workers(
        anyio_backend: Any, cap: int, tmp_path: Path, no_leaks: None) -> None:
    """Each worker takes its part of the cap (2 workers: 1 + 1, or 1 + 2)."""
    counter = holders(tmp_path)
    made = [functools.partial(Counted, index, counter) for index in range(6)]
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=2,
                                     max_concurrency=cap) as envs:
        await envs.reset()
        await envs.step(np.full(6, 0.05))
    inside, peak = counter.read()
    assert inside == 0 and 1 <= peak <= cap, peak


class Ticking(WorkerEnv):
    """Keeps a task of its own running (a keepalive, say), which notes each tick in a file."""

    ticker: asyncio.Task[None]

    async def tick(self, path: str) -> None:
        while True:
            with open(path, "a") as file:  # noqa: ASYNC230 (a line, now and then)
                file.write("tick\n")
            await anyio.sleep(0.01)

    async def close(self) -> None:
        self.ticker.cancel()


async def _ticking(path: str) -> Ticking:
    env = Ticking(0)
    env.ticker = asyncio.get_running_loop().create_task(env.tick(path))
    return env


def _ticks(path: str) -> int:
    return len(Path(path).read_text().split()) if os.path.exists(path) else 0


async def _after_ticks(path: str) -> WorkerEnv:
    """Made once the other worker's env has ticked 3 times (or 30 s passed)."""
    with anyio.move_on_after(30):
        while _ticks(path) < 3:  # noqa: ASYNC110 (another process's doing)
            await anyio.sleep(0.01)
    return WorkerEnv(1)


async def test_a_workers_loop_runs_on_while_the_others_are_made(
        anyio_backend: Any, tmp_path: Path, no_leaks: None) -> None:
    """Worker 0 said hello; worker 1 makes its env only once worker 0's env has ticked:
    worker 0's loop must keep running until the vector env attaches them both."""
    path = str(tmp_path / "ticks")
    made = [functools.partial(_ticking, path), functools.partial(_after_ticks, path)]
    async with aiovec.AsyncVectorEnv(made, backend="process", num_workers=2) as envs:
        assert _ticks(path) >= 3
        await envs.reset()


def test_no_workers_is_refused_as_before() -> None:
    with pytest.raises(ValueError, match="num_workers must be between 1 and 2"):
        aiovec.AsyncVectorEnv([functools.partial(WorkerEnv, 0)] * 2, backend="process",
                              num_workers=0, max_concurrency=2)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the loops: the tests above
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.value)
@pytest.mark.parametrize("kind", ENV_KINDS)
async def test_coroutine_env_rollouts_on_workers_match_sync_vector_env(
        anyio_backend: Any, mode: AutoresetMode, kind: str,
        reference: Reference) -> None:  # noqa: F811 (the fixture)
    """Gymnasium's envs behind ``AsyncAdapter``, on two coroutine workers: every
    observation, reward, ending and info as ``SyncVectorEnv``'s, bit for bit, in every
    autoreset mode (seeds, partial resets and options included)."""
    seed = 1234 + ENV_KINDS.index(kind)
    factories = [env_factory(kind, "async")] * NUM_ENVS
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2,
                                     autoreset_mode=mode) as envs:
        actual = await rollout(envs.reset, envs.step, envs.action_space, mode, seed,
                               NUM_STEPS)
    check_rollout(actual, reference(kind, mode, seed, NUM_STEPS))
