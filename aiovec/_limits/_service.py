"""The thread that keeps a vector env's limits: it grants rate-held waiters when their time
comes, and serves worker processes' takes over a Unix socket (Ray actors' over TCP).

A worker thread connects on its first take and proves it belongs with a secret token
(``T token``), then sends a line per take (``A id name``, answered ``G id`` once granted), per
give-back (``R name``) and per take it stopped waiting for (``W id``: withdrawn if still
waiting, given back if granted). What a connection holds or waits for is its own: when it
closes, by a clean exit or a SIGKILL alike (the kernel closes a dead process's sockets), the
service gives it all back, so a worker killed mid-hold leaks nothing.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import secrets
import selectors
import socket
import sys
import tempfile
import threading
import time

from aiovec._limits._broker import Broker, Waiter
from aiovec._limits._limit import Address

__all__ = ["Service"]

#: The longest line a worker sends: a command, a space and a limit's name.
_MAX_LINE = 4096
#: Marks a listening socket in the selector.
_LISTENER = object()
#: A TCP connection (a Ray actor's) whose peer went silent is dropped after about
#: ``idle + interval * probes`` seconds: a lost node's holds come back.
_KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}


class _Connection:
    """One worker's connection: its unread bytes, and what it waits for or holds, in order."""

    __slots__ = ("buffer", "sock", "takes", "trusted")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.trusted = False
        #: ``(id, name, waiter)`` of each take waiting or held, in order.
        self.takes: list[tuple[str, str, Waiter]] = []

    def grant(self, request: str) -> None:
        with contextlib.suppress(OSError):  # the worker is gone: its close gives all back
            self.sock.sendall(f"G {request}\n".encode())


class Service:
    """Runs until ``close``: one daemon thread per vector env that declares limits."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._directory: str | None = None
        if sys.platform == "linux":  # an abstract name: nothing on disk to leave behind
            path = f"\0aiovec-limits-{os.getpid()}-{secrets.token_hex(8)}"
        else:
            self._directory = tempfile.mkdtemp(prefix="aiovec-limits-")
            path = os.path.join(self._directory, "limits.sock")
        self._listener.bind(path)
        self._listener.listen(64)
        self._listener.setblocking(False)
        self.address = Address(path, secrets.token_hex(16))
        self._selector.register(self._wake_reader, selectors.EVENT_READ)
        self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._due = math.inf
        self._due_lock = threading.Lock()
        self._closing = False
        #: TCP listeners' addresses (``listen_tcp``), by host.
        self._tcp: dict[str, Address] = {}
        #: Listeners for the thread to register (it alone touches the selector).
        self._new_listeners: queue.SimpleQueue[tuple[socket.socket, threading.Event]] = (
            queue.SimpleQueue())
        broker.when_due = self._wake_at
        self._thread = threading.Thread(target=self._run, name="aiovec-limits", daemon=True)
        self._thread.start()

    def listen_tcp(self, host: str) -> Address:
        """Also listen on TCP at ``host`` (for Ray actors, maybe on other machines); the
        address there (idempotent)."""
        if host not in self._tcp:
            listener = socket.create_server((host, 0), backlog=64)
            listener.setblocking(False)
            registered = threading.Event()
            self._new_listeners.put((listener, registered))
            self._wake()
            if not registered.wait(30):
                listener.close()
                raise RuntimeError("the limits thread did not take the new listener")
            self._tcp[host] = Address(listener.getsockname()[:2], self.address.token)
        return self._tcp[host]

    def _wake_at(self, due: float) -> None:
        with self._due_lock:
            if due >= self._due:
                return
            self._due = due
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):  # full: a wake is pending anyway
            self._wake_writer.send(b"\0")

    def close(self) -> None:
        """End the thread and close every connection (idempotent)."""
        if self._closing:
            return
        self._closing = True
        self._broker.when_due = None
        self._wake()
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_writer.close()
        if self._directory is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self._directory, "limits.sock"))
                os.rmdir(self._directory)

    def _run(self) -> None:
        selector = self._selector
        while not self._closing:
            with self._due_lock:
                due = self._due
            timeout = None if due == math.inf else max(0.0, due - time.monotonic())
            for key, _ in selector.select(timeout):
                if key.fileobj is self._wake_reader:
                    with contextlib.suppress(BlockingIOError):
                        self._wake_reader.recv(4096)
                elif key.data is _LISTENER:
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                else:
                    self._read(key.data)
            while not self._new_listeners.empty():
                listener, registered = self._new_listeners.get()
                selector.register(listener, selectors.EVENT_READ, _LISTENER)
                registered.set()
            if due != math.inf and time.monotonic() >= due:
                with self._due_lock:
                    self._due = math.inf
                next_due = self._broker.tick()
                if next_due < math.inf:
                    self._wake_at(next_due)
        for key in list(selector.get_map().values()):
            if isinstance(key.data, _Connection):
                self._drop(key.data)

    def _accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = listener.accept()
            sock.setblocking(True)  # written by grants from any thread; read when readable
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for option, value in _KEEPALIVE.items():
                    if hasattr(socket, option):
                        sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
            self._selector.register(sock, selectors.EVENT_READ, _Connection(sock))

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(connection)
            return
        connection.buffer += data
        *lines, connection.buffer = connection.buffer.split(b"\n")
        if len(connection.buffer) > _MAX_LINE:
            self._drop(connection)
            return
        for line in lines:
            try:
                served = self._serve(connection, line.decode(errors="replace"))
            except Exception:  # a peer's mistake must not end the thread: drop that peer
                served = False
            if not served:
                self._drop(connection)
                return

    def _serve(self, connection: _Connection, line: str) -> bool:
        """Serve one line; False drops the connection (a stranger's, or not understood)."""
        command, _, argument = line.partition(" ")
        if not connection.trusted:
            connection.trusted = command == "T" and secrets.compare_digest(
                argument.encode(), self.address.token.encode())
            return connection.trusted
        takes = connection.takes
        if command == "A":
            request, _, name = argument.partition(" ")
            if name not in self._broker.names:
                return False
            waiter = Waiter(functools.partial(connection.grant, request))
            takes.append((request, name, waiter))
            if self._broker.take_or_queue(name, waiter):
                waiter.granted = True
                connection.grant(request)
            return True
        for position, (request, name, waiter) in enumerate(takes):
            if command == "R" and name == argument and waiter.granted:
                del takes[position]
                self._broker.give_back(name)
                return True
            if command == "W" and request == argument:
                del takes[position]
                if not self._broker.withdraw(name, waiter):
                    self._broker.give_back(name)
                return True
        return False

    def _drop(self, connection: _Connection) -> None:
        """A connection ended: everything it waited for or held goes back."""
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)
        connection.sock.close()
        takes, connection.takes = connection.takes, []
        for _, name, waiter in takes:
            if not self._broker.withdraw(name, waiter):
                self._broker.give_back(name)
