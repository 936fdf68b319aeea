"""First-ready batches: ``send`` / ``recv`` / ``batches`` on every backend."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import aiovec
from aiovec.testing import AsyncAdapter, CountingEnv, EpisodeEnv
from tests.backends_matrix import (
    CONCURRENT_IN_PROCESS_BACKENDS,
    LOCAL_BACKENDS,
    LOCAL_DEADLINE_BACKENDS,
    slow_on,
)
from tests.core.test_differential import as_async, rollout, run_without_loop
from tests.envs import RaisingEnv
from tests.helpers import assert_identical

#: Episodes last 2 to 6 steps: 500 steps cover every autoreset case many times over.
FULL_BATCH_STEPS = 500
backends = pytest.mark.parametrize("backend", LOCAL_BACKENDS)
pytestmark = pytest.mark.anyio


def factory(backend: str, make: Any) -> Any:
    return functools.partial(AsyncAdapter, make) if backend == "async" else make


class DelayedEnv(gym.Env[Any, Any]):
    """Counts its steps (the observation) and sleeps ``delays[step % len(delays)]`` seconds
    in each, so tests can decide who finishes first."""

    def __init__(self, delays: tuple[float, ...] = (0.0,)) -> None:
        self.observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(1000)
        self.delays = delays
        self.steps = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        import time

        time.sleep(self.delays[self.steps % len(self.delays)])
        self.steps += 1
        return np.array([self.steps], dtype=np.float64), float(action), False, False, {}


class AsyncDelayedEnv(aiovec.AsyncEnv[Any, Any]):
    """``DelayedEnv`` as a coroutine env: the same counting, sleeping on the event loop."""

    def __init__(self, delays: tuple[float, ...] = (0.0,)) -> None:
        self.observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(1000)
        self.delays = delays
        self.steps = 0

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1), {}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(self.delays[self.steps % len(self.delays)])
        self.steps += 1
        return np.array([self.steps], dtype=np.float64), float(action), False, False, {}


def delayed(backend: str, delays: tuple[float, ...] = (0.0,)) -> Any:
    env_class = AsyncDelayedEnv if backend == "async" else DelayedEnv
    return functools.partial(env_class, delays)


@backends
async def test_every_result_comes_back_once_and_no_sub_env_starves(
        anyio_backend: Any, backend: str) -> None:
    """Random batch sizes and random subsets sent back: each sub-env's step count rises by
    exactly one per result, its reward is the action it was sent, and all keep stepping."""
    num_envs = 8
    rng = np.random.default_rng(0)
    async with aiovec.AsyncVectorEnv([delayed(backend)] * num_envs, backend=backend,
                                     batch_size=3) as envs:
        await envs.reset(seed=1)
        steps = np.zeros(num_envs, dtype=np.int64)
        sent: dict[int, int] = {}
        actions = rng.integers(0, 1000, num_envs)
        envs.send(actions)
        sent.update(enumerate(actions.tolist()))
        idle: list[int] = []
        received = Counter[int]()
        for _ in range(300):
            batch = await envs.recv(batch_size=int(rng.integers(1, 5)))
            assert len(set(batch.env_ids.tolist())) == len(batch.env_ids)
            for row, env_index in enumerate(batch.env_ids.tolist()):
                steps[env_index] += 1
                assert batch.observations[row, 0] == steps[env_index]
                assert batch.rewards[row] == sent.pop(env_index)
                received[env_index] += 1
            # Send back what was held last round and part of this batch; hold the rest.
            fresh = batch.env_ids.tolist()
            keep = int(rng.integers(0, len(fresh) + 1))
            chosen, idle = idle + fresh[:keep], fresh[keep:]
            if not chosen:
                continue
            actions = rng.integers(0, 1000, len(chosen))
            envs.send(actions, chosen)
            sent.update(zip(chosen, actions.tolist()))
        if idle:
            envs.send(np.zeros(len(idle), dtype=np.int64), idle)
            sent.update((env, 0) for env in idle)
        # Drain: everything sent comes back exactly once.
        async for batch in envs.batches(batch_size=2):
            for row, env_index in enumerate(batch.env_ids.tolist()):
                steps[env_index] += 1
                assert batch.observations[row, 0] == steps[env_index]
                assert batch.rewards[row] == sent.pop(env_index)
        assert not sent
        assert min(received.values()) >= 10, received
        stepped = await envs.get_attr("steps")
        assert list(stepped) == steps.tolist()


@pytest.mark.parametrize("backend", CONCURRENT_IN_PROCESS_BACKENDS)
async def test_the_first_to_finish_come_first(anyio_backend: Any, backend: str) -> None:
    """A slow sub-env does not hold back the fast ones' batch; it arrives later, intact."""
    factories = [delayed(backend, (2.0,))] + [delayed(backend)] * 5
    async with aiovec.AsyncVectorEnv(factories, backend=backend, batch_size=5) as envs:
        await envs.reset()
        envs.send(np.arange(6))
        fast = await envs.recv()
        assert sorted(fast.env_ids.tolist()) == [1, 2, 3, 4, 5]
        slow = await envs.recv()
        assert slow.env_ids.tolist() == [0]
        assert slow.observations.tolist() == [[1.0]]


