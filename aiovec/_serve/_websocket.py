"""The WebSocket routes: one session driven over one connection, which is its lease.

Each message is a request ``{"op": "reset" | "step" | "send" | "recv" | "abort" |
"max_in_flight" | "cancel" | "close", "id": int | str | null, ...}``, as JSON text or as a
binary frame (``aiovec._wire``), answered in kind: ``{"id": ..., "ok": true, ...result}``
or ``{"id": ..., "ok": false, "error": code, "detail": ...}`` (``"id": null`` for a message
that could not be read).
Requests run one at a time, in order; ``{"op": "cancel", "id": n}`` cancels request ``n``
(running or waiting), which is answered ``cancelled``. The session is closed when the
connection ends, and a hang-up cancels whatever was running; when the session is closed
otherwise (deleted, reaped, shutdown), the connection is closed with code 4404.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from aiovec._serve._errors import ServeError
from aiovec._serve._http import error_response, refusal
from aiovec._serve._sessions import Session
from aiovec._serve._transport import dump_json, parse_bounded, parse_json_object, perform
from aiovec._wire._codec import FrameTooDeep, decode_frame, encode_frame

if TYPE_CHECKING:
    from aiovec._serve._config import Limits
    from aiovec._serve._server import EnvServer

__all__ = ["websocket_routes"]

#: Requests read ahead of the running one. The protocol is one request at a time (a
#: pipelining client gets them run in order); a small queue bounds what a connection holds.
_QUEUE = 2
#: Ids of cancelled requests remembered (a cancel may race its request's answer).
_CANCELLED = 64
_MESSAGE_TOO_BIG = 1009
_SESSION_GONE = 4404
_CANCELLED_BY_CLIENT = ServeError("cancelled", "cancelled by the client")


class _Request:
    """One decoded message: its id, operation, fields, and how to answer it."""

    __slots__ = ("big", "binary", "fields", "op", "request_id")

    def __init__(self, fields: Mapping[str, Any], binary: bool, big: bool) -> None:
        op, request_id = fields.get("op"), fields.get("id")
        if not isinstance(op, str) or not (request_id is None
                                           or type(request_id) in (int, str)):
            raise ServeError("bad_frame" if binary else "bad_json",
                             "a request is {\"op\": a string, \"id\": an int, a string or "
                             "null, ...}")
        self.fields, self.binary, self.big = fields, binary, big
        self.op, self.request_id = op, request_id


def _decoded_frame(data: bytes, limits: Limits) -> dict[str, Any]:
    try:
        fields = decode_frame(data, max_header_size=limits.max_body_bytes,
                              max_depth=limits.max_json_depth)
    except FrameTooDeep as error:  # measured before decoding, as JSON's depth is
        raise ServeError("too_deep", str(error)) from None
    except ValueError as error:
        raise ServeError("bad_frame", str(error)) from None
    if not isinstance(fields, dict):
        raise ServeError("bad_frame", "a request frame must hold an object")
    return fields


async def decode(message: Mapping[str, Any], limits: Limits, *, opening: bool = False
                 ) -> _Request:
    """A message as a request; big ones are decoded in a worker thread (an ``opening``
    message, small by nature, is refused when big)."""
    data: bytes | None = message.get("bytes")
    binary = data is not None
    raw = data if data is not None else (message.get("text") or "").encode()
    limit = limits.offload_bytes if opening else limits.max_body_bytes
    if len(raw) > limit:
        raise ServeError("too_large", f"messages are limited to {limit} bytes")
    big = len(raw) > limits.offload_bytes
    if binary:
        fields = await anyio.to_thread.run_sync(_decoded_frame, raw, limits) if big \
            else _decoded_frame(raw, limits)
    else:
        fields = await parse_bounded(raw, limits) if big else parse_json_object(raw, limits)
    return _Request(fields, binary, big)


async def _send(server: EnvServer, websocket: WebSocket, binary: bool,
                body: dict[str, Any]) -> None:
    if binary:
        await websocket.send_bytes(encode_frame(body))
    else:
        await websocket.send_text((await dump_json(body, server.limits)).decode())


async def _refuse_handshake(websocket: WebSocket, error: ServeError) -> None:
    """Refuse before accepting: an HTTP answer with the JSON error where the server can send
    one (uvicorn can), else a close code of 4000 + the HTTP status."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(error))
    else:
        await websocket.close(code=4000 + error.status, reason=error.detail[:120])


