"""A small WebSocket client on anyio and wsproto: whole messages over one connection, on
asyncio, asyncio + uvloop and trio alike (the ``websockets`` library runs on asyncio only).

    async with await WebSocket.connect(url, headers=[("Authorization", token)]) as ws:
        await ws.send_text("hello")
        reply = await ws.receive()

Errors (``connect`` also raises ``OSError`` when no TCP or TLS connection can be made, and
``ValueError`` for a URL that is not ``ws://`` or ``wss://``)::

    WebSocketClosed            the connection is closed, or never opened: .code, .reason
     └── WebSocketRejected     the server answered the opening handshake with an HTTP status
                               instead of upgrading: .status, .body, .headers (.code is None)

Who closed it, told by ``WebSocketClosed.code``:

- the peer, with its own code and reason (1000 normal, 1001 going away, 1011 server error,
  4000-4999 the application's);
- the world, 1006: the TCP connection ended or was reset without a close frame, or the
  opening handshake broke off (also 1006: a send cancelled while its frame could be cut short,
  see below);
- this side, because the peer broke the protocol (1002, 1007) or sent a message larger than
  ``max_message_bytes`` (1009);
- your code, with the code it gave ``aclose()``, for every call made afterwards.

The first close wins: once either side has started closing, later calls report that close.

Cancellation (anyio cancel scopes, trio, asyncio timeouts):

- ``receive()`` may be cancelled at any point without losing data or breaking the connection:
  bytes read from the socket are in wsproto's buffer, the parts of a message received so far
  stay on the WebSocket, so the next ``receive()`` returns the next message whole; the pongs
  and close replies it writes go out whole even if it is cancelled meanwhile (shielded, for at
  most ``STALLED_WRITE_SECONDS``), and a ping it could not answer before the cancellation is
  answered by the next ``receive()``.
- A send cancelled before its frame starts going out (while waiting for another task's send,
  or in an already cancelled scope) sends nothing; the connection stays usable. A frame the
  socket takes at once (a small message, when the peer keeps up) goes out whole in one step
  that no cancellation can interrupt. But a cancellation that arrives while the write waits
  for room (the peer not taking data as fast as it is sent, as with a large message) may cut
  the frame short, which corrupts the stream: the connection is then broken (the socket
  closed at once; every later call raises ``WebSocketClosed`` with code 1006).
- ``aclose()`` is shielded from cancellation and bounded by ``CLOSE_TIMEOUT_SECONDS``.

Concurrency: one task at a time receives (a second waits its turn); any task may send
meanwhile, and whole frames are written one after another, never interleaved. A message
already read from the socket is returned at once, without yielding to the event loop.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import struct
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import NamedTuple
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.lowlevel
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

__all__ = ["WebSocket", "WebSocketClosed", "WebSocketRejected"]

#: The most bytes asked of the socket per read.
READ_BYTES = 64 * 1024
#: How long a pong or close reply that receive() writes may wait on a peer that takes none
#: of it (shielded from cancellation) before the connection is declared broken.
STALLED_WRITE_SECONDS = 10.0
#: How long ``aclose()`` (or a close this side starts on a protocol error) waits for the
#: peer's answering close frame before closing the TCP connection anyway.
CLOSE_TIMEOUT_SECONDS = 2.0
DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20

_OPEN = ConnectionState.OPEN
_TEXT, _BINARY = 0x1, 0x2  # the opcodes of data frames
_LOCAL_CLOSING = ConnectionState.LOCAL_CLOSING
_REMOTE_CLOSING = ConnectionState.REMOTE_CLOSING
#: How much of a rejection's body its error message shows.
_SHOWN_BODY_CHARS = 300


class WebSocketClosed(Exception):
    """The WebSocket connection is closed, or never opened; ``code`` and ``reason`` say who
    closed it and why (the module docstring lists the codes)."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return f"WebSocket closed ({self.code}): {self.reason or 'no reason given'}"


