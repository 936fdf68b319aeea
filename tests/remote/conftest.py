"""A real server for the WebSocket client's tests: a small Starlette app under uvicorn, in a
process of its own on 127.0.0.1, started once per session for each configuration (uvicorn's
WebSocket implementation, TLS or not) and stopped with SIGTERM at the end. Nothing here is
aiovec's: the server is what aiovec.serve is, a Starlette app under uvicorn. (The remote
vector env's tests use aiovec.serve itself: ``serve``, from tests/serve/conftest.py.)

The app's ``/ws`` echoes every message back. A text message starting with ``!`` is a command
instead, so that the tests control what the server sends and when:

- ``!close CODE REASON``: the server closes the connection with that code and reason;
- ``!request``: a JSON text message with the handshake's headers, query and subprotocol;
- ``!binary N`` / ``!text N``: one message of N bytes / N characters (some non-ASCII);
- ``!closed ID``: a JSON text message ``{"code", "reason"}`` once the connection made with
  ``?id=ID`` has ended: the close frame the server received from it (the wait is the
  server's, up to 30 s, so a test never sleeps for it).

``/reject`` refuses the handshake with HTTP 403 and a JSON body.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from tests.serve.conftest import serve as serve

ROOT = Path(__file__).resolve().parents[2]
#: uvicorn's default ("auto": websockets' sans-I/O implementation when websockets is
#: installed, as here), and the other two it ships.
WS_IMPLEMENTATIONS = ["auto", "websockets", "wsproto"]
#: What the server sends for ``!text N``: ASCII with some two-byte characters.
TEXT_PATTERN = "aiovec é "


def binary_payload(size: int) -> bytes:
    """What the server sends for ``!binary N`` (and what the tests send): not all one byte, so
    a reordered or dropped chunk shows."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def text_payload(size: int) -> str:
    return (TEXT_PATTERN * (size // len(TEXT_PATTERN) + 1))[:size]


# The app (runs in the server process).

_closes: dict[str, tuple[int, str]] = {}
_ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)


async def _command(websocket: WebSocket, command: str) -> bool:
    """Run one ``!`` command; False once the server closed the connection."""
    name, _, argument = command.partition(" ")
    if name == "!close":
        code, _, reason = argument.partition(" ")
        await websocket.close(int(code), reason)
        return False
    if name == "!request":
        await websocket.send_text(json.dumps({
            "headers": dict(websocket.headers), "query": websocket.url.query,
            "subprotocol": (websocket.scope.get("subprotocols") or [None])[0]}))
    elif name == "!binary":
        await websocket.send_bytes(binary_payload(int(argument)))
    elif name == "!text":
        await websocket.send_text(text_payload(int(argument)))
    elif name == "!closed":
        await asyncio.wait_for(_ended[argument].wait(), 30)
        code, reason = _closes[argument]
        await websocket.send_text(json.dumps({"code": code, "reason": reason}))
    else:
        await websocket.send_text(f"unknown command {command!r}")
    return True


async def _echo(websocket: WebSocket) -> None:
    offered = websocket.scope.get("subprotocols") or [None]
    await websocket.accept(subprotocol=offered[0])
    connection_id = websocket.query_params.get("id")
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            if connection_id is not None:
                _closes[connection_id] = (message.get("code", 1005), message.get("reason", ""))
                _ended[connection_id].set()
            return
        text, data = message.get("text"), message.get("bytes")
        if text is not None and text.startswith("!"):
            if not await _command(websocket, text):
                return
        elif text is not None:
            await websocket.send_text(text)
        else:
            await websocket.send_bytes(data or b"")


async def _reject(websocket: WebSocket) -> None:
    await websocket.send_denial_response(
        JSONResponse({"error": "forbidden", "detail": "no such token"}, status_code=403))


app = Starlette(routes=[WebSocketRoute("/ws", _echo), WebSocketRoute("/reject", _reject)])


def run_echo_server(ws: str, certfile: str = "", keyfile: str = "") -> None:
    """The server process: uvicorn on a free port of 127.0.0.1; prints ``serving on PORT``
    once it accepts connections."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and sockets:
                print(f"serving on {sockets[0].getsockname()[1]}", flush=True)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, ws=ws, lifespan="off", log_level="warning",
                            ssl_certfile=certfile or None, ssl_keyfile=keyfile or None,
                            timeout_graceful_shutdown=5)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    AnnouncingServer(config).run(sockets=[listener])


# The fixtures (run in the test process).

@dataclass
class Server:
    process: subprocess.Popen[str]
    errors: IO[str]
    port: int
    scheme: str = "ws"

    def url(self, path: str = "/ws") -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL if it hangs); the server must not have crashed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.errors.seek(0)
        log = self.errors.read()
        self.errors.close()
        assert "Traceback" not in log, log

    def kill(self) -> None:
        """SIGKILL: the process vanishes without closing a connection properly."""
        self.process.kill()
        self.process.wait()


def start_server(ws: str = "auto", certfile: str = "", keyfile: str = "") -> Server:
    """Start a server process and wait for its announcement (the pytest timeout bounds it)."""
    # A file, not a pipe: a chatty log cannot block the server. Server.stop() closes it.
    errors = tempfile.TemporaryFile("w+")  # noqa: SIM115
    code = (f"from tests.remote.conftest import run_echo_server; "
            f"run_echo_server({ws!r}, {certfile!r}, {keyfile!r})")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=errors, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        process.wait()
        process.stdout.close()
        errors.seek(0)
        raise AssertionError(f"the server did not start: {line!r} {errors.read()}")
    return Server(process, errors, int(line.split()[-1]), "wss" if certfile else "ws")


@pytest.fixture
async def no_leaks(_tcp_warmed_loop: None, no_leaks: None) -> None:
    """tests/conftest.py's check, with the event loop's lazily opened descriptors already open
    when it takes its baseline: uvloop (libuv) opens /dev/null at a loop's first TCP connection
    and keeps it until the loop closes, which is after the check."""


@pytest.fixture
async def _tcp_warmed_loop() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        stream = await anyio.connect_tcp("127.0.0.1", listener.getsockname()[1])
        await stream.aclose()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """The echo server under uvicorn's default WebSocket implementation."""
    started = start_server()
    yield started
    started.stop()


@pytest.fixture(scope="session", params=WS_IMPLEMENTATIONS)
def any_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The echo server under each of uvicorn's WebSocket implementations."""
    started = start_server(request.param)
    yield started
    started.stop()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key (made by the openssl tool)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command-line tool makes the test certificate")
    folder = tmp_path_factory.mktemp("tls")
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(keyfile), "-out", str(certfile)],
                   check=True, capture_output=True)
    return certfile, keyfile


@pytest.fixture(scope="session")
def tls_server(certificate: tuple[Path, Path]) -> Iterator[Server]:
    """The echo server behind TLS (``wss://``), with ``certificate``."""
    started = start_server("auto", str(certificate[0]), str(certificate[1]))
    yield started
    started.stop()


@pytest.fixture
def own_server() -> Iterator[Callable[[], Server]]:
    """A server of the test's own, to kill; any left running is stopped at teardown."""
    started: list[Server] = []

    def start() -> Server:
        started.append(start_server())
        return started[-1]

    yield start
    for each in started:
        if each.process.poll() is None:
            each.stop()
        else:
            assert each.process.stdout is not None
            each.process.stdout.close()
            each.errors.close()
