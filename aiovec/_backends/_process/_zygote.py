"""The zygote: one pre-loaded interpreter per process, from which each fork server is forked.

A fork server (``_forkserver``) must be a fresh interpreter: one that never ran the caller's
code and holds none of its threads or locks. Starting one costs ~0.3 s of CPU (importing numpy,
Gymnasium and aiovec's worker), paid again by every process-backed vector env a script, a
notebook or a test suite makes. The zygote pays it once: it is such a fresh interpreter,
started with the first fork server, and every fork server after that is forked from it in
milliseconds. A forked server runs the same ``_forkserver.main`` as a started one, with the
caller's environment, working directory and standard streams of the moment, handed over with
each request.

The zygote is reused while the caller's interpreter, ``sys.path``, environment (what its
imports may have read), CPU affinity, niceness, umask and resource limits (what a started
server would inherit) are the ones it started with; when they differ, a new one replaces it.
When the caller closes its socket or dies, the zygote takes no more requests and exits once
the fork servers it forked have (each lives as long as its vector env): until then it reaps
them and relays each one's exit status to the caller, as a fork server does for its workers.
``AIOVEC_ZYGOTE=0`` turns it off (each fork server is then started as a fresh interpreter).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from aiovec._backends._children import (
    EXIT_STATUS,
    STARTED,
    Child,
    python_command,
    started_child,
)
from aiovec._core._exit import after_envs_closed

try:
    import resource
except ImportError:  # pragma: no cover - not a Unix (no fork server there either)
    resource = None  # type: ignore[assignment]

__all__ = ["MARKER", "enabled", "fork_server", "reap_retired", "running", "server_stopped"]

#: In the command line of the zygote and so of every fork server and worker forked below it,
#: as in a started fork server's (``_forkserver.MARKER``), before the caller's pid.
MARKER = "aiovec-forkserver"
#: Environment variables a zygote may differ in: pytest rewrites this one around every test
#: phase, and no import reads it. Their values travel with each request.
_VOLATILE = ("PYTEST_CURRENT_TEST",)
#: Seconds the caller waits for a zygote's answer (the first one waits for its imports).
_REPLY_TIMEOUT = 120.0
#: Seconds interpreter exit waits for its zygotes to exit, and reaps them, when every server
#: they forked was stopped (each exits once its socket is closed and its last server has: at
#: once then). With a server still running (a vector env left open), nothing waits: they
#: exit after this process.
_EXIT_WAIT = 1.0
#: Descriptors handed over with each request, before the caller's standard streams.
_CONTROL, _LIFELINE, _STATUS, _DIRECTORY = range(4)
#: Largest request: the volatile variables and which standard streams follow.
_MAX_REQUEST = 1 << 16
#: Errors that say the zygote is gone (its end closed) when sending to it.
_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ECONNREFUSED)
#: The resource limits a started server would inherit, and so a zygote must match.
_RESOURCE_LIMITS = tuple(getattr(resource, name) for name in (
    "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_DATA", "RLIMIT_STACK")
    if resource is not None and hasattr(resource, name))


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
        control.settimeout(_REPLY_TIMEOUT)
        self.control = control
        #: Found gone when a request was sent (replace it).
        self.gone = False

    def fork_server(self, control_end: int, lifeline: int) -> Child | None:
        """A fork server serving ``control_end``; ``None`` if this zygote cannot serve the
        caller (``gone``, or the working directory cannot be handed over): start the server
        another way."""
        # What a started server would inherit: the streams the caller would pass on (open
        # and inheritable), its working directory (as a descriptor: renamed or deleted, still
        # the same), and the variables that may differ from the zygote's.
        streams = [fd for fd in (0, 1, 2) if _inheritable(fd)]
        request = json.dumps({"volatile": {key: os.environ.get(key) for key in _VOLATILE},
                              "streams": streams}).encode()
        try:
            directory = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # no longer readable: a started server inherits it all the same
            return None
        status, remote = socket.socketpair()
        try:
            with remote:
                try:
                    socket.send_fds(self.control, [request], [control_end, lifeline,
                                                              remote.fileno(), directory,
                                                              *streams])
                except OSError as error:
                    if error.errno in _GONE:
                        self.gone = True
                        status.close()
                        return None
                    raise
                finally:
                    os.close(directory)
                try:
                    message, fds, _, _ = socket.recv_fds(self.control, STARTED.size, 1)
                except OSError:  # reset, or no answer in time: treated as gone
                    message, fds = b"", []
            if len(message) != STARTED.size:
                # Gone (or hung) after it got the request. It may have forked a server first:
                # that one exits once the caller closes the server's socket, which it then
                # does (``ForkServer`` starts its replacement on a new one).
                for fd in fds:
                    os.close(fd)
                self.popen.kill()
                self.gone = True
                status.close()
                return None
            return started_child(message, fds, status, "the zygote")
        except BaseException:
            status.close()
            raise

    def retire(self) -> None:
        """Close its socket: it takes no more requests, and exits once its servers have
        (reaped by ``reap_retired``)."""
        with contextlib.suppress(OSError):
            self.control.shutdown(socket.SHUT_RDWR)
        self.control.close()
        with _retired_lock:
            _retired.append(self.popen)


_lock = threading.Lock()
_zygote: _Zygote | None = None
#: Zygotes replaced, or closed at exit, that may still run: reaped once they exited.
_retired: list[subprocess.Popen[bytes]] = []
_retired_lock = threading.Lock()
#: The pids of the servers this process's zygotes forked, not stopped yet (under
#: ``_retired_lock``; a set: a server stopped twice is forgotten once).
_servers: set[int] = set()


def fork_server(control_end: int, lifeline: int) -> Child | None:
    """A fork server serving ``control_end``, forked by this process's zygote (started now if
    there is none, it died, or it was started in another context: ``_context``); ``None``
    when the zygote is off or gone (start the server as an interpreter)."""
    global _zygote
    if not enabled():
        return None
    context = _context()
    with _lock:
        reap_retired()
        zygote = _zygote
        if zygote is not None and (zygote.context != context or zygote.popen.poll() is not None):
            zygote.retire()
            zygote = _zygote = None
        if zygote is None:
            zygote = _zygote = _Zygote(context)
        server = zygote.fork_server(control_end, lifeline)
        if server is not None:
            with _retired_lock:
                _servers.add(server.pid)
        if zygote.gone:  # gone before the request: the next vector env starts a new one
            zygote.retire()
            _zygote = None
        return server


def server_stopped(pid: int) -> None:
    """The fork server ``pid`` was stopped (forked by a zygote or not): reap the zygotes that
    exited."""
    with _retired_lock:
        _servers.discard(pid)
    reap_retired()


def reap_retired() -> None:
    """Reap the retired zygotes that exited (each exits once its last server has)."""
    with _retired_lock:
        _retired[:] = [popen for popen in _retired if popen.poll() is None]


def running() -> tuple[int, int] | None:
    """This process's zygote, if it has one: its pid and the descriptor held for it. Leak
    checks leave both out: they live as long as this process, like a thread pool's threads."""
    zygote = _zygote
    return None if zygote is None else (zygote.popen.pid, zygote.control.fileno())


