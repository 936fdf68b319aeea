"""Every refusal the server sends: an HTTP status, a stable machine-readable code, a detail.

Clients branch on ``code`` (the statuses group them: 4xx the client's mistake, 5xx the
environment's). The codes are part of the public protocol; ``CODES`` lists them all and the
docs table is checked against it.
"""

from __future__ import annotations

from typing import Any

import aiovec

__all__ = ["CODES", "ServeError", "refusal_of"]

#: Every code the server answers with, and its HTTP status.
CODES: dict[str, int] = {
    "bad_json": 400,              # the body or message is not a JSON object
    "too_deep": 400,              # JSON nested deeper than Limits.max_json_depth
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


class ServeError(Exception):
    """A request the server refuses: ``status``, ``code`` (one of ``CODES``), ``detail``,
    and extra JSON fields (``env_ids``, ``retry_after``, ...)."""

    def __init__(self, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = CODES[code]
        self.code, self.detail, self.extra = code, detail, extra

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "detail": self.detail, **self.extra}


def refusal_of(error: BaseException) -> ServeError | None:
    """The refusal that tells the client about ``error``, or ``None`` for a bug of ours (the
    caller logs it and answers ``internal``): no traceback ever leaves the server."""
    if isinstance(error, ServeError):
        return error
    if isinstance(error, aiovec.EnvTimeoutError):
        return ServeError("timeout", str(error), env_ids=list(error.env_ids))
    if isinstance(error, aiovec.SubEnvErrorGroup):
        return ServeError("sub_env_failed", str(error).splitlines()[0],
                          env_ids=list(error.env_ids),
                          causes=[str(sub).splitlines()[0] for sub in error.exceptions])
    if isinstance(error, aiovec.ResetNeededError):
        return ServeError("reset_needed", str(error))
    if isinstance(error, aiovec.NothingSentError):
        return ServeError("nothing_sent", str(error))
    if isinstance(error, aiovec.BusyError):
        return ServeError("busy", str(error))
    if isinstance(error, aiovec.ClosedError):
        return ServeError("unknown_session", "the session was closed")
    if isinstance(error, (ValueError, TypeError)):  # aiovec's checks of the client's values
        return ServeError("invalid", str(error))
    return None
