"""Named shared limits (``limits=``, ``aiovec.limit``): one line per limit for every sub-env
of a vector env, in its worker processes too; a take that waits counts in the call's deadline
and holds nothing once given up; a worker killed while holding gives the limit back.

Holders are counted in a file every process shares (under ``flock``), so a cap broken by a
worker process would show in the peak.
"""

from __future__ import annotations

import fcntl
import functools
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import aiovec
from aiovec._limits._broker import Broker
from aiovec._limits._takers import LocalTaker
from tests.backends_matrix import DEADLINE_BACKENDS, LOCAL_BACKENDS, WORKER_BACKENDS

pytestmark = pytest.mark.anyio

#: The actions: what a sub-env does with the limit "sandbox" in a step.
HOLD_A_WHILE = 0  # take it, stay ``hold`` seconds, give it back
KEEP = 1  # take it and keep it past the step
GIVE_BACK = 2  # give back what KEEP took
UNDECLARED = 3  # take a limit the vector env does not declare
DIE_HOLDING = 4  # take it, then SIGKILL this process
NOTHING = 5  # leave it be
THREADS = 6  # hold it while two threads of the sub-env's own wait for it, then give it back
CANCELLED = 7  # take it in a scope cancelled already (async only)


class Holders:
    """``inside peak`` in a file: how many hold the limit now, and the most ever at once."""

    def __init__(self, path: str) -> None:
        self.path = path

    def add(self, delta: int) -> None:
        with open(self.path, "r+") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            inside, peak = map(int, file.read().split())
            inside += delta
            file.seek(0)
            file.truncate()
            file.write(f"{inside} {max(peak, inside)}")

    def read(self) -> tuple[int, int]:
        inside, peak = map(int, Path(self.path).read_text().split())
        return inside, peak


def holders(tmp_path: Path) -> Holders:
    path = tmp_path / "holders"
    path.write_text("0 0")
    return Holders(str(path))