class WebSocketRejected(WebSocketClosed):
    """The server answered the opening handshake with an HTTP status instead of upgrading
    (an authentication failure, an unknown path, a full server): ``status``, the response's
    ``body`` (at most ``max_message_bytes`` of it) and ``headers`` (lower-case names).
    ``code`` is None: no WebSocket connection existed."""

    def __init__(self, status: int, body: bytes = b"",
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(None, f"the server refused the WebSocket upgrade with HTTP {status}")
        self.status = status
        self.body = body
        self.headers = tuple(headers)
        self.args = (status, body, self.headers)  # what pickling rebuilds it from

    def __str__(self) -> str:
        if not self.body:
            return self.reason
        shown = self.body.decode("utf-8", "replace")
        if len(shown) > _SHOWN_BODY_CHARS:
            shown = shown[:_SHOWN_BODY_CHARS] + "..."
        return f"{self.reason}: {shown}"


class _Address(NamedTuple):
    secure: bool
    host: str
    port: int
    host_header: str
    resource: str


def _parse_url(url: str) -> _Address:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"not a WebSocket URL (ws://host/path or wss://...): {url!r}")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Address(secure, parts.hostname, port, parts.netloc.rpartition("@")[2], resource)


def _client_frame(opcode: int, payload: bytes | bytearray | memoryview, mask: bytes) -> bytes:
    """A whole message as one final frame from a client (RFC 6455 section 5.2: no
    extension, the payload masked with the 4-byte ``mask``)."""
    size = memoryview(payload).nbytes
    if size < 126:
        header = bytes((0x80 | opcode, 0x80 | size))
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    if not size:
        return header + mask
    key = (mask * (size // 4 + 1))[:size]
    masked = int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")
    return b"".join((header, mask, masked.to_bytes(size, "little")))


def _encoded_length(text: str) -> int:
    """The UTF-8 size of ``text``, without encoding it when it is ASCII (checked in O(1))."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class WebSocket:
    """One client WebSocket connection: ``await WebSocket.connect(url)``, then use it as
    ``async with`` (or call ``aclose()``). The module docstring gives the error and
    cancellation rules."""

    def __init__(self, stream: anyio.abc.ByteStream, protocol: WSConnection,
                 pending: Iterator[Event], *, url: str, subprotocol: str | None,
                 max_message_bytes: int) -> None:
        """Use ``connect`` or ``over_stream``: they do the opening handshake."""
        #: The URL connected to.
        self.url = url
        #: The subprotocol the server chose among those offered, if any.
        self.subprotocol = subprotocol
        #: A larger incoming message closes the connection with 1009.
        self.max_message_bytes = max_message_bytes
        self._stream = stream
        self._protocol = protocol
        # wsproto's events from the bytes fed so far; kept across calls (and cancellations).
        self._events = pending
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._read_lock = anyio.Lock(fast_acquire=True)
        # The message being received, part by part (one of the two lists is in use).
        self._text_parts: list[str] = []
        self._binary_parts: list[bytes] = []
        self._message_bytes = 0
        self._owed_pong: bytes | None = None
        # Masking keys for the frames sent (os.urandom, 4 bytes a frame), drawn a page at once.
        self._masks = b""
        self._mask_at = 0
        # (code, reason) of the close that ended the connection, once either side started it.
        self._close: tuple[int, str] | None = None
        self._stream_closed = False

    @classmethod
    async def connect(cls, url: str, *, headers: Sequence[tuple[str, str]] = (),
                      max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                      subprotocols: Sequence[str] = (),
                      ssl_context: ssl.SSLContext | None = None) -> WebSocket:
        """Connect to ``url`` (``ws://`` or ``wss://``, whose certificate is checked against
        ``ssl_context``, by default the system's) and do the opening handshake, sending
        ``headers`` (e.g. Authorization, Origin) and offering ``subprotocols``. The caller's
        cancel scope bounds it."""
        address = _parse_url(url)
        if ssl_context is not None and not address.secure:
            raise ValueError(f"ssl_context given for a ws:// URL (wss:// uses TLS): {url!r}")
        # tls_standard_compatible=False: no TLS close_notify exchange when closing; the
        # WebSocket closing handshake already tells a complete session from a truncated one.
        stream: anyio.abc.ByteStream
        if address.secure:
            stream = await anyio.connect_tcp(address.host, address.port, tls=True,
                                             ssl_context=ssl_context,
                                             tls_standard_compatible=False)
        else:
            stream = await anyio.connect_tcp(address.host, address.port)
        return await cls.over_stream(stream, url, headers=headers, subprotocols=subprotocols,
                                     max_message_bytes=max_message_bytes)

    @classmethod
    async def over_stream(cls, stream: anyio.abc.ByteStream, url: str, *,
                          headers: Sequence[tuple[str, str]] = (),
                          max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                          subprotocols: Sequence[str] = ()) -> WebSocket:
        """The opening handshake over an already connected byte stream (a tunnel, a Unix
        socket, a test's wrapper) for ``url``'s host and path. The WebSocket owns the stream
        from then on: it is closed here if the handshake fails."""
        address = _parse_url(url)
        try:
            return await cls._handshake(stream, address, url, headers, max_message_bytes,
                                        subprotocols)
        except BaseException:
            await anyio.aclose_forcefully(stream)
            raise

    @classmethod
    async def _handshake(cls, stream: anyio.abc.ByteStream, address: _Address, url: str,
                         headers: Sequence[tuple[str, str]], max_message_bytes: int,
                         subprotocols: Sequence[str]) -> WebSocket:
        protocol = WSConnection(ConnectionType.CLIENT)
        request = Request(host=address.host_header, target=address.resource,
                          extra_headers=[(name.encode("latin-1"), value.encode("latin-1"))
                                         for name, value in headers],
                          subprotocols=list(subprotocols))
        status = 0
        response_headers: list[tuple[str, str]] = []
        body = bytearray()
        try:
            await stream.send(protocol.send(request))
            while True:
                data: bytes | None
                try:
                    data = await stream.receive(READ_BYTES)
                except anyio.EndOfStream:
                    data = None  # tells wsproto (h11) of the end: a body may end with it
                try:
                    protocol.receive_data(data)
                except RemoteProtocolError as exc:
                    code = 1002 if data is not None else 1006
                    raise WebSocketClosed(code, f"bad handshake response: {exc}") from exc
                events = protocol.events()
                for event in events:
                    if isinstance(event, AcceptConnection):
                        return cls(stream, protocol, events, url=url,
                                   subprotocol=event.subprotocol,
                                   max_message_bytes=max_message_bytes)
                    if isinstance(event, RejectConnection):
                        status = event.status_code
                        response_headers = [(name.decode("latin-1"), value.decode("latin-1"))
                                            for name, value in event.headers]
                        finished = not event.has_body
                    elif isinstance(event, RejectData):
                        body += event.data
                        finished = event.body_finished or len(body) >= max_message_bytes
                    else:
                        continue
                    if finished:
                        raise WebSocketRejected(status, bytes(body[:max_message_bytes]),
                                                response_headers)
                if data is None:
                    raise WebSocketClosed(1006, "the server closed the connection during the "
                                                "opening handshake")
        except anyio.BrokenResourceError as exc:
            raise WebSocketClosed(1006, f"the connection broke during the opening handshake: "
                                        f"{exc.__cause__ or exc!r}") from exc

    @property
    def closed(self) -> bool:
        """True once either side started closing, or the connection broke."""
        return self._close is not None or self._stream_closed

    async def send_text(self, text: str) -> None:
        """Send one text message."""
        await self._write_message(_TEXT, text.encode())

    async def send_bytes(self, data: bytes | bytearray | memoryview) -> None:
        """Send one binary message."""
        await self._write_message(_BINARY, data)

    async def receive(self) -> str | bytes:
        """The next whole message: ``str`` for text, ``bytes`` for binary. Answers pings on
        the way; raises ``WebSocketClosed`` once the connection is closed."""
        async with self._read_lock:
            if self._stream_closed:
                raise self._closed_error()
            if self._owed_pong is not None:
                await self._answer_ping()
            while True:
                for event in self._events:
                    if isinstance(event, BytesMessage):
                        binary = event.data if type(event.data) is bytes else bytes(event.data)
                        self._message_bytes += len(binary)
                        if self._message_bytes > self.max_message_bytes:
                            await self._fail(1009, self._too_big())
                        if not event.message_finished:
                            self._binary_parts.append(binary)
                            continue
                        self._message_bytes = 0
                        if not self._binary_parts:
                            return binary
                        self._binary_parts.append(binary)
                        binary = b"".join(self._binary_parts)
                        self._binary_parts.clear()
                        return binary
                    if isinstance(event, TextMessage):
                        self._message_bytes += _encoded_length(event.data)
                        if self._message_bytes > self.max_message_bytes:
                            await self._fail(1009, self._too_big())
                        if not event.message_finished:
                            self._text_parts.append(event.data)
                            continue
                        self._message_bytes = 0
                        if not self._text_parts:
                            return event.data
                        self._text_parts.append(event.data)
                        text = "".join(self._text_parts)
                        self._text_parts.clear()
                        return text
                    if isinstance(event, Ping):
                        self._owed_pong = event.payload
                        await self._answer_ping()
                    elif isinstance(event, CloseConnection):
                        await self._closed_by_peer(event)
                    # A Pong needs nothing: this client sends no pings.
                await self._read()

    async def aclose(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection: send a close frame with ``code`` and ``reason``, wait for the
        peer's (at most ``CLOSE_TIMEOUT_SECONDS``, shielded from cancellation), then close the
        TCP connection. Idempotent, and safe once the peer is gone."""
        if not 1000 <= code <= 4999:
            raise ValueError(f"a close code is from 1000 to 4999, not {code}")
        if self._stream_closed:
            return
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_TIMEOUT_SECONDS):
                await self._start_closing(code, reason)
                # A task blocked in receive() holds the read lock: it sees the peer's answer.
                async with self._read_lock:
                    await self._await_peer_close()
            await self._close_stream()

    async def __aenter__(self) -> WebSocket:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_value: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        if self._close is not None:
            state = f"closed ({self._close[0]})"
        else:
            state = "closed" if self._stream_closed else "open"
        return f"<WebSocket {self.url} {state}>"

    # Receiving

    async def _read(self) -> None:
        """Feed the next bytes from the socket to wsproto. Nothing is lost if cancelled:
        anyio's receive either returns bytes or raises, and they go to wsproto at once."""
        try:
            data = await self._stream.receive(READ_BYTES)
        except anyio.EndOfStream:
            error = await self._break("the peer ended the connection without a close frame")
            raise error from None
        except anyio.BrokenResourceError as exc:
            error = await self._break(f"the connection broke: {exc.__cause__ or exc!r}")
            raise error from exc
        except anyio.ClosedResourceError:  # aclose() in another task, or a broken send
            raise self._closed_error() from None
        self._protocol.receive_data(data)
        self._events = self._protocol.events()

    def _too_big(self) -> str:
        return f"a message exceeded max_message_bytes ({self.max_message_bytes})"

    async def _answer_ping(self) -> None:
        payload = self._owed_pong
        if payload is not None:
            await self._write_event(Pong(payload=payload), atomic=True)
            self._owed_pong = None

    async def _closed_by_peer(self, event: CloseConnection) -> None:
        """Handle a close event from wsproto; always raises ``WebSocketClosed``."""
        state = self._protocol.state
        if state is _OPEN:  # not a frame: wsproto found the peer broke the protocol
            await self._fail(int(event.code), event.reason or "", wait_for_peer=False)
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_TIMEOUT_SECONDS):
                if state is _REMOTE_CLOSING:  # the peer starts closing: answer it
                    if self._close is None:
                        self._close = (int(event.code), event.reason or "")
                    with contextlib.suppress(WebSocketClosed):
                        await self._write_event(event.response(), atomic=True)
            # Otherwise (CLOSED) the peer answered a close frame from this side.
            await self._close_stream()
        raise self._closed_error()

    async def _fail(self, code: int, reason: str, *, wait_for_peer: bool = True) -> None:
        """Close the connection from this side on an error found while receiving (the read
        lock held); raises ``WebSocketClosed(code, reason)``."""
        self._text_parts.clear()
        self._binary_parts.clear()
        self._message_bytes = 0
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_TIMEOUT_SECONDS):
                await self._start_closing(code, reason)
                if wait_for_peer:
                    await self._await_peer_close()
            await self._close_stream()
        raise WebSocketClosed(code, reason)

    # Closing

    async def _start_closing(self, code: int, reason: str) -> None:
        if self._close is None:
            self._close = (code, reason)
        with contextlib.suppress(WebSocketClosed):
            await self._write_event(CloseConnection(code=code, reason=reason))

    async def _await_peer_close(self) -> None:
        """Read until the peer answers this side's close frame; messages arriving first are
        dropped. Returns early if the connection ends or breaks."""
        while self._protocol.state is _LOCAL_CLOSING and not self._stream_closed:
            for event in self._events:
                if isinstance(event, CloseConnection):
                    return  # the answer, or a protocol error: either way the end
            try:
                data = await self._stream.receive(READ_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            self._protocol.receive_data(data)
            self._events = self._protocol.events()

    async def _close_stream(self) -> None:
        if not self._stream_closed:
            self._stream_closed = True
            with anyio.CancelScope(shield=True):
                await anyio.aclose_forcefully(self._stream)

    async def _break(self, reason: str) -> WebSocketClosed:
        """The connection is unusable (ended, reset, or a frame cut short): close the socket
        and return the error that every call reports from now on."""
        if self._close is None:
            self._close = (1006, reason)
        await self._close_stream()
        return self._closed_error()

    def _closed_error(self) -> WebSocketClosed:
        code, reason = self._close or (1006, "the connection is closed")
        return WebSocketClosed(code, reason)

    # Sending

    async def _write_message(self, opcode: int, payload: bytes | bytearray | memoryview
                             ) -> None:
        """Frame a whole message (one frame, masked) and write it, under the write lock.
        Framed here, not by wsproto: a data frame changes nothing in its state, and this is
        every step's path. Cancelled before it is written (the lock and the stream check),
        nothing is sent."""
        async with self._write_lock:
            if self._protocol.state is not _OPEN or self._stream_closed:
                raise self._closed_error()
            if self._mask_at == len(self._masks):  # one urandom call per 1,024 frames
                self._masks, self._mask_at = os.urandom(4096), 0
            mask = self._masks[self._mask_at:self._mask_at + 4]
            self._mask_at += 4
            await self._write(_client_frame(opcode, payload, mask), atomic=False)

    async def _write_event(self, event: Event, *, atomic: bool = False) -> None:
        """Frame ``event`` and write it, under the write lock. A message when the connection
        is not open raises ``WebSocketClosed``; a pong or close frame that the state no longer
        allows is dropped. ``atomic``: write the frame whole even if cancelled meanwhile
        (shielded, bounded by ``STALLED_WRITE_SECONDS``), for the frames receive() writes."""
        async with self._write_lock:
            # Cancelled here, nothing is sent (and a cancellation cannot arrive between this
            # check and the stream's own, there being no await between them).
            await anyio.lowlevel.checkpoint_if_cancelled()
            state = self._protocol.state
            if isinstance(event, CloseConnection):
                allowed = state is _OPEN or state is _REMOTE_CLOSING
            else:
                allowed = state is _OPEN
            if not allowed or self._stream_closed:
                if isinstance(event, (Pong, CloseConnection)):
                    return
                raise self._closed_error()
            await self._write(self._protocol.send(event), atomic=atomic)

    async def _write(self, frame: bytes, *, atomic: bool) -> None:
        """Write a whole frame (the write lock held); see ``_write_event`` for ``atomic``."""
        try:
            if atomic:
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + STALLED_WRITE_SECONDS
                    await self._stream.send(frame)
                if scope.cancelled_caught:
                    raise await self._break(
                        f"the peer took no data for {STALLED_WRITE_SECONDS:g} s")
            else:
                await self._stream.send(frame)
        except anyio.BrokenResourceError as exc:
            error = await self._break(f"the connection broke: {exc.__cause__ or exc!r}")
            raise error from exc
        except anyio.ClosedResourceError:  # aclose() or a break in another task
            raise self._closed_error() from None
        except WebSocketClosed:
            raise
        except BaseException:
            # Cancelled while the stream waited for the peer to take data: the frame may
            # be cut short, and then nothing sent after it can be understood.
            await self._break("a send was cancelled while the peer was not taking data")
            raise
