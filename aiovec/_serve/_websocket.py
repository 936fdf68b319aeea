"""The WebSocket route: one session driven over one connection, which is its lease.

Each message is a request ``{"op": "reset" | "step" | "send" | "recv" | "cancel" | "close",
"id": any, ...}``, as JSON text or as a binary frame (``aiovec._wire``), answered in kind:
``{"id": ..., "ok": true, ...result}`` or ``{"id": ..., "ok": false, "error": code,
"detail": ...}``. Requests run one at a time, in order; ``{"op": "cancel", "id": n}``
cancels request ``n`` (running or waiting), which is answered ``cancelled``. The session is
closed when the connection ends, and a hang-up cancels whatever was running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from aiovec._serve._errors import ServeError
from aiovec._serve._http import error_response, refusal
from aiovec._serve._sessions import Session
from aiovec._serve._transport import dump_json, parse_bounded, perform
from aiovec._wire._codec import decode_frame, encode_frame

if TYPE_CHECKING:
    from aiovec._serve._server import EnvServer

__all__ = ["websocket_route"]

#: Requests a connection may queue behind the running one before the server stops reading.
_QUEUE = 16
_MESSAGE_TOO_BIG = 1009


class _Request:
    """One decoded message: its id, operation, fields, and how to answer it."""

    __slots__ = ("binary", "fields", "op", "request_id")

    def __init__(self, fields: Mapping[str, Any], binary: bool) -> None:
        self.fields, self.binary = fields, binary
        self.op, self.request_id = fields.get("op"), fields.get("id")


async def _refuse_handshake(websocket: WebSocket, error: ServeError) -> None:
    """Refuse before accepting: an HTTP answer with the JSON error where the server can send
    one (uvicorn can), else a close code of 4000 + the HTTP status."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(error))
    else:
        await websocket.close(code=4000 + error.status, reason=error.detail[:120])


class _Connection:
    """The state of one session's connection: the queue of requests and what runs now."""

    def __init__(self, server: EnvServer, websocket: WebSocket, session: Session) -> None:
        self.server, self.websocket, self.session = server, websocket, session
        self.running: tuple[Any, anyio.CancelScope] | None = None
        self.cancelled: set[Any] = set()
        self.ended = False  # the client hung up, or the server closed the connection
        self.group: anyio.abc.TaskGroup | None = None  # the reader's and the requests'

    async def decode(self, message: Mapping[str, Any]) -> _Request:
        limits = self.server.limits
        data = message.get("bytes")
        if data is not None:
            if len(data) > limits.max_body_bytes:
                raise ServeError("too_large", f"messages are limited to "
                                 f"{limits.max_body_bytes} bytes")
            try:
                fields = decode_frame(data)
            except ValueError as error:
                raise ServeError("bad_frame", str(error)) from None
            if not isinstance(fields, dict):
                raise ServeError("bad_frame", "a request frame must hold an object")
            return _Request(fields, binary=True)
        text = message.get("text") or ""
        return _Request(await parse_bounded(text.encode(), limits), binary=False)

    async def answer(self, request_id: Any, binary: bool, body: dict[str, Any]) -> None:
        body = {"id": request_id, **body}
        try:
            if binary:
                await self.websocket.send_bytes(encode_frame(body))
            else:
                await self.websocket.send_text(
                    (await dump_json(body, self.server.limits)).decode())
        except WebSocketDisconnect:  # it hung up meanwhile: nobody to answer, nothing to run
            self.ended = True
            assert self.group is not None
            self.group.cancel_scope.cancel()

    async def refuse(self, request_id: Any, binary: bool, error: BaseException) -> None:
        await self.answer(request_id, binary, {"ok": False,
                                               **refusal(self.server, error).body()})

    async def read(self, queue: MemoryObjectSendStream[_Request],
                   group: anyio.abc.TaskGroup) -> None:
        """Read messages until the client hangs up; act on ``cancel`` at once."""
        with queue:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.ended = True
                    group.cancel_scope.cancel()
                    return
                try:
                    request = await self.decode(message)
                except ServeError as error:
                    if error.code == "too_large":
                        self.server.telemetry.rejected(error.code)
                        self.ended = True
                        await self.websocket.close(_MESSAGE_TOO_BIG, error.detail[:120])
                        group.cancel_scope.cancel()
                        return
                    await self.refuse(None, message.get("bytes") is not None, error)
                    continue
                if request.op == "cancel":
                    self.cancel(request.fields.get("id"))
                    continue
                await queue.send(request)

    def cancel(self, request_id: Any) -> None:
        running = self.running
        if running is not None and running[0] == request_id:
            running[1].cancel()
        elif len(self.cancelled) < _QUEUE * 4:  # bounded: ids of requests done long ago
            self.cancelled.add(request_id)  # waiting in the queue, or done already

    async def serve(self, request: _Request) -> bool:
        """Answer one request; False once the client asked to close."""
        if request.op == "close":
            return False
        if request.request_id in self.cancelled:
            self.cancelled.discard(request.request_id)
            await self.refuse(request.request_id, request.binary,
                              ServeError("cancelled", "cancelled by the client"))
            return True
        scope = anyio.CancelScope()
        self.running = (request.request_id, scope)
        try:
            with scope:
                async with self.session.use():
                    result = await perform(self.session, str(request.op), request.fields,
                                           self.server.telemetry)
        except Exception as error:
            await self.refuse(request.request_id, request.binary, error)
            return True
        finally:
            self.running = None
        if scope.cancelled_caught:
            await self.refuse(request.request_id, request.binary,
                              ServeError("cancelled", "cancelled by the client"))
        else:
            await self.answer(request.request_id, request.binary, {"ok": True, **result})
        return True


def websocket_route(server: EnvServer) -> WebSocketRoute:
    async def session_socket(websocket: WebSocket) -> None:
        try:
            principal = await server.guard.admit(websocket)
            session = server.manager.get(websocket.path_params["session_id"], principal)
        except Exception as error:
            await _refuse_handshake(websocket, refusal(server, error))
            return
        await websocket.accept()
        connection = _Connection(server, websocket, session)
        try:
            send, receive = anyio.create_memory_object_stream[_Request](_QUEUE)
            async with anyio.create_task_group() as group:
                connection.group = group
                group.start_soon(connection.read, send, group)
                with receive:
                    async for request in receive:
                        if not await connection.serve(request):
                            break
                group.cancel_scope.cancel()
        except WebSocketDisconnect:
            connection.ended = True
        finally:
            await server.manager.close(session, "disconnected" if connection.ended else "client")
        if not connection.ended:
            # It may hang up as we say goodbye.
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await websocket.close()

    return WebSocketRoute("/sessions/{session_id}/ws", session_socket)