class _Connection:
    """One session's connection: the reader, the requests it queued, the one that runs."""

    def __init__(self, server: EnvServer, websocket: WebSocket, session: Session,
                 group: anyio.abc.TaskGroup) -> None:
        self.server, self.websocket, self.session, self.group = server, websocket, session, group
        self.running: tuple[Any, anyio.CancelScope] | None = None
        self.cancelled: OrderedDict[Any, None] = OrderedDict()
        # Requests read ahead of the running one, handed from the reader to the runner
        # (``next_request``): an event set for whichever of them waits for the other.
        self.queued: deque[_Request] = deque()
        self.reading = True
        self.arrived: anyio.Event | None = None  # the runner waits for a request
        self.room: anyio.Event | None = None  # the reader waits for room in the queue
        self.ended = False  # the client hung up, or the server closed the connection

    def end(self) -> None:
        self.ended = True
        self.group.cancel_scope.cancel()

    async def answer(self, request_id: Any, binary: bool, body: dict[str, Any]) -> None:
        try:
            await _send(self.server, self.websocket, binary, {"id": request_id, **body})
        except (WebSocketDisconnect, RuntimeError):  # it hung up, or the server closed it
            self.end()  # meanwhile: nobody to answer, nothing left to run

    async def refuse(self, request_id: Any, binary: bool, error: BaseException) -> None:
        await self.answer(request_id, binary, {"ok": False,
                                               **refusal(self.server, error).body()})

    async def close(self, code: int, reason: str) -> None:
        self.end()
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.websocket.close(code, reason[:120])

    async def read(self) -> None:
        """Read messages until the client hangs up; act on ``cancel`` at once, queue the
        rest for ``next_request``."""
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.end()
                    return
                try:
                    request = await decode(message, self.server.limits)
                except ServeError as error:
                    if error.code == "too_large":
                        self.server.telemetry.rejected(error.code)
                        await self.close(_MESSAGE_TOO_BIG, error.detail)
                        return
                    await self.refuse(None, message.get("bytes") is not None, error)
                    continue
                if request.op == "cancel":
                    self.cancel(request.request_id)
                    continue
                while len(self.queued) >= _QUEUE:  # read no further ahead
                    self.room = anyio.Event()
                    await self.room.wait()
                self.queued.append(request)
                self._wake_runner()
        finally:
            self.reading = False
            self._wake_runner()

    def _wake_runner(self) -> None:
        arrived, self.arrived = self.arrived, None
        if arrived is not None:
            arrived.set()

    async def next_request(self) -> _Request | None:
        """The next request read, in order; ``None`` once the reader stopped and none is
        left. A request already read is returned without a loop turn (the step it runs
        yields before its sub-envs step)."""
        queued = self.queued
        while not queued:
            if not self.reading:
                return None
            self.arrived = arrived = anyio.Event()
            await arrived.wait()
        request = queued.popleft()
        room, self.room = self.room, None
        if room is not None:
            room.set()
        return request

    async def watch_session(self) -> None:
        """Close the connection once its session is closed elsewhere (deleted, reaped)."""
        await self.session.ended.wait()
        await self.close(_SESSION_GONE, "the session was closed")

    def cancel(self, request_id: Any) -> None:
        running = self.running
        if running is not None and running[0] == request_id:
            running[1].cancel()
            return
        self.cancelled[request_id] = None  # waiting in the queue, or answered already
        if len(self.cancelled) > _CANCELLED:  # forget the oldest: long answered
            self.cancelled.popitem(last=False)

    async def serve(self, request: _Request) -> bool:
        """Answer one request; False once the client asked to close."""
        if request.op == "close":
            return False
        telemetry = self.server.telemetry
        if request.request_id in self.cancelled:  # cancelled while it waited in the queue
            del self.cancelled[request.request_id]
            telemetry.cancelled_before_it_ran(request.op)
            await self.refuse(request.request_id, request.binary, _CANCELLED_BY_CLIENT)
            return True
        scope = anyio.CancelScope()  # a cancel reaches it from now, its turn awaited or not
        self.running = (request.request_id, scope)
        performed = False
        try:
            with scope:
                # The turn is for the step only: the answer is sent after, so a client that
                # stops reading holds up no one but itself.
                async with self.server.turn_for(self.session):
                    with self.session.use():
                        performed = True  # ``perform`` counts it, however it ends
                        result = await perform(self.session, request.op, request.fields,
                                               telemetry, big=request.big)
        except Exception as error:
            await self.refuse(request.request_id, request.binary, error)
            return True
        finally:
            self.running = None
        if scope.cancelled_caught:
            if not performed:  # cancelled while it waited for its turn
                telemetry.cancelled_before_it_ran(request.op)
            await self.refuse(request.request_id, request.binary, _CANCELLED_BY_CLIENT)
        else:
            await self.answer(request.request_id, request.binary, {"ok": True, **result})
        return True


