"""How sub-env code takes a limit where it runs: ``LocalTaker`` in the vector env's own process
(queues at its ``Broker``), ``SocketTaker`` in a worker process or Ray actor (asks the limits
``Service`` over a socket). A take returns a ticket that its give-back hands back."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any, Protocol

from aiovec._exceptions import LimitError
from aiovec._limits._broker import Broker, Waiter
from aiovec._limits._limit import Address, undeclared

__all__ = ["LocalTaker", "SocketTaker", "Taker"]


class Taker(Protocol):
    def take(self, name: str) -> object: ...

    async def take_async(self, name: str) -> object: ...

    def give_back(self, name: str, ticket: object) -> None: ...


def _given_up(name: str, why: str) -> LimitError:
    return LimitError(f"the take of limit {name!r} was given up: {why}")


class LocalTaker:
    """Takes from the ``Broker`` of this process.

    ``can_wait=False`` (the inline backend: its sub-envs run in the event loop's thread, where
    no other sub-env can give back while one waits) raises ``LimitError`` instead of waiting
    for a holder; it still waits for a rate. ``abandon`` ends a thread's wait (the thread
    backend gave up on its sub-env at a deadline: its take must not hold on after) and refuses
    every later take.
    """

    __slots__ = ("_abandoned", "_broker", "_can_wait", "_waiting")

    def __init__(self, broker: Broker, *, can_wait: bool = True) -> None:
        self._broker = broker
        self._can_wait = can_wait
        self._abandoned = False
        #: The take in line, if any, and its limit's name.
        self._waiting: tuple[str, Waiter] | None = None

    def take(self, name: str) -> None:
        if self._abandoned:
            raise _given_up(name, "its deadline passed")
        granted = threading.Event()
        waiter = Waiter(granted.set)
        self._waiting = (name, waiter)  # first: an abandon from now on withdraws it
        try:
            if self._broker.take_or_queue(name, waiter):
                return
            if not self._can_wait and self._broker.full(name):
                raise LimitError(
                    f"limit {name!r} is fully held, and a sub-env on the inline backend cannot "
                    "wait for it (its holders run in the same thread): use backend='thread' "
                    "or 'async', or give it back within the call that took it")
            if not self._abandoned:  # (else abandoned before it got in line)
                granted.wait()
            if self._abandoned or not waiter.granted:
                raise _given_up(name, "its deadline passed" if self._abandoned
                                else "the vector env closed")
        except BaseException:
            self._give_up(name, waiter)
            raise
        finally:
            self._waiting = None

    def abandon(self) -> None:
        """End the wait of the take in progress, and refuse any later one.

        The take leaves the line here, not when its thread wakes: a hold given back meanwhile
        goes to the next in line, never to a take that was given up (nor counts as taken)."""
        self._abandoned = True
        waiting = self._waiting
        if waiting is not None:
            name, waiter = waiting
            self._broker.withdraw(name, waiter)  # (granted already: its thread gives it back)
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
            try:
                await anyio.lowlevel.checkpoint()
            except BaseException:  # cancelled right after taking: nothing may stay held
                self._broker.give_back(name)
                raise
            return
        try:
            await granted.wait()
            if waiter.refused:
                raise _given_up(name, "the vector env closed")
        except BaseException:  # cancelled (a deadline, an abort, closing): nothing is held
            self._give_up(name, waiter)
            raise

    def _give_up(self, name: str, waiter: Waiter) -> None:
        if not self._broker.withdraw(name, waiter):  # granted meanwhile: give it back
            self._broker.give_back(name)

    def give_back(self, name: str, ticket: object = None) -> None:
        self._broker.give_back(name)


class _Connection:
    """One thread's connection to the limits service: its takes are answered in it."""

    __slots__ = ("buffer", "next_id", "send_lock", "sock", "withdrawn")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.next_id = 0
        #: Takes this thread stopped waiting for: a grant of one arriving later is ignored
        #: (the service gives it back on the withdrawal).
        self.withdrawn: set[int] = set()
        self.send_lock = threading.Lock()  # give-backs may come from other threads

    def send(self, line: str) -> None:
        with self.send_lock:
            self.sock.sendall(line.encode() + b"\n")

    def read_line(self) -> str:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the limits service closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


class _AsyncTicket:
    """A take on an asyncio loop: the connection that holds it."""

    __slots__ = ("writer",)

    def __init__(self, writer: Any) -> None:
        self.writer = writer