@backends
async def test_cancelled_recv_loses_nothing(anyio_backend: Any, backend: str) -> None:
    """Results landing while a cancelled ``recv`` waited are returned by the next one."""
    factories = [delayed(backend, (0.0, 1.0))] + [delayed(backend)] * 3
    async with aiovec.AsyncVectorEnv(factories, backend=backend) as envs:
        await envs.reset()
        envs.send(np.arange(4))
        first = await envs.recv()  # env 0's first step is quick, its second one slow
        assert sorted(first.env_ids.tolist()) == [0, 1, 2, 3]
        envs.send(np.arange(4))
        with anyio.move_on_after(0.3) as scope:
            await envs.recv()
        # The inline backend runs the sub-envs inside recv, so nothing can cancel it.
        assert scope.cancelled_caught is (backend != "inline")
        if scope.cancelled_caught:
            batch = await envs.recv()
            assert sorted(batch.env_ids.tolist()) == [0, 1, 2, 3]
            order = np.argsort(batch.env_ids)
            assert batch.observations[order, 0].tolist() == [2.0] * 4
            assert batch.rewards[order].tolist() == [0.0, 1.0, 2.0, 3.0]


@backends
async def test_misuse_is_refused_and_touches_nothing(anyio_backend: Any, backend: str) -> None:
    async with aiovec.AsyncVectorEnv([factory(backend, CountingEnv)] * 4, backend=backend,
                                     batch_size=2) as envs:
        with pytest.raises(aiovec.ResetNeededError, match="before reset"):
            envs.send(np.zeros(4, dtype=np.int64))
        await envs.reset()
        with pytest.raises(aiovec.NothingSentError, match="nothing to receive"):
            await envs.recv()
        with pytest.raises(ValueError, match="expected shape"):
            envs.send(np.zeros(3, dtype=np.int64), [0, 1])
        with pytest.raises(ValueError, match="lists a sub-env twice"):
            envs.send(np.zeros(2, dtype=np.int64), [1, 1])
        with pytest.raises(ValueError, match=r"must lie in \[0, 4\)"):
            envs.send(np.zeros(1, dtype=np.int64), [4])
        with pytest.raises(ValueError, match="batch_size must be at most"):
            await envs.recv(batch_size=5)
        envs.send(np.zeros(2, dtype=np.int64), [0, 2])
        with pytest.raises(aiovec.BusyError, match=r"sub-env\(s\) \[2\]"):
            envs.send(np.zeros(2, dtype=np.int64), [1, 2])
        with pytest.raises(aiovec.BusyError):
            await envs.step(np.zeros(4, dtype=np.int64))
        batch = await envs.recv(batch_size=4)  # only two were sent
        assert sorted(batch.env_ids.tolist()) == [0, 2]
        counts = await envs.get_attr("steps")
        assert counts == (1, 0, 1, 0)
        obs, *_ = await envs.step(np.zeros(4, dtype=np.int64))  # all received: steps again
        assert len(obs) == 4


