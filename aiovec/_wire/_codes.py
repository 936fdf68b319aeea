"""The error codes of the serving protocol, with the HTTP status each one answers with.

A refusal is ``{"error": code, "detail": text, ...}`` over HTTP and WebSocket alike; clients
branch on the code (4xx: the client's mistake, 5xx: the environment's). Part of the public
protocol: ``aiovec.serve.ERROR_CODES``.
"""

from __future__ import annotations

__all__ = ["CODES"]

#: Every code the server answers with, and its HTTP status.
CODES: dict[str, int] = {
    "bad_json": 400,              # the body or message is not a JSON object
    "too_deep": 400,              # JSON or a frame nested deeper than Limits.max_json_depth
    "bad_frame": 400,             # a binary WebSocket message that is not a valid frame
    "bad_host": 400,              # the Host header is not one the server answers to
    "unauthorized": 401,          # no or wrong credentials
    "origin_refused": 403,        # a browser page from another origin
    "not_found": 404,             # no such route
    "unknown_session": 404,       # no such session, or it is somebody else's
    "method_not_allowed": 405,
    "busy": 409,                  # the session is serving another request
    "reset_needed": 409,          # step before reset, or after a failed episode
    "nothing_sent": 409,          # recv with no action sent
    "too_large": 413,             # body or message over Limits.max_body_bytes
    "unsupported_media_type": 415,  # a body that is not application/json
    "invalid": 422,               # actions, seeds or arguments that do not fit
    "unknown_env": 422,           # an env id not on the allow-list
    "bad_num_envs": 422,
    "quota_exceeded": 429,        # this client holds its maximum number of sessions
    "cancelled": 499,             # the client cancelled the request (WebSocket "cancel")
    "internal": 500,              # a bug of the server's: logged there
    "sub_env_failed": 502,        # a sub-env failed beyond what its restarts could mend
    "full": 503,                  # the server holds its maximum number of sessions
    "not_started": 503,           # the app's lifespan has not started the server
    "timeout": 504,               # a sub-env took longer than its deadline
}
