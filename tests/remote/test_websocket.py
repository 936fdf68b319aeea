"""The WebSocket client (``aiovec._remote._websocket``) on asyncio, asyncio + uvloop and trio:
against a real uvicorn server in its own process (conftest.py), and against a scripted peer in
the test process for what a server does not do on request (pings mid-message, fragments, a
protocol error, a peer that stops reading or resets the connection)."""

from __future__ import annotations

import json
import pickle
import socket
import ssl
import struct
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from aiovec._remote._websocket import WebSocket, WebSocketClosed, WebSocketRejected
from tests.remote.conftest import Server, binary_payload, text_payload

pytestmark = pytest.mark.anyio

#: Bytes of a "large" message: several times every buffer on the way (64 KiB reads, the
#: kernel's socket buffers), well under uvicorn's 16 MiB limit.
LARGE = 5_000_000


def unique_id() -> str:
    """For ``?id=``: the server keeps what each connection's close frame said, by id."""
    return uuid.uuid4().hex


async def close_seen_by_server(server: Server, connection_id: str) -> dict[str, Any]:
    """The close code and reason the server received from connection ``connection_id``
    (the server waits for that connection to end)."""
    async with await WebSocket.connect(server.url()) as ws:
        await ws.send_text(f"!closed {connection_id}")
        reply = await ws.receive()
    assert isinstance(reply, str)
    seen: dict[str, Any] = json.loads(reply)
    return seen


# Against uvicorn

async def test_text_and_bytes_echo(no_leaks: None, server: Server) -> None:
    async with await WebSocket.connect(server.url()) as ws:
        assert not ws.closed
        await ws.send_text("hello, é ✓")
        assert await ws.receive() == "hello, é ✓"
        await ws.send_bytes(b"\x00\x01\xff")
        assert await ws.receive() == b"\x00\x01\xff"
        await ws.send_bytes(bytearray(b"from a bytearray"))
        assert await ws.receive() == b"from a bytearray"
        await ws.send_bytes(memoryview(b"--from a memoryview--")[2:-2])
        assert await ws.receive() == b"from a memoryview"
        await ws.send_text("")
        assert await ws.receive() == ""
    assert ws.closed


async def test_a_large_message_round_trips_whole(no_leaks: None, server: Server) -> None:
    data = binary_payload(LARGE)
    async with await WebSocket.connect(server.url()) as ws:
        await ws.send_bytes(data)
        assert await ws.receive() == data
        await ws.send_text(f"!text {LARGE}")  # some characters span two bytes, and reads
        assert await ws.receive() == text_payload(LARGE)
        await ws.send_text("small after large")
        assert await ws.receive() == "small after large"


async def test_a_close_from_the_server_carries_its_code_and_reason(no_leaks: None,
                                                                   server: Server) -> None:
    async with await WebSocket.connect(server.url()) as ws:
        await ws.send_text("!close 4001 see you later")
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert (raised.value.code, raised.value.reason) == (4001, "see you later")
        assert ws.closed
        # Every later call reports the same close.
        with pytest.raises(WebSocketClosed) as again:
            await ws.send_text("too late")
        assert (again.value.code, again.value.reason) == (4001, "see you later")
        with pytest.raises(WebSocketClosed):
            await ws.receive()


async def test_a_refused_handshake_carries_the_status_and_body(no_leaks: None,
                                                               server: Server) -> None:
    with pytest.raises(WebSocketRejected) as raised:
        await WebSocket.connect(server.url("/reject"))
    refused = raised.value
    assert isinstance(refused, WebSocketClosed)
    assert refused.status == 403 and refused.code is None
    assert json.loads(refused.body) == {"error": "forbidden", "detail": "no such token"}
    assert ("content-type", "application/json") in refused.headers
    assert "HTTP 403" in str(refused) and "no such token" in str(refused)


