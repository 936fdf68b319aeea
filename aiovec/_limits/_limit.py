"""What a named shared limit allows: a ``Limit``, and the check of a vector env's ``limits=``."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from aiovec._exceptions import LimitError

__all__ = ["Address", "Limit", "LimitUsage", "WorkerLimits", "check_limits", "undeclared"]


@dataclass(frozen=True)
class Limit:
    """A shared resource's limits: at most ``concurrency`` held at once, and at most ``rate``
    taken per second (takes spaced ``1/rate`` apart; after a pause, up to ``burst`` at once:
    by default 10 ms worth of the rate, at least 1).

    ``Limit(concurrency=64, rate=500)``: 64 sandboxes alive at once, at most 500 created per
    second. Either may be ``None`` (no cap of that kind), not both.
    """

    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency is None and self.rate is None:
            raise ValueError("a Limit needs concurrency=, rate= or both")
        if self.concurrency is not None and not _positive_int(self.concurrency):
            raise ValueError(f"concurrency must be a positive int or None, got "
                             f"{self.concurrency!r}")
        if self.rate is not None and (
                isinstance(self.rate, bool)
                or not isinstance(self.rate, (int, float, np.integer, np.floating))
                or not 0 < self.rate < math.inf):
            raise ValueError(f"rate must be a positive, finite number per second or None, got "
                             f"{self.rate!r}")
        if self.burst is not None and not _positive_int(self.burst):
            raise ValueError(f"burst must be a positive int or None, got {self.burst!r}")

    @property
    def takes_at_once(self) -> int:
        """``burst``, or its default: 10 ms worth of the rate, at least 1."""
        if self.burst is not None:
            return int(self.burst)
        return max(1, round((self.rate or 0.0) * 0.01))


@dataclass(frozen=True)
class LimitUsage:
    """One limit's use so far (``Statistics.limits``): held now, waiting now, taken in all,
    and the seconds every taker spent waiting, summed."""

    in_use: int
    waiting: int
    taken: int
    wait_seconds: float


@dataclass(frozen=True)
class Address:
    """Where a worker process reaches its vector env's limits service (a Unix socket's path;
    for Ray actors, which may run on other machines, a TCP ``(host, port)``), and the token it
    proves itself with."""

    path: str | tuple[str, int]
    token: str

    def connect(self) -> socket.socket:
        if isinstance(self.path, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.path)
            return sock
        return socket.create_connection(self.path)


#: What a worker process needs to take its vector env's limits: where, and their names.
WorkerLimits = tuple[Address, tuple[str, ...]]


def undeclared(name: str, declared: Iterable[str]) -> LimitError:
    """The error for a take of ``name`` that the vector env does not declare (the broker's
    and a worker's alike)."""
    return LimitError(f"no limit named {name!r}: this vector env declares "
                      f"{', '.join(map(repr, declared))} (limits=)")


def _positive_int(value: object) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, np.integer))
            and bool(value >= 1))


def check_limits(limits: Any) -> dict[str, Limit] | None:
    """``limits=`` as a dict of name to ``Limit`` (``None`` or empty: none); else an error
    naming what is wrong."""
    if limits is None:
        return None
    if not isinstance(limits, Mapping):
        raise TypeError(f"limits must be a mapping of names to aiovec.Limit, got "
                        f"{type(limits).__name__}")
    checked: dict[str, Limit] = {}
    for name, limit in limits.items():
        if not isinstance(name, str) or not name or "\n" in name:
            raise ValueError(f"a limit's name must be a non-empty str without newlines, got "
                             f"{name!r}")
        if not isinstance(limit, Limit):
            raise TypeError(f"limits[{name!r}] must be an aiovec.Limit, got "
                            f"{type(limit).__name__}")
        checked[name] = limit
    return checked or None
