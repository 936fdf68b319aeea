"""aiovec.serve over HTTP, against a real uvicorn on 127.0.0.1: sessions, results equal to
Gymnasium's, every refusal a JSON body with a stable code, limits, quotas and the reaper."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import anyio
import gymnasium as gym
import httpx
import numpy as np
import pytest

from aiovec._wire._schema import space_from_schema
from aiovec.serve import ERROR_CODES
from tests.leaks import wait_until
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio


async def create(client: httpx.AsyncClient, env_id: str, num_envs: int = 1) -> str:
    response = await client.post("/sessions", json={"env_id": env_id, "num_envs": num_envs})
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


def refused(response: httpx.Response, status: int, code: str) -> None:
    """A refusal as the protocol promises: the status, a JSON body, the stable code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert body["error"] == code, body
    assert ERROR_CODES[code] == status
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in response.text


def metric(response: httpx.Response, sample: str) -> float:
    """The value of ``sample`` (``name{labels}``) on a ``/metrics`` page (0 if absent)."""
    for line in response.text.splitlines():
        if line.startswith(f"{sample} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_session_steps_like_gymnasium(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 3)
        described = (await client.get(f"/sessions/{session}")).json()
        local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
        assert space_from_schema(described["single_observation_space"]) == \
            local.single_observation_space
        assert space_from_schema(described["single_action_space"]) == local.single_action_space
        observations = (await client.post(f"/sessions/{session}/reset",
                                          json={"seed": 5})).json()["observations"]
        expected, _ = local.reset(seed=5)
        assert np.array_equal(np.array(observations, dtype=np.float32), expected)
        for step in range(40):
            actions = [step % 2, 1, 0]
            result = (await client.post(f"/sessions/{session}/step",
                                        json={"actions": actions})).json()
            obs, rewards, terminations, truncations, _ = local.step(np.array(actions))
            assert np.array_equal(np.array(result["observations"], dtype=np.float32), obs)
            assert result["rewards"] == rewards.tolist()
            assert result["terminations"] == terminations.tolist()
            assert result["truncations"] == truncations.tolist()
            assert result["restarted"] == {}
        local.close()
        assert (await client.get(f"/sessions/{session}")).json()["steps"] == 40
        assert (await client.delete(f"/sessions/{session}")).status_code == 204
        refused(await client.get(f"/sessions/{session}"), 404, "unknown_session")


async def test_session_ids_are_unguessable(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        ids = [await create(client, "CartPole-v1") for _ in range(3)]
        for session in ids:
            await client.delete(f"/sessions/{session}")
    assert len(set(ids)) == 3
    for session in ids:  # 192 random bits, URL-safe, no counter in them
        assert len(session) >= 32 and session.replace("-", "").replace("_", "").isalnum()
    assert len({session[:4] for session in ids}) > 1 or len({s[-4:] for s in ids}) > 1


async def test_every_refusal_is_a_json_body_with_a_stable_code(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
        await client.post(f"/sessions/{session}/reset", json={})
        cases: list[tuple[str, str, Any, int, str]] = [
            ("POST", "/sessions", {"env_id": "os.system"}, 422, "unknown_env"),
            ("POST", "/sessions", {"env_id": "CartPole-v1", "num_envs": 999}, 422,
             "bad_num_envs"),
            ("POST", "/sessions", {"env_id": "CartPole-v1", "num_envs": 0}, 422,
             "bad_num_envs"),
            ("POST", "/sessions", {"env_id": 3}, 422, "invalid"),
            ("POST", "/sessions", b"{not json", 400, "bad_json"),
            ("POST", "/sessions", [1, 2], 400, "bad_json"),
            ("POST", f"/sessions/{session}/step", {"actions": [0, 1, 1]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/step", {"actions": [0.5, 1]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/step", {"actions": [[0], [1, 2]]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/step", {"actions": ["a", "b"]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/step", {"actions": 1}, 422, "invalid"),
            ("POST", f"/sessions/{session}/step", {}, 422, "invalid"),
            ("POST", f"/sessions/{session}/reset", {"seed": "x"}, 422, "invalid"),
            ("POST", f"/sessions/{session}/reset", {"seed": [1, 2, 3]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/reset", {"seed": True}, 422, "invalid"),
            ("POST", f"/sessions/{session}/reset", {"options": [1]}, 422, "invalid"),
            # Outside CartPole's Discrete(2), or a seed numpy refuses: the client's mistake,
            # never a sub-env failure, so never a restart a client could force.
            ("POST", f"/sessions/{session}/step", {"actions": [0, 5]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/step", {"actions": [-1, 0]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/reset", {"seed": -1}, 422, "invalid"),
            ("POST", f"/sessions/{session}/reset", {"seed": [0, -5]}, 422, "invalid"),
            ("POST", f"/sessions/{session}/recv", {}, 409, "nothing_sent"),
            ("POST", f"/sessions/{session}/launch", {}, 404, "not_found"),
            ("POST", "/sessions/nope/step", {"actions": [0, 1]}, 404, "unknown_session"),
            ("DELETE", "/sessions/nope", None, 404, "unknown_session"),
            ("GET", "/no/such/route", None, 404, "not_found"),
            ("PUT", "/sessions", {}, 405, "method_not_allowed"),
            ("DELETE", "/envs", None, 405, "method_not_allowed"),
            ("GET", f"/sessions/{session}/step", None, 405, "method_not_allowed"),
        ]
        for method, path, body, status, error in cases:
            content = None if body is None else (
                body if isinstance(body, bytes) else json.dumps(body).encode())
            headers = {"content-type": "application/json"} if content else {}
            response = await client.request(method, path, content=content, headers=headers)
            refused(response, status, error)
        # Nothing stepped, the session still works, nothing was restarted.
        result = await client.post(f"/sessions/{session}/step", json={"actions": [0, 1]})
        assert result.status_code == 200, result.text
        assert result.json()["restarted"] == {}
        assert (await client.get(f"/sessions/{session}")).json()["restarts"] == 0
        await client.delete(f"/sessions/{session}")


async def test_a_body_that_is_not_json_is_refused_before_it_is_read(serve: Any) -> None:
    """A browser may POST text/plain or a form cross-origin without a preflight: refused."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        for content_type in ("text/plain", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x"):
            response = await client.post(
                "/sessions", content=b'{"env_id": "CartPole-v1"}',
                headers={"content-type": content_type})
            refused(response, 415, "unsupported_media_type")
        assert (await client.get("/healthz")).json()["sessions"] == 0


async def test_limits_on_size_and_depth(serve: Any) -> None:
    server: Server = serve("strict")  # 256 KiB bodies, JSON depth 8
    async with httpx.AsyncClient(base_url=server.url) as client:
        deep = b"[" * 100_000 + b"]" * 100_000
        refused(await client.post("/sessions", content=deep,
                                  headers={"content-type": "application/json"}),
                400, "too_deep")
        nine = json.dumps({"env_id": "CartPole-v1", "x": [[[[[[[[[]]]]]]]]]}).encode()
        refused(await client.post("/sessions", content=nine,
                                  headers={"content-type": "application/json"}),
                400, "too_deep")
        big = json.dumps({"env_id": "CartPole-v1", "pad": "x" * 300_000}).encode()
        refused(await client.post("/sessions", content=big,
                                  headers={"content-type": "application/json"}),
                413, "too_large")

        async def chunks() -> Any:  # no Content-Length: the server counts as it reads
            yield b'{"env_id": "CartPole-v1", "pad": "'
            for _ in range(40):
                yield b"x" * 10_000
            yield b'"}'

        refused(await client.post("/sessions", content=chunks(),
                                  headers={"content-type": "application/json"}),
                413, "too_large")
        assert (await client.get("/healthz")).json() == {"status": "ok", "sessions": 0}


async def test_a_big_body_is_parsed_off_the_event_loop(serve: Any) -> None:
    """Bodies over ``offload_bytes`` are parsed in a worker thread: the result is the same."""
    server: Server = serve("strict")  # offload above 1 KiB
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
        body = json.dumps({"actions": [0, 1], "pad": "y" * 100_000}).encode()
        response = await client.post(f"/sessions/{session}/reset", json={"seed": 1})
        assert response.status_code == 200
        response = await client.post(f"/sessions/{session}/step", content=body,
                                     headers={"content-type": "application/json"})
        assert response.status_code == 200, response.text
        await client.delete(f"/sessions/{session}")


async def test_a_full_server_and_a_greedy_client_are_refused(serve: Any) -> None:
    server: Server = serve("tokens")  # 8 sessions, 2 per client
    alice = {"authorization": "Bearer alice-token-0123456789"}
    async with httpx.AsyncClient(base_url=server.url, headers=alice) as client:
        first, second = [await create(client, "CartPole-v1") for _ in range(2)]
        greedy = await client.post("/sessions", json={"env_id": "CartPole-v1"})
        refused(greedy, 429, "quota_exceeded")
        assert greedy.headers["retry-after"] == "1"
        await client.delete(f"/sessions/{first}")
        third = await create(client, "CartPole-v1")
        # Another client's quota is its own.
        bob = {"authorization": "Bearer bob-token-0123456789ab"}
        theirs = (await client.post("/sessions", headers=bob,
                                    json={"env_id": "CartPole-v1"})).json()["session_id"]
        for session in (second, third):
            assert (await client.delete(f"/sessions/{session}")).status_code == 204
        await client.delete(f"/sessions/{theirs}", headers=bob)
    server = serve("strict")  # 3 sessions in all
    async with httpx.AsyncClient(base_url=server.url) as client:
        sessions = [await create(client, "CartPole-v1") for _ in range(3)]
        full = await client.post("/sessions", json={"env_id": "CartPole-v1"})
        refused(full, 503, "full")
        assert full.headers["retry-after"] == "1"
        for session in sessions:
            await client.delete(f"/sessions/{session}")


async def test_idle_sessions_are_reaped(serve: Any) -> None:
    server: Server = serve("strict")  # idle_timeout 1 s
    async with httpx.AsyncClient(base_url=server.url) as client:
        reaped = metric(await client.get("/metrics"),
                        'aiovec_serve_sessions_closed_total{reason="idle"}')
        session = await create(client, "CartPole-v1")
        await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: httpx.get(f"{server.url}/healthz").json()["sessions"] == 0, 30,
            "the idle session to be reaped"))
        refused(await client.get(f"/sessions/{session}"), 404, "unknown_session")
        assert metric(await client.get("/metrics"),
                      'aiovec_serve_sessions_closed_total{reason="idle"}') == reaped + 1


async def test_a_crashing_sub_env_is_restarted_and_reported(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "Crashing-v0", 1)
        await client.post(f"/sessions/{session}/reset", json={"seed": 0})
        answers = [await client.post(f"/sessions/{session}/step", json={"actions": [1]})
                   for _ in range(3)]
        assert [answer.status_code for answer in answers] == [200, 200, 200]
        third = answers[2].json()
        assert set(third["restarted"]) == {"0"} and "simulator fault" in third["restarted"]["0"]
        assert third["truncations"] == [True]
        assert (await client.get(f"/sessions/{session}")).json()["restarts"] == 1
        await client.delete(f"/sessions/{session}")


async def test_first_ready_send_and_recv(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 4)
        await client.post(f"/sessions/{session}/reset", json={"seed": 3})
        sent = await client.post(f"/sessions/{session}/send",
                                 json={"actions": [1, 0], "env_ids": [2, 0]})
        assert sent.status_code == 200, sent.text
        received: list[int] = []
        while len(received) < 2:
            batch = (await client.post(f"/sessions/{session}/recv",
                                       json={"batch_size": 1})).json()
            assert len(batch["rewards"]) == len(batch["env_ids"]) == 1
            received += batch["env_ids"]
        assert sorted(received) == [0, 2]
        refused(await client.post(f"/sessions/{session}/send",
                                  json={"actions": [1], "env_ids": [9]}), 422, "invalid")
        await client.delete(f"/sessions/{session}")


async def test_the_allow_list_and_openapi(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        envs = (await client.get("/envs")).json()
        document = (await client.get("/openapi.json")).json()
    assert envs["CartPole-v1"] == {"description": "Gymnasium's CartPole", "max_envs": 8}
    assert document["openapi"].startswith("3.")
    assert {"/sessions", "/sessions/{session_id}", "/sessions/{session_id}/step",
            "/healthz", "/metrics"} <= set(document["paths"])
    codes = document["components"]["schemas"]["Error"]["properties"]["error"]["enum"]
    assert set(codes) == set(ERROR_CODES)
    assert document["paths"]["/sessions"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]["properties"]["env_id"]["enum"] == sorted(envs)


async def test_mounted_in_another_app_under_its_lifespan(serve: Any) -> None:
    server: Server = serve("mounted")
    async with httpx.AsyncClient(base_url=f"{server.url}/rl") as client:
        session = await create(client, "CartPole-v1", 2)
        assert (await client.post(f"/sessions/{session}/reset", json={})).status_code == 200
        refused(await client.get("/nowhere"), 404, "not_found")
        assert (await client.delete(f"/sessions/{session}")).status_code == 204
    unstarted: Server = serve("unstarted")
    async with httpx.AsyncClient(base_url=f"{unstarted.url}/rl") as client:
        refused(await client.post("/sessions", json={"env_id": "CartPole-v1"}), 503,
                "not_started")
        assert (await client.get("/healthz")).status_code == 503


async def test_what_would_make_a_sub_env_fail_is_refused_before_it_is_sent(serve: Any) -> None:
    """Reset options reach the env's own code: refused unless the env takes them; and the
    counts of seeds and env ids are checked before their values are looked at."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
        refused(await client.post(f"/sessions/{session}/reset",
                                  json={"options": {"low": 1, "high": 0}}), 422, "invalid")
        refused(await client.post(f"/sessions/{session}/reset",
                                  json={"seed": list(range(100_000))}), 422, "invalid")
        await client.post(f"/sessions/{session}/reset", json={"seed": 0})
        for env_ids in ([0, 0], [2], [-1], list(range(100_000)), [], "all"):
            refused(await client.post(f"/sessions/{session}/send",
                                      json={"actions": [0, 1], "env_ids": env_ids}),
                    422, "invalid")
        assert (await client.get(f"/sessions/{session}")).json()["restarts"] == 0
        await client.delete(f"/sessions/{session}")
        options = await create(client, "Options-v0", 1)
        answer = await client.post(f"/sessions/{options}/reset",
                                   json={"seed": 0, "options": {"level": 3}})
        assert answer.status_code == 200, answer.text
        assert answer.json()["infos"]["options"]["level"] == [3]  # as vector infos nest it
        await client.delete(f"/sessions/{options}")


async def test_a_sub_env_that_fails_to_close_does_not_take_the_server_down(serve: Any) -> None:
    server: Server = serve("strict")  # the reaper runs every 0.5 s (idle after 1 s)
    async with httpx.AsyncClient(base_url=server.url) as client:
        deleted = await create(client, "BadClose-v0", 2)
        assert (await client.delete(f"/sessions/{deleted}")).status_code == 204
        await create(client, "BadClose-v0", 1)  # left for the reaper
        await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: httpx.get(f"{server.url}/healthz").json()["sessions"] == 0, 30,
            "the reaper to close the session"))
        # The reaper and the server carry on.
        session = await create(client, "CartPole-v1")
        assert (await client.post(f"/sessions/{session}/reset", json={})).status_code == 200
        await client.delete(f"/sessions/{session}")


async def test_an_env_whose_spaces_cannot_be_described_is_the_servers_error(serve: Any
                                                                          ) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        refused(await client.post("/sessions", json={"env_id": "Unservable-v0"}), 500,
                "internal")
        assert (await client.get("/healthz")).json()["sessions"] == 0


def test_idle_keep_alive_connections_close_after_the_configured_time(serve: Any) -> None:
    """The brief server keeps an idle connection 1 s (uvicorn_config(keep_alive=1))."""
    server: Server = serve("brief")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        received = b""
        while b"}" not in received:  # the whole (small) answer
            received += connection.recv(4096)
        assert received.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        while connection.recv(4096):  # b"": the server closed it
            pass
        assert time.monotonic() - started < 25  # 1 s, with a noisy machine's margin


async def test_boolean_actions_are_refused_as_a_local_env_refuses_them(serve: Any) -> None:
    """``Discrete(2)`` takes no booleans locally (``expected dtype int64``): over HTTP
    neither; the session steps on afterwards, nothing counted against its sub-envs."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
        await client.post(f"/sessions/{session}/reset", json={"seed": 0})
        answer = await client.post(f"/sessions/{session}/step",
                                   json={"actions": [True, False]})
        refused(answer, 422, "invalid")
        assert "bool" in answer.json()["detail"]
        fine = await client.post(f"/sessions/{session}/step", json={"actions": [1, 0]})
        assert fine.status_code == 200, fine.text
        assert (await client.get(f"/sessions/{session}")).json()["restarts"] == 0
        await client.delete(f"/sessions/{session}")
