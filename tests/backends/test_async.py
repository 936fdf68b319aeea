"""The async backend: coroutine sub-envs as tasks on the event loop (asyncio, uvloop, trio)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import gymnasium as gym
import numpy as np
import pytest
import sniffio
from gymnasium.vector import AutoresetMode

import aiovec
from aiovec._backends._async import _GIVEN_UP, AsyncBackend
from aiovec._core._requests import NO_REPLY, Failure, Op
from aiovec.testing import AsyncAdapter, CountingEnv

pytestmark = pytest.mark.anyio


class Gauge:
    """Counts how many sub-envs are inside ``step`` at once (shared by one test's envs)."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0


class IOEnv(aiovec.AsyncEnv[Any, Any]):
    """Awaits ``delay`` seconds per step (I/O); ``hang_at``: that step never returns;
    ``fail_at``: that step raises. Records what happened to it."""

    def __init__(self, delay: float = 0.0, gauge: Gauge | None = None,
                 hang_at: int | None = None, fail_at: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(0, math.inf, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(4)
        self.delay, self.gauge = delay, gauge
        self.hang_at, self.fail_at = hang_at, fail_at
        self.steps = 0
        self.cancelled = 0
        self.closed = anyio.Event()  # made on the loop: the async backend calls the factory there

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1), {"seed_draw": int(self.np_random.integers(1000))}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        gauge = self.gauge
        if gauge is not None:
            gauge.now += 1
            gauge.peak = max(gauge.peak, gauge.now)
        try:
            if self.steps == self.fail_at:
                self.steps += 1
                raise ConnectionResetError("the simulator hung up")
            await anyio.sleep(math.inf if self.steps == self.hang_at else self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            if gauge is not None:
                gauge.now -= 1
        self.steps += 1
        return np.array([self.steps], dtype=np.float64), float(action), False, False, {}

    async def close(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.closed.set()


async def test_sub_envs_wait_concurrently(anyio_backend: Any) -> None:
    """50 sub-envs awaiting 0.2 s each: one vector step takes about 0.2 s, not 10 s."""
    async with aiovec.AsyncVectorEnv([functools.partial(IOEnv, 0.2)] * 50,
                                     backend="async") as envs:
        await envs.reset(seed=0)
        started = anyio.current_time()
        obs, rewards, *_ = await envs.step(np.full(50, 3))
        elapsed = anyio.current_time() - started
    assert obs.tolist() == [[1.0]] * 50 and rewards.tolist() == [3.0] * 50
    assert elapsed < 3.0, f"a 0.2 s step of 50 envs took {elapsed:.2f} s: not concurrent"


async def test_max_concurrency_caps_the_sub_envs_at_work(anyio_backend: Any) -> None:
    gauge = Gauge()
    async with aiovec.AsyncVectorEnv([functools.partial(IOEnv, 0.01, gauge)] * 20,
                                     backend="async", max_concurrency=5) as envs:
        await envs.reset()
        for _ in range(3):
            obs, *_ = await envs.step(np.zeros(20, dtype=np.int64))
        envs.send(np.zeros(20, dtype=np.int64))
        async for batch in envs.batches(batch_size=7):
            assert len(batch.env_ids) in (7, 6)
    assert gauge.peak == 5
    assert obs.tolist() == [[3.0]] * 20


class ThreadGaugeEnv(CountingEnv):
    """Sleeps 20 ms per step in its thread, counting how many are inside ``step`` at once."""

    def __init__(self, gauge: Gauge, lock: threading.Lock) -> None:
        super().__init__()
        self.gauge, self.lock = gauge, lock

    def step(self, action: int) -> Any:
        with self.lock:
            self.gauge.now += 1
            self.gauge.peak = max(self.gauge.peak, self.gauge.now)
        time.sleep(0.02)
        with self.lock:
            self.gauge.now -= 1
        return super().step(action)


def test_max_concurrency_caps_thread_sub_envs_too() -> None:
    """The thread backend honours the same cap (a semaphore around each sub-env's call)."""
    gauge, lock = Gauge(), threading.Lock()
    envs = aiovec.VectorEnv([functools.partial(ThreadGaugeEnv, gauge, lock)] * 8,
                            backend="thread", max_concurrency=3)
    try:
        envs.reset()
        for _ in range(5):
            envs.step(np.zeros(8, dtype=np.int64))
    finally:
        envs.close()
    assert 1 <= gauge.peak <= 3


async def test_backend_auto_picks_async_for_async_env_classes(anyio_backend: Any) -> None:
    envs = aiovec.AsyncVectorEnv([IOEnv, IOEnv])
    assert envs.backend_name == "async"
    partial_envs = aiovec.AsyncVectorEnv([functools.partial(IOEnv, 0.0)])
    assert partial_envs.backend_name == "async"


@pytest.mark.parametrize("num_envs", [1, 3])  # "auto" first picks thread, then process
async def test_backend_auto_finds_coroutine_envs_made_by_plain_callables(
        anyio_backend: Any, num_envs: int, no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv([lambda: IOEnv(0.01)] * num_envs)
    assert envs.backend_name != "async"  # a lambda says nothing until it is called
    async with envs:
        assert envs.backend_name == "async"
        await envs.reset()
        obs, *_ = await envs.step(np.zeros(num_envs, dtype=np.int64))
        assert obs.tolist() == [[1.0]] * num_envs


async def test_a_plain_env_on_the_async_backend_and_vice_versa_say_what_to_do(
        anyio_backend: Any) -> None:
    with pytest.raises(aiovec.SubEnvErrorGroup, match="start") as raised:
        await aiovec.AsyncVectorEnv([CountingEnv], backend="async").start()
    assert "backend='thread' or 'process'" in str(raised.value.exceptions[0])
    with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
        await aiovec.AsyncVectorEnv([lambda: IOEnv()], backend="inline").start()
    assert "backend='async'" in str(raised.value.exceptions[0])


async def test_a_raising_sub_env_is_named_and_the_others_results_kept(
        anyio_backend: Any) -> None:
    factories = [IOEnv, functools.partial(IOEnv, fail_at=1), IOEnv]
    async with aiovec.AsyncVectorEnv(factories, backend="async") as envs:
        await envs.reset()
        await envs.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.step(np.ones(3, dtype=np.int64))
        error = raised.value
        assert error.env_ids == (1,)
        assert isinstance(error.exceptions[0].__cause__, ConnectionResetError)
        assert "the simulator hung up" in error.exceptions[0].remote_traceback
        obs = error.partial_result[0]
        assert obs.tolist() == [[2.0], [1.0], [2.0]]
        assert envs.unusable_envs == (1,)
        obs, _ = await envs.reset(options={"reset_mask": np.array([False, True, False])})
        assert envs.unusable_envs == ()


async def test_a_hung_sub_env_times_out_is_cancelled_and_remade(anyio_backend: Any) -> None:
    made: list[IOEnv] = []

    def hangs_the_first_time() -> IOEnv:
        made.append(IOEnv(hang_at=None if made else 0))
        return made[-1]

    factories = [IOEnv, hangs_the_first_time, IOEnv]
    async with aiovec.AsyncVectorEnv(factories, backend="async", timeout=0.3) as envs:
        await envs.reset()
        hung = envs._engine.backend.local_env(1)
        with pytest.raises(aiovec.EnvTimeoutError) as raised:
            await envs.step(np.zeros(3, dtype=np.int64))
        assert raised.value.env_ids == (1,)
        with anyio.fail_after(5):  # cancelled, its task unwinds and the env is closed
            await hung.closed.wait()
        assert hung.cancelled == 1, "the hung step's coroutine was not cancelled"
        assert envs.unusable_envs == (1,)
        await envs.reset()
        assert envs._engine.backend.local_env(1) is made[1]
        obs, *_ = await envs.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[1.0]] * 3


async def test_the_restart_policy_restarts_a_failed_coroutine_env(anyio_backend: Any) -> None:
    factories = [IOEnv, functools.partial(IOEnv, fail_at=0)]
    async with aiovec.AsyncVectorEnv(factories, backend="async", restart=True) as envs:
        await envs.reset(seed=3)
        _, rewards, _, truncations, infos = await envs.step(np.ones(2, dtype=np.int64))
        assert truncations.tolist() == [False, True]
        assert rewards.tolist() == [1.0, 0.0]
        assert "the simulator hung up" in infos["restart"][1]
        assert envs.statistics().restarts == 1


async def test_cancelling_a_step_cancels_nothing_else_and_reset_recovers(
        anyio_backend: Any) -> None:
    async with aiovec.AsyncVectorEnv([functools.partial(IOEnv, 0.5)] * 3,
                                     backend="async") as envs:
        await envs.reset()
        with anyio.move_on_after(0.1):
            await envs.step(np.zeros(3, dtype=np.int64))
        assert envs.unusable_envs == (0, 1, 2)
        obs, _ = await envs.reset()
        assert obs.tolist() == [[0.0]] * 3
        obs, *_ = await envs.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[1.0]] * 3


async def test_close_awaits_every_sub_env_close(anyio_backend: Any) -> None:
    envs = aiovec.AsyncVectorEnv([IOEnv] * 4, backend="async")
    await envs.reset()
    made = [envs._engine.backend.local_env(index) for index in range(4)]
    await envs.aclose()
    await envs.aclose()
    assert all(env.closed.is_set() for env in made)
    with pytest.raises(aiovec.ClosedError):
        await envs.step(np.zeros(4, dtype=np.int64))


async def test_seeds_get_attr_call_and_adapter(anyio_backend: Any) -> None:
    async with aiovec.AsyncVectorEnv([functools.partial(AsyncAdapter, CountingEnv)] * 2,
                                     backend="async") as envs:
        await envs.reset(seed=5)
        assert envs.np_random_seed == (5, 6)
        await envs.set_attr("marker", ["a", "b"])
        assert await envs.get_attr("marker") == ("a", "b")
        assert await envs.call("get_wrapper_attr", "steps") == (0, 0)


class GivesUpEnv(IOEnv):
    """Raises ``SystemExit`` in its step: an error of the sub-env's, not the loop's end."""

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        raise SystemExit("the env gave up")


async def test_a_base_exception_from_a_sub_env_is_its_failure(anyio_backend: Any) -> None:
    async with aiovec.AsyncVectorEnv([IOEnv, GivesUpEnv], backend="async") as envs:
        await envs.reset()
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.step(np.zeros(2, dtype=np.int64))
        assert raised.value.env_ids == (1,)
        assert isinstance(raised.value.exceptions[0].__cause__, SystemExit)


class SlowCloseEnv(IOEnv):
    """Its ``close`` takes 0.3 s, as a graceful disconnect would."""

    async def close(self) -> None:
        await anyio.sleep(0.3)
        await super().close()


async def test_close_waits_for_the_envs_given_up_on_to_close(anyio_backend: Any) -> None:
    made: list[SlowCloseEnv] = []

    def make() -> SlowCloseEnv:
        made.append(SlowCloseEnv(hang_at=None if made else 0))
        return made[-1]

    envs = aiovec.AsyncVectorEnv([make], backend="async", timeout=0.1)
    await envs.reset()
    with pytest.raises(aiovec.EnvTimeoutError):
        await envs.step(np.zeros(1, dtype=np.int64))
    await envs.aclose()  # the hung env, given up on, is closing on its own task meanwhile
    assert made[0].closed.is_set()


def current_task() -> object:
    """The task running this (the object itself: a finished task's ``id`` may be reused)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_task()
    return asyncio.current_task()


class HostRecordingEnv(IOEnv):
    """Notes the task that runs each of its calls, and how many steps ran to the end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tasks: list[object] = []  # kept alive, so their ids stay unique
        self.completed = 0
        self.context_seen: list[str] = []

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.tasks.append(current_task())
        return await super().reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.tasks.append(current_task())
        self.context_seen.append(MARKER.get())
        result = await super().step(action)
        self.completed += 1
        return result

    @property
    def hosts(self) -> set[int]:
        return {id(task) for task in self.tasks}


MARKER: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


async def test_each_sub_env_has_one_host_task_that_outlives_its_failures(
        anyio_backend: Any) -> None:
    """Requests to a sub-env wake its host task rather than start tasks; a failing request
    (named by its index) leaves the host serving."""
    factories = [HostRecordingEnv, functools.partial(HostRecordingEnv, fail_at=1),
                 HostRecordingEnv]
    async with aiovec.AsyncVectorEnv(factories, backend="async") as envs:
        made = [envs._engine.backend.local_env(index) for index in range(3)]
        await envs.reset()
        await envs.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.step(np.zeros(3, dtype=np.int64))
        assert raised.value.env_ids == (1,)
        assert isinstance(raised.value.exceptions[0].__cause__, ConnectionResetError)
        await envs.reset()
        obs, *_ = await envs.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[1.0]] * 3
    hosts = [env.hosts for env in made]
    assert [len(host) for host in hosts] == [1, 1, 1], hosts
    assert len(set.union(*hosts)) == 3


async def test_a_deadline_cancels_the_step_and_a_new_host_serves_the_remade_env(
        anyio_backend: Any) -> None:
    made: list[HostRecordingEnv] = []

    def hangs_the_first_time() -> HostRecordingEnv:
        made.append(HostRecordingEnv(hang_at=None if made else 1))
        return made[-1]

    factories = [HostRecordingEnv, hangs_the_first_time]
    async with aiovec.AsyncVectorEnv(factories, backend="async", timeout=0.3,
                                     max_concurrency=2) as envs:
        healthy = envs._engine.backend.local_env(0)
        await envs.reset()
        await envs.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(aiovec.EnvTimeoutError) as raised:
            await envs.step(np.zeros(2, dtype=np.int64))
        assert raised.value.env_ids == (1,)
        with anyio.fail_after(5):
            await made[0].closed.wait()
        assert made[0].cancelled == 1 and made[0].completed == 1
        await envs.reset()
        with anyio.fail_after(5):  # the hung host's permit was handed back
            obs, *_ = await envs.step(np.zeros(2, dtype=np.int64))
        assert obs.tolist() == [[1.0], [1.0]]
    assert len(healthy.hosts) == 1
    assert len(made[1].hosts) == 1 and made[1].hosts != made[0].hosts


async def test_a_cancelled_step_runs_on_and_its_hosts_serve_the_reset_after_it(
        anyio_backend: Any) -> None:
    """The caller's cancellation is not the sub-envs': their steps finish on their hosts, the
    replies are dropped, and the reset that follows runs after them, in order."""
    async with aiovec.AsyncVectorEnv([functools.partial(HostRecordingEnv, 0.3)] * 3,
                                     backend="async") as envs:
        made = [envs._engine.backend.local_env(index) for index in range(3)]
        await envs.reset()
        with anyio.move_on_after(0.05):
            await envs.step(np.zeros(3, dtype=np.int64))
        assert envs.unusable_envs == (0, 1, 2)
        obs, _ = await envs.reset()
        assert obs.tolist() == [[0.0]] * 3
        assert [env.completed for env in made] == [1, 1, 1]
        obs, *_ = await envs.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[1.0]] * 3
    assert [env.cancelled for env in made] == [0, 0, 0]
    assert [len(env.hosts) for env in made] == [1, 1, 1]


async def test_closing_during_a_hung_step_cancels_it_and_ends_every_host(
        anyio_backend: Any) -> None:
    envs = aiovec.AsyncVectorEnv([HostRecordingEnv, functools.partial(HostRecordingEnv,
                                                                      hang_at=0)],
                                 backend="async", close_timeout=0.2)
    await envs.reset()
    made = [envs._engine.backend.local_env(index) for index in range(2)]
    outcome: list[BaseException] = []

    async def step() -> None:
        try:
            await envs.step(np.zeros(2, dtype=np.int64))
        except aiovec.ClosedError as error:
            outcome.append(error)

    async with anyio.create_task_group() as group:
        group.start_soon(step)
        await anyio.wait_all_tasks_blocked()
        await envs.aclose()
    assert len(outcome) == 1
    assert made[0].closed.is_set() and made[1].cancelled == 1
    assert envs._engine.backend._hosts_alive == 0  # type: ignore[attr-defined]


async def test_requests_run_in_the_context_of_the_call_that_made_the_sub_env(
        anyio_backend: Any) -> None:
    """Each sub-env's host task starts with a copy of the context variables of ``start`` (or
    of the ``reset`` that remade it), as a thread would be started; later calls do not
    change them."""
    token = MARKER.set("at start")
    try:
        async with aiovec.AsyncVectorEnv([HostRecordingEnv] * 2, backend="async") as envs:
            MARKER.set("at step")
            await envs.reset()
            await envs.step(np.zeros(2, dtype=np.int64))
            made = [envs._engine.backend.local_env(index) for index in range(2)]
    finally:
        MARKER.reset(token)
    assert [env.context_seen for env in made] == [["at start"], ["at start"]]


class FailsToMake(Exception):
    pass


def fails_to_make() -> IOEnv:
    raise FailsToMake("no simulator")


async def test_a_host_given_up_on_with_no_env_to_close_ends_at_once(anyio_backend: Any) -> None:
    """A sub-env whose factory failed has a parked host and no env: given up on, the host
    ends there and then (``aclose`` does not wait for it)."""
    backend = AsyncBackend([IOEnv, fails_to_make], AutoresetMode.NEXT_STEP)
    pending = await backend.start()
    await pending.wait()
    assert [type(reply).__name__ for reply in pending.replies] == ["EnvDescription", "Failure"]
    backend.discard([1])
    await anyio.wait_all_tasks_blocked()
    assert backend._hosts_alive == 1
    started = anyio.current_time()
    await backend.aclose(5.0)
    assert backend._hosts_alive == 0 and anyio.current_time() - started < 0.5


class GatedIOEnv(IOEnv):
    """Its steps wait for ``gate``."""

    def __init__(self, gate: anyio.Event) -> None:
        super().__init__()
        self.gate = gate

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await self.gate.wait()
        return await super().step(action)


@pytest.mark.parametrize("max_concurrency", [None, 1])
async def test_what_is_queued_when_the_close_is_sent_is_given_up_at_once(
        anyio_backend: Any, max_concurrency: int | None) -> None:
    """Requests queued when the close is sent (behind a running step, or waiting for a
    permit) are answered as given up there and then, and never run; running steps end as
    they would, then every sub-env closes."""
    gate = anyio.Event()
    made: list[GatedIOEnv] = []

    def factory() -> GatedIOEnv:
        made.append(GatedIOEnv(gate))
        return made[-1]

    backend = AsyncBackend([factory, factory], AutoresetMode.NEXT_STEP,
                           max_concurrency=max_concurrency)
    await (await backend.start()).wait()
    reset = backend.submit(Op.RESET, [0, 1], [(0, None), (1, None)])  # (seed, options)
    await reset.wait()
    assert not reset.failures()
    first = backend.submit(Op.STEP, [0], [1])
    # Env 0's second step queues behind its first; env 1's steps at once, or (one permit,
    # held by env 0) waits for the permit.
    second = backend.submit(Op.STEP, [0, 1], [2, 3])
    env_1_waits = max_concurrency == 1
    await anyio.wait_all_tasks_blocked()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(backend.aclose, 30.0)
            try:
                await anyio.wait_all_tasks_blocked()
                given_up = [isinstance(reply, Failure) and reply.description == _GIVEN_UP
                            for reply in second.replies]
                assert given_up == [True, env_1_waits]
                assert first.replies[0] is NO_REPLY  # still at its step
            finally:
                gate.set()
        await first.wait()
    assert not first.failures() and first.replies[0][1] == 1.0  # its reward: its action
    if not env_1_waits:
        assert second.replies[1][1] == 3.0
    assert [env.steps for env in made] == [1, 0 if env_1_waits else 1]
    assert all(env.closed.is_set() for env in made)
