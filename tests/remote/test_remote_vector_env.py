"""aiovec.remote against a real served session (uvicorn on 127.0.0.1): a remote vector env's
rollouts equal a local one's, on asyncio, uvloop and trio, in both encodings; deadlines and
cancellation reach the server; a server's refusals, restarts and death are clear errors."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import gymnasium as gym
import httpx
import numpy as np
import pytest

import aiovec
from aiovec._remote._vector_env import TRANSPORT_GRACE
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from aiovec.testing import release_hangs
from tests.leaks import wait_until
from tests.serve.apps import ENVS, TOKENS
from tests.serve.conftest import Server, launch
from tests.serve.test_websocket import until_no_sessions

pytestmark = pytest.mark.anyio

ENCODINGS = pytest.mark.parametrize("encoding", ["binary", "json"])


def assert_tree_equal(remote: Any, local: Any, where: str = "") -> None:
    if isinstance(local, dict):
        assert isinstance(remote, dict) and set(remote) == set(local), where
        for key in local:
            assert_tree_equal(remote[key], local[key], f"{where}.{key}")
    elif isinstance(local, tuple):
        assert isinstance(remote, tuple) and len(remote) == len(local), where
        for index, (mine, theirs) in enumerate(zip(remote, local)):
            assert_tree_equal(mine, theirs, f"{where}[{index}]")
    else:
        local = np.asarray(local)
        assert isinstance(remote, np.ndarray), where
        assert remote.dtype == local.dtype and np.array_equal(remote, local), where


async def until_idle(server: Server, session: str) -> None:
    """Wait (bounded) until the server no longer runs anything for ``session``."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            while (await client.get(f"/sessions/{session}")).json()["busy"]:  # noqa: ASYNC110
                await anyio.sleep(0.01)  # another process: there is no event to wait on


@contextlib.asynccontextmanager
async def ending_local_hangs() -> AsyncIterator[None]:
    """End the hangs of this process's abandoned sub-env threads on the way out (those of
    the server's end on their own, in its process)."""
    try:
        yield
    finally:
        release_hangs()


@ENCODINGS
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Dict-v0", "Tuple-v0", "Box-v0"])
async def test_a_remote_rollout_equals_a_local_one(serve: Any, env_id: str,
                                                   encoding: str) -> None:
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([ENVS[env_id].env_fn] * 3, backend="inline")
    async with local, AsyncRemoteVectorEnv(server.url, env_id, 3,
                                           encoding=encoding) as remote:  # type: ignore[arg-type]
        assert remote.single_observation_space == local.single_observation_space
        assert remote.single_action_space == local.single_action_space
        assert remote.observation_space == local.observation_space
        assert remote.metadata["autoreset_mode"] == local.metadata["autoreset_mode"]
        remote_obs, remote_infos = await remote.reset(seed=11)
        local_obs, local_infos = await local.reset(seed=11)
        assert_tree_equal(remote_obs, local_obs, "reset obs")
        assert set(remote_infos) == set(local_infos)
        local.action_space.seed(5)
        episodes_ended = 0
        for step in range(60):
            actions = local.action_space.sample()
            got = await remote.step(actions)
            expected = await local.step(actions)
            for name, mine, theirs in zip(("obs", "rewards", "terminations", "truncations"),
                                          got[:4], expected[:4]):
                assert_tree_equal(mine, theirs, f"step {step} {name}")
            assert set(got[4]) == set(expected[4]), step
            if encoding == "binary":
                assert_tree_equal(got[4], expected[4], f"step {step} infos")
            episodes_ended += int(np.sum(expected[2] | expected[3]))
    assert episodes_ended > 0, "the rollout should cross an episode boundary (autoreset)"


