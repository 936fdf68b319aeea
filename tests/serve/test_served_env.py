"""examples/serve (a thin app on aiovec.serve) under a real uvicorn on 127.0.0.1, with real
concurrent clients: heavy, slow and crashing envs, workers killed, shutdown, the tiny client.
The library itself: test_http, test_websocket, test_guard, test_metrics_endpoint."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from tests.leaks import descendants, wait_until
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio

ASYNCIO = pytest.mark.parametrize("anyio_backend", ["asyncio"])


async def create(client: httpx.AsyncClient, env_id: str, num_envs: int) -> str:
    response = await client.post("/sessions", json={"env_id": env_id, "num_envs": num_envs})
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


async def until_busy(client: httpx.AsyncClient, session: str) -> None:
    """Poll until the server is serving a request of ``session`` (bounded)."""
    with anyio.fail_after(30):
        while not (await client.get(f"/sessions/{session}")).json()["busy"]:  # noqa: ASYNC110
            await anyio.sleep(0.01)  # polling another process: there is no event to wait on


def session_count(server: Server) -> int:
    return int(httpx.get(f"{server.url}/healthz").json()["sessions"])


@pytest.mark.slow
@ASYNCIO
async def test_fifty_concurrent_sessions_step(anyio_backend: str, start_server: Any) -> None:
    server = start_server("--max-sessions", "60")
    steps_seen: list[int] = []
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
        async def user(index: int) -> None:
            session = await create(client, "CartPole-v1", 2)
            reset = await client.post(f"/sessions/{session}/reset", json={"seed": index})
            assert reset.status_code == 200, reset.text
            for step in range(20):
                result = await client.post(f"/sessions/{session}/step",
                                           json={"actions": [step % 2, 1]})
                assert result.status_code == 200, result.text
                assert len(result.json()["observations"]) == 2
            described = (await client.get(f"/sessions/{session}")).json()
            steps_seen.append(described["steps"])
            assert (await client.delete(f"/sessions/{session}")).status_code == 204

        async with anyio.create_task_group() as group:
            for index in range(50):
                group.start_soon(user, index)
    assert steps_seen == [20] * 50
    assert session_count(server) == 0


@ASYNCIO
async def test_a_full_server_says_so(anyio_backend: str, start_server: Any) -> None:
    server = start_server("--max-sessions", "2")
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await create(client, "CartPole-v1", 1)
        await create(client, "CartPole-v1", 1)
        full = await client.post("/sessions", json={"env_id": "CartPole-v1"})
        assert full.status_code == 503 and full.json()["error"] == "full"
        assert full.headers["retry-after"] == "1"
        await client.delete(f"/sessions/{first}")
        await create(client, "CartPole-v1", 1)


@ASYNCIO
async def test_a_client_that_hangs_up_mid_step_releases_its_session(
        anyio_backend: str, start_server: Any) -> None:
    server = start_server()
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        session = await create(client, "SlowCartPole-v0", 2)
        await client.post(f"/sessions/{session}/reset", json={})
        workers = server.workers()
        assert len(workers) == 2
        async with (httpx.AsyncClient(base_url=server.url, timeout=60) as stepping,
                    anyio.create_task_group() as group):
            group.start_soon(functools.partial(stepping.post, f"/sessions/{session}/step",
                                               json={"actions": [0, 1]}))
            # Wait until the server is stepping (the session is busy), then hang up.
            await until_busy(client, session)
            group.cancel_scope.cancel()
        # The 2 s step was cancelled and the session closed: its workers are gone at once.
        started = time.monotonic()
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: session_count(server) == 0, 10, "the session to close"))
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: not (workers & descendants(server.process.pid)), 10,
                               "the session's workers to exit"))
        assert time.monotonic() - started < 10
        assert (await client.get(f"/sessions/{session}")).status_code == 404


@ASYNCIO
async def test_a_killed_worker_is_restarted_mid_session(anyio_backend: str,
                                                        start_server: Any) -> None:
    server = start_server()
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        session = await create(client, "HeavyCartPole-v0", 2)
        await client.post(f"/sessions/{session}/reset", json={"seed": 0})
        await client.post(f"/sessions/{session}/step", json={"actions": [0, 1]})
        victim = min(server.workers())
        os.kill(victim, signal.SIGKILL)
        result = await client.post(f"/sessions/{session}/step", json={"actions": [0, 1]})
        assert result.status_code == 200, result.text
        body = result.json()
        assert len(body["restarted"]) == 1 and "died" in next(iter(body["restarted"].values()))
        restarted = int(next(iter(body["restarted"])))
        assert body["truncations"][restarted] is True
        assert victim not in server.workers() and len(server.workers()) == 2
        assert (await client.get(f"/sessions/{session}")).json()["restarts"] == 1
        for _ in range(3):  # and it carries on
            assert (await client.post(f"/sessions/{session}/step",
                                      json={"actions": [0, 1]})).status_code == 200


@ASYNCIO
async def test_a_crashing_simulator_gets_a_structured_answer(anyio_backend: str,
                                                             start_server: Any) -> None:
    server = start_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CrashingCartPole-v0", 2)
        await client.post(f"/sessions/{session}/reset", json={})
        restarted = {}
        for _ in range(3):  # the simulator fails every third step
            response = await client.post(f"/sessions/{session}/step", json={"actions": [0, 1]})
            assert response.status_code == 200, response.text
            restarted.update(response.json()["restarted"])
        assert restarted == {"0": "RuntimeError: simulator fault at step 3",
                             "1": "RuntimeError: simulator fault at step 3"}


@pytest.mark.slow
@ASYNCIO
async def test_healthz_stays_responsive_while_heavy_envs_step(
        anyio_backend: str, start_server: Any, record_property: Any) -> None:
    server = start_server()
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        sessions = [await create(client, "HeavyCartPole-v0", 4) for _ in range(4)]
        for session in sessions:
            await client.post(f"/sessions/{session}/reset", json={})
        async with anyio.create_task_group() as group:
            async def keep_stepping(session: str) -> None:
                while True:
                    response = await client.post(f"/sessions/{session}/step",
                                                 json={"actions": [0, 1, 0, 1]})
                    assert response.status_code == 200, response.text

            for session in sessions:
                group.start_soon(keep_stepping, session)
            async with httpx.AsyncClient(base_url=server.url) as probe:
                for _ in range(200):
                    started = time.perf_counter()
                    assert (await probe.get("/healthz")).status_code == 200
                    latencies.append(time.perf_counter() - started)
            group.cancel_scope.cancel()
    p50, p99 = np.percentile(latencies, 50), np.percentile(latencies, 99)
    # Plain floats: pytest-xdist sends the properties to the controller, and its serializer
    # refuses numpy scalars (the worker crashes).
    record_property("healthz_p50_ms", round(float(p50) * 1e3, 2))
    record_property("healthz_p99_ms", round(float(p99) * 1e3, 2))
    print(f"/healthz under load: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
          f"mean {statistics.mean(latencies) * 1e3:.2f} ms")
    # 16 envs burning 5 ms of CPU a step keep both cores busy; a blocked loop would show up
    # as latencies of whole vector steps and more. A wide margin: these machines are noisy.
    assert p99 < 1.0


@ASYNCIO
async def test_shutdown_with_sessions_open_reaps_everything(anyio_backend: str,
                                                            start_server: Any) -> None:
    server = start_server()
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        sessions = {}
        for env_id in ("HeavyCartPole-v0", "SlowCartPole-v0", "CartPole-v1"):
            sessions[env_id] = await create(client, env_id, 2)
            await client.post(f"/sessions/{sessions[env_id]}/reset", json={})
        assert len(server.workers()) == 4
        async with anyio.create_task_group() as group:
            async def step_slowly() -> None:
                # The server stops while this step runs: it gets an answer or a closed
                # connection, never a hang.
                with contextlib.suppress(httpx.HTTPError):
                    await client.post(f"/sessions/{sessions['SlowCartPole-v0']}/step",
                                      json={"actions": [0, 1]})

            assert (await client.get("/healthz")).json()["sessions"] == 3
            group.start_soon(step_slowly)
            await until_busy(client, sessions["SlowCartPole-v0"])
            started = time.monotonic()
            assert await anyio.to_thread.run_sync(server.stop) == 0
        assert time.monotonic() - started < 30
    assert not descendants(server.process.pid)


@ASYNCIO
async def test_idle_sessions_are_reaped(anyio_backend: str, start_server: Any) -> None:
    server = start_server("--idle-timeout", "0.5")
    async with httpx.AsyncClient(base_url=server.url) as client:
        await create(client, "HeavyCartPole-v0", 1)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: session_count(server) == 0, 15, "the idle reaper"))
        metrics = (await client.get("/metrics")).text
        assert 'aiovec_serve_sessions_closed_total{reason="idle"} 1' in metrics
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: not server.workers(), 10, "the reaped session's worker"))


@ASYNCIO
async def test_a_websocket_session(anyio_backend: str, start_server: Any) -> None:
    server = start_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
    address = server.url.replace("http://", "ws://") + f"/sessions/{session}/ws"
    async with connect(address) as socket:
        await socket.send(json.dumps({"op": "reset", "seed": 3}))
        reset = json.loads(await socket.recv())
        assert reset["ok"] and len(reset["observations"]) == 2
        await socket.send(json.dumps({"op": "step", "actions": [1, 1]}))
        stepped = json.loads(await socket.recv())
        assert stepped["ok"] and stepped["rewards"] == [1.0, 1.0]
        for bad, error in (("{oops", "bad_json"), (json.dumps({"op": "fly"}), "not_found"),
                           (json.dumps({"op": "step", "actions": [1]}), "invalid")):
            await socket.send(bad)
            answer = json.loads(await socket.recv())
            assert not answer["ok"] and answer["error"] == error, answer
        await socket.send(json.dumps({"op": "step", "actions": [0, 0]}))
        assert json.loads(await socket.recv())["ok"]  # still serving after bad messages
    # The connection was the lease: the session is gone with it.
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: session_count(server) == 0, 10, "the session to close"))


@ASYNCIO
async def test_a_websocket_that_drops_mid_step_releases_its_session(
        anyio_backend: str, start_server: Any) -> None:
    server = start_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "SlowCartPole-v0", 2)
        await client.post(f"/sessions/{session}/reset", json={})
        workers = server.workers()
        address = server.url.replace("http://", "ws://") + f"/sessions/{session}/ws"
        async with connect(address) as socket:
            await socket.send(json.dumps({"op": "step", "actions": [0, 1]}))
            await until_busy(client, session)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: session_count(server) == 0, 10, "the session to close"))
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: not (workers & descendants(server.process.pid)), 10,
                               "the session's workers to exit"))


def test_the_tiny_client_plays_over_http_and_as_a_remote_vector_env(start_server: Any) -> None:
    server = start_server()
    client = Path(__file__).resolve().parents[2] / "examples" / "serve" / "client.py"
    completed = subprocess.run(
        [sys.executable, str(client), "--url", server.url, "--num-envs", "3", "--steps", "40"],
        capture_output=True, text=True, timeout=120, check=True)
    assert "Traceback" not in completed.stderr, completed.stderr
    for transport in ("http", "remote vector env"):
        line = next(line for line in completed.stdout.splitlines()
                    if line.startswith(f"{transport}:"))
        # Every step pays each of the 3 CartPoles 1 (reset steps pay 0).
        reward = float(line.rsplit(" ", 1)[1])
        assert 40 * 3 * 0.8 <= reward <= 40 * 3, line
    assert session_count(server) == 0
