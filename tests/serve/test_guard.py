"""Who may use a server: bearer tokens and ownership, Host and Origin checks, loopback-only
when open; against a real uvicorn on 127.0.0.1 (and ``Guard`` alone for what a loopback
test cannot be: a client from another address)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.requests import Request

from aiovec._remote._websocket import WebSocket, WebSocketRejected
from aiovec._serve._errors import ServeError
from aiovec._serve._guard import Guard
from aiovec.serve import EnvServer, Limits, ServedEnv, uvicorn_config
from tests.serve.apps import ALLOWED_ORIGIN, ENVS, TOKENS
from tests.serve.conftest import Server
from tests.serve.test_http import create, refused

pytestmark = pytest.mark.anyio

ALICE = {"authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"authorization": f"Bearer {TOKENS['bob']}"}


async def test_a_token_server_refuses_requests_without_a_good_token(serve: Any) -> None:
    server: Server = serve("tokens")
    async with httpx.AsyncClient(base_url=server.url) as client:
        for headers in ({}, {"authorization": "Bearer wrong-token-0123456789"},
                        {"authorization": TOKENS["alice"]},
                        {"authorization": f"Basic {TOKENS['alice']}"}):
            for method, path in (("POST", "/sessions"), ("GET", "/envs"),
                                 ("GET", "/metrics"), ("GET", "/openapi.json")):
                response = await client.request(method, path, headers=headers,
                                                json={"env_id": "CartPole-v1"})
                refused(response, 401, "unauthorized")
                assert response.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/healthz")).status_code == 200  # probes need no token
        assert (await client.get("/envs", headers=ALICE)).status_code == 200


async def test_sessions_belong_to_their_creator(serve: Any) -> None:
    server: Server = serve("tokens")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = (await client.post("/sessions", headers=ALICE,
                                     json={"env_id": "CartPole-v1"})).json()["session_id"]
        await client.post(f"/sessions/{session}/reset", headers=ALICE, json={"seed": 0})
        # Bob is told it does not exist, whatever he tries.
        refused(await client.get(f"/sessions/{session}", headers=BOB), 404, "unknown_session")
        refused(await client.post(f"/sessions/{session}/step", headers=BOB,
                                  json={"actions": [1]}), 404, "unknown_session")
        refused(await client.delete(f"/sessions/{session}", headers=BOB), 404,
                "unknown_session")
        with pytest.raises(WebSocketRejected) as rejected:
            await WebSocket.connect(f"{server.url.replace('http', 'ws')}/sessions/{session}/ws",
                                    headers=list(BOB.items()))
        assert rejected.value.status == 404
        # Alice's session is untouched and still hers.
        described = (await client.get(f"/sessions/{session}", headers=ALICE)).json()
        assert described["steps"] == 0
        assert (await client.post(f"/sessions/{session}/step", headers=ALICE,
                                  json={"actions": [1]})).status_code == 200
        assert (await client.delete(f"/sessions/{session}", headers=ALICE)).status_code == 204


async def test_a_loopback_server_answers_only_loopback_host_names(serve: Any) -> None:
    """DNS rebinding: a page at evil.example resolving to 127.0.0.1 sends Host: evil.example."""
    server: Server = serve("open")
    port = server.url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(base_url=server.url) as client:
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example",
                     "localhost.evil.example"):
            refused(await client.get("/envs", headers={"host": host}), 400, "bad_host")
            refused(await client.post("/sessions", headers={"host": host},
                                      json={"env_id": "CartPole-v1"}), 400, "bad_host")
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"[::1]:{port}",
                     f"LocalHost:{port}"):
            assert (await client.get("/envs", headers={"host": host})).status_code == 200
        assert (await client.get("/healthz")).json()["sessions"] == 0


async def test_cross_origin_requests_and_websockets_are_refused(serve: Any) -> None:
    server: Server = serve("open")
    evil = {"origin": "https://evil.example"}
    async with httpx.AsyncClient(base_url=server.url) as client:
        refused(await client.post("/sessions", headers=evil, json={"env_id": "CartPole-v1"}),
                403, "origin_refused")
        refused(await client.get("/envs", headers=evil), 403, "origin_refused")
        assert (await client.get("/healthz")).json()["sessions"] == 0  # nothing was created
        session = await create(client, "CartPole-v1")
        with pytest.raises(WebSocketRejected) as rejected:
            await WebSocket.connect(f"{server.url.replace('http', 'ws')}/sessions/{session}/ws",
                                    headers=list(evil.items()))
        assert rejected.value.status == 403
        assert b"origin_refused" in rejected.value.body
        # The server's own pages are same-origin.
        same = {"origin": server.url}
        assert (await client.get(f"/sessions/{session}", headers=same)).status_code == 200
        await client.delete(f"/sessions/{session}")


async def test_an_allowed_origin_is_admitted(serve: Any) -> None:
    server: Server = serve("strict")
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/sessions", headers={"origin": ALLOWED_ORIGIN},
                                     json={"env_id": "CartPole-v1"})
        assert response.status_code == 201, response.text
        await client.delete(f"/sessions/{response.json()['session_id']}")
        refused(await client.get("/envs", headers={"origin": "https://trusted.example.evil"}),
                403, "origin_refused")


def request_from(client_host: str, server_host: str = "127.0.0.1",
                 headers: dict[str, str] | None = None) -> Request:
    """A request as uvicorn hands it over, from ``client_host`` to ``server_host``."""
    raw = [(name.encode(), value.encode())
           for name, value in {"host": f"{server_host}:8000", **(headers or {})}.items()]
    return Request({"type": "http", "method": "GET", "path": "/envs", "headers": raw,
                    "client": (client_host, 40000), "server": (server_host, 8000),
                    "scheme": "http", "query_string": b"", "root_path": ""})


async def test_an_open_server_answers_loopback_clients_only() -> None:
    guard = Guard(None, None, ())
    assert await guard.admit(request_from("127.0.0.1")) is None
    assert await guard.admit(request_from("::1")) is None
    for outsider in ("10.1.2.3", "192.168.0.7", "2001:db8::1"):
        with pytest.raises(ServeError) as refusal:
            await guard.admit(request_from(outsider, server_host="10.0.0.1"))
        assert refusal.value.code == "unauthorized"


async def test_custom_authentication_hooks() -> None:
    async def by_header(connection: Any) -> str | None:
        return connection.headers.get("x-user")

    guard = Guard(by_header, None, ())
    assert await guard.admit(request_from("10.1.2.3", "10.0.0.1", {"x-user": "carol"})) \
        == "carol"
    with pytest.raises(ServeError) as refusal:
        await guard.admit(request_from("10.1.2.3", "10.0.0.1"))
    assert refusal.value.code == "unauthorized"
    with pytest.raises(ValueError, match="16 characters"):
        Guard("short", None, ())


def test_listening_beyond_loopback_requires_a_token(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIOVEC_SERVE_TOKEN", raising=False)
    server = EnvServer(ENVS)
    uvicorn_config(server, host="127.0.0.1")
    assert server.guard.open
    uvicorn_config(server, host="0.0.0.0")
    assert not server.guard.open
    printed = capsys.readouterr().err
    token = printed.split("Bearer ")[1].split("'")[0]
    assert len(token) >= 32
    # A token given by the environment is the one required.
    monkeypatch.setenv("AIOVEC_SERVE_TOKEN", "env-token-0123456789abcdef")
    other = EnvServer(ENVS)
    uvicorn_config(other, host="192.0.2.1")
    assert "env-token-0123456789abcdef" in capsys.readouterr().err


async def test_an_open_server_behind_a_proxy_refuses_the_proxied_requests(serve: Any) -> None:
    """A reverse proxy on this host forwards the world from 127.0.0.1: without auth, the
    requests it forwards are refused."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        for header in ("x-forwarded-for", "forwarded", "x-real-ip"):
            refused(await client.get("/envs", headers={header: "203.0.113.9"}), 401,
                    "unauthorized")
        assert (await client.get("/envs")).status_code == 200


