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
import struct
import subprocess
import sys
import threading
import traceback

from aiovec._backends._children import EXIT_STATUS, Child, python_command
from aiovec._backends._process_tree import become_subreaper, end_tree, owner_of

__all__ = ["ForkServer", "available"]

#: Marks the server, and every worker it forks, in ``/proc/<pid>/cmdline``.
MARKER = "aiovec-forkserver"
_PID = struct.Struct("q")
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
                popen = subprocess.Popen(
                    python_command(__name__, MARKER, str(os.getpid()), str(remote.fileno()),
                                   str(lifeline)),
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
                    message, fds, _, _ = socket.recv_fds(self._control, _PID.size, 1)
                except (BrokenPipeError, ConnectionResetError):
                    message, fds = b"", []
            if len(message) != _PID.size:
                self.process.wait_blocking(_EXIT_WAIT)  # closed its end: it is exiting
                raise ChildProcessError(f"the fork server (pid {self.process.pid}) is gone: "
                                        f"{self.process.describe_exit()}")
            (pid,) = _PID.unpack(message)
            if pid < 0:
                raise OSError(-pid, f"the fork server could not fork: {os.strerror(-pid)}")
        except BaseException:
            status.close()
            raise
        status.setblocking(False)  # read from the event loop's thread, only once readable
        return Child(pid, None, pidfd=fds[0], status=status)

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

    def stop_blocking(self, timeout: float) -> None:
        """``stop`` for callers off the event loop (start-up failures, restarts, close_nowait)."""
        self._ask_to_exit()
        if self.process.wait_blocking(timeout) is None:
            self.process.signal(signal.SIGKILL)
            self.process.wait_blocking(timeout)
        self.process.close()


# ---------------------------------------------------------------------- in the server


def main(argv: list[str]) -> None:
    """The server's main loop: ``argv`` is ``[MARKER, PARENT_PID, CONTROL_FD, LIFELINE_FD]``."""
    control = socket.socket(fileno=int(argv[2]))
    lifeline = int(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    become_subreaper()
    # What every worker needs, imported once here instead of once per worker.
    import aiovec._backends._process_worker  # noqa: F401

    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status descriptor)
    # Processes ended after their worker died, by worker pid, until its status is relayed.
    ended: collections.Counter[int | None] = collections.Counter()
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1, 2)
                if not message:  # the parent closed the vector env, or died
                    end_tree()  # workers and whatever is left below them
                    os._exit(0)  # (an interpreter's shutdown takes ~0.1 s here)
                child_end, status = fds
                try:
                    pid = _start_worker(message, child_end, lifeline, argv[:2])
                except OSError as error:  # out of processes or memory: the parent raises it
                    os.close(status)
                    control.sendall(_PID.pack(-(error.errno or 1)))
                    continue
                finally:
                    os.close(child_end)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, status)
                selector.register(pidfd, selectors.EVENT_READ)
                socket.send_fds(control, [_PID.pack(pid)], [pidfd])
            else:
                pidfd = int(key.fd)
                pid, status = children.pop(pidfd)
                selector.unregister(pidfd)
                _, wait_status = os.waitpid(pid, 0)
                # The dead worker's orphans were handed to us before we heard of its death:
                # every living process below us that is not a worker (or below one) is an
                # orphan, this worker's or that of one that died with it (they say whose).
                end_tree(spare={pid for pid, _ in children.values()},
                         note=lambda orphan: ended.update([owner_of(orphan)]))
                count = ended.pop(pid, 0) + ended.pop(None, 0)
                with contextlib.suppress(OSError):  # the parent may have stopped listening
                    os.write(status, EXIT_STATUS.pack(os.waitstatus_to_exitcode(wait_status),
                                                      count))
                os.close(status)
                os.close(pidfd)


def _start_worker(request: bytes, child_end: int, lifeline: int, marker: list[str]) -> int:
    """Fork a worker serving ``child_end`` (``b"F"``), or spawn one (``b"S"``): its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1  # an exception escaped: as a spawned interpreter, print it and exit 1
    try:
        os.setsid()  # its own session, as a spawned worker: Ctrl-C reaches the parent only
        keep = sorted({0, 1, 2, child_end, lifeline})  # nothing of the server's
        for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low + 1, high)
        if request == b"S":
            os.set_inheritable(child_end, True)
            os.set_inheritable(lifeline, True)
            command = python_command("aiovec._backends._process_worker", *marker,
                                     str(child_end), str(lifeline))
            os.execv(command[0], command)
        from aiovec._backends._process_worker import worker_main

        worker_main(socket.socket(fileno=child_end), lifeline)
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