@pytest.mark.parametrize("backend", slow_on(LOCAL_BACKENDS, "process"))
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.value)
async def test_full_batches_match_sync_vector_env(
        anyio_backend: Any, backend: str, mode: AutoresetMode) -> None:
    """Sending every sub-env and receiving them all is a ``step``, rows in any order."""
    make = functools.partial(EpisodeEnv, "dict", 2, 6)
    reference_envs = SyncVectorEnv([make] * 4, autoreset_mode=mode)
    try:
        expected = run_without_loop(rollout(as_async(reference_envs.reset),
                                            as_async(reference_envs.step),
                                            reference_envs.action_space, mode, 7,
                                            FULL_BATCH_STEPS))
    finally:
        reference_envs.close()
    async with aiovec.AsyncVectorEnv([factory(backend, make)] * 4, backend=backend,
                                     autoreset_mode=mode) as envs:

        async def step(actions: Any) -> tuple[Any, ...]:
            envs.send(actions)
            batch = await envs.recv()
            return in_env_order(batch)

        actual = await rollout(envs.reset, step, envs.action_space, mode, 7, FULL_BATCH_STEPS)
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_identical(sorted_keys(got), sorted_keys(want), f"record {index}")


def in_env_order(batch: aiovec.StepBatch) -> tuple[Any, ...]:
    order = np.argsort(batch.env_ids)
    return (take(batch.observations, order), batch.rewards[order], batch.terminations[order],
            batch.truncations[order], take(batch.infos, order))


def take(value: Any, order: np.ndarray[Any, Any]) -> Any:
    if isinstance(value, np.ndarray):
        return value[order]
    if isinstance(value, dict):
        return {key: take(child, order) for key, child in value.items()}
    return tuple(take(child, order) for child in value)


def sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, tuple):
        return tuple(sorted_keys(child) for child in value)
    if isinstance(value, np.ndarray) and value.dtype == object:
        result = np.empty_like(value)
        for index in np.ndindex(value.shape):
            result[index] = sorted_keys(value[index])
        return result
    return value


@backends
async def test_a_failed_sub_env_is_reported_with_the_batch_kept(
        anyio_backend: Any, backend: str) -> None:
    raising = functools.partial(RaisingEnv, "step", 1)
    factories = [factory(backend, CountingEnv), factory(backend, raising)] * 2
    async with aiovec.AsyncVectorEnv(factories, backend=backend) as envs:
        await envs.reset()
        envs.send(np.zeros(4, dtype=np.int64))
        await envs.recv()
        envs.send(np.ones(4, dtype=np.int64))
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.recv()
        assert raised.value.env_ids == (1, 3)
        assert "injected failure in step" in raised.value.exceptions[0].remote_traceback
        batch = raised.value.partial_result
        assert isinstance(batch, aiovec.StepBatch)
        healthy = np.isin(batch.env_ids, [0, 2])
        assert batch.rewards[healthy].tolist() == [1.0, 1.0]
        assert envs.unusable_envs == (1, 3)
        with pytest.raises(aiovec.ResetNeededError, match=r"\[1\]"):
            envs.send(np.zeros(1, dtype=np.int64), [1])
        envs.send(np.zeros(2, dtype=np.int64), [0, 2])  # the healthy ones go on
        assert sorted((await envs.recv()).env_ids.tolist()) == [0, 2]
        await envs.reset(options={"reset_mask": np.array([False, True, False, True])})
        assert envs.unusable_envs == ()


@backends
async def test_the_restart_policy_restarts_inside_a_batch(anyio_backend: Any, backend: str) -> None:
    raising = functools.partial(RaisingEnv, "step", 0)
    factories = [factory(backend, CountingEnv), factory(backend, raising)]
    async with aiovec.AsyncVectorEnv(factories, backend=backend, restart=True) as envs:
        await envs.reset()
        envs.send(np.ones(2, dtype=np.int64))
        batch = await envs.recv()
        order = np.argsort(batch.env_ids)
        assert batch.truncations[order].tolist() == [False, True]
        assert batch.rewards[order].tolist() == [1.0, 0.0]
        restart_row = int(np.flatnonzero(batch.env_ids == 1)[0])
        assert "injected failure" in batch.infos["restart"][restart_row]
        envs.send(np.ones(2, dtype=np.int64))  # the restarted one steps on (a fresh episode)
        batch = await envs.recv()
        assert sorted(batch.env_ids.tolist()) == [0, 1]


