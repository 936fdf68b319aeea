"""The ASGI app (Starlette): sessions of registered envs, stepped over HTTP or a WebSocket.

Routes::

    GET    /healthz                     {"status": "ok", "sessions": n}: never waits on an env
    GET    /envs                        the allow-list
    POST   /sessions                    {"env_id", "num_envs"} -> 201 the session
    GET    /sessions/{id}               the session
    DELETE /sessions/{id}               release its envs -> 204
    POST   /sessions/{id}/reset         {"seed": int | [int] | null} -> observations, infos
    POST   /sessions/{id}/step          {"actions": [...]} -> observations, rewards, ...
    WS     /sessions/{id}/ws            {"op": "reset" | "step" | "close", ...} per message

Every failure is a JSON body ``{"error": kind, "detail": text, ...}`` with a 4xx for the
client's mistakes (400 bad JSON, 404 unknown session, 409 busy or reset needed, 422 invalid
values, 503 full) and a 5xx for the environment's (502 a sub-env failed beyond its restarts,
504 it timed out): never a traceback, never a dropped connection. A client that disconnects
mid-request cancels it, and its session's envs are released.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
from registry import REGISTRY
from sessions import Session, SessionError, SessionManager, cancel_on
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

import aiovec


def jsonable(value: Any) -> Any:
    """Numpy values as plain JSON values (infos hold arrays, masks, numpy scalars)."""
    if isinstance(value, np.ndarray):
        return [jsonable(item) for item in value] if value.dtype == object else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def failure(error: BaseException) -> SessionError:
    """What to tell the client about ``error`` (no traceback ever leaves the server)."""
    if isinstance(error, SessionError):
        return error
    if isinstance(error, aiovec.EnvTimeoutError):
        return SessionError(504, "timeout", str(error), env_ids=list(error.env_ids))
    if isinstance(error, aiovec.SubEnvErrorGroup):
        return SessionError(502, "sub_env_failed", str(error).splitlines()[0],
                            env_ids=list(error.env_ids),
                            causes=[str(sub).splitlines()[0] for sub in error.exceptions])
    if isinstance(error, aiovec.ResetNeededError):
        return SessionError(409, "reset_needed", str(error))
    if isinstance(error, aiovec.BusyError):
        return SessionError(409, "busy", str(error))
    if isinstance(error, aiovec.ClosedError):
        return SessionError(404, "unknown_session", "the session was closed")
    if isinstance(error, ClientDisconnect):  # nobody will read it: not an error of ours
        return SessionError(400, "client_disconnected", "the client went away mid-request")
    if isinstance(error, (ValueError, TypeError)):  # aiovec's checks of the client's values
        return SessionError(422, "invalid", str(error))
    raise error  # a bug of ours: let the server log it


def reply(error: SessionError) -> JSONResponse:
    headers = {"Retry-After": str(error.extra["retry_after"])} if "retry_after" in error.extra \
        else None
    return JSONResponse(error.as_json(), status_code=error.status, headers=headers)


async def read_json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SessionError(400, "bad_json", f"the body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise SessionError(400, "bad_json", "the body must be a JSON object")
    return body


def seed_from(body: dict[str, Any]) -> int | list[int] | None:
    seed = body.get("seed")
    ok = seed is None or (type(seed) is int) or (
        isinstance(seed, list) and all(type(item) is int for item in seed))
    if not ok:
        raise SessionError(422, "invalid", f"seed must be an int, a list of ints or null, "
                           f"got {seed!r}")
    return seed  # type: ignore[no-any-return]


def actions_from(body: dict[str, Any]) -> np.ndarray[Any, Any]:
    if "actions" not in body:
        raise SessionError(422, "invalid", "the body needs 'actions': one per sub-env")
    try:
        return np.asarray(body["actions"])
    except ValueError as error:  # ragged nesting
        raise SessionError(422, "invalid", f"actions: {error}") from None


async def reset(session: Session, body: dict[str, Any]) -> dict[str, Any]:
    observations, infos = await session.envs.reset(seed=seed_from(body))
    return {"observations": observations.tolist(), "infos": jsonable(infos)}


async def step(session: Session, body: dict[str, Any]) -> dict[str, Any]:
    observations, rewards, terminations, truncations, infos = await session.envs.step(
        actions_from(body))
    session.steps += 1
    restarted = {str(index): str(infos["restart"][index])
                 for index in np.flatnonzero(infos.get("_restart", []))}
    return {"observations": observations.tolist(), "rewards": rewards.tolist(),
            "terminations": terminations.tolist(), "truncations": truncations.tolist(),
            "restarted": restarted}


OPERATIONS: dict[str, Callable[[Session, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "reset": reset, "step": step}


def manager_of(request: Request | WebSocket) -> SessionManager:
    return request.app.state.manager  # type: ignore[no-any-return]


async def healthz(request: Request) -> JSONResponse:
    manager = manager_of(request)
    return JSONResponse({"status": "ok", "sessions": len(manager), "reaped": manager.reaped})


async def list_envs(request: Request) -> JSONResponse:
    return JSONResponse({env_id: {"description": entry.description, "max_envs": entry.max_envs}
                         for env_id, entry in REGISTRY.items()})


async def create_session(request: Request) -> Response:
    try:
        body = await read_json(request)
        env_id, num_envs = body.get("env_id"), body.get("num_envs", 1)
        if not isinstance(env_id, str) or type(num_envs) is not int:
            raise SessionError(422, "invalid", "need 'env_id' (a string) and 'num_envs' "
                               "(an int)")
        session = await manager_of(request).create(env_id, num_envs)
    except Exception as error:
        return reply(failure(error))
    return JSONResponse(session.describe(), status_code=201)


async def describe_session(request: Request) -> Response:
    try:
        session = manager_of(request).get(request.path_params["session_id"])
    except SessionError as error:
        return reply(error)
    return JSONResponse(session.describe())


async def delete_session(request: Request) -> Response:
    manager = manager_of(request)
    try:
        session = manager.get(request.path_params["session_id"])
    except SessionError as error:
        return reply(error)
    await manager.close(session)
    return Response(status_code=204)


async def operate(request: Request) -> Response:
    """``reset`` or ``step`` over HTTP; a client that hangs up mid-way cancels it."""
    manager = manager_of(request)
    operation = OPERATIONS.get(request.path_params["operation"])
    if operation is None:
        return reply(SessionError(404, "not_found", f"no such operation; use one of "
                                  f"{sorted(OPERATIONS)}"))
    try:
        body = await read_json(request)
        session = manager.get(request.path_params["session_id"])
        async with session.use():
            async def disconnected() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass

            finished, result = await cancel_on(disconnected, lambda: operation(session, body))
    except Exception as error:
        return reply(failure(error))
    if not finished:  # nobody is listening any more: release what the client leased
        await manager.close(session)
        return Response(status_code=499)
    return JSONResponse(result)


async def session_socket(websocket: WebSocket) -> None:
    """One session driven over a WebSocket; the session lives as long as the connection."""
    manager = manager_of(websocket)
    try:
        session = manager.get(websocket.path_params["session_id"])
    except SessionError as error:
        await websocket.close(code=4404, reason=error.detail)
        return
    await websocket.accept()
    waiting: deque[dict[str, Any]] = deque()
    gone = anyio.Event()

    async def next_message() -> dict[str, Any] | None:
        message = waiting.popleft() if waiting else await websocket.receive()
        if message["type"] == "websocket.disconnect":
            gone.set()
            return None
        return message

    async def disconnected() -> None:
        # Messages that arrive while a request runs wait their turn; a disconnect cancels it.
        while not gone.is_set():
            message = await websocket.receive()
            waiting.append(message)
            if message["type"] == "websocket.disconnect":
                gone.set()
                return

    try:
        while (message := await next_message()) is not None:
            try:
                request = json.loads(message.get("text") or message.get("bytes") or b"")
                if not isinstance(request, dict) or request.get("op") not in (*OPERATIONS,
                                                                             "close"):
                    raise SessionError(422, "invalid", "send {\"op\": \"reset\" | \"step\" | "
                                       "\"close\", ...}")
                if request["op"] == "close":
                    break
                operation = OPERATIONS[request["op"]]
                async with session.use():
                    finished, result = await cancel_on(
                        disconnected, lambda: operation(session, request))  # noqa: B023
                if not finished:
                    break
                await websocket.send_json({"ok": True, **(result or {})})
            except json.JSONDecodeError as error:
                await websocket.send_json({"ok": False, "error": "bad_json", "detail": str(error)})
            except Exception as error:
                await websocket.send_json({"ok": False, **failure(error).as_json()})
    except WebSocketDisconnect:
        pass
    finally:
        await manager.close(session)
    if not gone.is_set():
        with contextlib.suppress(WebSocketDisconnect):  # it may hang up as we say goodbye
            await websocket.close()


def create_app(*, max_sessions: int = 64, idle_timeout: float = 300.0,
               reap_period: float = 1.0) -> Starlette:
    """The app; its lifespan owns every vector env (all closed at shutdown)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        manager = SessionManager(max_sessions=max_sessions, idle_timeout=idle_timeout)
        app.state.manager = manager
        async with anyio.create_task_group() as group:
            group.start_soon(manager.reap_idle_forever, reap_period)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await manager.close_all()
                group.cancel_scope.cancel()

    return Starlette(routes=[
        Route("/healthz", healthz),
        Route("/envs", list_envs),
        Route("/sessions", create_session, methods=["POST"]),
        Route("/sessions/{session_id}", describe_session, methods=["GET"]),
        Route("/sessions/{session_id}", delete_session, methods=["DELETE"]),
        Route("/sessions/{session_id}/{operation:str}", operate, methods=["POST"]),
        WebSocketRoute("/sessions/{session_id}/ws", session_socket),
    ], lifespan=lifespan)