async def test_headers_query_and_subprotocol_reach_the_server(no_leaks: None,
                                                              server: Server) -> None:
    headers = [("Authorization", "Bearer s3cret"), ("Origin", "https://aiovec.example")]
    async with await WebSocket.connect(server.url("/ws?session=7&x=%20y"), headers=headers,
                                       subprotocols=["aiovec.v1", "aiovec.v0"]) as ws:
        assert ws.subprotocol == "aiovec.v1"
        await ws.send_text("!request")
        reply = await ws.receive()
    assert isinstance(reply, str)
    request = json.loads(reply)
    assert request["headers"]["authorization"] == "Bearer s3cret"
    assert request["headers"]["origin"] == "https://aiovec.example"
    assert request["headers"]["host"] == f"127.0.0.1:{server.port}"
    assert request["query"] == "session=7&x=%20y"
    assert request["subprotocol"] == "aiovec.v1"


async def test_a_cancelled_receive_leaves_the_connection_usable(no_leaks: None,
                                                                server: Server) -> None:
    """The server sends nothing unless asked: the receive waits until cancelled."""
    async with await WebSocket.connect(server.url()) as ws:
        with anyio.move_on_after(0.2) as waited:
            await ws.receive()
        assert waited.cancelled_caught
        assert not ws.closed
        await ws.send_text("next")
        assert await ws.receive() == "next"


class PausingStream(anyio.abc.ByteStream):
    """The client's stream, made to stop once ``pause_after`` bytes have come in: the next
    receive calls ``on_pause`` and blocks until ``release`` is set. So a test can cancel a
    receive() at a known point midway through a message."""

    def __init__(self, inner: anyio.abc.ByteStream, pause_after: int,
                 on_pause: Callable[[], None]) -> None:
        self.inner = inner
        self.pause_after = pause_after
        self.on_pause = on_pause
        self.received = 0
        self.release = anyio.Event()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.received >= self.pause_after and not self.release.is_set():
            self.on_pause()
            await self.release.wait()
        data = await self.inner.receive(max_bytes)
        self.received += len(data)
        return data

    async def send(self, item: bytes) -> None:
        await self.inner.send(item)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self.inner.extra_attributes