def test_allowed_hosts_match_names_without_case_or_port() -> None:
    guard = Guard(None, ["API.example.com:8443", "*.Internal"], ())
    for host in ("api.example.com", "api.example.com:8000", "a.b.internal"):
        assert guard._check_host(request_from("127.0.0.1", headers={"host": host})) is None
    with pytest.raises(ServeError):
        guard._check_host(request_from("127.0.0.1", headers={"host": "example.com"}))


async def test_a_custom_authentication_hook_under_uvicorn(serve: Any) -> None:
    server: Server = serve("hook")  # X-Api-Key: key-NAME is principal NAME
    async with httpx.AsyncClient(base_url=server.url) as client:
        refused(await client.post("/sessions", json={"env_id": "CartPole-v1"}), 401,
                "unauthorized")
        refused(await client.post("/sessions", headers={"x-api-key": "nope"},
                                  json={"env_id": "CartPole-v1"}), 401, "unauthorized")
        carol, dave = {"x-api-key": "key-carol"}, {"x-api-key": "key-dave"}
        session = (await client.post("/sessions", headers=carol,
                                     json={"env_id": "CartPole-v1"})).json()["session_id"]
        refused(await client.get(f"/sessions/{session}", headers=dave), 404,
                "unknown_session")
        assert (await client.delete(f"/sessions/{session}", headers=carol)).status_code == 204


def test_limits_and_a_server_refuse_nonsense_at_construction() -> None:
    for field in ("max_body_bytes", "max_json_depth", "offload_bytes", "in_loop_operations"):
        with pytest.raises(ValueError, match=field):
            Limits(**{field: 0})
    with pytest.raises(ValueError, match="max_sessions"):
        EnvServer(ENVS, max_sessions=0)
    with pytest.raises(ValueError, match="max_sessions_per_client"):
        EnvServer(ENVS, max_sessions_per_client=0)
    with pytest.raises(ValueError, match="serve at least one env"):
        EnvServer({})


def test_a_served_env_is_an_id_or_a_callable() -> None:
    env = ServedEnv("CartPole-v1").env_fn()
    assert env.spec is not None and env.spec.id == "CartPole-v1"
    env.close()
    made = object()
    assert ServedEnv(factory=lambda: made).env_fn() is made  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="factory"):
        ServedEnv(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="opening_seconds"):
        Limits(opening_seconds=0)
