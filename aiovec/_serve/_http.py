"""The HTTP routes: sessions created, described, deleted, reset and stepped with JSON bodies.

Every route admits the connection first (``Guard``), reads at most ``Limits.max_body_bytes``
of ``application/json`` and answers JSON: a result, or ``{"error": code, "detail": ...}``.
A client that hangs up mid-operation cancels it, and its session is released.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aiovec._serve._errors import ServeError, refusal_of
from aiovec._serve._transport import dump_json, parse_bounded, perform, watched

if TYPE_CHECKING:
    from aiovec._serve._server import EnvServer

__all__ = ["error_response", "http_routes"]

logger = logging.getLogger("aiovec.serve")

Handler = Callable[[Request, "str | None"], Awaitable[Response]]


def error_response(error: ServeError) -> JSONResponse:
    headers = {}
    if "retry_after" in error.extra:
        headers["Retry-After"] = str(error.extra["retry_after"])
    if error.code == "unauthorized":
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def refusal(server: EnvServer, error: BaseException) -> ServeError:
    """The ``ServeError`` to answer ``error`` with (counted); a bug is logged, not shown."""
    answer = refusal_of(error)
    if answer is None:
        logger.error("aiovec.serve: an unexpected error", exc_info=error)
        answer = ServeError("internal", "the server failed unexpectedly; its log has the "
                            "details")
    server.telemetry.rejected(answer.code)
    return answer


async def read_body(request: Request, server: EnvServer) -> tuple[dict[str, Any], int]:
    """The request's JSON object (``{}`` for an empty body), within the server's limits, and
    the body's size."""
    limit = server.limits.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServeError("too_large", f"the body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServeError("too_large", f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    if not size:
        return {}, 0
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    # Only JSON: a browser sends a cross-origin form or text/plain POST without asking first,
    # but must ask (a CORS preflight, which this server never grants) before sending JSON.
    if media_type != "application/json":
        raise ServeError("unsupported_media_type", "send the body as application/json")
    return await parse_bounded(b"".join(chunks), server.limits), size


def http_routes(server: EnvServer) -> list[Route]:
    """The HTTP routes of ``server``."""

    def route(path: str, handler: Handler, method: str, *, admit: bool = True) -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                principal = await server.guard.admit(request) if admit else None
                return await handler(request, principal)
            except ClientDisconnect:  # nobody will read an answer
                return Response(status_code=499)
            except Exception as error:
                return error_response(refusal(server, error))

        return Route(path, endpoint, methods=[method], name=handler.__name__)

    async def healthz(request: Request, principal: str | None) -> Response:
        manager = server.manager_or_none
        if manager is None:
            return JSONResponse({"status": "starting", "sessions": 0}, status_code=503)
        return JSONResponse({"status": "ok", "sessions": len(manager)})

    async def metrics(request: Request, principal: str | None) -> Response:
        return Response(server.telemetry.render(), media_type=server.telemetry.content_type)

    async def openapi(request: Request, principal: str | None) -> Response:
        return JSONResponse(server.openapi())

    async def list_envs(request: Request, principal: str | None) -> Response:
        return JSONResponse({env_id: {"description": served.description,
                                      "max_envs": served.max_envs}
                             for env_id, served in server.envs.items()})

    async def create_session(request: Request, principal: str | None) -> Response:
        body, _ = await read_body(request, server)
        session = await server.open_session(body, principal,
                                            request.client.host if request.client else None)
        return JSONResponse(session.describe(), status_code=201)

    async def describe_session(request: Request, principal: str | None) -> Response:
        session = server.manager.get(request.path_params["session_id"], principal)
        return JSONResponse(session.describe())

    async def delete_session(request: Request, principal: str | None) -> Response:
        manager = server.manager
        await manager.close(manager.get(request.path_params["session_id"], principal))
        return Response(status_code=204)

    async def operate(request: Request, principal: str | None) -> Response:
        manager = server.manager
        session = manager.get(request.path_params["session_id"], principal)
        body, size = await read_body(request, server)
        big = size > server.limits.offload_bytes

        async def gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        async with server.turn_for(session):
            with session.use():
                finished, result = await watched(gone, lambda: perform(
                    session, request.path_params["op"], body, server.telemetry, big=big))
                if finished:
                    return Response(await dump_json(result, server.limits),
                                    media_type="application/json")
        # Nobody is listening any more: release what the client leased.
        await manager.close(session, "disconnected")
        return Response(status_code=499)

    return [
        route("/healthz", healthz, "GET", admit=False),
        route("/metrics", metrics, "GET"),
        route("/openapi.json", openapi, "GET"),
        route("/envs", list_envs, "GET"),
        route("/sessions", create_session, "POST"),
        route("/sessions/{session_id}", describe_session, "GET"),
        route("/sessions/{session_id}", delete_session, "DELETE"),
        route("/sessions/{session_id}/{op}", operate, "POST"),
    ]