class Leasing:
    """What the lease envs share: spaces, the holders' counter, the hold they keep."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(8)

    def __init__(self, counter: Holders, hold: float = 0.02) -> None:
        self.counter = counter
        self.hold = hold
        self.kept: aiovec.LimitHold | None = None


class LeaseEnv(Leasing, gym.Env[np.ndarray, int]):
    """Does with the limit "sandbox" what its action says (the actions above)."""

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == HOLD_A_WHILE:
            with aiovec.limit("sandbox"):
                self.counter.add(1)
                time.sleep(self.hold)  # the work done while holding it
                self.counter.add(-1)
        elif action == KEEP:
            self.kept = aiovec.limit("sandbox").take()
        elif action == GIVE_BACK:
            assert self.kept is not None
            self.kept.release()
        elif action == UNDECLARED:
            with aiovec.limit("nope"):
                pass
        elif action == DIE_HOLDING:
            with aiovec.limit("sandbox"):
                os.kill(os.getpid(), signal.SIGKILL)
        elif action == THREADS:
            with aiovec.limit("sandbox"):
                self.counter.add(1)
                helpers = [threading.Thread(target=self.step, args=(HOLD_A_WHILE,))
                           for _ in range(2)]
                for helper in helpers:
                    helper.start()
                time.sleep(self.hold)
                self.counter.add(-1)
            for helper in helpers:
                helper.join(30)
                assert not helper.is_alive(), "a thread of the sub-env never got the limit"
        return np.zeros(1, np.float32), 0.0, False, False, {}


class AsyncLeaseEnv(Leasing, aiovec.AsyncEnv[np.ndarray, int]):
    """``LeaseEnv`` as a coroutine env: ``async with aiovec.limit(...)``."""

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.zeros(1, np.float32), {}

    async def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == HOLD_A_WHILE:
            async with aiovec.limit("sandbox"):
                self.counter.add(1)
                await anyio.sleep(self.hold)
                self.counter.add(-1)
        elif action == KEEP:
            self.kept = await aiovec.limit("sandbox").take_async()
        elif action == GIVE_BACK:
            assert self.kept is not None
            self.kept.release()
        elif action == UNDECLARED:
            async with aiovec.limit("nope"):
                pass
        elif action == CANCELLED:
            with anyio.CancelScope() as scope:
                scope.cancel()
                async with aiovec.limit("sandbox"):  # taken at once, cancelled right after
                    raise AssertionError("a cancelled scope ran on")
        return np.zeros(1, np.float32), 0.0, False, False, {}


def lease_envs(backend: str, counter: Holders, num_envs: int, **kwargs: Any) -> list[Any]:
    env_class = AsyncLeaseEnv if backend == "async" else LeaseEnv
    return [functools.partial(env_class, counter, **kwargs)] * num_envs


def one_worker_each(backend: str, num_envs: int) -> dict[str, Any]:
    return {"num_workers": num_envs} if backend in WORKER_BACKENDS else {}


def actions(*each: int) -> np.ndarray:
    return np.array(each)


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
async def test_a_limit_caps_its_holders_across_sub_envs_and_workers(
        backend: str, tmp_path: Path, no_leaks: None) -> None:
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            lease_envs(backend, counter, 6), backend=backend, timeout=60,
            limits={"sandbox": aiovec.Limit(concurrency=2)},
            **one_worker_each(backend, 6)) as envs:
        await envs.reset(seed=0)
        for _ in range(3):
            await envs.step(actions(*[HOLD_A_WHILE] * 6))
        usage = envs.statistics().limits["sandbox"]
        assert usage.taken == 18
    inside, peak = counter.read()
    assert inside == 0 and 1 <= peak <= 2, (inside, peak)
    # Closed: whatever a worker still held (none here) was given back.
    assert envs.statistics().limits["sandbox"].in_use == 0
    assert envs.statistics().limits["sandbox"].waiting == 0


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
async def test_a_take_that_waits_counts_in_the_calls_deadline(
        backend: str, tmp_path: Path, no_leaks: None) -> None:
    """Sub-env 0 keeps the only hold; sub-env 1's take waits past the step's deadline: it is
    restarted, and its take left the line (the next take, once 0 gives back, is served)."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            lease_envs(backend, counter, 2), backend=backend, restart=True,
            limits={"sandbox": aiovec.Limit(concurrency=1)},
            **one_worker_each(backend, 2)) as envs:
        await envs.reset(seed=0)
        await envs.step(actions(KEEP, NOTHING))
        started = time.monotonic()
        _, _, _, _, infos = await envs.step(actions(NOTHING, HOLD_A_WHILE), timeout=1.0)
        assert time.monotonic() - started >= 0.9
        assert "_restart" in infos and list(infos["_restart"]) == [False, True]
        assert "1 s" in infos["restart"][1] or "deadline" in infos["restart"][1]
        # Were the timed-out take still in line, it would take the hold given back here and
        # keep it (a restarted thread's or a dead worker's): the next take would wait forever.
        # (Sub-env 1, restarted with its episode cut, resets in this step: it takes nothing.)
        await envs.step(actions(GIVE_BACK, HOLD_A_WHILE), timeout=60)
        await envs.step(actions(HOLD_A_WHILE, HOLD_A_WHILE), timeout=60)
        assert envs.statistics().limits["sandbox"].taken == 3
    assert counter.read()[1] == 1


def test_a_take_given_up_leaves_the_line_before_its_thread_wakes() -> None:
    """The thread backend gives up on a sub-env whose take waits (a deadline): the take leaves
    the line then, so a hold given back before its thread runs again goes to the next in line,
    and the given-up take is never counted as taken (a race the test above met under load)."""
    broker = Broker({"sandbox": aiovec.Limit(concurrency=1)})
    holder, given_up, next_in_line = (LocalTaker(broker) for _ in range(3))
    holder.take("sandbox")
    errors: list[Exception] = []

    def wait_in_line(taker: LocalTaker) -> None:
        try:
            taker.take("sandbox")
        except aiovec.LimitError as error:
            errors.append(error)

    threads = []
    for position, taker in enumerate([given_up, next_in_line], start=1):
        threads.append(threading.Thread(target=wait_in_line, args=(taker,)))
        threads[-1].start()
        deadline = time.monotonic() + 60
        while broker.usage()["sandbox"].waiting < position:  # in line, in this order
            assert time.monotonic() < deadline, "the take never got in line"
            time.sleep(0.001)
    given_up.abandon()
    broker.give_back("sandbox")  # at once, on this thread: the given-up one has not run yet
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    usage = broker.usage()["sandbox"]
    assert (usage.taken, usage.in_use, usage.waiting) == (2, 1, 0)  # the holder's, the next's
    assert len(errors) == 1 and "its deadline passed" in str(errors[0])


