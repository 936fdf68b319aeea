"""The zygote: one pre-loaded interpreter per process, from which each fork server is forked.

A fork server (``_forkserver``) must be a fresh interpreter: one that never ran the caller's
code and holds none of its threads or locks. Starting one costs ~0.3 s of CPU (importing numpy,
Gymnasium and aiovec's worker), paid again by every process-backed vector env a script, a
notebook or a test suite makes. The zygote pays it once: it is such a fresh interpreter,
started with the first fork server, and every fork server after that is forked from it in
milliseconds. What it forks is exactly what a started server is: the caller's environment,
working directory and standard streams of the moment are handed over with each request, and it
runs the same ``_forkserver.main``.

The zygote is reused while the caller's interpreter, ``sys.path`` and environment (what its
imports may have read) are the ones it started with; when they differ, a new one replaces it.
It exits when the caller closes its socket or dies. The fork servers it forked do not depend on
it: each lives as long as its vector env. The zygote reaps them and relays each one's exit
status to the caller, as a fork server does for its workers. ``AIOVEC_ZYGOTE=0`` turns it off
(each fork server is then started as a fresh interpreter).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from aiovec._backends._children import EXIT_STATUS, Child, python_command

__all__ = ["MARKER", "enabled", "fork_server", "running"]

#: In the command line of the zygote and so of every fork server and worker forked below it,
#: as in a started fork server's (``_forkserver.MARKER``), before the caller's pid.
MARKER = "aiovec-forkserver"
#: Environment variables a zygote may differ in: pytest rewrites this one around every test
#: phase, and no import reads it (the forked server gets the caller's value all the same).
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})
_PID = struct.Struct("q")
#: Seconds a zygote whose socket was closed gets to exit before it is killed.
_EXIT_WAIT = 5.0
#: Descriptors handed over with each request, before the caller's standard streams.
_CONTROL, _LIFELINE, _STATUS = range(3)
#: Largest request (the caller's environment and working directory, as JSON).
_MAX_REQUEST = 1 << 22


def enabled() -> bool:
    """False when ``AIOVEC_ZYGOTE=0``: each fork server is started as a fresh interpreter."""
    return os.environ.get("AIOVEC_ZYGOTE", "1") != "0"


class _Zygote:
    """The caller's handle on its zygote (use under ``_lock``)."""

    def __init__(self, context: tuple[object, ...]) -> None:
        self.context = context
        control, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with remote:
                self.popen = subprocess.Popen(
                    python_command(__name__, MARKER, str(os.getpid()),
                                   str(remote.fileno())),
                    pass_fds=(remote.fileno(),), start_new_session=True,
                )
        except BaseException:
            control.close()
            raise
        self.control = control

    def fork_server(self, control_end: int, lifeline: int) -> Child | None:
        """A fork server serving ``control_end``; ``None`` if this zygote is gone."""
        streams = [fd for fd in (0, 1, 2) if _is_open(fd)]
        request = json.dumps({"environ": dict(os.environ), "cwd": _working_directory(),
                              "streams": streams}).encode()
        status, remote = socket.socketpair()
        try:
            with remote:
                try:
                    socket.send_fds(self.control, [request],
                                    [control_end, lifeline, remote.fileno(), *streams])
                    message, fds, _, _ = socket.recv_fds(self.control, _PID.size, 1)
                except OSError:  # gone (broken pipe, reset), or the request was refused
                    message, fds = b"", []
            if len(message) != _PID.size:
                for fd in fds:
                    os.close(fd)
                status.close()
                return None
            (pid,) = _PID.unpack(message)
            if pid < 0:
                raise OSError(-pid, f"the zygote could not fork a server: {os.strerror(-pid)}")
        except BaseException:
            status.close()
            raise
        status.setblocking(False)  # read from the event loop's thread, only once readable
        return Child(pid, None, pidfd=fds[0], status=status)

    def stop(self) -> None:
        """Close its socket (it exits at once) and reap it."""
        with contextlib.suppress(OSError):
            self.control.shutdown(socket.SHUT_RDWR)
        self.control.close()
        try:
            self.popen.wait(_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


_lock = threading.Lock()
_zygote: _Zygote | None = None


def fork_server(control_end: int, lifeline: int) -> Child | None:
    """A fork server serving ``control_end``, forked by this process's zygote (started now if
    there is none, it died, or it was started for another interpreter, path or environment);
    ``None`` when the zygote is off or cannot serve (start the server as an interpreter)."""
    global _zygote
    if not enabled():
        return None
    context = _context()
    with _lock:
        for _ in range(2):  # a zygote that died meanwhile is replaced once
            if _zygote is not None and (_zygote.context != context
                                        or _zygote.popen.poll() is not None):
                _zygote.stop()
                _zygote = None
            if _zygote is None:
                _zygote = _Zygote(context)
            server = _zygote.fork_server(control_end, lifeline)
            if server is not None:
                return server
            _zygote.stop()
            _zygote = None
    return None


def running() -> tuple[int, int] | None:
    """This process's zygote, if one runs: its pid and the descriptor held for it. Leak
    checks leave both out: they live as long as this process, like a thread pool's threads."""
    zygote = _zygote
    if zygote is None or zygote.popen.poll() is not None:
        return None
    return zygote.popen.pid, zygote.control.fileno()


def _context() -> tuple[object, ...]:
    """What a zygote's imports may have depended on: it serves only callers that match."""
    environment = tuple(sorted((key, value) for key, value in os.environ.items()
                               if key not in _VOLATILE))
    return sys.executable, tuple(sys.path), environment


def _working_directory() -> str | None:
    """The caller's (``None`` if it was deleted: the server keeps the zygote's)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _stop_at_exit() -> None:
    global _zygote
    zygote, _zygote = _zygote, None
    if zygote is not None:
        zygote.stop()


def _forget_in_child() -> None:
    """A forked copy of the caller does not share its zygote (nor a lock held mid-request)."""
    global _lock, _zygote
    _lock = threading.Lock()
    if _zygote is not None:
        _zygote.control.close()
        _zygote = None


atexit.register(_stop_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


# ---------------------------------------------------------------------- in the zygote


def main(argv: list[str]) -> NoReturn:
    """The zygote's loop: ``argv`` is ``[MARKER, PARENT_PID, CONTROL_FD]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    for fd in (0, 1, 2):  # so that no descriptor received later takes a stream's number
        if not _is_open(fd):
            os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    # What every fork server and every worker needs, imported once for all of them.
    import aiovec._backends._process._worker  # noqa: F401
    from aiovec._backends._process import _forkserver

    control = socket.socket(fileno=int(argv[2]))
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    servers: dict[int, tuple[int, int]] = {}  # by pidfd: (pid, where its status is relayed)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, 3 + 3)
                if not message:  # the parent is done with us, or died
                    os._exit(0)
                status = fds[_STATUS]
                try:
                    pid = _fork(_forkserver.main, argv[:2], json.loads(message), fds)
                except OSError as error:  # out of processes or memory: the parent raises it
                    os.close(status)
                    control.sendall(_PID.pack(-(error.errno or 1)))
                    continue
                finally:
                    for fd in fds:
                        if fd != status:
                            os.close(fd)
                pidfd = os.pidfd_open(pid)
                servers[pidfd] = (pid, status)
                selector.register(pidfd, selectors.EVENT_READ)
                socket.send_fds(control, [_PID.pack(pid)], [pidfd])
            else:  # a fork server exited: reap it and relay its status
                pidfd = key.fd
                selector.unregister(pidfd)
                pid, status = servers.pop(pidfd)
                _, wait_status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the parent may have stopped listening
                    os.write(status, EXIT_STATUS.pack(os.waitstatus_to_exitcode(wait_status),
                                                      0, 0, 0))
                os.close(status)
                os.close(pidfd)


def _fork(serve: Callable[[list[str]], object], marker: list[str], request: dict[str, Any],
          fds: list[int]) -> int:
    """Fork a fork server: it takes the caller's environment, directory and streams, keeps
    only its own descriptors, and runs ``serve`` (``_forkserver.main``)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()  # its own session, as a started server: Ctrl-C reaches the parent only
        streams: list[int] = request["streams"]
        for target in (0, 1, 2):
            if target in streams:
                os.dup2(fds[3 + streams.index(target)], target)
            else:
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, target)
                os.close(null)
        control, lifeline = fds[_CONTROL], fds[_LIFELINE]
        keep = sorted({0, 1, 2, control, lifeline})
        for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low + 1, high)
        os.environ.clear()
        os.environ.update(request["environ"])
        if request["cwd"] is not None:
            os.chdir(request["cwd"])
        serve([*marker, str(control), str(lifeline)])
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)