async def test_a_deadline_cancels_the_servers_step(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Waiting-v0", 1, timeout=0.5) as remote:
        await remote.reset(seed=0, timeout=30)  # resets do not wait
        with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
            await remote.step(np.array([1]))
        assert isinstance(timed_out.value, TimeoutError)
        assert timed_out.value.env_ids == (0,)
        assert timed_out.value.timeout == 0.5
        assert remote.session_id is not None
        await until_idle(server, remote.session_id)  # the 3 s step was given up on
        with pytest.raises(aiovec.ResetNeededError):  # its episode is off, as locally
            await remote.step(np.array([1]), timeout=30)
        obs, _ = await remote.reset(seed=1)
        assert obs.shape == (1, 4)


@pytest.mark.parametrize("env_id", ["Hung-v0", "HungProcess-v0"])
async def test_after_a_deadline_a_reset_with_the_same_deadline_succeeds(serve: Any,
                                                                       env_id: str) -> None:
    """The client's deadline is the call's deadline on the server: the hung sub-env is given
    up on there at 0.5 s (its thread abandoned, its worker killed), not at the served env's
    own 30 s, so a reset with the same 0.5 s makes it afresh at once, as locally (where the
    resets after a remote timeout had all timed out until the server's step ended)."""
    server: Server = serve("open")
    backend = "process" if env_id == "HungProcess-v0" else "thread"
    local = aiovec.AsyncVectorEnv([ENVS[env_id].env_fn], backend=backend, timeout=0.5)
    async with local, AsyncRemoteVectorEnv(server.url, env_id, 1, timeout=0.5) as remote, \
            ending_local_hangs():
        for envs in (local, remote):
            await envs.reset(seed=0)
            with pytest.raises(aiovec.EnvTimeoutError) as timed_out:
                await envs.step(np.zeros(1))
            assert timed_out.value.env_ids == (0,), envs
            began = anyio.current_time()
            obs, _ = await envs.reset(seed=1)  # made afresh: its first step would hang again
            assert anyio.current_time() - began < 0.5 + TRANSPORT_GRACE, envs
            assert obs.shape == (1, 4)
            with pytest.raises(aiovec.EnvTimeoutError):
                await envs.step(np.zeros(1))
            await envs.reset(seed=2)


@pytest.mark.parametrize("env_id", ["Hung-v0", "HungProcess-v0"])
async def test_after_a_cancelled_call_recovery_is_as_local(serve: Any, env_id: str) -> None:
    """A cancelled step leaves what a local one leaves: the sub-env owes its step, so the
    first reset waits for it until its deadline (then gives up on it, EnvTimeoutError), and
    the next one makes it afresh; remote and local go through the same outcomes."""
    server: Server = serve("open")
    backend = "process" if env_id == "HungProcess-v0" else "thread"
    local = aiovec.AsyncVectorEnv([ENVS[env_id].env_fn], backend=backend, timeout=0.5)
    outcomes: dict[str, list[str]] = {}
    async with local, AsyncRemoteVectorEnv(server.url, env_id, 1, timeout=0.5) as remote, \
            ending_local_hangs():
        for name, envs in (("local", local), ("remote", remote)):
            await envs.reset(seed=0)
            with anyio.move_on_after(0.5) as scope:
                await envs.step(np.zeros(1), timeout=None)
            assert scope.cancelled_caught
            seen = outcomes[name] = []
            while not seen or seen[-1] != "ok":
                assert len(seen) < 5, seen
                try:
                    await envs.reset(seed=1)
                    seen.append("ok")
                except aiovec.EnvTimeoutError:
                    seen.append("timeout")
    assert outcomes["remote"] == outcomes["local"] == ["timeout", "ok"]


async def test_a_wrong_deadline_is_refused_before_anything_is_sent(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "CartPole-v1", 1, timeout=5) as remote:
        await remote.reset(seed=0)
        for timeout in (0, -1, float("nan"), "1", True):
            with pytest.raises(ValueError, match="timeout"):
                await remote.step(np.zeros(1, dtype=np.int64),
                                  timeout=timeout)  # type: ignore[arg-type]
        await remote.step(np.zeros(1, dtype=np.int64), timeout=float("inf"))  # no deadline
    async with httpx.AsyncClient(base_url=server.url) as client:  # and on the server
        session = (await client.post("/sessions", json={"env_id": "CartPole-v1",
                                                        "num_envs": 1})).json()["session_id"]
        for timeout in (-1, 0, "1", True, [1]):
            refused = await client.post(f"/sessions/{session}/reset",
                                        json={"timeout": timeout})
            assert refused.status_code == 422 and refused.json()["error"] == "invalid"
        assert (await client.post(f"/sessions/{session}/reset",
                                  json={"timeout": 5})).status_code == 200
        await client.delete(f"/sessions/{session}")


async def test_cancelling_a_call_cancels_the_servers_step(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Waiting-v0", 1) as remote:
        await remote.reset(seed=0)
        with anyio.move_on_after(0.5) as scope:
            await remote.step(np.array([0]))
        assert scope.cancelled_caught
        assert remote.session_id is not None
        await until_idle(server, remote.session_id)
        # The late answer of the cancelled step is skipped: the next call gets its own.
        obs, infos = await remote.reset(seed=2)
        assert obs.shape == (1, 4) and isinstance(infos, dict)


async def test_bad_actions_and_seeds_are_refused_before_anything_is_sent(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "CartPole-v1", 2) as remote:
        await remote.reset(seed=0)
        for actions, error in (([0, 5], ValueError), ([0, 1, 1], ValueError),
                               (np.array([0.5, 1.0]), ValueError), (1, TypeError)):
            with pytest.raises(error):
                await remote.step(actions)
        for seed in (-1, [1], "x"):
            with pytest.raises((ValueError, TypeError)):
                await remote.reset(seed=seed)  # type: ignore[arg-type]
        async with httpx.AsyncClient(base_url=server.url) as client:
            described = (await client.get(f"/sessions/{remote.session_id}")).json()
        assert described["steps"] == 0 and described["restarts"] == 0
        await remote.step(np.array([0, 1]))


async def test_a_server_restart_shows_in_infos_as_locally(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Crashing-v0", 1) as remote:
        await remote.reset(seed=0)
        for _ in range(2):
            *_, infos = await remote.step(np.array([1]))
            assert "_restart" not in infos
        _, _, _, truncations, infos = await remote.step(np.array([1]))
        assert infos["_restart"].tolist() == [True]
        assert "simulator fault" in str(infos["restart"][0])
        assert truncations.tolist() == [True]


async def test_refusals_are_remote_errors_with_the_servers_code(serve: Any) -> None:
    server: Server = serve("tokens")
    with pytest.raises(aiovec.RemoteError) as refused:
        await AsyncRemoteVectorEnv(server.url, "CartPole-v1").start()
    assert refused.value.code == "unauthorized" and refused.value.status == 401
    with pytest.raises(aiovec.RemoteError) as refused:
        await AsyncRemoteVectorEnv(server.url, "NoSuchEnv-v0", token=TOKENS["alice"]).start()
    assert refused.value.code == "unknown_env" and refused.value.status == 422
    with pytest.raises(aiovec.RemoteError) as refused:
        await AsyncRemoteVectorEnv(server.url, "CartPole-v1", 99, token=TOKENS["alice"]).start()
    assert refused.value.code == "bad_num_envs"
    async with httpx.AsyncClient(base_url=server.url, headers={
            "authorization": f"Bearer {TOKENS['alice']}"}) as client:
        assert (await client.get("/healthz")).json()["sessions"] == 0  # none left behind
    async with AsyncRemoteVectorEnv(server.url, "CartPole-v1", token=TOKENS["bob"]) as remote:
        obs, _ = await remote.reset(seed=0)
        assert obs.shape == (1, 4)


async def test_a_server_that_goes_away_is_a_clear_error() -> None:
    server = launch([sys.executable, "-m", "tests.serve.apps", "open"])
    try:
        async with AsyncRemoteVectorEnv(server.url, "CartPole-v1", 2) as remote:
            await remote.reset(seed=0)
            server.process.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(server.process.wait)
            with pytest.raises(aiovec.ServerGoneError) as gone:
                await remote.step(np.array([0, 1]))
            assert isinstance(gone.value, ConnectionError)
            assert remote.closed
            with pytest.raises(aiovec.ServerGoneError):  # every later call says so again
                await remote.step(np.array([0, 1]))
            await remote.aclose()
        with pytest.raises(aiovec.ServerGoneError):
            await AsyncRemoteVectorEnv(server.url, "CartPole-v1").start()
    finally:
        if server.process.poll() is None:
            server.process.kill()
        server.process.communicate()


async def test_lifecycle_errors_and_the_lease(serve: Any) -> None:
    server: Server = serve("open")
    remote = AsyncRemoteVectorEnv(server.url, "CartPole-v1", 2)
    with pytest.raises(aiovec.NotStartedError):
        await remote.step(np.array([0, 1]))
    await remote.start()
    assert "open" in repr(remote)
    await remote.reset()
    await remote.aclose()
    await remote.aclose()
    with pytest.raises(aiovec.ClosedError):
        await remote.reset()
    await until_no_sessions(server)
    with pytest.raises(ValueError, match="encoding"):
        AsyncRemoteVectorEnv(server.url, "CartPole-v1", encoding="xml")  # type: ignore[arg-type]


async def test_two_calls_at_once_are_refused_as_locally(serve: Any) -> None:
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Waiting-v0", 1) as remote:
        await remote.reset(seed=0)
        async with anyio.create_task_group() as group:
            group.start_soon(remote.step, np.array([0]))
            with anyio.fail_after(30):
                while remote._running is None:
                    await anyio.lowlevel.checkpoint()
            with pytest.raises(aiovec.BusyError):
                await remote.step(np.array([1]))
            group.cancel_scope.cancel()


async def test_a_mounted_server_under_a_prefix(serve: Any) -> None:
    server: Server = serve("mounted")
    async with AsyncRemoteVectorEnv(f"{server.url}/rl", "CartPole-v1", 2) as remote:
        obs, _ = await remote.reset(seed=0)
        obs2, *_ = await remote.step(np.array([0, 1]))
    assert obs.shape == obs2.shape == (2, 4)


def test_the_sync_remote_vector_env_is_a_gymnasium_vector_env(serve: Any) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "CartPole-v1", 3)
    local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    try:
        assert isinstance(remote, gym.vector.VectorEnv)
        assert remote.single_action_space == local.single_action_space
        assert remote.observation_space == local.observation_space
        obs, _ = remote.reset(seed=4)
        expected, _ = local.reset(seed=4)
        assert np.array_equal(obs, expected)
        for step in range(50):
            actions = np.array([step % 2, 1, 0])
            got, expected_step = remote.step(actions), local.step(actions)
            for mine, theirs in zip(got[:4], expected_step[:4]):
                assert np.array_equal(mine, theirs), step
    finally:
        remote.close()
        local.close()
    remote.close()
    with pytest.raises(aiovec.ClosedError):
        remote.step(np.array([0, 1, 0]))


async def test_float64_actions_for_a_float32_box_never_fail_the_sub_env(serve: Any) -> None:
    """A binary frame keeps the client's float64; the server gives the env what its float32
    space contains (an env asserting ``contains`` would fail, and restart, otherwise)."""
    server: Server = serve("open")
    async with AsyncRemoteVectorEnv(server.url, "Box-v0", 2) as remote:
        await remote.reset(seed=0)
        for _ in range(5):
            actions = np.random.default_rng(0).uniform(-1, 1, (2, 2))  # float64
            *_, infos = await remote.step(actions)
            assert "_restart" not in infos


async def test_a_message_over_the_servers_limit_is_a_clear_error(serve: Any) -> None:
    server: Server = serve("strict")  # 256 KiB messages
    async with AsyncRemoteVectorEnv(server.url, "Options-v0", 1) as remote:
        with pytest.raises(aiovec.RemoteError) as refused:
            await remote.reset(options={"pad": "x" * 300_000})
        assert refused.value.code == "too_large"
        assert not isinstance(refused.value, aiovec.ServerGoneError)
        with pytest.raises(aiovec.RemoteError):  # the connection is gone with it
            await remote.reset()


def test_ctrl_c_in_the_sync_remote_env_cancels_the_servers_step(serve: Any,
                                                                 ctrl_c: None) -> None:
    server: Server = serve("open")
    remote = RemoteVectorEnv(server.url, "Waiting-v0", 1, timeout=60)
    try:
        remote.reset(seed=0)
        session = remote.async_env.session_id

        def interrupt_once_stepping() -> None:
            with httpx.Client(base_url=server.url) as client:
                wait_until(lambda: client.get(f"/sessions/{session}").json()["busy"], 30,
                           "the server to step")
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(target=interrupt_once_stepping)
        interrupter.start()
        with pytest.raises(KeyboardInterrupt):
            remote.step(np.array([1]))  # 3 s on the server, unless cancelled
        interrupter.join()
        with httpx.Client(base_url=server.url) as client:  # cancelled there too, at once
            wait_until(lambda: not client.get(f"/sessions/{session}").json()["busy"], 2.5,
                       "the server's step to be cancelled")
        obs, _ = remote.reset(seed=1)
        assert obs.shape == (1, 4)
    finally:
        remote.close()
