"""The fork server: one fresh interpreter per vector env that starts and supervises its workers.

A spawned worker spends ~0.2-0.3 s of CPU importing numpy, Gymnasium and aiovec's worker before
it can make a sub-env; a worker forked from a server that imported them once starts in
milliseconds, and so does a restarted one. The server is a fresh, single-threaded interpreter
that never ran the caller's code, so forking it is as safe as spawning (unlike ``fork``, which
copies whatever threads and locks the caller holds). It lives exactly as long as its vector
env.

With ``start_method="spawn"`` the server starts each worker as a fresh interpreter instead
(fork, then exec), so that spawned workers are supervised the same way.

Workers are the server's children, not the caller's, so the server relays each one's exit
status: the parent hands it a socket per worker, and the server writes the status there once
it reaps the worker (``Child`` reads it). The server is a child subreaper (``_process_tree``):
what a dead worker's sub-envs had started lands here and is ended before the status, with how
many processes were ended, is relayed. The server exits when the parent closes the control
socket or dies, after ending everything below it; workers whose server dies end their own
trees and exit.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

from aiovec._backends._children import (
    EXIT_STATUS,
    STARTED,
    Child,
    python_command,
    started_child,
)
from aiovec._backends._cleanup_channel import CleanupLedger, Pending, run_orphaned
from aiovec._backends._process import _zygote
from aiovec._backends._process_tree import become_subreaper, end_tree, owner_of

__all__ = ["ForkServer", "available"]

#: Marks the server, and every worker it forks, in ``/proc/<pid>/cmdline``.
MARKER = _zygote.MARKER
#: Seconds a fork server that closed its end of the control socket gets to exit (it ends
#: whatever is left below it first: SIGTERM, a grace, SIGKILL).
_EXIT_WAIT = 5.0
#: The request to start a worker: fork one, or spawn a fresh interpreter.
_REQUESTS = {"forkserver": b"F", "spawn": b"S"}


def available() -> bool:
    """True where the fork server can run: Linux-like ``fork``, ``pidfd`` and fd passing."""
    return (hasattr(os, "fork") and hasattr(os, "pidfd_open")
            and hasattr(socket, "send_fds") and hasattr(signal, "pidfd_send_signal"))


class ForkServer:
    """The parent's handle on a fork server (blocking methods: call them off the loop)."""

    def __init__(self, lifeline: int) -> None:
        control, remote = socket.socketpair()
        try:
            with remote:
                forked = _zygote.fork_server(remote.fileno(), lifeline)
        except BaseException:
            control.close()
            raise
        if forked is not None:
            self.process = forked
        else:  # started as an interpreter, on a new socket: the zygote may have left a server
            control.close()  # on the old one, which exits now
            control, remote = socket.socketpair()
            try:
                with remote:
                    popen = subprocess.Popen(
                        python_command(__name__, MARKER, str(os.getpid()),
                                       str(remote.fileno()), str(lifeline)),
                        pass_fds=(remote.fileno(), lifeline), start_new_session=True,
                    )
            except BaseException:
                control.close()
                raise
            self.process = Child(popen.pid, popen)
        self._control = control
        self._lock = threading.Lock()  # one request at a time (starts and restarts overlap)

    def start_child(self, child_end: socket.socket, method: str = "forkserver") -> Child:
        """Start a worker serving ``child_end``, forked (``"forkserver"``) or a fresh
        interpreter (``"spawn"``); the caller then closes its copy of ``child_end``."""
        status, remote = socket.socketpair()
        try:
            with remote, self._lock:
                try:
                    socket.send_fds(self._control, [_REQUESTS[method]],
                                    [child_end.fileno(), remote.fileno()])
                    message, fds, _, _ = socket.recv_fds(self._control, STARTED.size, 1)
                except (BrokenPipeError, ConnectionResetError):
                    message, fds = b"", []
            if len(message) != STARTED.size:
                self.process.wait_blocking(_EXIT_WAIT)  # closed its end: it is exiting
                raise ChildProcessError(f"the fork server (pid {self.process.pid}) is gone: "
                                        f"{self.process.describe_exit()}")
            return started_child(message, fds, status, "the fork server")
        except BaseException:
            status.close()
            raise

    def _ask_to_exit(self) -> None:
        """It exits at once: ask after its workers are gone, whose exit statuses it relays."""
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        self._control.close()

    async def stop(self, timeout: float) -> None:
        """Ask it to exit and reap it (killed if it has not exited within ``timeout``)."""
        self._ask_to_exit()
        if await self.process.wait(timeout) is None:
            self.process.signal(signal.SIGKILL)
            await self.process.wait(timeout)
        self.process.close()
        self._stopped()

    def stop_blocking(self, timeout: float) -> None:
        """``stop`` for callers off the event loop (start-up failures, restarts, close_nowait)."""
        self._ask_to_exit()
        if self.process.wait_blocking(timeout) is None:
            self.process.signal(signal.SIGKILL)
            self.process.wait_blocking(timeout)
        self.process.close()
        self._stopped()

    def _stopped(self) -> None:
        _zygote.server_stopped(self.process.pid)  # a replaced zygote exits with its last server


# ---------------------------------------------------------------------- in the server


def main(argv: list[str]) -> None:
    """The server's main loop: ``argv`` is ``[MARKER, PARENT_PID, CONTROL_FD, LIFELINE_FD]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    become_subreaper()
    server = _Supervisor(socket.socket(fileno=int(argv[2])), int(argv[3]), argv[:2])
    while True:
        for key, _ in server.selector.select():
            key.data(key.fileobj)


@dataclass(eq=False)
class _Supervised:
    """The server's record of one worker."""

    pid: int
    pidfd: int
    status: int  # where its exit status is relayed
    cleanups: CleanupLedger