@pytest.mark.parametrize("backend", ["process", "async", "ray"])
async def test_a_rate_spaces_the_takes(backend: str, tmp_path: Path, no_leaks: None) -> None:
    """At most 25 takes a second, burst 1: 12 takes (4 sub-envs, 3 steps) take at least the
    11 gaps of 1/25 s between them, across worker processes too."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            lease_envs(backend, counter, 4, hold=0.0), backend=backend, timeout=60,
            limits={"sandbox": aiovec.Limit(rate=25)}, **one_worker_each(backend, 4)) as envs:
        await envs.reset(seed=0)
        started = time.monotonic()
        for _ in range(3):
            await envs.step(actions(*[HOLD_A_WHILE] * 4))
        elapsed = time.monotonic() - started
        usage = envs.statistics().limits["sandbox"]
    assert usage.taken == 12
    assert elapsed >= 11 / 25 * 0.98, elapsed  # (a lower bound: a busy machine only adds)
    assert usage.wait_seconds > 0


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_an_undeclared_limit_fails_its_sub_env_by_name(
        backend: str, tmp_path: Path, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(
            lease_envs(backend, holders(tmp_path), 2), backend=backend, timeout=60,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.step(actions(HOLD_A_WHILE, UNDECLARED))
    (error,) = raised.value.exceptions
    assert error.env_id == 1
    assert "no limit named 'nope'" in str(error.__cause__)
    assert "'sandbox'" in str(error.__cause__)


@pytest.mark.parametrize("backend", WORKER_BACKENDS)
async def test_a_worker_killed_while_holding_gives_the_limit_back(
        backend: str, tmp_path: Path, no_leaks: None) -> None:
    """A worker process or a Ray actor SIGKILLed while holding: its connection to the limits
    thread closes with it, and all it held comes back."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            lease_envs(backend, counter, 2), backend=backend, num_workers=2, restart=True,
            timeout=60, limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        _, _, _, _, infos = await envs.step(actions(DIE_HOLDING, HOLD_A_WHILE))
        assert "died" in infos["restart"][0]
        # The dead worker's hold came back: both take it again, one after the other.
        await envs.step(actions(HOLD_A_WHILE, HOLD_A_WHILE))  # (sub-env 0 resets in it)
        assert envs.statistics().limits["sandbox"].taken == 3
    assert counter.read()[1] == 1


