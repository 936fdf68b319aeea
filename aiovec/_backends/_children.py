"""Starting worker processes and keeping a handle on them until they are reaped.

``forkserver`` (default where the platform has it, see ``_forkserver``) forks each worker from
a fresh interpreter that imported aiovec once. ``spawn`` runs a fresh interpreter per worker
(``python_command``). Both are safe whatever threads the parent runs,
and neither re-imports the caller's ``__main__``, so scripts need no
``if __name__ == "__main__"`` guard. ``fork`` copies the caller itself: like every fork of a
process with threads, it may deadlock on a lock another thread held: opt in knowingly.

Workers run in their own session (Ctrl-C at the terminal reaches only the parent, which then
closes them) and exit the moment the parent dies (see ``_process._worker._exit_with_parent``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import anyio
import anyio.to_thread

from aiovec._backends._readable import readable

__all__ = ["EXIT_STATUS", "STARTED", "START_METHODS", "Child", "python_command", "start_child",
           "started_child"]

START_METHODS = ("spawn", "fork", "forkserver")
#: How a fork server relays a worker's exit status, how many processes it had left behind
#: were ended, and how many of the cleanups it left ran and failed (``_forkserver``).
EXIT_STATUS = struct.Struct("iiii")
#: The exit status of a worker whose fork server died before relaying it.
_UNKNOWN_STATUS = 255
#: How a supervisor (a fork server, the zygote) answers a request to start a process: its
#: pid, with its pidfd alongside, or minus the errno of a fork that failed.
STARTED = struct.Struct("q")


def python_command(module: str, *arguments: str, prelude: str = "") -> list[str]:
    """A fresh interpreter running ``module.main(arguments)``.

    It starts with the parent's ``sys.path``, so it imports aiovec (and the env's modules)
    from wherever the parent did: a virtualenv, an editable install, ``PYTHONPATH``.
    ``prelude`` (whole lines) runs first, before anything is imported (``arguments`` are
    ``sys.argv[2:]`` there).
    """
    bootstrap = (f"{prelude}import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
                 f"from {module} import main; main(sys.argv[2:])")
    return [sys.executable, "-c", bootstrap, json.dumps(sys.path), *arguments]


class Child:
    """A worker process: its exit status, a descriptor readable once it is known, signals.

    A child of ours is watched through a pidfd and reaped here. A worker forked by a fork
    server (``_forkserver``) is the server's child: the server relays its exit status over
    ``status``, and signals go through the ``pidfd`` it passed along (immune to pid reuse).
    """

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None, *,
                 pidfd: int | None = None, status: socket.socket | None = None) -> None:
        self.pid = pid
        self._popen = popen
        self.returncode: int | None = None
        #: Processes the worker's sub-envs had started, ended after it died (relayed by a
        #: fork server; ``None``: not known).
        self.descendants_ended: int | None = None
        #: The cleanups it left that its fork server ran: ``(run, failed)``.
        self.cleanups = (0, 0)
        self._pidfd = pidfd
        self._status = status
        #: Our own child: reaped here, and its pid ours until then. A supervisor's child
        #: (``status`` given) is never signalled or waited for by pid: it may be reused.
        self._ours = status is None
        self._status_unknown = False
        self._watcher: anyio.Event | None = None
        if self._pidfd is None and hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(pid)

    @property
    def _sentinel(self) -> int | None:
        """Readable once ``poll`` can tell the exit status."""
        return self._status.fileno() if self._status is not None else self._pidfd

    def poll(self) -> int | None:
        """The exit status (negative: the signal that killed it), reaping it; ``None`` if alive."""
        if self.returncode is None:
            if self._status is not None:
                self._read_relayed_status()
            elif self._status_unknown:  # its fork server died: exited, status unknown
                if self._pidfd is None or readable([self._pidfd]):
                    self.returncode = _UNKNOWN_STATUS
            elif self._popen is not None:
                self.returncode = self._popen.poll()
            elif self._ours:
                with contextlib.suppress(ChildProcessError):
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def _read_relayed_status(self) -> None:
        assert self._status is not None
        try:
            data = self._status.recv(EXIT_STATUS.size, socket.MSG_WAITALL)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self._status.close()
        self._status = None
        if len(data) == EXIT_STATUS.size:
            self.returncode, self.descendants_ended, *cleanups = EXIT_STATUS.unpack(data)
            self.cleanups = (cleanups[0], cleanups[1])
        else:  # the server is gone: watch the process itself from now on
            self._status_unknown = True
            self.poll()

    def signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self._popen is None and self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signum)
                elif self._ours:  # not reaped yet (poll said so): the pid is still its own
                    os.kill(self.pid, signum)

    async def wait(self, timeout: float) -> int | None:
        """Wait (bounded, without blocking the event loop) for the process to exit.

        Several tasks may wait at once (a failing step and a concurrent close): one watches
        the process, the others wait for it to say so.
        """
        with anyio.move_on_after(timeout):
            while self.poll() is None:
                if self._watcher is not None:
                    await self._watcher.wait()
                    continue
                self._watcher = anyio.Event()
                try:
                    if self._sentinel is not None:
                        await anyio.wait_readable(self._sentinel)
                    else:  # pragma: no cover - no pidfd: wait in a thread instead
                        await anyio.to_thread.run_sync(self._wait_blocking,
                                                       abandon_on_cancel=True)
                finally:
                    watcher, self._watcher = self._watcher, None
                    watcher.set()
        return self.poll()

    def _wait_blocking(self) -> None:  # pragma: no cover - only without pidfd
        self.wait_blocking(None)

    def wait_blocking(self, timeout: float | None) -> int | None:
        """Block until the process exits (at most ``timeout`` seconds); for non-async callers."""
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = self._popen.wait(timeout)
        elif self._sentinel is not None:
            deadline = None if timeout is None else time.monotonic() + timeout
            while self.poll() is None and self._sentinel is not None:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not readable([self._sentinel], remaining):
                    break
        elif self._ours and self.poll() is None:
            with contextlib.suppress(ChildProcessError):
                _, status = os.waitpid(self.pid, 0)  # fork children die fast once killed
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.poll()

    def close(self) -> None:
        """Release the exit descriptors (after the process was reaped, or abandoned).

        A supervisor's child whose status has not come is from then on taken as exited,
        status unknown: without its pidfd nothing can address it safely (its pid may name
        another process by now), so it is never signalled or waited for again.
        """
        if not self._ours and self.returncode is None:
            self._status_unknown = True
        if self._status is not None:
            self._status.close()
            self._status = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def exitcode(self) -> int | None:
        """The exit status, ``None`` while alive or when it cannot be known (its fork server
        died, or the handle was released first)."""
        code = self.poll()
        return None if self._status_unknown else code

    def host_name(self, index: int) -> str:
        """How errors name this worker."""
        return f"worker process {index} (pid {self.pid})"

    def describe_exit(self) -> str:
        code = self.exitcode()
        if code is None:
            return "exit status unknown"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


def started_child(answer: bytes, fds: list[int], status: socket.socket,
                  supervisor: str) -> Child:
    """The process a supervisor started, from its ``answer`` (``STARTED``) and the pidfd in
    ``fds``; its exit status is relayed over ``status``."""
    (pid,) = STARTED.unpack(answer)
    if pid < 0:
        raise OSError(-pid, f"{supervisor} could not fork: {os.strerror(-pid)}")
    status.setblocking(False)  # read from the event loop's thread, only once readable
    return Child(pid, None, pidfd=fds[0], status=status)


def start_child(method: str, child_end: socket.socket, lifeline: int) -> Child:
    """Start one worker serving ``child_end``; the caller then closes its copy of that end."""
    if method in ("spawn", "forkserver"):  # forkserver without a fork server: spawn
        popen = subprocess.Popen(
            python_command("aiovec._backends._process._worker", str(child_end.fileno()),
                           str(lifeline), "-1"),
            pass_fds=(child_end.fileno(), lifeline), start_new_session=True,
        )
        return Child(popen.pid, popen)
    if method == "fork":
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            try:
                os.setsid()
                # Hold nothing of the parent's: above all not the lifeline's write end,
                # whose closing tells every worker that the parent died.
                keep = sorted({0, 1, 2, child_end.fileno(), lifeline})
                for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")]):
                    os.closerange(low + 1, high)
                from aiovec._backends._process._worker import worker_main

                worker_main(child_end, lifeline)
            finally:
                os._exit(0)
        return Child(pid, None)
    raise ValueError(f"unknown start method {method!r}; choose one of {START_METHODS}")
