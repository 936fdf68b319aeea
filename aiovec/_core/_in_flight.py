"""A call on the vector env while it runs: the request sent to the backend, its deadline,
and what is known so far about its replies."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

from aiovec._core._arguments import check_timeout
from aiovec._core._backend import Pending
from aiovec._core._requests import NO_REPLY, Failure, Op

__all__ = ["START_TIMEOUT", "USE_DEFAULT", "CallerDeadline", "InFlight", "Timeout",
           "checked_timeout"]


class _UseDefault(enum.Enum):
    """``timeout=USE_DEFAULT``: the deadline given at construction."""

    TOKEN = enum.auto()


USE_DEFAULT: Final = _UseDefault.TOKEN
Timeout = float | None | _UseDefault


def checked_timeout(timeout: Timeout) -> Timeout:
    """A call's ``timeout=``, checked where the call enters, before anything is sent:
    ``USE_DEFAULT`` as it is, anything else by the one rule (``check_timeout``)."""
    return timeout if timeout is USE_DEFAULT else check_timeout(timeout, "timeout")


class CallerDeadline(float):
    """``timeout=CallerDeadline(seconds)``: a deadline that is the caller's own, not the
    sub-envs' (a remote client's, which ``aiovec.serve`` applies). A sub-env that misses it
    is discarded as at any deadline (worker killed, thread abandoned) but never restarted,
    whatever the restart policy: the caller gave up on it, so it hears ``EnvTimeoutError``
    naming it and resets it. Other broken sub-envs are restarted as usual
    (``_recovery.Recovery`` keeps the rule)."""

    __slots__ = ()

#: Default deadline (seconds) for making the sub-envs: ``start``, and remaking lost ones in
#: ``reset`` without a restart policy. Imports and worker start-up can be slow; it is not
#: the per-call ``timeout``.
START_TIMEOUT = 120.0


class InFlight:
    """A request submitted to the backend (or, after lost sub-envs are remade, about to be)
    and not yet collected."""

    __slots__ = ("deadline", "early", "env_indices", "failed", "late", "op", "operation",
                 "out", "payloads", "pending", "remake")

    def __init__(self, operation: str, op: Op, env_indices: Sequence[int],
                 payloads: Sequence[Any], pending: Pending | None,
                 remake: Sequence[int] = (), out: Any = None) -> None:
        self.operation = operation
        self.op = op
        self.env_indices = env_indices
        self.payloads = payloads
        self.pending = pending
        #: Lost sub-envs to make afresh before the request is sent.
        self.remake = list(remake)
        #: Sub-envs that failed before the request was sent (their remake failed).
        self.early: dict[int, Failure] = {}
        self.deadline: float | None = None
        self.late: list[int] = []
        self.failed: list[Failure] = []
        #: The caller's buffer for the observations (``out=``, checked), or ``None``.
        self.out = out

    def replies(self) -> list[Any]:
        """One reply per sub-env of ``env_indices`` (``NO_REPLY`` where none came); a copy
        once a deadline passed, since late replies may still land in the original."""
        pending = self.pending
        if pending is not None and not self.early:
            return list(pending.replies) if self.late else pending.replies
        answered = {} if pending is None else dict(zip(pending.env_indices, pending.replies))
        return [self.early.get(index, answered.get(index, NO_REPLY))
                for index in self.env_indices]

    def quiet(self) -> bool:
        """True when every sub-env answered ``None`` (see ``Pending.quiet``)."""
        pending = self.pending
        return (pending is not None and pending.quiet and not self.late
                and not self.early)

    def unanswered(self) -> list[int]:
        return [index for index, reply in zip(self.env_indices, self.replies())
                if reply is NO_REPLY]