async def test_on_the_inline_backend_a_held_limit_fails_the_take(
        tmp_path: Path, no_leaks: None) -> None:
    """Inline sub-envs run in the loop's thread: a take that would wait for a holder (which
    cannot run meanwhile) fails at once instead of blocking the loop for good."""
    async with aiovec.AsyncVectorEnv(
            lease_envs("inline", holders(tmp_path), 2), backend="inline", restart=True,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        _, _, _, _, infos = await envs.step(actions(KEEP, HOLD_A_WHILE))
        assert "cannot wait" in infos["restart"][1]
        await envs.step(actions(GIVE_BACK, HOLD_A_WHILE))
        assert envs.statistics().limits["sandbox"].in_use == 0


def test_outside_a_vector_env_with_limits_a_limit_takes_nothing(tmp_path: Path) -> None:
    """The same env class runs on its own and under Gymnasium's vector envs."""
    counter = holders(tmp_path)
    with aiovec.limit("anything") as hold:
        assert isinstance(hold, aiovec.LimitHold)
    envs = gym.vector.SyncVectorEnv([functools.partial(LeaseEnv, counter)] * 2)
    envs.reset(seed=0)
    envs.step(actions(HOLD_A_WHILE, KEEP))
    envs.close()
    assert counter.read() == (0, 1)


def test_the_sync_shim_takes_limits(tmp_path: Path) -> None:
    counter = holders(tmp_path)
    envs = aiovec.VectorEnv([functools.partial(LeaseEnv, counter)] * 4, backend="thread",
                            limits={"sandbox": aiovec.Limit(concurrency=1)})
    try:
        envs.reset(seed=0)
        envs.step(actions(*[HOLD_A_WHILE] * 4))
    finally:
        envs.close()
    assert counter.read() == (0, 1)


@pytest.mark.parametrize(("limits", "error", "message"), [
    ([("sandbox", 1)], TypeError, "mapping"),
    ({"sandbox": 4}, TypeError, "aiovec.Limit"),
    ({"": aiovec.Limit(concurrency=1)}, ValueError, "non-empty str"),
    ({"a\nb": aiovec.Limit(concurrency=1)}, ValueError, "without newlines"),
])
def test_limits_are_checked_when_the_vector_env_is_made(limits: Any, error: type[Exception],
                                                        message: str) -> None:
    with pytest.raises(error, match=message):
        aiovec.AsyncVectorEnv([lambda: gym.make("CartPole-v1")], limits=limits)


@pytest.mark.parametrize(("arguments", "message"), [
    ({}, "concurrency=, rate= or both"),
    ({"concurrency": 0}, "concurrency must be"),
    ({"concurrency": True}, "concurrency must be"),
    ({"concurrency": 1.5}, "concurrency must be"),
    ({"rate": 0}, "rate must be"),
    ({"rate": float("nan")}, "rate must be"),
    ({"rate": float("inf")}, "rate must be"),
    ({"rate": 1, "burst": 0}, "burst must be"),
])
def test_a_limit_refuses_what_it_cannot_mean(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aiovec.Limit(**arguments)



@pytest.mark.parametrize("backend", ["thread", "process", "inline"])
async def test_threads_a_sub_env_starts_take_from_its_vector_envs_limits(
        backend: str, tmp_path: Path, no_leaks: None) -> None:
    """The threads a sub-env starts itself (no context of the sub-env's) take from the same
    line, each waiting on its own: a holder in one thread gives back while another waits."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            lease_envs(backend, counter, 1), backend=backend, timeout=60,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        await envs.step(actions(THREADS))
        assert envs.statistics().limits["sandbox"].taken == 3
    assert counter.read() == (0, 1)


async def test_a_take_cancelled_as_it_is_granted_holds_nothing(
        tmp_path: Path, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(
            lease_envs("async", holders(tmp_path), 2), backend="async", timeout=60,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        await envs.step(actions(CANCELLED, NOTHING))
        assert envs.statistics().limits["sandbox"].in_use == 0
        await envs.step(actions(HOLD_A_WHILE, HOLD_A_WHILE))  # both get it, one after the other


def coroutine_lease_env(counter: Holders) -> AsyncLeaseEnv:
    return AsyncLeaseEnv(counter)


async def test_limits_hold_when_auto_finds_coroutine_envs(tmp_path: Path,
                                                          no_leaks: None) -> None:
    """``backend="auto"`` cannot tell coroutine envs made by a plain function: its first start
    fails and it starts again on the async backend, where the limits still serve."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv([functools.partial(coroutine_lease_env, counter)] * 3,
                                     timeout=60,
                                     limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        await envs.step(actions(HOLD_A_WHILE, HOLD_A_WHILE, HOLD_A_WHILE))
        assert envs.backend_name == "async"
        assert envs.statistics().limits["sandbox"].taken == 3
    assert counter.read() == (0, 1)


async def test_on_the_inline_backend_a_take_waits_for_a_rate(tmp_path: Path,
                                                            no_leaks: None) -> None:
    """A rate frees itself with time (no holder must run), so an inline take waits for it."""
    async with aiovec.AsyncVectorEnv(
            lease_envs("inline", holders(tmp_path), 4, hold=0.0), backend="inline",
            limits={"sandbox": aiovec.Limit(rate=50)}) as envs:
        await envs.reset(seed=0)
        started = time.monotonic()
        await envs.step(actions(*[HOLD_A_WHILE] * 4))
        assert time.monotonic() - started >= 3 / 50 * 0.98
        assert envs.statistics().limits["sandbox"].taken == 4


async def test_a_stranger_on_the_limits_socket_is_dropped_and_harms_nothing(
        tmp_path: Path, no_leaks: None) -> None:
    """Anyone on the machine can find the socket: a wrong token (even one that is not ASCII)
    or a line not understood drops that connection, and the workers' takes go on."""
    counter = holders(tmp_path)
    async with aiovec.AsyncVectorEnv(
            lease_envs("process", counter, 2), backend="process", num_workers=2, timeout=60,
            limits={"sandbox": aiovec.Limit(concurrency=1)}) as envs:
        await envs.reset(seed=0)
        address, _ = envs._limits.for_workers()
        for line in ("T \u00fc\n", "T wrong\n", f"T {address.token}\nA 1 sandbox extra\n",
                     f"T {address.token}\nX\n"):
            stranger = address.connect()
            stranger.sendall(line.encode())
            stranger.shutdown(socket.SHUT_WR)
            assert stranger.recv(16) == b""  # dropped, nothing granted
            stranger.close()
        await envs.step(actions(HOLD_A_WHILE, HOLD_A_WHILE))
        usage = envs.statistics().limits["sandbox"]
    assert usage.taken == 2
    assert counter.read() == (0, 1)
