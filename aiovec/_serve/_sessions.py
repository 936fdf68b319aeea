"""Sessions: a client's lease on one ``aiovec.AsyncVectorEnv`` of an allow-listed env id.

``SessionManager`` owns every vector env the server runs: it caps how many exist in all and
per client, finds a session only for its owner, reaps the ones left idle and closes them all
at shutdown. A session does one thing at a time: a second request while one runs is refused
(409 ``busy``), never queued behind it or run beside it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

import aiovec
from aiovec._serve._config import ServedEnv
from aiovec._serve._errors import ServeError
from aiovec._wire._schema import space_to_schema

__all__ = ["Session", "SessionManager"]

logger = logging.getLogger("aiovec.serve")


@dataclass(eq=False)
class Session:
    """One leased vector env and what the server knows of its use."""

    session_id: str
    env_id: str
    served: ServedEnv
    envs: aiovec.AsyncVectorEnv
    #: Who created it (the authenticated principal; ``None`` on an open loopback server,
    #: where the unguessable id alone grants access).
    owner: str | None
    #: Whose quota it counts against.
    client: str
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False
    closed: bool = False
    steps: int = 0
    #: Set once the session is closed (by its owner, the reaper or shutdown): a WebSocket
    #: carrying it ends then.
    ended: anyio.Event = field(default_factory=anyio.Event)
    _schema: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        """The session as JSON, with its spaces as schemas a client rebuilds them from."""
        if self._schema is None:
            envs = self.envs
            self._schema = {
                "session_id": self.session_id, "env_id": self.env_id,
                "num_envs": envs.num_envs, "backend": envs.backend_name,
                "single_observation_space": space_to_schema(envs.single_observation_space),
                "single_action_space": space_to_schema(envs.single_action_space),
                "autoreset_mode": envs.autoreset_mode.value,
                # What a client checks ``recv``'s bounds against, as the local env does.
                "batch_size": envs.batch_size}
        return {**self._schema, "max_in_flight": self.envs.max_in_flight, "steps": self.steps,
                "restarts": self.envs.statistics().restarts, "busy": self.busy}

    def use(self) -> _Claim:
        """Claim the session for one request (409 ``busy`` if another request has it), as
        ``with session.use():`` (no await: a step's round trip pays for no loop turn here)."""
        return _Claim(self)


class _Claim:
    """A session claimed for one request: released (and its idle clock restarted) on exit."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def __enter__(self) -> Session:
        session = self.session
        if session.closed:
            raise ServeError("unknown_session", f"session {session.session_id} was closed")
        if session.busy:
            raise ServeError("busy", f"session {session.session_id} is serving another "
                             "request: send one request at a time")
        session.busy = True
        return session

    def __exit__(self, *_exc_info: object) -> None:
        self.session.busy = False
        self.session.last_used = time.monotonic()


class SessionManager:
    """Creates, finds, reaps and closes sessions: at most ``max_sessions`` in all and
    ``max_per_client`` for any one client."""

    def __init__(self, envs: dict[str, ServedEnv], *, max_sessions: int, max_per_client: int,
                 idle_timeout: float,
                 on_closed: Callable[[Session, str], None] = lambda _session, _why: None
                 ) -> None:
        self.envs = envs
        self.max_sessions, self.max_per_client = max_sessions, max_per_client
        self.idle_timeout = idle_timeout
        self._sessions: dict[str, Session] = {}
        self._per_client: Counter[str] = Counter()  # open and starting sessions
        self._starting = 0
        self._on_closed = on_closed
        self.reaped = 0

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, env_id: str, num_envs: int, *, owner: str | None,
                     client: str) -> Session:
        """A new session of ``num_envs`` sub-envs of ``env_id``, started (its sub-envs are
        up) before it is returned; refused before anything starts if it does not fit."""
        served = self.envs.get(env_id)
        if served is None:
            raise ServeError("unknown_env", f"env_id {env_id!r} is not served here; choose one "
                             f"of {sorted(self.envs)}")
        if not 1 <= num_envs <= served.max_envs:
            raise ServeError("bad_num_envs", f"num_envs must be 1 to {served.max_envs} for "
                             f"{env_id}, got {num_envs}")
        if len(self._sessions) + self._starting >= self.max_sessions:
            raise ServeError("full", f"the server holds {self.max_sessions} sessions, its "
                             "maximum: retry later", retry_after=1)
        if self._per_client[client] >= self.max_per_client:
            raise ServeError("quota_exceeded", f"this client holds {self.max_per_client} "
                             "sessions, its maximum: close one first", retry_after=1)
        self._starting += 1
        self._per_client[client] += 1
        try:
            envs = self._build(served, num_envs)
            try:
                await envs.start()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await envs.aclose()
                raise
        except BaseException:
            self._release(client)
            raise
        finally:
            self._starting -= 1
        session_id = secrets.token_urlsafe(24)  # 192 random bits: nothing to guess or count
        session = Session(session_id, env_id, served, envs, owner, client)
        try:
            session.describe()  # spaces with no schema are the server's problem: found here
        except TypeError as error:  # logged in a line: a configuration, not a bug to trace
            logger.error("aiovec.serve: %s cannot be served: %s", env_id, error)
            self._release(client)
            with anyio.CancelScope(shield=True):
                await envs.aclose()
            raise ServeError("internal", f"{env_id} cannot be served here: the server's log "
                             "says why") from None
        self._sessions[session_id] = session
        return session

    @staticmethod
    def _build(served: ServedEnv, num_envs: int) -> aiovec.AsyncVectorEnv:
        options = {"restart": True, "close_timeout": 2.0, **served.vector_options,
                   "validate_actions": True}
        if "num_workers" in options:  # at most, like max_envs: a small session needs fewer
            options["num_workers"] = min(options["num_workers"], num_envs)
        try:
            return aiovec.AsyncVectorEnv([served.env_fn] * num_envs, backend=served.backend,
                                         timeout=served.timeout, **options)
        except (TypeError, ValueError) as error:  # the server's configuration, not the client
            raise RuntimeError(f"ServedEnv options do not fit AsyncVectorEnv: {error}") \
                from error

    def get(self, session_id: str, principal: str | None) -> Session:
        """The session, for its owner only: anybody else is told it does not exist."""
        session = self._sessions.get(session_id)
        if session is None or (session.owner is not None and session.owner != principal):
            raise ServeError("unknown_session", f"no session {session_id!r}")
        return session

    def _release(self, client: str) -> None:
        self._per_client[client] -= 1
        if not self._per_client[client]:
            del self._per_client[client]

    async def close(self, session: Session, reason: str = "client") -> None:
        """Release the session's sub-envs (idempotent; shielded: it always finishes);
        ``reason`` is what the metrics count it under."""
        if self._sessions.pop(session.session_id, None) is None:
            return
        session.closed = True
        self._release(session.client)
        session.ended.set()
        self._on_closed(session, reason)  # counted as it leaves the books, as the gauge is
        try:
            with anyio.CancelScope(shield=True):
                await session.envs.aclose()
        except Exception as error:  # a sub-env's close raised: the session is gone all the same
            logger.warning("aiovec.serve: closing a session of %s: %s", session.env_id, error)

    async def close_all(self) -> None:
        async with anyio.create_task_group() as group:
            for session in list(self._sessions.values()):
                group.start_soon(self.close, session, "shutdown")

    async def reap_idle_forever(self, period: float) -> None:
        """Close sessions nobody used for ``idle_timeout`` seconds (checked every ``period``)."""
        while True:
            await anyio.sleep(period)
            now = time.monotonic()
            for session in list(self._sessions.values()):
                if not session.busy and now - session.last_used > self.idle_timeout:
                    self.reaped += 1
                    await self.close(session, "idle")