class _Supervisor:
    """Starts workers on request; when one dies, ends what it left, runs its orphaned
    cleanups and relays its exit status; ends everything when the parent goes."""

    def __init__(self, control: socket.socket, lifeline: int, marker: list[str]) -> None:
        self.control = control
        self.lifeline = lifeline
        self.marker = marker
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, self._request)
        self.workers: dict[int, _Supervised] = {}  # by pid
        # Processes ended after their worker died, by worker pid, until its status is relayed.
        self.ended: collections.Counter[int | None] = collections.Counter()

    def _request(self, control: Any) -> None:
        message, fds, _, _ = socket.recv_fds(self.control, 1, 2)
        if not message:  # the parent closed the vector env, or died
            self._shut_down()
        child_end, status = fds
        channel, worker_channel = socket.socketpair()
        try:
            pid = _start_worker(message, child_end, self.lifeline, worker_channel.fileno(),
                                self.marker)
        except OSError as error:  # out of processes or memory: the parent raises it
            os.close(status)
            channel.close()
            self.control.sendall(STARTED.pack(-(error.errno or 1)))
            return
        finally:
            os.close(child_end)
            worker_channel.close()
        worker = _Supervised(pid, os.pidfd_open(pid), status, CleanupLedger(channel))
        self.workers[pid] = worker
        self.selector.register(worker.pidfd, selectors.EVENT_READ, self._worker_died)
        self.selector.register(channel, selectors.EVENT_READ, self._cleanups_sent)
        socket.send_fds(self.control, [STARTED.pack(pid)], [worker.pidfd])

    def _cleanups_sent(self, channel: Any) -> None:
        ledger = next(worker.cleanups for worker in self.workers.values()
                      if worker.cleanups.channel is channel)
        if not ledger.read():  # closed: whatever is left is read once the worker is reaped
            self.selector.unregister(channel)

    def _worker_died(self, pidfd: Any) -> None:
        worker = next(worker for worker in self.workers.values() if worker.pidfd == pidfd)
        del self.workers[worker.pid]
        self.selector.unregister(worker.pidfd)
        _, wait_status = os.waitpid(worker.pid, 0)
        # The dead worker's orphans were handed to us before we heard of its death: every
        # living process below us that is not a worker (or below one) is an orphan, this
        # worker's or that of one that died with it (they say whose).
        end_tree(spare=set(self.workers), note=lambda orphan: self.ended.update([owner_of(orphan)]))
        ended = self.ended.pop(worker.pid, 0) + self.ended.pop(None, 0)
        run, failed = run_orphaned(self._forget(worker))
        with contextlib.suppress(OSError):  # the parent may have stopped listening
            os.write(worker.status, EXIT_STATUS.pack(os.waitstatus_to_exitcode(wait_status),
                                                     ended, run, failed))
        os.close(worker.status)
        os.close(worker.pidfd)

    def _forget(self, worker: _Supervised) -> list[Pending]:
        """The cleanups the dead ``worker`` left unclaimed; its channel closed."""
        ledger = worker.cleanups
        if ledger.read():  # still registered: unregister (a closed one was already)
            with contextlib.suppress(KeyError):
                self.selector.unregister(ledger.channel)
        ledger.close()
        return list(ledger.pending.values())

    def _shut_down(self) -> NoReturn:
        """End every worker and what is below it, run what cleanups they left, exit."""
        end_tree()
        pending = [entry for worker in self.workers.values() for entry in self._forget(worker)]
        run_orphaned(pending)
        os._exit(0)  # (an interpreter's shutdown takes ~0.1 s here)


def _start_worker(request: bytes, child_end: int, lifeline: int, channel: int,
                  marker: list[str]) -> int:
    """Fork a worker serving ``child_end`` (``b"F"``), or spawn one (``b"S"``): its pid.
    It reports its sub-envs' cleanups over ``channel`` (``_cleanup_channel``)."""
    if request == b"F":
        # What every forked worker needs, imported here once (at the first fork) instead of
        # once per worker; a server that only spawns never needs it.
        import aiovec._backends._process._worker  # noqa: F401
    pid = os.fork()
    if pid:
        return pid
    code = 1  # an exception escaped: as a spawned interpreter, print it and exit 1
    try:
        os.setsid()  # its own session, as a spawned worker: Ctrl-C reaches the parent only
        keep = sorted({0, 1, 2, child_end, lifeline, channel})  # nothing of the server's
        for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low + 1, high)
        if request == b"S":
            for fd in (child_end, lifeline, channel):
                os.set_inheritable(fd, True)
            command = python_command("aiovec._backends._process._worker", *marker,
                                     str(child_end), str(lifeline), str(channel))
            os.execv(command[0], command)
        import numpy as np

        from aiovec._backends._process._worker import worker_main

        # Every worker forked here (and every server forked by the zygote) would share one
        # legacy global NumPy state: reseeded from the OS, as a fresh interpreter's is.
        # (Python's ``random`` reseeds itself after a fork.)
        np.random.seed()
        worker_main(socket.socket(fileno=child_end), lifeline, channel)
        code = 0
    except SystemExit as request_to_exit:  # sys.exit(...) in a sub-env: its status, as in spawn
        if request_to_exit.code is None or isinstance(request_to_exit.code, int):
            code = request_to_exit.code or 0
        else:
            print(request_to_exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
