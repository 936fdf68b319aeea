"""The server's metrics, named once: sessions, operations, sub-env steps, their latency,
restarts and refusals (``GET /metrics``, Prometheus text)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from aiovec._serve._metrics import CONTENT_TYPE, Metrics
from aiovec._serve._operations import OPERATIONS
from aiovec._serve._sessions import Session

__all__ = ["Telemetry"]

#: The operations whose latency is measured: the others (``send``, ``abort``, moving the
#: in-flight cap) return at once.
_TIMED = frozenset({"reset", "step", "recv"})


class Telemetry:
    """Counts what the server does; ``render()`` is the ``/metrics`` page."""

    def __init__(self, open_sessions: Callable[[], float]) -> None:
        metrics = self.metrics = Metrics()
        metrics.gauge("aiovec_serve_sessions", "Sessions open now.", read=open_sessions)
        self._opened = metrics.counter("aiovec_serve_sessions_opened_total",
                                       "Sessions created.", labelnames=("env_id",))
        self._closed = metrics.counter("aiovec_serve_sessions_closed_total",
                                       "Sessions closed, by why.", labelnames=("reason",))
        self._operations = metrics.counter("aiovec_serve_operations_total",
                                           "Operations served, by kind and outcome.",
                                           labelnames=("op", "outcome"))
        self._env_steps = metrics.counter("aiovec_serve_env_steps_total",
                                          "Sub-env steps taken (a step of N sub-envs is N).")
        self._latency = metrics.histogram("aiovec_serve_operation_seconds",
                                          "Time a reset, step or recv took on the server "
                                          "(answered or not).", labelnames=("op",))
        self._restarts = metrics.counter("aiovec_serve_restarts_total",
                                         "Sub-envs restarted after a failure or a timeout.")
        self._rejections = metrics.counter("aiovec_serve_rejections_total",
                                           "Requests refused, by error code.",
                                           labelnames=("code",))

    def opened(self, session: Session) -> None:
        self._opened.inc(env_id=session.env_id)

    def closed(self, reason: str) -> None:
        self._closed.inc(reason=reason)

    def rejected(self, code: str) -> None:
        self._rejections.inc(code=code)

    def operation_done(self, session: Session, op: str, seconds: float,
                       result: Mapping[str, Any], restarts: int) -> None:
        self._operations.inc(op=op, outcome="ok")
        if op in _TIMED:
            self._latency.observe(seconds, op=op)
        if op in ("step", "recv"):
            self._env_steps.inc(float(np.size(result["rewards"])))
        if restarts:
            self._restarts.inc(float(restarts))

    @property
    def content_type(self) -> str:
        return CONTENT_TYPE

    def operation_failed(self, op: str, seconds: float, *, cancelled: bool = False) -> None:
        """An operation refused or failed (outcome ``failed``), or ``cancelled`` (by the
        client, or its connection going); its latency counts all the same."""
        self._operations.inc(op=op, outcome="cancelled" if cancelled else "failed")
        if op in _TIMED:
            self._latency.observe(seconds, op=op)

    def cancelled_before_it_ran(self, op: str) -> None:
        """An operation the client cancelled before it started (waiting its turn)."""
        if op in OPERATIONS:  # an unknown op is no operation: it is refused as not_found
            self._operations.inc(op=op, outcome="cancelled")

    def render(self) -> str:
        return self.metrics.render()
