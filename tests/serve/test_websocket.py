"""aiovec.serve's WebSocket protocol against a real uvicorn: JSON and binary frames, request
ids, cancellation, limits, and the connection as the session's lease."""

from __future__ import annotations

import json
from typing import Any

import anyio
import gymnasium as gym
import httpx
import numpy as np
import pytest

from aiovec._remote._websocket import WebSocket, WebSocketClosed, WebSocketRejected
from aiovec._wire._codec import FRAME_MAGIC, decode_frame, encode_frame
from tests.leaks import wait_until
from tests.serve.conftest import Server
from tests.serve.test_http import create, metric

pytestmark = pytest.mark.anyio


def ws_url(server: Server, session: str) -> str:
    return f"{server.url.replace('http', 'ws', 1)}/sessions/{session}/ws"


async def ask(socket: WebSocket, request: dict[str, Any], binary: bool = False) -> Any:
    if binary:
        await socket.send_bytes(encode_frame(request))
    else:
        await socket.send_text(json.dumps(request))
    answer = await socket.receive()
    assert isinstance(answer, bytes) == binary
    return decode_frame(answer) if binary else json.loads(answer)


def session_count(server: Server) -> int:
    return int(httpx.get(f"{server.url}/healthz").json()["sessions"])


async def until_no_sessions(server: Server) -> None:
    """Wait (bounded) until the server holds no session: it closes them as connections end."""
    await anyio.to_thread.run_sync(lambda: wait_until(lambda: session_count(server) == 0, 10,
                                                      "the session to close"))


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_a_session_over_a_websocket_steps_like_gymnasium(serve: Any, binary: bool
                                                               ) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
    local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        answer = await ask(socket, {"op": "reset", "id": 1, "seed": [3, 4]}, binary)
        expected, _ = local.reset(seed=[3, 4])
        assert answer["ok"] and answer["id"] == 1
        observations = answer["observations"]
        if binary:  # arrays travel as themselves
            assert isinstance(observations, np.ndarray) and observations.dtype == np.float32
        assert np.array_equal(np.asarray(observations, dtype=np.float32), expected)
        for step in range(30):
            actions = np.array([step % 2, 1])
            answer = await ask(socket, {"op": "step", "id": step + 2,
                                        "actions": actions if binary else actions.tolist()},
                               binary)
            obs, rewards, terminations, truncations, _ = local.step(actions)
            assert answer["id"] == step + 2
            assert np.array_equal(np.asarray(answer["observations"], np.float32), obs)
            assert np.array_equal(answer["rewards"], rewards)
            assert np.array_equal(answer["terminations"], terminations)
            assert np.array_equal(answer["truncations"], truncations)
        await socket.send_text(json.dumps({"op": "close"}))
        with pytest.raises(WebSocketClosed):
            await socket.receive()
    local.close()
    await until_no_sessions(server)


def _deep_frame(levels: int) -> bytes:
    """A frame whose tree nests ``levels`` lists deep (no writer of ours makes one)."""
    tree = "[" * levels + "]" * levels
    header = json.dumps({"arrays": [], "tree": 0}).replace("0}", tree + "}").encode()
    frame = FRAME_MAGIC + len(header).to_bytes(4, "little") + header
    return frame + b"\0" * (-len(frame) % 8)