async def _drive(server: EnvServer, websocket: WebSocket, session: Session) -> None:
    """Serve ``session``'s requests over the accepted ``websocket`` until either side ends
    it; the session is closed then, whatever happened."""
    manager = server.manager  # (the lifespan may end before the connection does)
    ended = True
    try:
        async with anyio.create_task_group() as group:
            connection = _Connection(server, websocket, session, group)
            group.start_soon(connection.read)
            group.start_soon(connection.watch_session)
            while (request := await connection.next_request()) is not None:
                if not await connection.serve(request):
                    break
            group.cancel_scope.cancel()
        ended = connection.ended
    finally:
        await manager.close(session, "disconnected" if ended else "client")
    if not ended:
        # It may hang up as we say goodbye.
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await websocket.close()


async def _opening(server: EnvServer, websocket: WebSocket, principal: str | None
                   ) -> Session | None:
    """The session the connection's first message opens (``{"op": "open", "env_id",
    "num_envs"}``), answered with its description; ``None`` if it was refused (answered,
    then closed) or the client left."""
    message: Mapping[str, Any] = {"type": "websocket.disconnect"}
    with anyio.move_on_after(server.limits.opening_seconds):  # no session, no lease
        message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await websocket.close(1008, "open a session with the first message")
        return None
    binary = message.get("bytes") is not None
    request_id = None
    try:
        opening = await decode(message, server.limits, opening=True)
        request_id = opening.request_id
        if opening.op != "open":
            raise ServeError("invalid", "the first message must open a session: "
                             "{\"op\": \"open\", \"env_id\": ..., \"num_envs\": ...}")
        session = await server.open_session(
            opening.fields, principal, websocket.client.host if websocket.client else None)
    except Exception as error:
        answer = {"id": request_id, "ok": False, **refusal(server, error).body()}
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await _send(server, websocket, binary, answer)
            await websocket.close()
        return None
    try:
        await _send(server, websocket, binary,
                    {"id": request_id, "ok": True, "session": session.describe()})
    except BaseException:
        await server.manager.close(session, "disconnected")
        raise
    return session


def websocket_routes(server: EnvServer) -> list[WebSocketRoute]:
    """``/sessions/{id}/ws`` drives a session opened over HTTP; ``/ws`` opens one with its
    first message (one round trip, and no session left behind by a client that never
    connected)."""

    async def session_socket(websocket: WebSocket) -> None:
        try:
            principal = await server.guard.admit(websocket)
            session = server.manager.get(websocket.path_params["session_id"], principal)
        except Exception as error:
            await _refuse_handshake(websocket, refusal(server, error))
            return
        await websocket.accept()
        await _drive(server, websocket, session)

    async def opening_socket(websocket: WebSocket) -> None:
        try:
            principal = await server.guard.admit(websocket)
            server.manager  # noqa: B018 - refused at the handshake if not started
        except Exception as error:
            await _refuse_handshake(websocket, refusal(server, error))
            return
        await websocket.accept()
        try:
            session = await _opening(server, websocket, principal)
        except WebSocketDisconnect:
            return
        if session is not None:
            await _drive(server, websocket, session)

    return [WebSocketRoute("/sessions/{session_id}/ws", session_socket),
            WebSocketRoute("/ws", opening_socket)]
