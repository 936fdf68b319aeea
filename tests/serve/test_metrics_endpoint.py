"""``GET /metrics``: Prometheus text that counts what the server did."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from aiovec._remote._websocket import WebSocket
from tests.leaks import wait_until
from tests.serve.conftest import Server
from tests.serve.test_http import create
from tests.serve.test_websocket import ask, ws_url

pytestmark = pytest.mark.anyio

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` → value, every line checked against the text format."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            assert not line or line.startswith(("# HELP ", "# TYPE ")), line
            continue
        match = SAMPLE.match(line)
        assert match, line
        values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


async def test_metrics_count_sessions_steps_latency_restarts_and_refusals(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        before = samples((await client.get("/metrics")).text)
        session = await create(client, "Crashing-v0", 2)
        await client.post(f"/sessions/{session}/reset", json={"seed": 0})
        for _ in range(3):  # the third step crashes both sub-envs: two restarts
            assert (await client.post(f"/sessions/{session}/step",
                                      json={"actions": [0, 1]})).status_code == 200
        await client.post(f"/sessions/{session}/step", json={"actions": [0, 9]})  # 422
        await client.get("/nowhere")  # 404
        response = await client.get("/metrics")
        after = samples(response.text)
        await client.delete(f"/sessions/{session}")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert after["aiovec_serve_sessions"] >= 1
    assert grew('aiovec_serve_sessions_opened_total{env_id="Crashing-v0"}') == 1
    assert grew('aiovec_serve_operations_total{op="step",outcome="ok"}') == 3
    assert grew('aiovec_serve_operations_total{op="step",outcome="failed"}') == 1
    assert grew('aiovec_serve_operations_total{op="reset",outcome="ok"}') == 1
    assert grew("aiovec_serve_env_steps_total") == 6
    assert grew("aiovec_serve_restarts_total") == 2
    assert grew('aiovec_serve_operation_seconds_count{op="step"}') == 4  # the refused one too
    assert grew('aiovec_serve_operation_seconds_bucket{op="step",le="+Inf"}') == 4
    assert grew('aiovec_serve_rejections_total{code="invalid"}') == 1
    assert grew('aiovec_serve_rejections_total{code="not_found"}') == 1


async def test_a_cancelled_step_counts_as_cancelled_not_failed(serve: Any) -> None:
    """A step cancelled by the client (its ``cancel`` over the WebSocket) is outcome
    ``cancelled``; nothing is counted ``failed``."""
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        before = samples((await client.get("/metrics")).text)
        session = await create(client, "Waiting-v0", 1)
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        assert (await ask(socket, {"op": "reset", "id": 1, "seed": 0}))["ok"]
        await socket.send_text(json.dumps({"op": "step", "id": 2, "actions": [1]}))
        await socket.send_text(json.dumps({"op": "cancel", "id": 2}))
        assert json.loads(await socket.receive())["error"] == "cancelled"

    def grew(name: str) -> float:
        after = samples(httpx.get(f"{server.url}/metrics").text)
        return after.get(name, 0.0) - before.get(name, 0.0)

    cancelled = 'aiovec_serve_operations_total{op="step",outcome="cancelled"}'
    failed = 'aiovec_serve_operations_total{op="step",outcome="failed"}'
    # The answer goes out as the step is cancelled; the count follows as it unwinds.
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: grew(cancelled) + grew(failed) >= 1, 30,
                           "the cancelled step to be counted"))
    assert (grew(cancelled), grew(failed)) == (1, 0)