async def test_bad_messages_get_an_answer_and_the_connection_stays(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        cases: list[tuple[Any, str]] = [
            ("{not json", "bad_json"),
            ("[1, 2]", "bad_json"),
            ("[" * 50_000 + "]" * 50_000, "too_deep"),
            (b"not a frame", "bad_frame"),
            ({"op": "step", "id": 7, "actions": [0, 1]}, "reset_needed"),
            ({"op": "reset", "id": 8, "seed": -3}, "invalid"),
            ({"op": "explode", "id": 9}, "not_found"),
            ({"op": "step", "id": [1]}, "bad_json"),
            ({"op": 5, "id": 1}, "bad_json"),
            (encode_frame({"op": "step", "id": np.array([1, 2]), "actions": [0, 1]}),
             "bad_frame"),
            (_deep_frame(1_000), "too_deep"),  # measured before parsing, as JSON text is
            (_deep_frame(100_000), "too_deep"),
        ]
        for message, code in cases:
            if isinstance(message, dict):
                await socket.send_text(json.dumps(message))
            elif isinstance(message, bytes):
                await socket.send_bytes(message)
            else:
                await socket.send_text(message)
            raw = await socket.receive()
            answer = decode_frame(raw) if isinstance(raw, bytes) else json.loads(raw)
            assert answer["ok"] is False and answer["error"] == code, (message, answer)
            if isinstance(message, dict) and code not in ("bad_json", "bad_frame"):
                assert answer["id"] == message["id"]
        answer = await ask(socket, {"op": "reset", "id": 10, "seed": 0})
        assert answer["ok"]
        answer = await ask(socket, {"op": "step", "id": 11, "actions": [0, 5]})
        assert answer["error"] == "invalid"
        answer = await ask(socket, {"op": "step", "id": 12, "actions": [0, 1]})
        assert answer["ok"] and answer["restarted"] == {}


async def test_a_message_over_the_limit_closes_with_1009(serve: Any) -> None:
    server: Server = serve("strict")  # 256 KiB
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 1)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        await socket.send_text(json.dumps({"op": "reset", "pad": "x" * 300_000}))
        with pytest.raises(WebSocketClosed) as closed:
            await socket.receive()
    assert closed.value.code == 1009
    await until_no_sessions(server)


