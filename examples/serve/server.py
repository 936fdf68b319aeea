"""Serve registered envs over HTTP and WebSocket: uvicorn, uvloop, one process.

    python examples/serve/server.py --port 8000
    python examples/serve/client.py --url http://127.0.0.1:8000

Binds 127.0.0.1 by default (any other address needs a bearer token: ``--token``, else one is
made and printed). ``--port 0`` picks a free port. The first line printed is
``serving on http://HOST:PORT`` once the app is started (its lifespan ran), so a supervisor or
a test can wait for it. SIGINT / SIGTERM stop it gracefully: open requests get
``--graceful-seconds`` to finish, then every session's envs are closed.
"""

from __future__ import annotations

import argparse

from app import create_server

from aiovec.serve import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=64)
    parser.add_argument("--idle-timeout", type=float, default=300.0,
                        help="seconds before an unused session is closed")
    parser.add_argument("--token", help="the bearer token clients must send")
    parser.add_argument("--graceful-seconds", type=float, default=5.0)
    parser.add_argument("--keep-alive", type=float, default=30.0,
                        help="seconds an idle keep-alive connection stays open")
    args = parser.parse_args()
    server = create_server(max_sessions=args.max_sessions, idle_timeout=args.idle_timeout,
                           auth=args.token)
    run(server, host=args.host, port=args.port, keep_alive=args.keep_alive, announce=True,
        timeout_graceful_shutdown=args.graceful_seconds)


if __name__ == "__main__":
    main()