class SocketTaker:
    """Takes from the ``Service`` of the vector env that started this worker process (or Ray
    actor), over one connection per thread that takes, so threads a sub-env starts take
    independently. If the process dies, the service sees its connections close and gives back
    all they held; ``abandon`` does the same from here (a parent worker let go of)."""

    def __init__(self, address: Address, names: tuple[str, ...]) -> None:
        self._address = address
        self._names = names
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[_Connection] = []
        #: The takes of coroutines (``take_async`` on asyncio), a connection each.
        self._tickets: set[_AsyncTicket] = set()
        self._abandoned = False

    def _connection(self) -> _Connection:
        connection: _Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            sock = self._address.connect()
            connection = _Connection(sock)
            connection.send(f"T {self._address.token}")
            with self._lock:
                self._connections.append(connection)
            self._local.connection = connection
        return connection

    def take(self, name: str) -> _Connection:
        if name not in self._names:
            raise undeclared(name, self._names)
        if self._abandoned:
            raise _given_up(name, "the vector env let go of this sub-env")
        try:
            connection = self._connection()
            request = connection.next_id
            connection.next_id += 1
            connection.send(f"A {request} {name}")
        except OSError as error:
            raise _given_up(name, "the vector env closed, or let go of this sub-env") from error
        try:
            while True:
                granted = int(connection.read_line().partition(" ")[2])
                if granted == request:
                    return connection
                connection.withdrawn.discard(granted)
        except OSError as error:  # (ConnectionError included) the service dropped us
            raise _given_up(name, "the vector env closed, or let go of this sub-env") from error
        except BaseException:  # interrupted (a signal, an exception in a handler): withdraw
            connection.withdrawn.add(request)
            with contextlib.suppress(OSError):
                connection.send(f"W {request}")
            raise

    async def take_async(self, name: str) -> object:
        """``take`` without blocking an asyncio loop (a coroutine worker's, where other
        sub-envs, the holders among them, run meanwhile): a connection of its own per take,
        whose closing gives back what it held or withdraws what it waits for, cancelled or
        not. Elsewhere the blocking ``take``: a plain worker runs one call at a time."""
        import sniffio  # here: a plain worker never needs it

        if sniffio.current_async_library() != "asyncio":
            return self.take(name)
        if name not in self._names:
            raise undeclared(name, self._names)
        if self._abandoned:
            raise _given_up(name, "the vector env let go of this sub-env")
        import asyncio

        try:
            if isinstance(self._address.path, str):
                reader, writer = await asyncio.open_unix_connection(self._address.path)
            else:
                reader, writer = await asyncio.open_connection(*self._address.path)
        except OSError as error:
            raise _given_up(name, "the vector env closed") from error
        ticket = _AsyncTicket(writer)
        with self._lock:
            self._tickets.add(ticket)
        try:
            if self._abandoned:  # (abandoned meanwhile: its shutdown may have missed it)
                raise _given_up(name, "the vector env let go of this sub-env")
            writer.write(f"T {self._address.token}\nA 0 {name}\n".encode())
            if await reader.readline() != b"G 0\n":  # b"": the service dropped us
                raise _given_up(name, "the vector env closed, or let go of this sub-env")
        except BaseException:
            self._forget(ticket)
            raise
        return ticket

    def _forget(self, ticket: _AsyncTicket) -> None:
        with self._lock:
            self._tickets.discard(ticket)
        ticket.writer.close()

    def give_back(self, name: str, ticket: object) -> None:
        if isinstance(ticket, _AsyncTicket):
            self._forget(ticket)  # the service gives back what the connection held
            return
        assert isinstance(ticket, _Connection)
        with contextlib.suppress(OSError):
            ticket.send(f"R {name}")

    def abandon(self) -> None:
        """From any thread: end every connection as a dead process's end (a take waiting in
        one raises ``LimitError``; the service gives back what they held)."""
        self._abandoned = True
        with self._lock:
            sockets = [connection.sock for connection in self._connections]
            sockets += [ticket.writer.get_extra_info("socket") for ticket in self._tickets]
        for sock in sockets:
            with contextlib.suppress(OSError, AttributeError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close every connection: the service gives back whatever they still held."""
        with self._lock:
            connections, self._connections = self._connections, []
            tickets, self._tickets = self._tickets, set()
        for connection in connections:
            connection.sock.close()
        for ticket in tickets:  # (its loop's thread: the worker's, which is ending)
            with contextlib.suppress(RuntimeError):  # its loop is closed already
                ticket.writer.close()