@pytest.mark.parametrize("backend", LOCAL_DEADLINE_BACKENDS)
async def test_a_sub_env_past_its_deadline_times_out_alone(
        anyio_backend: Any, backend: str) -> None:
    factories = [delayed(backend, (0.0, 3.0))] + [delayed(backend)] * 3
    kwargs = {"num_workers": 4} if backend == "process" else {}
    async with aiovec.AsyncVectorEnv(factories, backend=backend, **kwargs) as envs:
        await envs.reset()
        envs.send(np.zeros(4, dtype=np.int64))
        await envs.recv()
        envs.send(np.zeros(4, dtype=np.int64), timeout=0.5)
        fast = await envs.recv(batch_size=3)
        assert sorted(fast.env_ids.tolist()) == [1, 2, 3]
        with anyio.fail_after(2.5):
            with pytest.raises(aiovec.EnvTimeoutError) as raised:
                await envs.recv()
        assert raised.value.env_ids == (0,)
        assert envs.statistics().timeouts == 1
        assert 0 in envs.unusable_envs
        await envs.reset(options={"reset_mask": np.array([True, False, False, False])})
        envs.send(np.zeros(4, dtype=np.int64))
        assert sorted((await envs.recv()).env_ids.tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", LOCAL_DEADLINE_BACKENDS)
async def test_closing_wakes_a_waiting_recv(anyio_backend: Any, backend: str) -> None:
    # Still stepping long after close_timeout; not much longer: an abandoned thread is waited
    # for at teardown (tests/conftest.py).
    envs = aiovec.AsyncVectorEnv([delayed(backend, (2.5,))] * 2, backend=backend,
                                 close_timeout=0.5)
    await envs.reset()
    envs.send(np.zeros(2, dtype=np.int64))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(envs.aclose)
            with pytest.raises(aiovec.ClosedError):
                await envs.recv()


def test_the_sync_shim_sends_and_receives() -> None:
    envs = aiovec.VectorEnv([CountingEnv] * 4, backend="thread", batch_size=2)
    try:
        envs.reset(seed=0)
        envs.send(np.arange(4))
        received = []
        for _ in range(2):
            batch = envs.recv()
            assert len(batch.env_ids) == 2
            received += batch.env_ids.tolist()
        assert sorted(received) == [0, 1, 2, 3]
    finally:
        envs.close()


# ---------------------------------------------------------------- regressions found in review


class BigTextEnv(gym.Env[str, str]):
    """400 kB text actions and observations: they travel pickled and fill socket buffers."""

    SIZE = 400_000

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Text(self.SIZE)
        self.action_space = gym.spaces.Text(self.SIZE)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "a", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "b" * self.SIZE, float(len(action)), False, False, {}


async def test_large_requests_and_replies_to_one_worker_do_not_deadlock(
        anyio_backend: Any) -> None:
    """Two big requests queued to one worker that is busy writing a big reply: the parent
    must read while it writes (on trio it flushes from the waiting task itself)."""
    async with aiovec.AsyncVectorEnv([BigTextEnv] * 2, backend="process", num_workers=1,
                                     close_timeout=2) as envs:
        await envs.reset(seed=0)
        envs.send(("c" * BigTextEnv.SIZE,), [0])
        envs.send(("c" * BigTextEnv.SIZE,), [1])
        with anyio.fail_after(20):
            batch = await envs.recv()
        assert sorted(batch.env_ids.tolist()) == [0, 1]
        assert [len(obs) for obs in batch.observations] == [BigTextEnv.SIZE] * 2


async def test_an_inline_step_that_timed_out_before_running_never_runs(
        anyio_backend: Any) -> None:
    async with aiovec.AsyncVectorEnv([DelayedEnv], backend="inline") as envs:
        await envs.reset()
        envs.send(np.array([7]), timeout=0.05)
        await anyio.sleep(0.1)  # the deadline passes before recv runs the step
        with pytest.raises(aiovec.EnvTimeoutError):
            await envs.recv()
        await envs.reset()
        envs.send(np.array([3]))
        batch = await envs.recv()
        assert batch.observations.tolist() == [[1.0]]  # one step since the reset, not two
        assert batch.rewards.tolist() == [3.0]


async def test_inline_requests_run_in_the_order_they_were_made(anyio_backend: Any) -> None:
    async with aiovec.AsyncVectorEnv([DelayedEnv] * 2, backend="inline") as envs:
        await envs.reset()
        envs.send(np.zeros(2, dtype=np.int64))
        assert await envs.get_attr("steps") == (1, 1)  # the sent steps ran first
        await envs.recv()


async def test_a_worker_neighbour_in_the_same_batch_is_reported_restarted(
        anyio_backend: Any) -> None:
    """Sub-env 1 (healthy result) shares a worker with sub-env 0, which kills it: both rows
    of the batch say restarted, as ``step`` would."""
    from aiovec.testing import Fault
    from tests.faults.envs import faulty

    factories = faulty(2, faults={0: [Fault("exit", "step", at=1)]})
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=1,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        envs.send(np.ones(2, dtype=np.int64))
        await envs.recv()
        envs.send(np.ones(2, dtype=np.int64))
        batch = await envs.recv()
        assert batch.truncations.tolist() == [True, True]
        assert all(batch.infos["_restart"])


async def test_a_send_while_recv_restarts_a_sub_env_waits_for_the_restart(
        anyio_backend: Any) -> None:
    """While ``recv`` remakes a failed sub-env, another task's ``send`` to the others is
    queued and dispatched once the restart ends (the pipelined loop's policy task sends
    then); a ``reset``, or a send to the sub-env being restarted, is refused."""
    started, finish = anyio.Event(), anyio.Event()
    steps: list[int] = []

    made = [0, 0]  # instances made per sub-env (their hosts make them in any order)

    class SlowToRemake(aiovec.AsyncEnv[Any, Any]):
        def __init__(self, position: int) -> None:
            self.observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
            self.action_space = gym.spaces.Discrete(1000)
            made[position] += 1
            self.position = position
            self.fail = position == 0 and made[0] == 1  # sub-env 0's first instance
            self.remade = position == 0 and made[0] == 2

        async def reset(self, *, seed: int | None = None,
                        options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
            if self.remade:  # reset by the restart
                started.set()
                await finish.wait()
            return np.zeros(1), {}

        async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
            if self.fail:
                raise RuntimeError("boom")
            steps.append(self.position)
            return np.full(1, float(action)), 1.0, False, False, {}

    factories = [functools.partial(SlowToRemake, position) for position in (0, 1)]
    async with aiovec.AsyncVectorEnv(factories, backend="async", autoreset_mode="SameStep",
                                     restart=True) as envs:
        await envs.reset()
        envs.send(np.zeros(1, dtype=np.int64), [0])
        received: list[aiovec.StepBatch] = []

        async def receive() -> None:
            received.append(await envs.recv())

        with anyio.fail_after(30):  # a failure below must not leave the restart waiting
            async with anyio.create_task_group() as group:
                group.start_soon(receive)
                try:
                    await started.wait()
                    envs.send(np.full(1, 7, dtype=np.int64), [1])  # queued, not refused
                    with pytest.raises(aiovec.BusyError, match="waiting for recv"):
                        envs.send(np.zeros(1, dtype=np.int64), [0])
                    with pytest.raises(aiovec.BusyError, match="restarting"):
                        await envs.reset()
                    for _ in range(20):
                        await anyio.lowlevel.checkpoint()
                    assert steps == []  # not dispatched while the restart runs
                finally:
                    finish.set()
            batch = await envs.recv()
        assert received[0].env_ids.tolist() == [0] and received[0].truncations.all()
        assert batch.env_ids.tolist() == [1] and batch.observations[0, 0] == 7.0
        assert steps == [1]


@pytest.mark.parametrize("backend", CONCURRENT_IN_PROCESS_BACKENDS)
async def test_a_sub_env_given_up_on_gives_its_concurrency_permit_back(
        anyio_backend: Any, backend: str) -> None:
    """``max_concurrency=1``: after sub-env 0 misses its deadline, the others still run."""
    factories = [delayed(backend, (0.0, 3.0))] + [delayed(backend)] * 2
    async with aiovec.AsyncVectorEnv(factories, backend=backend, max_concurrency=1) as envs:
        await envs.reset()
        envs.send(np.zeros(1, dtype=np.int64), [0])
        await envs.recv()
        envs.send(np.zeros(1, dtype=np.int64), [0], timeout=0.2)  # its 3 s step
        envs.send(np.zeros(2, dtype=np.int64), [1, 2], timeout=10.0)
        with anyio.fail_after(2.5), pytest.raises(aiovec.EnvTimeoutError) as raised:
            await envs.recv(batch_size=3)  # sub-env 0 times out; 1 and 2 get their turn
        assert raised.value.env_ids == (0,)
        batch = raised.value.partial_result
        assert sorted(batch.env_ids.tolist()) == [0, 1, 2]
        assert batch.observations[batch.env_ids != 0, 0].tolist() == [1.0, 1.0]
        with anyio.fail_after(5):
            await envs.reset()  # the remake of sub-env 0 gets a permit too


@backends
async def test_a_step_after_first_ready_episode_ends_needs_a_reset(backend: str) -> None:
    """Autoreset off: sub-envs whose episode ended in a ``recv`` batch cannot then be stepped
    by a full ``step`` either, even after earlier full steps had found every sub-env ready."""
    make = functools.partial(EpisodeEnv, min_length=2, max_length=2, terminate_probability=0.0)
    async with aiovec.AsyncVectorEnv([factory(backend, make)] * 2, backend=backend,
                                     autoreset_mode=AutoresetMode.DISABLED) as envs:
        await envs.reset(seed=1)
        await envs.step(envs.action_space.sample())  # every sub-env was ready: step 1 of 2
        envs.send(envs.action_space.sample())
        batch = await envs.recv(batch_size=2)
        assert batch.truncations.all()  # step 2 of 2
        with pytest.raises(aiovec.ResetNeededError, match="need a reset"):
            await envs.step(envs.action_space.sample())
        assert envs.unusable_envs == (0, 1)
        await envs.reset(seed=2)
        await envs.step(envs.action_space.sample())


async def test_a_caller_deadline_spares_only_its_own_sub_envs_from_restarts(
        anyio_backend: Any) -> None:
    """``CallerDeadline`` (a remote client's, applied by ``aiovec.serve``): a sub-env late
    for it is not restarted, while one in the same batch that failed under the env's own
    deadline is, as the restart policy says."""
    from aiovec._core._in_flight import CallerDeadline
    from aiovec.testing import Fault, FaultyEnv, release_hangs

    factories = [functools.partial(FaultyEnv, 0, faults=[Fault("hang", "step", at=0)]),
                 functools.partial(FaultyEnv, 1, faults=[Fault("raise", "step", at=0)])]
    try:
        async with aiovec.AsyncVectorEnv(factories, backend="thread", restart=True) as envs:
            await envs.reset(seed=0)
            envs.send(np.zeros(1), [0], timeout=CallerDeadline(0.3))
            envs.send(np.zeros(1), [1])
            with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
                with anyio.fail_after(30):
                    await envs.recv(batch_size=2)
            assert timed_out.value.env_ids == (0,)
            batch = timed_out.value.partial_result
            assert batch.env_ids.tolist() in ([0, 1], [1, 0])
            row = batch.env_ids.tolist().index(1)
            assert batch.infos["_restart"][row] and batch.truncations[row]
            assert envs.statistics().restarts == 1
            assert envs.unusable_envs == (0,)
            await envs.reset(seed=1)  # makes sub-env 0 afresh
    finally:
        release_hangs()