async def test_a_receive_cancelled_midway_through_a_message_loses_nothing(
        no_leaks: None, server: Server) -> None:
    stream = PausingStream(await anyio.connect_tcp("127.0.0.1", server.port),
                           pause_after=LARGE // 5, on_pause=lambda: None)
    async with await WebSocket.over_stream(stream, server.url()) as ws:
        await ws.send_text(f"!binary {LARGE}")
        with anyio.CancelScope() as scope:
            stream.on_pause = scope.cancel
            await ws.receive()
        assert scope.cancelled_caught, "the receive was not cancelled midway"
        assert LARGE // 5 <= stream.received < LARGE
        stream.release.set()
        assert await ws.receive() == binary_payload(LARGE)
        await ws.send_bytes(b"and then")
        assert await ws.receive() == b"and then"


async def test_a_send_cancelled_before_it_starts_sends_nothing(no_leaks: None,
                                                               server: Server) -> None:
    async with await WebSocket.connect(server.url()) as ws:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await ws.send_text("never sent")
        assert scope.cancelled_caught
        await ws.send_text("sent")
        assert await ws.receive() == "sent"  # the echo of "never sent" would come first


async def test_tasks_send_while_another_receives(no_leaks: None, server: Server) -> None:
    """Large and small messages from two tasks while a third waits in receive(): each
    arrives whole (frames are never interleaved)."""
    large = [binary_payload(1_000_000 + index) for index in range(4)]
    small = [f"small {index}" for index in range(200)]
    received: list[str | bytes] = []
    async with await WebSocket.connect(server.url()) as ws:

        async def send_all(messages: list[bytes] | list[str]) -> None:
            for message in messages:
                if isinstance(message, str):
                    await ws.send_text(message)
                else:
                    await ws.send_bytes(message)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(send_all, large)
            tasks.start_soon(send_all, small)
            for _ in range(len(large) + len(small)):
                received.append(await ws.receive())
    assert Counter(received) == Counter([*large, *small])


async def test_a_message_above_max_message_bytes_closes_with_1009(no_leaks: None,
                                                                  server: Server) -> None:
    connection_id = unique_id()
    async with await WebSocket.connect(server.url(f"/ws?id={connection_id}"),
                                       max_message_bytes=100_000) as ws:
        await ws.send_text("!binary 100000")
        assert len(await ws.receive()) == 100_000  # at the limit: fine
        await ws.send_text("!text 60000")  # 60 000 characters, about 66 700 bytes
        assert len(await ws.receive()) == 60_000
        await ws.send_text(f"!binary {LARGE}")
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert raised.value.code == 1009
        assert ws.closed
    assert (await close_seen_by_server(server, connection_id))["code"] == 1009


async def test_text_is_measured_in_utf8_bytes(no_leaks: None, server: Server) -> None:
    async with await WebSocket.connect(server.url(), max_message_bytes=100_000) as ws:
        await ws.send_text("!text 95000")  # fewer characters than the limit, more bytes
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert raised.value.code == 1009


async def test_aclose_twice(no_leaks: None, server: Server) -> None:
    connection_id = unique_id()
    ws = await WebSocket.connect(server.url(f"/ws?id={connection_id}"))
    await ws.send_text("hi")
    assert await ws.receive() == "hi"
    await ws.aclose(4000, "done here")
    assert ws.closed
    await ws.aclose()
    for call in (ws.receive, lambda: ws.send_text("late"), lambda: ws.send_bytes(b"late")):
        with pytest.raises(WebSocketClosed) as raised:
            await call()
        assert (raised.value.code, raised.value.reason) == (4000, "done here")
    assert await close_seen_by_server(server, connection_id) == {"code": 4000,
                                                                 "reason": "done here"}
    with pytest.raises(ValueError, match="close code"):
        await ws.aclose(999)


async def test_aclose_in_a_cancelled_scope_still_closes_cleanly(no_leaks: None,
                                                               server: Server) -> None:
    """As in a ``finally:`` after a timeout: the close handshake is shielded."""
    connection_id = unique_id()
    ws = await WebSocket.connect(server.url(f"/ws?id={connection_id}"))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await ws.aclose(4005, "timed out")
    assert ws.closed
    assert await close_seen_by_server(server, connection_id) == {"code": 4005,
                                                                 "reason": "timed out"}


async def receive_ended_by(ws: WebSocket, end: Callable[[], Awaitable[object]]
                          ) -> list[WebSocketClosed]:
    """Run ``end`` while another task waits in ``receive``; what that receive raised."""
    ended: list[WebSocketClosed] = []

    async def receive() -> None:
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        ended.append(raised.value)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receive)
        await anyio.wait_all_tasks_blocked()  # the receive waits for data
        await end()
    return ended


async def test_aclose_from_another_task_ends_a_pending_receive(no_leaks: None,
                                                               server: Server) -> None:
    ws = await WebSocket.connect(server.url())
    ended = await receive_ended_by(ws, lambda: ws.aclose(1001, "going away"))
    assert [(error.code, error.reason) for error in ended] == [(1001, "going away")]


async def test_a_server_killed_mid_receive(no_leaks: None,
                                           own_server: Callable[[], Server]) -> None:
    server = own_server()
    async with await WebSocket.connect(server.url()) as ws:
        await ws.send_text("alive")
        assert await ws.receive() == "alive"
        async def kill() -> None:
            server.kill()

        ended = await receive_ended_by(ws, kill)
        assert [error.code for error in ended] == [1006]
        assert ws.closed
        with pytest.raises(WebSocketClosed) as raised:
            await ws.send_text("anyone?")
        assert raised.value.code == 1006


async def test_under_each_uvicorn_websocket_implementation(no_leaks: None,
                                                           any_server: Server) -> None:
    """uvicorn picks websockets' sans-I/O implementation when websockets is installed (as
    here: ``auto``); the client works with each one uvicorn ships."""
    async with await WebSocket.connect(any_server.url()) as ws:
        await ws.send_text("text")
        assert await ws.receive() == "text"
        await ws.send_bytes(binary_payload(200_000))
        assert await ws.receive() == binary_payload(200_000)
        await ws.send_text("!close 4002 bye")
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert (raised.value.code, raised.value.reason) == (4002, "bye")
    with pytest.raises(WebSocketRejected) as refused:
        await WebSocket.connect(any_server.url("/reject"))
    assert refused.value.status == 403 and b"no such token" in refused.value.body


