"""``EnvServer``: allow-listed envs served over HTTP and WebSocket as an ASGI app.

The server's sessions live between ``lifespan`` enter and exit: its ``app`` runs that
lifespan itself when it is the application; mounted inside another app (Starlette,
FastAPI), the host's lifespan must enter ``server.lifespan`` (until then requests answer
503 ``not_started``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import anyio
import gymnasium as gym
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from aiovec._serve._config import Limits, ServedEnv, allow_list
from aiovec._serve._errors import CODES, ServeError
from aiovec._serve._guard import Authenticate, Guard
from aiovec._serve._http import error_response, http_routes
from aiovec._serve._openapi import openapi_document
from aiovec._serve._sessions import Session, SessionManager
from aiovec._serve._telemetry import Telemetry
from aiovec._serve._websocket import websocket_routes

__all__ = ["EnvServer"]

_STATUS_CODES = {404: "not_found", 405: "method_not_allowed"}


class EnvServer:
    """Serves the envs of an allow-list (public id → ``ServedEnv``, a Gymnasium id or a
    factory) as sessions of 1 to ``max_envs`` sub-envs each.

    ``max_sessions`` in all, ``max_sessions_per_client`` per principal (default: a quarter
    of ``max_sessions`` when ``auth`` names several principals; otherwise no cap below
    ``max_sessions``); sessions unused for ``idle_timeout`` seconds are closed.
    ``auth``: a bearer token, ``{token: principal}``, a callable returning the principal
    (or ``None`` to refuse), or ``None``: loopback clients only. Sessions belong to the
    principal that created them. ``allowed_hosts`` / ``allowed_origins``: see ``Guard``.
    """

    def __init__(
        self,
        envs: Mapping[str, ServedEnv | str | Callable[[], gym.Env[Any, Any]]],
        *,
        max_sessions: int = 64,
        max_sessions_per_client: int | None = None,
        idle_timeout: float = 300.0,
        auth: str | Mapping[str, str] | Authenticate | None = None,
        allowed_hosts: Sequence[str] | None = None,
        allowed_origins: Sequence[str] = (),
        limits: Limits = Limits(),  # noqa: B008 (frozen: one shared default is safe)
    ) -> None:
        self.envs = allow_list(envs)
        if type(max_sessions) is not int or max_sessions < 1:
            raise ValueError(f"max_sessions must be a positive int, got {max_sessions!r}")
        if max_sessions_per_client is not None and (
                type(max_sessions_per_client) is not int or max_sessions_per_client < 1):
            raise ValueError("max_sessions_per_client must be a positive int, got "
                             f"{max_sessions_per_client!r}")
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive, got {idle_timeout!r}")
        self.guard = Guard(auth, allowed_hosts, allowed_origins)
        if max_sessions_per_client is None:  # one principal: only addresses tell clients apart
            max_sessions_per_client = max_sessions if self.guard.single_principal \
                else max(1, max_sessions // 4)
        self.max_sessions, self.max_sessions_per_client = max_sessions, max_sessions_per_client
        self.idle_timeout = idle_timeout
        self.limits = limits
        self.telemetry = Telemetry(lambda: float(len(self._manager or ())))
        self._manager: SessionManager | None = None
        self._in_loop: anyio.CapacityLimiter | None = None
        self._openapi: dict[str, Any] | None = None
        self.app = Starlette(routes=self.routes, lifespan=lambda _app: self.lifespan(),
                             exception_handlers={HTTPException: self._http_exception})

    @property
    def routes(self) -> list[BaseRoute]:
        """The routes, to add to another app's router (then enter ``lifespan`` there)."""
        return [*http_routes(self), *websocket_routes(self)]

    @property
    def manager(self) -> SessionManager:
        """The sessions (``not_started`` before ``lifespan`` was entered)."""
        if self._manager is None:
            raise ServeError("not_started", "the server is not started: enter "
                             "EnvServer.lifespan() in the application's lifespan")
        return self._manager

    @property
    def manager_or_none(self) -> SessionManager | None:
        return self._manager

    def turn_for(self, session: Session) -> AbstractAsyncContextManager[Any]:
        """What an operation on ``session`` holds while it runs and answers: a place among
        ``Limits.in_loop_operations`` when its sub-envs step in the event loop's thread
        (inline), so that a loop turn never runs hundreds of them back to back; nothing
        otherwise (their steps run elsewhere and may take long)."""
        if session.envs.backend_name == "inline" and self._in_loop is not None:
            return _InLoopTurn(self._in_loop)
        return nullcontext()

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the server: sessions may be opened inside; every one is closed on the way
        out (shielded: shutdown never leaves a sub-env or worker behind)."""
        if self._manager is not None:
            raise RuntimeError("this EnvServer is already running")
        manager = SessionManager(self.envs, max_sessions=self.max_sessions,
                                 max_per_client=self.max_sessions_per_client,
                                 idle_timeout=self.idle_timeout,
                                 on_closed=lambda _session, why: self.telemetry.closed(why))
        self._manager = manager
        self._in_loop = anyio.CapacityLimiter(self.limits.in_loop_operations)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(manager.reap_idle_forever, min(1.0, self.idle_timeout / 2))
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await manager.close_all()
            self._manager = None

    async def open_session(self, fields: Mapping[str, Any], principal: str | None,
                           client_host: str | None) -> Session:
        """A new session for ``fields`` (``{"env_id", "num_envs"}``), owned by ``principal``
        and counted against its quota (an anonymous client's: its address's)."""
        env_id, num_envs = fields.get("env_id"), fields.get("num_envs", 1)
        if not isinstance(env_id, str) or type(num_envs) is not int:
            raise ServeError("invalid", "send {\"env_id\": a string, \"num_envs\": an int}")
        client = principal if principal is not None else (client_host or "unknown")
        session = await self.manager.create(env_id, num_envs, owner=principal, client=client)
        self.telemetry.opened(session)
        return session

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI 3.1 description of the HTTP routes (``GET /openapi.json``)."""
        if self._openapi is None:
            self._openapi = openapi_document(sorted(self.envs), sorted(CODES))
        return self._openapi

    async def _http_exception(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        code = _STATUS_CODES.get(error.status_code, "not_found")
        detail = "no such route" if code == "not_found" else \
            f"{request.method} is not allowed here"
        refusal = ServeError(code, detail)
        self.telemetry.rejected(code)
        response = error_response(refusal)
        if error.headers:
            response.headers.update(error.headers)  # Allow: on a 405
        return response


class _InLoopTurn:
    """A place among the in-loop operations, taken at once when one is free. Waiting for a
    place is the only reason to give up the loop here: the request just woke its task, and
    its sub-envs yield before they step, so a free place costs no extra loop turn."""

    __slots__ = ("limiter",)

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        self.limiter = limiter

    async def __aenter__(self) -> None:
        try:
            self.limiter.acquire_on_behalf_of_nowait(self)
        except anyio.WouldBlock:
            await self.limiter.acquire_on_behalf_of(self)

    async def __aexit__(self, *_exc_info: object) -> None:
        self.limiter.release_on_behalf_of(self)
