"""``aiovec.limit(name)``: how sub-env code takes a named limit, wherever the sub-env runs.

The backend that runs a sub-env's calls binds a ``Taker`` around them (``bind``): in this
process one that queues at the vector env's ``Broker`` directly; in a worker process one
that asks the limits' ``Service`` over a socket (``bind_process``). Outside any vector env
that declares limits, ``limit`` takes nothing and never waits, so the same env class runs
under Gymnasium's vector envs or on its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Protocol

from aiovec._exceptions import LimitError
from aiovec._limits._broker import Broker, Waiter
from aiovec._limits._limit import Address

__all__ = ["LimitHold", "LocalTaker", "SocketTaker", "Taker", "bind", "bind_process", "bound",
           "limit"]


class Taker(Protocol):
    def take(self, name: str) -> None: ...

    async def take_async(self, name: str) -> None: ...

    def give_back(self, name: str) -> None: ...


class LocalTaker:
    """Takes from the ``Broker`` of this process. ``can_wait=False`` (the inline backend: its
    sub-envs run in the event loop's thread, where a holder could never give back while one
    waits) raises ``LimitError`` instead of waiting. ``abandon`` ends a thread's wait (the
    thread backend gave up on its sub-env at a deadline: its take must not hold on after)."""

    __slots__ = ("_abandoned", "_broker", "_can_wait", "_waiting")

    def __init__(self, broker: Broker, *, can_wait: bool = True) -> None:
        self._broker = broker
        self._can_wait = can_wait
        self._abandoned = False
        self._waiting: Waiter | None = None

    def take(self, name: str) -> None:
        granted = threading.Event()
        waiter = Waiter(granted.set)
        if self._broker.take_or_queue(name, waiter):
            return
        if not self._can_wait:
            self._give_up(name, waiter)
            raise LimitError(f"limit {name!r} is fully held, and a sub-env on the inline "
                             "backend cannot wait for it (its holders run in the same thread): "
                             "use backend='thread' or 'async', or hold it within one call")
        self._waiting = waiter
        try:
            if not self._abandoned:  # (else abandoned before it got in line)
                granted.wait()
            if not waiter.granted:
                why = "the vector env closed" if waiter.refused else "its deadline passed"
                raise LimitError(f"the take of limit {name!r} was given up: {why}")
        except BaseException:
            self._give_up(name, waiter)
            raise
        finally:
            self._waiting = None

    def abandon(self) -> None:
        """End the wait of the take in progress, and of any later one, without the limit."""
        self._abandoned = True
        waiter = self._waiting
        if waiter is not None:
            waiter.grant()

    async def take_async(self, name: str) -> None:
        if not self._can_wait:
            self.take(name)
            return
        import anyio  # here: a worker process never needs it
        import anyio.lowlevel

        from aiovec._core._loop_wakeup import threadsafe_caller

        granted = anyio.Event()
        call_soon = threadsafe_caller()
        waiter = Waiter(lambda: call_soon(granted.set))
        if self._broker.take_or_queue(name, waiter):
            await anyio.lowlevel.checkpoint()
            return
        try:
            await granted.wait()
            if waiter.refused:
                raise LimitError(f"the take of limit {name!r} was given up: the vector env "
                                 "closed")
        except BaseException:  # cancelled (a deadline, an abort, closing): nothing is held
            self._give_up(name, waiter)
            raise

    def _give_up(self, name: str, waiter: Waiter) -> None:
        if not self._broker.withdraw(name, waiter):  # granted meanwhile: give it back
            self._broker.give_back(name)

    def give_back(self, name: str) -> None:
        self._broker.give_back(name)


class SocketTaker:
    """Takes from the ``Service`` of the vector env that started this worker process, over one
    connection made on the first take. If this process dies, the service sees the connection
    close and gives back all it held."""

    def __init__(self, address: Address, names: tuple[str, ...]) -> None:
        self._address = address
        self._names = names
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def _connection(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self._address.path)
            sock.sendall(f"T {self._address.token}\n".encode())
            self._sock = sock
        return self._sock

    def _check(self, name: str) -> None:
        if name not in self._names:
            raise LimitError(f"no limit named {name!r}: this vector env declares "
                             f"{', '.join(map(repr, self._names))} (limits=)")

    def take(self, name: str) -> None:
        self._check(name)
        with self._lock:  # one take in flight per connection: its answer is the next line
            answer = b""
            try:
                sock = self._connection()
                sock.sendall(f"A {name}\n".encode())
                while len(answer) < 2:
                    chunk = sock.recv(2 - len(answer))
                    if not chunk:
                        break
                    answer += chunk
            except OSError:
                pass
            if answer != b"G\n":
                raise LimitError(f"the take of limit {name!r} was given up: the vector env "
                                 "closed, or let go of this sub-env")

    async def take_async(self, name: str) -> None:
        self.take(name)  # a worker process runs one sub-env call at a time: waiting is fine

    def give_back(self, name: str) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._connection().sendall(f"R {name}\n".encode())

    def abandon(self) -> None:
        """From any thread: end the connection as a dead process's ends (a take waiting in it
        raises ``LimitError``; the service gives back whatever it held)."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the connection: the service gives back whatever it still held."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


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


class LimitHold:
    """One hold of the limit ``name``, taken on entering (waiting in line, first come first
    served) and given back on leaving; a sync and an async context manager. ``take`` and
    ``take_async`` take it (and ``release`` gives it back) across calls, say from a sub-env's
    ``reset`` to its ``close``. Outside a vector env that declares limits, it takes nothing."""

    __slots__ = ("_held", "_taker", "name")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"a limit's name is a str, got {type(name).__name__}")
        self.name = name
        self._taker: Taker | None = None
        self._held = False

    def _start(self) -> Taker | None:
        if self._held:
            raise RuntimeError(f"this hold of limit {self.name!r} is already taken: make "
                               "one aiovec.limit(...) per hold")
        return _taker.get() or _process_taker

    def take(self) -> LimitHold:
        """Wait for the limit (blocking the thread); returns this hold."""
        taker = self._start()
        if taker is not None:
            taker.take(self.name)
        self._taker, self._held = taker, True
        return self

    async def take_async(self) -> LimitHold:
        """Wait for the limit (cancellable: a cancelled take holds nothing); returns this hold."""
        taker = self._start()
        if taker is not None:
            await taker.take_async(self.name)
        self._taker, self._held = taker, True
        return self

    def release(self) -> None:
        """Give the limit back (idempotent)."""
        taker, self._taker = self._taker, None
        if self._held:
            self._held = False
            if taker is not None:
                taker.give_back(self.name)

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
    the limit is fully held or its rate is spent, on every backend but Ray, across worker
    processes too; the wait counts in the call's deadline. A name the vector env does not
    declare raises ``LimitError``; outside a vector env with limits it takes nothing."""
    return LimitHold(name)
