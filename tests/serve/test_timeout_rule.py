"""The server checks a request's ``timeout`` by the rule every deadline follows
(``check_timeout``): what a local vector env refuses is refused as ``invalid`` with the local
env's own words, before any sub-env is sent anything; ``inf`` (or an int past any float) is
no deadline of the client's. Over both transports and both WebSocket encodings."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import numpy as np
import pytest

import aiovec
from aiovec._remote._websocket import WebSocket, WebSocketClosed
from aiovec.testing import CountingEnv
from tests.serve.conftest import Server
from tests.serve.test_http import create
from tests.serve.test_websocket import ask, until_no_sessions, ws_url

pytestmark = pytest.mark.anyio

#: What the local env refuses; NaN travels in binary frames only (JSON has no NaN).
REFUSED = [True, False, 0, -1.5, "1", [1]]


async def local_refusal(value: Any) -> str:
    """The local env's refusal of ``timeout=value`` in a ``step``."""
    async with aiovec.AsyncVectorEnv([CountingEnv], backend="inline") as envs:
        await envs.reset()
        with pytest.raises(ValueError) as refused:  # noqa: PT011 - its words are compared
            await envs.step(np.zeros(1, np.int64), timeout=value)
    return str(refused.value)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_a_timeout_the_local_env_refuses_is_refused_with_its_words(serve: Any,
                                                                         binary: bool) -> None:
    values = [*REFUSED, math.nan] if binary else REFUSED  # (JSON has no NaN)
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
    request_ids = iter(range(1, 1000))
    async with await WebSocket.connect(ws_url(server, session)) as socket:
        for value in values:
            expected = await local_refusal(value)
            for op, fields in (("reset", {"seed": 0}), ("step", {"actions": [0, 1]}),
                               ("send", {"actions": [0, 1]})):
                request = {"op": op, "id": next(request_ids), "timeout": value, **fields}
                answer = await ask(socket, request, binary)
                assert (answer["ok"], answer["error"]) == (False, "invalid"), (request, answer)
                assert answer["detail"] == expected
        # Nothing was sent: the session was never reset.
        answer = await ask(socket, {"op": "step", "id": next(request_ids), "actions": [0, 1]},
                           binary)
        assert answer["error"] == "reset_needed", answer
        no_deadline = math.inf if binary else 10**400  # (JSON has no inf either)
        for op, fields in (("reset", {"seed": 0}), ("step", {"actions": [0, 1]})):
            answer = await ask(socket, {"op": op, "id": next(request_ids),
                                        "timeout": no_deadline, **fields}, binary)
            assert answer["ok"], answer
        await socket.send_text(json.dumps({"op": "close"}))
        with pytest.raises(WebSocketClosed):
            await socket.receive()
    await until_no_sessions(server)


async def test_the_http_api_refuses_a_bool_timeout_with_the_local_words(serve: Any) -> None:
    server: Server = serve("open")
    async with httpx.AsyncClient(base_url=server.url) as client:
        session = await create(client, "CartPole-v1", 2)
        response = await client.post(f"/sessions/{session}/reset",
                                     json={"seed": 0, "timeout": True})
        assert response.status_code == 422, response.text
        assert response.json()["detail"] == await local_refusal(True)
        response = await client.post(f"/sessions/{session}/reset",
                                     json={"seed": 0, "timeout": 30})
        assert response.status_code == 200, response.text
        await client.delete(f"/sessions/{session}")
