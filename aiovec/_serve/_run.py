"""Running an ``EnvServer`` under uvicorn, with the settings a served env wants."""

from __future__ import annotations

import contextlib
import gc
import os
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from aiovec._serve._guard import is_loopback
from aiovec._serve._server import EnvServer

__all__ = ["run", "uvicorn_config"]

#: The youngest generation's collection threshold while ``run`` serves (Python's default is
#: 700). Requests in flight are alive when the young generations are collected, so they are
#: promoted to the old one, and with thousands of sessions its full collections (tens of ms,
#: every connection stalled meanwhile) owned the latency tail: ``/healthz`` p99 with 2,048
#: sessions stepping flat out went from ~25 ms to ~5 ms with 10,000.
GC_THRESHOLD = 10_000


def uvicorn_config(server: EnvServer, *, host: str = "127.0.0.1", port: int = 8000,
                   keep_alive: float = 30.0, app: Any = None, **options: Any) -> Any:
    """A ``uvicorn.Config`` for ``server``: uvloop where installed, its message limit,
    ``keep_alive`` seconds for idle connections (longer than clients keep theirs: httpx
    keeps 5 s, so a client never sends down a connection the server is closing). Beyond
    loopback, an open server gets a bearer token (``AIOVEC_SERVE_TOKEN`` or a new one,
    printed to stderr). ``app``: an app of yours that mounts ``server`` and enters its
    lifespan, served instead of ``server.app``; ``options`` go to ``uvicorn.Config``."""
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
        # Idle sessions are the reaper's; a client need not answer pings between its calls.
        "ws_ping_interval": None,
        "server_header": False, "log_level": "warning", **options}
    return uvicorn.Config(server.app if app is None else app, **settings)


def run(server: EnvServer, *, host: str = "127.0.0.1", port: int = 8000,
        keep_alive: float = 30.0, announce: bool = False, app: Any = None,
        **options: Any) -> None:
    """Serve until SIGINT or SIGTERM, then let open requests finish, close every session and
    return. ``port=0`` picks a free port; ``announce`` prints ``serving on http://HOST:PORT``
    once the app is started (for a supervisor or a test to wait for). ``app`` and
    ``options``: as for ``uvicorn_config``."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if announce and self.started:
                bound_host, bound_port = self.servers[0].sockets[0].getsockname()[:2]
                if ":" in bound_host:  # IPv6
                    bound_host = f"[{bound_host}]"
                print(f"serving on http://{bound_host}:{bound_port}", flush=True)

    config = uvicorn_config(server, host=host, port=port, keep_alive=keep_alive, app=app,
                            **options)
    web = Server(config)
    # uvicorn shuts down on SIGINT/SIGTERM, then raises the signal again for the default
    # handler to end the process: here it is ignored instead, and run() returns. (Signals
    # are the main thread's: elsewhere uvicorn does not catch them either.)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: None) if main_thread else None
    try:
        with contextlib.suppress(KeyboardInterrupt), collecting_less_often():
            web.run()
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    if not web.started:
        raise RuntimeError("the server did not start (its log above says why)")


@contextlib.contextmanager
def collecting_less_often(threshold: int = GC_THRESHOLD) -> Iterator[None]:
    """Raise the youngest generation's collection threshold to ``threshold`` (never lower
    it) for the duration; the thresholds before are restored on the way out."""
    before = gc.get_threshold()
    if before[0] < threshold:
        gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