def _context() -> tuple[object, ...]:
    """What a zygote's imports may have read, and what a started server would inherit: a
    zygote serves only callers that match it."""
    environment = tuple(sorted((key, value) for key, value in os.environ.items()
                               if key not in _VOLATILE))
    inherited = (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None,
                 os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None,
                 _umask(),
                 tuple(resource.getrlimit(limit) for limit in _RESOURCE_LIMITS))
    return sys.executable, tuple(sys.path), environment, inherited


def _umask() -> str | None:
    """Read without setting it (which would race with other threads creating files)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return line.split()[1]
    return None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _inheritable(fd: int) -> bool:
    """Open, and passed on to a started child (not close-on-exec)."""
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False


def _close_at_exit() -> None:
    """It exits once the servers of vector envs still open have (they go with this process);
    reaped here when it does within ``_EXIT_WAIT`` (no child left running unawaited)."""
    global _zygote
    if _lock.acquire(timeout=1.0):  # a thread may be mid-request: then leave it be
        try:
            if _zygote is not None:
                _zygote.retire()
                _zygote = None
        finally:
            _lock.release()
    deadline = time.monotonic() + _EXIT_WAIT
    if _retired_lock.acquire(timeout=1.0):
        try:
            for popen in () if _servers else list(_retired):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    popen.wait(max(0.0, deadline - time.monotonic()))
                    _retired.remove(popen)
        finally:
            _retired_lock.release()


def _forget_in_child() -> None:
    """A forked copy of the caller does not share its zygote (nor a lock held mid-request)."""
    global _lock, _retired_lock, _zygote
    _lock, _retired_lock = threading.Lock(), threading.Lock()
    _servers.clear()
    if _zygote is not None:
        _zygote.control.close()
        _zygote = None
    _retired.clear()  # not this copy's children


after_envs_closed(_close_at_exit)
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
            if key.fileobj is not control:  # a fork server exited: reap it, relay its status
                pid, status = servers.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, wait_status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the parent may have stopped listening
                    os.write(status, EXIT_STATUS.pack(os.waitstatus_to_exitcode(wait_status),
                                                      0, 0, 0))
                os.close(status)
                continue
            message, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, 4 + 3)
            if not message:  # the parent is done with us, or died: no more requests
                selector.unregister(control)
                control.close()
                continue
            status = fds[_STATUS]
            try:
                pid = _fork(_forkserver.main, argv[:2], json.loads(message), fds)
                pidfd = _pidfd_of(pid)
            except OSError as error:  # out of processes, memory or descriptors
                os.close(status)
                control.sendall(STARTED.pack(-(error.errno or 1)))
                continue
            finally:
                for fd in fds:
                    if fd != status:
                        os.close(fd)
            servers[pidfd] = (pid, status)
            selector.register(pidfd, selectors.EVENT_READ)
            socket.send_fds(control, [STARTED.pack(pid)], [pidfd])
        if control.fileno() == -1 and not servers:  # closed, and every server reaped
            os._exit(0)


def _pidfd_of(pid: int) -> int:
    """A pidfd for the server just forked; if there is none to be had, the server goes."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise


def _fork(serve: Callable[[list[str]], object], marker: list[str], request: dict[str, Any],
          fds: list[int]) -> int:
    """Fork a fork server: it takes the caller's directory, streams and volatile variables,
    keeps only its own descriptors, and runs ``serve`` (``_forkserver.main``)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()  # its own session, as a started server: Ctrl-C reaches the parent only
        streams: list[int] = request["streams"]
        for target in (0, 1, 2):
            if target in streams:
                os.dup2(fds[_DIRECTORY + 1 + streams.index(target)], target)
            else:
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, target)
                os.close(null)
        os.fchdir(fds[_DIRECTORY])
        for name, value in request["volatile"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        control, lifeline = fds[_CONTROL], fds[_LIFELINE]
        keep = sorted({0, 1, 2, control, lifeline})
        for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low + 1, high)
        serve([*marker, str(control), str(lifeline)])
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)
