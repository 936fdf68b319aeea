"""Running an ``EnvServer`` under uvicorn, with the settings a served env wants."""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

from aiovec._serve._guard import is_loopback
from aiovec._serve._server import EnvServer

__all__ = ["run", "uvicorn_config"]


def uvicorn_config(server: EnvServer, *, host: str = "127.0.0.1", port: int = 8000,
                   keep_alive: float = 30.0, **options: Any) -> Any:
    """A ``uvicorn.Config`` for ``server``: uvloop where installed, its message limit,
    ``keep_alive`` seconds for idle connections (longer than clients keep theirs: httpx
    keeps 5 s, so a client never sends down a connection the server is closing). Beyond
    loopback, an open server gets a bearer token (``AIOVEC_SERVE_TOKEN`` or a new one,
    printed to stderr)."""
    import uvicorn

    if not is_loopback(host) and server.guard.open:
        token = os.environ.get("AIOVEC_SERVE_TOKEN") or secrets.token_urlsafe(32)
        server.guard.require_token(token)
        print(f"aiovec.serve: listening on {host} beyond loopback: clients must send "
              f"'Authorization: Bearer {token}'", file=sys.stderr, flush=True)
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    settings: dict[str, Any] = {
        "host": host, "port": port, "loop": loop, "lifespan": "on",
        "timeout_keep_alive": keep_alive, "ws_max_size": server.limits.max_body_bytes,
        "server_header": False, "log_level": "warning", **options}
    return uvicorn.Config(server.app, **settings)


def run(server: EnvServer, *, host: str = "127.0.0.1", port: int = 8000,
        keep_alive: float = 30.0, **options: Any) -> None:
    """Serve until SIGINT/SIGTERM (then open requests finish and every session is closed).
    ``options`` go to ``uvicorn.Config``."""
    import uvicorn

    uvicorn.Server(uvicorn_config(server, host=host, port=port, keep_alive=keep_alive,
                                  **options)).run()
