"""The machinery behind ``aiovec.serve``: sessions of allow-listed envs over HTTP and WebSocket.

``_server`` builds the ASGI app from the other modules: ``_config`` (what is served and the
limits), ``_sessions`` (leases on vector envs: cap, quota, owner, idle reaper), ``_guard``
(Host, Origin and authentication checks), ``_operations`` (reset/step/send/recv on a session,
from and to the wire), ``_http`` and ``_websocket`` (the two transports), ``_errors`` (every
refusal as a status and a stable code), ``_json`` (bounded parsing) and ``_metrics``
(Prometheus text). The wire format both ends speak lives in ``aiovec._wire``.
"""
