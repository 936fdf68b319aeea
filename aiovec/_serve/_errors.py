"""Every refusal the server sends: an HTTP status, a stable machine-readable code, a detail.

Clients branch on ``code`` (the statuses group them: 4xx the client's mistake, 5xx the
environment's); the codes are part of the protocol (``aiovec._wire._codes``).
"""

from __future__ import annotations

from typing import Any

import aiovec
from aiovec._wire._codes import CODES

__all__ = ["CODES", "ServeError", "refusal_of"]

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
    if isinstance(error, aiovec.SubEnvError):
        return ServeError("sub_env_failed", str(error).splitlines()[0],
                          env_ids=[error.env_id])
    if isinstance(error, aiovec.WorkerDiedError):
        return ServeError("sub_env_failed", str(error).splitlines()[0],
                          env_ids=list(error.env_ids))
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
    return None