async def test_cancel_stops_the_running_step(serve: Any) -> None:
    """A 3 s step, cancelled by id: answered ``cancelled`` long before it would end."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "Waiting-v0", 1)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        assert (await ask(socket, {"op": "reset", "id": 1, "seed": 0}))["ok"]
        await socket.send_text(json.dumps({"op": "step", "id": 2, "actions": [1]}))
        await socket.send_text(json.dumps({"op": "cancel", "id": 2}))
        answer = json.loads(await socket.receive())
        assert answer == {"id": 2, "ok": False, "error": "cancelled",
                          "detail": "cancelled by the client"}
        # The session serves the next request (a reset: the cancelled step's episode is off).
        answer = await ask(socket, {"op": "reset", "id": 3, "seed": 1})
        assert answer["ok"], answer


async def test_requests_queue_in_order_and_a_cancel_skips_a_waiting_one(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 1)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        await socket.send_text(json.dumps({"op": "reset", "id": "a", "seed": 0}))
        for index in range(5):
            await socket.send_text(json.dumps({"op": "step", "id": index, "actions": [1]}))
        await socket.send_text(json.dumps({"op": "cancel", "id": 4}))
        answers = [json.loads(await socket.receive()) for _ in range(6)]
    assert [answer["id"] for answer in answers] == ["a", 0, 1, 2, 3, 4]
    assert all(answer["ok"] for answer in answers[:4])
    # Step 4 waited behind the others, or was already done: cancelled, or answered.
    assert answers[5]["ok"] or answers[5]["error"] == "cancelled"


async def test_hanging_up_mid_step_releases_the_session(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "Waiting-v0", 1)
        socket = await WebSocket.connect(ws_url(server, session))
        try:
            assert (await ask(socket, {"op": "reset", "id": 1}))["ok"]
            await socket.send_text(json.dumps({"op": "step", "id": 2, "actions": [0]}))
            with anyio.fail_after(30):
                while not (await client.get(f"/sessions/{session}")).json()["busy"]:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # another process: no event to wait on
        finally:
            await socket.aclose()
        await until_no_sessions(server)
        assert metric(await client.get("/metrics"),
                      'aiovec_serve_sessions_closed_total{reason="disconnected"}') >= 1


async def test_healthz_stays_responsive_while_a_big_payload_is_parsed(serve: Any) -> None:
    server: Server = serve("open")  # offload above 64 KiB, bodies up to 4 MiB
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        session = await create(client, "Box-v0", 1)
        body = json.dumps({"actions": [[0.5, -0.5]], "pad": [1.5] * 400_000}).encode()
        assert len(body) < 4 * 2**20
        await client.post(f"/sessions/{session}/reset", json={"seed": 0})
        async with anyio.create_task_group() as group:
            async def big() -> None:
                answer = await client.post(f"/sessions/{session}/step", content=body,
                                           headers={"content-type": "application/json"})
                assert answer.status_code == 200, answer.text

            group.start_soon(big)
            for _ in range(20):  # each answered, whatever the big one is doing
                assert (await client.get("/healthz")).status_code == 200
        await client.delete(f"/sessions/{session}")


def opening_url(server: Server) -> str:
    return f"{server.url.replace('http', 'ws', 1)}/ws"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_ws_opens_its_own_session_with_its_first_message(serve: Any, binary: bool
                                                               ) -> None:
    server: Server = serve("open")
    async with await WebSocket.connect(opening_url(server)) as socket:
        answer = await ask(socket, {"op": "open", "id": "o", "env_id": "CartPole-v1",
                                    "num_envs": 2}, binary)
        assert answer["ok"] and answer["id"] == "o"
        described = answer["session"]
        assert described["num_envs"] == 2 and described["single_action_space"] == {
            "type": "Discrete", "dtype": "int64", "n": 2, "start": 0}
        assert session_count(server) == 1
        answer = await ask(socket, {"op": "reset", "id": 1, "seed": 0}, binary)
        assert answer["ok"] and np.asarray(answer["observations"]).shape == (2, 4)
    # The connection was the lease.
    await until_no_sessions(server)


async def test_ws_refuses_a_bad_opening_and_closes(serve: Any) -> None:
    server: Server = serve("open")
    for opening, code in (({"op": "open", "id": 1, "env_id": "Nope-v0"}, "unknown_env"),
                          ({"op": "open", "id": 1, "env_id": "CartPole-v1", "num_envs": 99},
                           "bad_num_envs"),
                          ({"op": "reset", "id": 1}, "invalid"),
                          ({"op": "open", "id": 1, "env_id": "CartPole-v1",
                            "pad": "x" * 100_000}, "too_large")):
        async with await WebSocket.connect(opening_url(server)) as socket:
            answer = await ask(socket, opening)
            assert answer["ok"] is False and answer["error"] == code, answer
            assert answer["id"] == (None if code == "too_large" else 1)
            with pytest.raises(WebSocketClosed):
                await socket.receive()
    assert session_count(server) == 0


async def test_ws_opening_counts_against_the_quota_and_refuses_strangers(serve: Any) -> None:
    server: Server = serve("tokens")  # 2 sessions per principal
    alice = [("authorization", "Bearer alice-token-0123456789")]
    url = opening_url(server)
    with pytest.raises(WebSocketRejected) as rejected:
        await WebSocket.connect(url)
    assert rejected.value.status == 401 and json.loads(rejected.value.body)["error"] == \
        "unauthorized"
    async with await WebSocket.connect(url, headers=alice) as first, \
            await WebSocket.connect(url, headers=alice) as second, \
            await WebSocket.connect(url, headers=alice) as third:
        opening = {"op": "open", "id": 1, "env_id": "CartPole-v1"}
        assert (await ask(first, opening))["ok"] and (await ask(second, opening))["ok"]
        answer = await ask(third, opening)
        assert answer["error"] == "quota_exceeded"


async def test_a_session_closed_elsewhere_closes_its_connection(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 1)
        async with await WebSocket.connect(ws_url(server, session)) as socket:
            assert (await ask(socket, {"op": "reset", "id": 1}))["ok"]
            assert (await client.delete(f"/sessions/{session}")).status_code == 204
            with pytest.raises(WebSocketClosed) as closed:
                await socket.receive()
    assert closed.value.code == 4404


async def test_ws_closes_a_connection_that_never_opens_a_session(serve: Any) -> None:
    server: Server = serve("brief")  # opening_seconds=1 (no other test of it opens a session)
    async with await WebSocket.connect(opening_url(server)) as socket:
        with anyio.fail_after(30), pytest.raises(WebSocketClosed) as closed:
            await socket.receive()  # nothing sent: the server gives up on it
    assert closed.value.code == 1008


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_boolean_actions_are_refused_as_a_local_env_refuses_them(serve: Any,
                                                                       binary: bool) -> None:
    """Over a WebSocket too, in JSON text and in a frame carrying a ``|b1`` array."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        await ask(socket, {"op": "reset", "id": 1, "seed": 0}, binary)
        actions = np.array([True, False])
        answer = await ask(socket, {"op": "step", "id": 2,
                                    "actions": actions if binary else actions.tolist()},
                           binary)
        assert not answer["ok"] and answer["error"] == "invalid", answer
        assert "bool" in answer["detail"]
        answer = await ask(socket, {"op": "step", "id": 3, "actions": [1, 0]}, binary)
        assert answer["ok"], answer
        await socket.send_text(json.dumps({"op": "close"}))
        with pytest.raises(WebSocketClosed):
            await socket.receive()
    await until_no_sessions(server)
