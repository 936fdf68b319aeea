"""The served app: the allow-list of registry.py behind ``aiovec.serve.EnvServer``.

Everything a hardened env server needs (sessions, limits, authentication, Origin and Host
checks, the WebSocket protocol, metrics, OpenAPI) comes from the library; this file only
says what to serve. Routes, error codes and the protocol: docs/guide/serving.md.
"""

from __future__ import annotations

from typing import Any

from registry import SERVED

from aiovec.serve import EnvServer


def create_server(*, max_sessions: int = 64, max_sessions_per_client: int | None = None,
                  idle_timeout: float = 300.0, **options: Any) -> EnvServer:
    """The server; a single developer's example, so one client may use every session."""
    return EnvServer(SERVED, max_sessions=max_sessions,
                     max_sessions_per_client=max_sessions_per_client or max_sessions,
                     idle_timeout=idle_timeout, **options)