async def test_wss(no_leaks: None, tls_server: Server, certificate: tuple[Path, Path]) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    async with await WebSocket.connect(tls_server.url(), ssl_context=trusting) as ws:
        await ws.send_text("over TLS")
        assert await ws.receive() == "over TLS"
        await ws.send_bytes(binary_payload(LARGE))
        assert await ws.receive() == binary_payload(LARGE)
    with pytest.raises(ssl.SSLCertVerificationError):  # the system does not trust it
        await WebSocket.connect(tls_server.url())


async def test_connection_errors(no_leaks: None) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(OSError, match="onnect"):  # "All connection attempts failed"
        await WebSocket.connect(f"ws://127.0.0.1:{port}/")
    with pytest.raises(ValueError, match="not a WebSocket URL"):
        await WebSocket.connect("http://127.0.0.1/")
    with pytest.raises(ValueError, match="ssl_context"):
        await WebSocket.connect("ws://127.0.0.1/", ssl_context=ssl.create_default_context())


# Against a scripted peer

class Peer:
    """The server end of one connection, spoken frame by frame with wsproto."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.protocol = WSConnection(ConnectionType.SERVER)
        self._events: Iterator[Event] = iter(())

    async def accept(self) -> None:
        request = await self.next_event()
        assert isinstance(request, Request)
        await self.send(AcceptConnection())

    async def next_event(self) -> Event:
        """The next event from the client (a wait bounded only so that a broken client fails
        the test with a message rather than at the suite's timeout)."""
        with anyio.fail_after(60):
            while True:
                for event in self._events:
                    return event
                self.protocol.receive_data(await self.stream.receive())
                self._events = self.protocol.events()

    async def send(self, event: Event) -> None:
        await self.stream.send(self.protocol.send(event))

    async def reset(self) -> None:
        """Drop the connection with a TCP reset (SO_LINGER 0), as a crashed host would."""
        raw = self.stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self.stream.aclose()


@asynccontextmanager
async def connected_to_peer(**options: Any) -> AsyncIterator[tuple[Peer, WebSocket]]:
    """A client WebSocket connected to a ``Peer`` listening on 127.0.0.1 in this process."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        peers: list[Peer] = []

        async def accept() -> None:
            peers.append(Peer(await listener.listeners[0].accept()))
            await peers[0].accept()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(accept)
            ws = await WebSocket.connect(f"ws://127.0.0.1:{port}/", **options)
        try:
            yield peers[0], ws
        finally:
            await peers[0].stream.aclose()  # first: the client's close then ends at once
            await ws.aclose()


async def test_pings_are_answered_and_a_receive_cancelled_between_fragments(
        no_leaks: None) -> None:
    """The peer's pong arrives only once the client has read the first fragment (it comes
    before the ping): the receive is cancelled midway through the message, for sure."""
    async with connected_to_peer() as (peer, ws):
        await peer.send(BytesMessage(data=b"first, ", message_finished=False))
        await peer.send(Ping(payload=b"still there?"))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ws.receive)
            assert await peer.next_event() == Pong(payload=b"still there?")
            tasks.cancel_scope.cancel()
        await peer.send(BytesMessage(data=b"second, ", message_finished=False))
        await peer.send(BytesMessage(data=b"last", message_finished=True))
        assert await ws.receive() == b"first, second, last"


async def test_text_fragments_split_inside_a_character(no_leaks: None) -> None:
    async with connected_to_peer() as (peer, ws):
        # Unmasked server frames by hand: text "é" cut between its two UTF-8 bytes.
        await peer.stream.send(bytes([0x01, 2]) + b"a\xc3")  # TEXT, not final
        await peer.stream.send(bytes([0x80, 2]) + b"\xa9b")  # CONTINUATION, final
        assert await ws.receive() == "aéb"


async def test_a_close_from_the_peer_is_answered(no_leaks: None) -> None:
    async with connected_to_peer() as (peer, ws):
        await peer.send(CloseConnection(code=4003, reason="enough"))
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert (raised.value.code, raised.value.reason) == (4003, "enough")
        reply = await peer.next_event()
        assert isinstance(reply, CloseConnection) and reply.code == 4003


async def test_a_protocol_error_from_the_peer_closes_with_1002(no_leaks: None) -> None:
    async with connected_to_peer() as (peer, ws):
        await peer.stream.send(bytes([0x82 | 0x40, 0]))  # RSV1 set, no extension agreed
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert raised.value.code == 1002
        close = await peer.next_event()
        assert isinstance(close, CloseConnection) and close.code == 1002
        assert ws.closed


@pytest.mark.parametrize("ending", ["end", "reset"])
async def test_a_connection_dropped_without_a_close_frame(no_leaks: None, ending: str) -> None:
    async with connected_to_peer() as (peer, ws):
        await peer.send(TextMessage(data="last words"))
        assert await ws.receive() == "last words"
        await (peer.stream.aclose() if ending == "end" else peer.reset())
        with pytest.raises(WebSocketClosed) as raised:
            await ws.receive()
        assert raised.value.code == 1006
        with pytest.raises(WebSocketClosed) as again:
            await ws.send_text("hello?")
        assert again.value.code == 1006
        await ws.aclose()


async def test_a_send_cancelled_while_the_peer_stopped_reading_breaks_the_connection(
        no_leaks: None) -> None:
    """The peer reads nothing, so a large send blocks once the socket buffers are full; a
    frame cut short there would corrupt the stream, so the connection is broken."""
    async with connected_to_peer() as (_, ws):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ws.send_bytes, bytes(16 * 2**20))
            await anyio.wait_all_tasks_blocked()  # the send waits for room
            tasks.cancel_scope.cancel()
        assert ws.closed
        with pytest.raises(WebSocketClosed) as raised:
            await ws.send_text("small")
        assert raised.value.code == 1006 and "cancelled" in raised.value.reason
        with pytest.raises(WebSocketClosed):
            await ws.receive()


def test_the_errors_pickle() -> None:
    for error in (WebSocketClosed(4001, "bye"), WebSocketClosed(None),
                  WebSocketRejected(403, b'{"error": "forbidden"}', [("a", "b")])):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert vars(copy) == vars(error)


def _server_side() -> WSConnection:
    """wsproto's server end of a connection whose handshake is done."""
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(WSConnection(ConnectionType.CLIENT).send(
        Request(host="localhost", target="/")))
    list(server.events())
    server.send(AcceptConnection())
    return server


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70001])
def test_a_sent_frame_is_what_a_server_side_parser_reads(size: int) -> None:
    """The client frames data messages itself (every step's path): masked, one final frame,
    every length encoding (7, 16 and 64 bits) read back whole by wsproto's server side,
    from bytes, a bytearray and a memoryview of another format."""
    from aiovec._remote._websocket import _client_frame

    payload = bytes(range(256)) * (size // 256 + 1)
    for opcode, data in ((0x2, payload[:size]), (0x2, bytearray(payload[:size])),
                         (0x1, "é".encode() * (size // 2) + b"x" * (size % 2))):
        server = _server_side()
        frame = _client_frame(opcode, data, b"\x9a\x17\x00\xe3")
        assert frame[1] & 0x80 and b"\x9a\x17\x00\xe3" in frame[:14]  # masked
        server.receive_data(frame)
        (event,) = server.events()
        assert event.message_finished
        if opcode == 0x2:
            assert isinstance(event, BytesMessage) and bytes(event.data) == bytes(data)
        else:
            assert isinstance(event, TextMessage) and event.data == data.decode()
    server = _server_side()
    floats = memoryview(struct.pack("<3d", 1.5, -2.0, 3.25)).cast("d")
    server.receive_data(_client_frame(0x2, floats, b"abcd"))
    (event,) = server.events()
    assert bytes(event.data) == struct.pack("<3d", 1.5, -2.0, 3.25)
