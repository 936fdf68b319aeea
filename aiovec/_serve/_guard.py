"""Who may talk to the server: Host and Origin checks, then authentication.

Run before any route reads a body. A server on loopback answers only Host headers naming
loopback (no DNS rebinding of ``evil.example`` onto 127.0.0.1); a browser page from another
origin is refused (no cross-site requests or WebSockets from a web page a developer visits);
and without an ``auth`` hook the server answers loopback clients only.
"""

from __future__ import annotations

import inspect
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.requests import HTTPConnection

from aiovec._serve._errors import ServeError

__all__ = ["Authenticate", "Guard", "is_loopback"]

#: A custom authentication scheme: the principal (who is asking) or ``None`` to refuse.
Authenticate = Callable[[HTTPConnection], "Awaitable[str | None] | str | None"]

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
#: Headers a reverse proxy adds: behind one, a loopback peer is not a local client.
_PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")


def is_loopback(host: str | None) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host is None:
        return False
    host = host.strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(host_header: str) -> str:
    """``Example.com:8000`` → ``example.com``; ``[::1]:8000`` → ``::1`` (names compare
    without case)."""
    host_header = host_header.strip().lower()
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """Admits a connection (returns its principal) or refuses it with a ``ServeError``.

    ``auth``: a bearer token, a mapping of tokens to principals, a callable
    (``Authenticate``), or ``None`` (loopback clients only, no principal).
    ``allowed_hosts``: Host names answered (``"*"`` any, ``"*.example.com"`` a domain);
    by default loopback names on a loopback listener, any name elsewhere.
    ``allowed_origins``: browser origins admitted besides the server's own (``"*"`` any).
    """

    def __init__(self, auth: str | Mapping[str, str] | Authenticate | None,
                 allowed_hosts: Sequence[str] | None, allowed_origins: Sequence[str]) -> None:
        self._use(auth)
        self._hosts = None if allowed_hosts is None else tuple(
            pattern if pattern == "*" or pattern.startswith("*.") else _hostname(pattern)
            for pattern in allowed_hosts)
        self._origins = frozenset(allowed_origins)

    def _use(self, auth: str | Mapping[str, str] | Authenticate | None) -> None:
        """Admit by ``auth`` from now on."""
        if isinstance(auth, str):
            auth = {auth: "bearer"}
        if isinstance(auth, Mapping):
            tokens = dict(auth)
            if not tokens or not all(isinstance(token, str) and len(token) >= 16
                                     for token in tokens):
                raise ValueError("bearer tokens must be strings of at least 16 characters "
                                 "(secrets.token_urlsafe() makes good ones)")
            self._tokens: dict[str, str] | None = tokens
            self._authenticate: Authenticate | None = None
        else:
            self._tokens, self._authenticate = None, auth
        self.open = auth is None
        #: How many principals can exist: an open server or one token has one, so the
        #: per-client quota cannot tell clients apart by principal.
        self.single_principal = auth is None or (self._tokens is not None
                                                 and len(set(self._tokens.values())) == 1)

    def require_token(self, token: str) -> None:
        """From now on, admit only requests bearing ``token`` (an open server's default when
        it listens beyond loopback)."""
        self._use(token)

    async def admit(self, connection: HTTPConnection) -> str | None:
        self._check_host(connection)
        self._check_origin(connection)
        return await self._principal(connection)

    def _check_host(self, connection: HTTPConnection) -> None:
        allowed = self._hosts
        if allowed is None:
            server = connection.scope.get("server")
            if not (server and is_loopback(server[0])):
                return  # beyond loopback: authentication, not the Host, guards the server
            allowed = tuple(_LOOPBACK_NAMES)
        host = _hostname(connection.headers.get("host", ""))
        for pattern in allowed:
            if pattern == "*" or host == pattern.strip("[]") or (
                    pattern.startswith("*.") and host.endswith(pattern[1:].lower())):
                return
        if self._hosts is None and is_loopback(host):
            return
        raise ServeError("bad_host", f"this server does not answer to Host {host!r}")

    def _check_origin(self, connection: HTTPConnection) -> None:
        origin = connection.headers.get("origin")
        if origin is None or "*" in self._origins or origin in self._origins:
            return  # not a browser, or an origin the server was told to trust
        scheme = "https" if connection.url.scheme in ("https", "wss") else "http"
        if origin == f"{scheme}://{connection.headers.get('host', '')}":
            return  # a page the server itself served
        raise ServeError("origin_refused", f"requests from web pages at {origin} are refused; "
                         "the server admits the origins in its allowed_origins")

    async def _principal(self, connection: HTTPConnection) -> str | None:
        if self.open:
            client = connection.client
            if client is None or not is_loopback(client.host):
                raise ServeError("unauthorized", "this server has no authentication and "
                                 "answers loopback clients only (serve it with auth=...)")
            headers = connection.headers
            if any(name in headers for name in _PROXY_HEADERS):
                # A proxy on this host forwards the world's requests from loopback.
                raise ServeError("unauthorized", "this server has no authentication and a "
                                 "proxy forwarded this request: serve it with auth=...")
            return None
        if self._tokens is not None:
            scheme, _, token = connection.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer":
                for known, principal in self._tokens.items():
                    if secrets.compare_digest(token.encode(), known.encode()):
                        return principal
            raise ServeError("unauthorized", "send 'Authorization: Bearer <token>' with a "
                             "token this server accepts")
        assert self._authenticate is not None
        answer: Any = self._authenticate(connection)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is None:
            raise ServeError("unauthorized", "the server's authentication refused this request")
        return str(answer)
