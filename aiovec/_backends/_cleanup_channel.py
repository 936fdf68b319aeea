"""The channel over which a supervised worker tells its fork server about its sub-envs'
cleanups, so that the server can run them if the worker dies without running them itself.

The worker sends ``("add", id, pickled function, timeout, description)`` when a sub-env
registers a cleanup and ``("claim", id)`` just before running one; the server keeps what is
added and not claimed (``CleanupLedger``), and once the worker is dead (and its process tree
ended) runs the rest in a short-lived child process (``run_orphaned``), so that user code never
runs in the server itself, which must stay single-threaded to fork safely.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import struct
import threading
from typing import Any

from aiovec._backends._readable import readable

__all__ = ["CleanupLedger", "connect", "run_orphaned"]

_LENGTH = struct.Struct("I")
_COUNTS = struct.Struct("ii")
#: Seconds the child running orphaned cleanups gets beyond the sum of their bounds.
_SLACK = 5.0

Pending = tuple[bytes, float, str]  # pickled function, timeout, description


def connect(fd: int) -> None:
    """In a worker: forward cleanup registrations and claims over the channel ``fd``."""
    import cloudpickle

    from aiovec._core._cleanups import Cleanup, set_forwarder

    lock = threading.Lock()  # an env's own threads may register cleanups too
    os.set_blocking(fd, True)  # made under socket.setdefaulttimeout, it would not be

    def forward(kind: str, cleanup: Cleanup) -> None:
        if kind == "add":
            try:
                blob = cloudpickle.dumps(cleanup.function)
            except Exception as error:
                raise TypeError(f"a cleanup must pickle (cloudpickle) on the process backend: "
                                f"{cleanup.description}: {error!r}") from error
            message: tuple[Any, ...] = (kind, cleanup.id, blob, cleanup.timeout,
                                        cleanup.description)
        else:
            message = (kind, cleanup.id)
        data = pickle.dumps(message)
        with lock, contextlib.suppress(OSError):  # the server is gone: the worker exits soon
            _write_all(fd, _LENGTH.pack(len(data)) + data)

    set_forwarder(forward)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the blocking descriptor ``fd``. A plain descriptor, not a
    socket object: it stays open for the process's life, and a socket object still open at
    exit is warned about (``ResourceWarning``)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class CleanupLedger:
    """In the fork server: one worker's cleanups, added and not yet claimed."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.pending: dict[int, Pending] = {}
        self._buffer = b""
        channel.setblocking(False)

    def read(self) -> bool:
        """Take in what the worker sent; False once it closed the channel (or died)."""
        while True:
            try:
                data = self.channel.recv(1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                return False
            self._buffer += data
            self._parse()

    def _parse(self) -> None:
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < _LENGTH.size + length:
                return
            message = pickle.loads(self._buffer[_LENGTH.size:_LENGTH.size + length])
            self._buffer = self._buffer[_LENGTH.size + length:]
            if message[0] == "add":
                _, cleanup_id, blob, timeout, description = message
                self.pending[cleanup_id] = (blob, timeout, description)
            else:
                self.pending.pop(message[1], None)

    def close(self) -> None:
        self.channel.close()


def run_orphaned(pending: list[Pending]) -> tuple[int, int]:
    """Run cleanups whose worker died, in a child process, each within its bound; returns
    ``(run, failed)``. Blocks at most the sum of their bounds plus a few seconds."""
    if not pending:
        return 0, 0
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, which never returns
        counts = (0, len(pending))
        try:
            os.close(read_end)
            counts = _run_all(pending)
        finally:
            with contextlib.suppress(OSError):
                os.write(write_end, _COUNTS.pack(*counts))
            os._exit(0)
    os.close(write_end)
    pidfd = os.pidfd_open(pid)
    try:
        bound = sum(timeout for _, timeout, _ in pending) + _SLACK
        if not readable([read_end], bound):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        data = os.read(read_end, _COUNTS.size) if readable([read_end]) else b""
        os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
        os.close(read_end)
    if len(data) != _COUNTS.size:
        return 0, len(pending)
    run, failed = _COUNTS.unpack(data)
    return run, failed


def _run_all(pending: list[Pending]) -> tuple[int, int]:
    import cloudpickle

    from aiovec._core._cleanups import logger, run_bounded

    run = failed = 0
    for blob, timeout, description in pending:
        what = f"cleanup {description} (its worker died)"
        try:
            function = cloudpickle.loads(blob)
        except Exception:
            logger.warning("aiovec: %s could not be unpickled", what, exc_info=True)
            failed += 1
            continue
        if run_bounded(function, timeout, what):
            run += 1
        else:
            failed += 1
    return run, failed
