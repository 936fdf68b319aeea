"""Sessions: a client's lease on one ``aiovec.AsyncVectorEnv`` of a registered env id.

``SessionManager`` owns every vector env the server runs: it caps how many exist, reaps the
ones left idle, and closes them all at shutdown. A session does one thing at a time; a second
request while one is running is refused (409), not queued behind it.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from registry import REGISTRY, EnvEntry

import aiovec

T = TypeVar("T")


class SessionError(Exception):
    """A request the session layer refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, error: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail, self.extra = status, error, detail, extra

    def as_json(self) -> dict[str, Any]:
        return {"error": self.error, "detail": self.detail, **self.extra}


@dataclass(eq=False)
class Session:
    """One leased vector env and what the server knows of its use."""

    session_id: str
    env_id: str
    entry: EnvEntry
    envs: aiovec.AsyncVectorEnv
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False
    closed: bool = False
    steps: int = 0

    def describe(self) -> dict[str, Any]:
        envs = self.envs
        return {"session_id": self.session_id, "env_id": self.env_id,
                "num_envs": envs.num_envs, "backend": envs.backend_name,
                "observation_space": repr(envs.single_observation_space),
                "action_space": repr(envs.single_action_space),
                "steps": self.steps, "restarts": envs.statistics().restarts,
                "busy": self.busy}

    @asynccontextmanager
    async def use(self) -> AsyncIterator[Session]:
        """Claim the session for one request (409 if another request has it)."""
        if self.closed:
            raise SessionError(404, "unknown_session", f"session {self.session_id} was closed")
        if self.busy:
            raise SessionError(409, "busy", f"session {self.session_id} is serving another "
                               "request: send one request at a time")
        self.busy = True
        try:
            yield self
        finally:
            self.busy = False
            self.last_used = time.monotonic()


class SessionManager:
    """Creates, finds, reaps and closes sessions; at most ``max_sessions`` at once."""

    def __init__(self, *, max_sessions: int, idle_timeout: float) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self._sessions: dict[str, Session] = {}
        self._reserved = 0  # sessions being created (their envs are starting)
        self._ids = itertools.count(1)
        self.reaped = 0

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, env_id: str, num_envs: int) -> Session:
        entry = REGISTRY.get(env_id)
        if entry is None:
            raise SessionError(422, "unknown_env", f"env_id {env_id!r} is not registered; "
                               f"choose one of {sorted(REGISTRY)}")
        if not 1 <= num_envs <= entry.max_envs:
            raise SessionError(422, "bad_num_envs", f"num_envs must be 1 to {entry.max_envs} "
                               f"for {env_id}, got {num_envs}")
        if len(self._sessions) + self._reserved >= self.max_sessions:
            raise SessionError(503, "full", f"the server has {self.max_sessions} sessions open, "
                               "its maximum: retry later", retry_after=1)
        self._reserved += 1
        try:
            options = {"num_workers": min(num_envs, 2)} if entry.backend == "process" else {}
            envs = aiovec.AsyncVectorEnv([entry.factory] * num_envs, backend=entry.backend,
                                         timeout=entry.timeout, restart=True, close_timeout=2.0,
                                         validate_actions=True, **options)
            try:
                await envs.start()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await envs.aclose()
                raise
        finally:
            self._reserved -= 1
        session_id = f"{next(self._ids)}-{secrets.token_hex(4)}"
        session = Session(session_id, env_id, entry, envs)
        self._sessions[session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionError(404, "unknown_session", f"no session {session_id!r}")
        return session

    async def close(self, session: Session) -> None:
        """Release the session's sub-envs (idempotent; shielded: it always finishes)."""
        if self._sessions.pop(session.session_id, None) is None:
            return
        session.closed = True
        with anyio.CancelScope(shield=True):
            await session.envs.aclose()

    async def close_all(self) -> None:
        async with anyio.create_task_group() as group:
            for session in list(self._sessions.values()):
                group.start_soon(self.close, session)

    async def reap_idle_forever(self, period: float) -> None:
        """Close sessions nobody used for ``idle_timeout`` seconds (checked every ``period``)."""
        while True:
            await anyio.sleep(period)
            now = time.monotonic()
            for session in list(self._sessions.values()):
                if not session.busy and now - session.last_used > self.idle_timeout:
                    self.reaped += 1
                    await self.close(session)


async def cancel_on(disconnected: Callable[[], Awaitable[None]],
                    work: Callable[[], Awaitable[T]]) -> tuple[bool, T | None]:
    """Run ``work`` unless ``disconnected`` returns first (the client went away): then the
    work is cancelled. Returns ``(finished, result)``."""
    outcome: list[T] = []
    errors: list[Exception] = []
    async with anyio.create_task_group() as group:
        async def watch() -> None:
            await disconnected()
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            outcome.append(await work())
        except Exception as error:  # raised as itself, not wrapped in an exception group
            errors.append(error)
        group.cancel_scope.cancel()
    if errors:
        raise errors[0]
    return (True, outcome[0]) if outcome else (False, None)
