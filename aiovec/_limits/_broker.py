"""The state of a vector env's named limits: who holds, who waits, first come first served.

One ``Broker`` per vector env, shared by every way in (coroutines and threads of this
process, worker processes through ``_service``): all of them queue in the same line per
limit, so a limit means the same however its takers run. Thread-safe; a waiter's ``grant``
runs outside the lock, in whichever thread made room (or the service thread, once a rate
allows the next take).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping

from aiovec._exceptions import LimitError
from aiovec._limits._limit import Limit, LimitUsage, undeclared

__all__ = ["Broker", "Waiter"]

logger = logging.getLogger("aiovec")


class Waiter:
    """One take waiting in line: ``grant()`` is called once it holds the limit (``granted``),
    or once it never will (``refused``: the vector env closed, or its taker gave up)."""

    __slots__ = ("grant", "granted", "refused", "since")

    def __init__(self, grant: Callable[[], object]) -> None:
        self.grant = grant
        self.granted = False
        self.refused = False
        self.since = 0.0


class _Pool:
    """One limit's state. The rate is kept as a theoretical arrival time (GCRA): each take
    moves ``due`` on by ``1/rate``, and a take may happen while ``due`` is at most ``burst - 1``
    intervals ahead of now; so a late timer loses nothing within the burst."""

    __slots__ = ("capacity", "due", "in_use", "interval", "line", "slack", "taken", "waited")

    def __init__(self, limit: Limit, now: float) -> None:
        self.capacity = limit.concurrency
        self.interval = None if limit.rate is None else 1.0 / float(limit.rate)
        self.slack = 0.0 if self.interval is None else (limit.takes_at_once - 1) * self.interval
        self.due = now
        self.in_use = 0
        self.line: collections.deque[Waiter] = collections.deque()
        self.taken = 0
        self.waited = 0.0

    def room(self, now: float) -> float:
        """0 if a take may happen now; else when the rate allows one (``inf``: when a holder
        gives back)."""
        if self.capacity is not None and self.in_use >= self.capacity:
            return math.inf
        if self.interval is None:
            return 0.0
        allowed = self.due - self.slack
        return 0.0 if now >= allowed else allowed

    def take(self, waiter: Waiter | None, now: float) -> None:
        self.in_use += 1
        self.taken += 1
        if self.interval is not None:
            self.due = max(self.due, now) + self.interval
        if waiter is not None:
            waiter.granted = True
            self.waited += now - waiter.since


class Broker:
    """Named limits (``limits=`` of a vector env) and their takers.

    ``when_due(t)`` is told whenever a waiter can be granted at time ``t`` (by
    ``time.monotonic``) only because of a rate: someone must call ``tick`` then.
    """

    def __init__(self, limits: Mapping[str, Limit]) -> None:
        now = time.monotonic()
        self._pools = {name: _Pool(limit, now) for name, limit in limits.items()}
        self._lock = threading.Lock()
        self._closed = False
        self.when_due: Callable[[float], object] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._pools)

    def _pool(self, name: str) -> _Pool:
        try:
            return self._pools[name]
        except KeyError:
            raise undeclared(name, self._pools) from None

    def full(self, name: str) -> bool:
        """True while ``name`` is held as often as its concurrency allows."""
        pool = self._pool(name)
        with self._lock:
            return pool.capacity is not None and pool.in_use >= pool.capacity

    def take_or_queue(self, name: str, waiter: Waiter) -> bool:
        """Take ``name`` now (True), or put ``waiter`` in its line (False: ``grant`` follows,
        unless it is withdrawn first; a waiter withdrawn already never gets in line)."""
        pool = self._pool(name)
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise LimitError(f"cannot take limit {name!r}: the vector env is closed")
            if waiter.refused:  # given up before it got here: nothing to take or wait for
                return False
            due = math.inf if pool.line else pool.room(now)
            if due == 0.0:
                pool.take(None, now)
                return True
            waiter.since = now
            pool.line.append(waiter)
        if due < math.inf and self.when_due is not None:
            self.when_due(due)
        return False

    def withdraw(self, name: str, waiter: Waiter) -> bool:
        """Take ``waiter`` out of line: True if it was still waiting; False if it was granted
        meanwhile (then its holder must ``give_back``)."""
        pool = self._pool(name)
        with self._lock:
            if waiter.granted:
                return False
            if waiter.refused:  # out of line already
                return True
            waiter.refused = True  # out of line for good: a second withdrawal finds it so
            if waiter not in pool.line:  # not in line yet: take_or_queue will refuse it
                return True
            pool.line.remove(waiter)
            grants, due = self._grant(pool)  # it may have been the head, held back by a rate
        self._deliver(name, grants, due)
        return True

    def give_back(self, name: str) -> None:
        pool = self._pool(name)
        with self._lock:
            pool.in_use -= 1
            grants, due = self._grant(pool)
        self._deliver(name, grants, due)

    def tick(self) -> float:
        """Grant what the rates allow by now; returns when to tick next (``inf``: no need)."""
        grants: list[tuple[str, Waiter]] = []
        due = math.inf
        with self._lock:
            for name, pool in self._pools.items():
                granted, pool_due = self._grant(pool)
                grants += ((name, waiter) for waiter in granted)
                due = min(due, pool_due)
        for name, waiter in grants:
            self._tell(name, waiter)
        return due

    def _grant(self, pool: _Pool) -> tuple[list[Waiter], float]:
        """Grant ``pool``'s line in order while it has room (under the lock)."""
        grants = []
        now = time.monotonic()
        due = math.inf
        line = pool.line
        while line:
            due = pool.room(now)
            if due:
                break
            waiter = line.popleft()
            pool.take(waiter, now)
            grants.append(waiter)
        return grants, (due if line else math.inf)

    def _deliver(self, name: str, grants: list[Waiter], due: float) -> None:
        for waiter in grants:
            self._tell(name, waiter)
        if due < math.inf and self.when_due is not None:
            self.when_due(due)

    def _tell(self, name: str, waiter: Waiter) -> None:
        """Wake ``waiter``; if that fails (its event loop closed), nobody holds what it was
        granted: give it back, so that the others in line are served."""
        try:
            waiter.grant()
        except Exception:
            logger.warning("limit %r: could not wake a granted take; given back", name,
                           exc_info=True)
            if waiter.granted:
                self.give_back(name)

    def reopen(self) -> None:
        """Take again after ``close`` (a start that failed is retried on another backend)."""
        with self._lock:
            self._closed = False

    def close(self) -> None:
        """Refuse every take from now on, and every waiter in line (they are woken)."""
        with self._lock:
            self._closed = True
            refused = [waiter for pool in self._pools.values() for waiter in pool.line]
            for pool in self._pools.values():
                pool.line.clear()
            for waiter in refused:
                waiter.refused = True
        for waiter in refused:
            with contextlib.suppress(Exception):  # (its event loop closed: nobody waits)
                waiter.grant()

    def usage(self) -> dict[str, LimitUsage]:
        with self._lock:
            return {name: LimitUsage(pool.in_use, len(pool.line), pool.taken, pool.waited)
                    for name, pool in self._pools.items()}
