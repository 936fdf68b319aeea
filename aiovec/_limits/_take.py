"""``aiovec.limit(name)``: how sub-env code takes a named limit, wherever the sub-env runs.

The backend that runs a sub-env's calls binds a ``Taker`` around them (``bind``): in this
process one that queues at the vector env's ``Broker`` directly; in a worker process or Ray
actor one that asks the limits' ``Service`` over a socket (``bind_process``). A thread a
sub-env starts itself has no binding: in a worker, the process's taker serves it; in the
vector env's process, the one vector env open here that declares the name does (``opened``).
Outside any vector env that declares limits, ``limit`` takes nothing and never waits, so the
same env class runs under Gymnasium's vector envs or on its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Iterator
from types import TracebackType

from aiovec._exceptions import LimitError
from aiovec._limits._broker import Broker
from aiovec._limits._takers import LocalTaker, Taker

__all__ = ["LimitHold", "bind", "bind_process", "bound", "limit", "opened"]


#: The taker of the sub-env whose code runs in this context (set by its backend).
_taker: contextvars.ContextVar[Taker | None] = contextvars.ContextVar("aiovec_limits",
                                                                     default=None)
#: A worker process's taker (every sub-env of the process has the same), for threads the
#: sub-envs start themselves too.
_process_taker: Taker | None = None


def bind(taker: Taker | None) -> contextvars.Token[Taker | None]:
    """Sub-env code running in this context from now on takes limits from ``taker``."""
    return _taker.set(taker)


@contextlib.contextmanager
def bound(taker: Taker | None) -> Iterator[None]:
    """``bind`` for the length of a block (in a context of the caller's own)."""
    token = _taker.set(taker)
    try:
        yield
    finally:
        _taker.reset(token)


def bind_process(taker: Taker | None) -> None:
    """In a worker process: every sub-env here takes limits from ``taker``."""
    global _process_taker
    _process_taker = taker


#: The brokers of the vector envs open in this process (``opened``), for threads that
#: sub-envs start themselves (no binding reaches them).
_open_brokers: weakref.WeakSet[Broker] = weakref.WeakSet()
_open_lock = threading.Lock()


def opened(broker: Broker, is_open: bool) -> None:
    """``broker``'s vector env opened (or closed) its limits in this process."""
    with _open_lock:
        if is_open:
            _open_brokers.add(broker)
        else:
            _open_brokers.discard(broker)


def _unbound_taker(name: str) -> Taker | None:
    """For a take in no sub-env's context: the process's taker in a worker; else the one
    vector env open here that declares ``name`` (``None``: none does, the take is free)."""
    if _process_taker is not None:
        return _process_taker
    with _open_lock:
        declaring = [broker for broker in _open_brokers if name in broker.names]
    if not declaring:
        return None
    if len(declaring) > 1:
        raise LimitError(f"{len(declaring)} vector envs open in this process declare limit "
                         f"{name!r}: take it in the sub-env's own call, not in a thread it "
                         "started (or run that thread in contextvars.copy_context())")
    return LocalTaker(declaring[0])


class LimitHold:
    """One hold of the limit ``name``, taken on entering (waiting in line, first come first
    served) and given back on leaving; a sync and an async context manager. ``take`` and
    ``take_async`` take it (and ``release`` gives it back) across calls, say from a sub-env's
    ``reset`` to its ``close``. Outside a vector env that declares limits, it takes nothing."""

    __slots__ = ("_held", "_taker", "_ticket", "name")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"a limit's name is a str, got {type(name).__name__}")
        self.name = name
        self._taker: Taker | None = None
        self._ticket: object = None
        self._held = False

    def _start(self) -> Taker | None:
        if self._held:
            raise RuntimeError(f"this hold of limit {self.name!r} is already taken: make "
                               "one aiovec.limit(...) per hold")
        return _taker.get() or _unbound_taker(self.name)

    def take(self) -> LimitHold:
        """Wait for the limit (blocking the thread); returns this hold."""
        taker = self._start()
        if taker is not None:
            self._ticket = taker.take(self.name)
        self._taker, self._held = taker, True
        return self

    async def take_async(self) -> LimitHold:
        """Wait for the limit (cancellable: a cancelled take holds nothing); returns this hold."""
        taker = self._start()
        if taker is not None:
            self._ticket = await taker.take_async(self.name)
        self._taker, self._held = taker, True
        return self

    def release(self) -> None:
        """Give the limit back (idempotent)."""
        taker, self._taker = self._taker, None
        if self._held:
            self._held = False
            if taker is not None:
                taker.give_back(self.name, self._ticket)

    def __enter__(self) -> LimitHold:
        return self.take()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

    async def __aenter__(self) -> LimitHold:
        return await self.take_async()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.release()


def limit(name: str) -> LimitHold:
    """A hold of the vector env's limit ``name`` (``limits={"sandbox": aiovec.Limit(...)}``),
    for sub-env code: ``async with aiovec.limit("sandbox"):`` in a coroutine env, ``with
    aiovec.limit("sandbox"):`` in a sync one. Taking it waits, first come first served, while
    the limit is fully held or its rate is spent, on every backend, across worker processes
    and Ray actors too; the wait counts in the call's deadline. A name the vector env does not
    declare raises ``LimitError``; outside a vector env with limits it takes nothing."""
    return LimitHold(name)
