"""The parent worker: one share of the process backend's sub-envs hosted on a thread of the
parent process itself (``parent_worker=True``).

While the worker processes step their shares, the parent only waits: on a machine with as
many cores as workers, one core idles every vector step. A parent worker does that core's share
of the work here instead, with one process fewer to wake. It serves exactly the frames a worker
process serves (``_worker.serve``) over a socket pair, writes into the same shared memory, and
the backend drives it through the same ``WorkerHandle``: deadlines, failures, restarts and
closing take one path for both.

A thread cannot be killed. Where the backend would kill a worker process (a missed deadline, a
close that overran), the parent worker is *abandoned*, as the thread backend abandons a hung
sub-env's thread: the backend stops reading it and closes its end of the socket, its sub-envs
count as lost (remade on a fresh thread at the next reset), and the thread ends by itself,
closing its sub-envs, once the call it is stuck in returns.
"""

from __future__ import annotations

import os
import signal
import socket
import threading

import anyio
import anyio.to_thread

from aiovec._backends._portable import drop_frames
from aiovec._backends._process._worker import WriteGuard, serve

__all__ = ["ParentThread", "on_parent_worker"]

_thread_state = threading.local()


def on_parent_worker() -> bool:
    """True on a parent worker's thread (``aiovec.testing.FaultyEnv`` ends the thread there
    where it would end a worker process)."""
    return bool(getattr(_thread_state, "parent_worker", False))


#: The exit status an abandoned parent worker reports (as if SIGKILLed, which it stands for).
_ABANDONED = -int(signal.SIGKILL)


class ParentThread:
    """The thread of a parent worker, with the face of ``_children.Child`` (exit status,
    signals, waiting) that ``WorkerHandle`` and the backend expect of a worker."""

    #: Nothing is ended on behalf of sub-envs hosted here (``NoProcessTracking``).
    descendants_ended: int | None = 0
    cleanups = (0, 0)

    def __init__(self, sock: socket.socket, index: int) -> None:
        self.pid = os.getpid()
        self.returncode: int | None = None
        #: What ended the thread other than CLOSE or the backend letting go (a sub-env that
        #: raised ``SystemExit``, say: in a worker process, the process would have died of it).
        self.error: BaseException | None = None
        self.abandoned = False
        self._guard = WriteGuard()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(sock,), daemon=True,
                                        name=f"aiovec-parent-worker-{index}")
        self._thread.start()

    def _run(self, sock: socket.socket) -> None:
        _thread_state.parent_worker = True
        try:
            serve(sock, guard=self._guard)
        except (EOFError, ConnectionError):  # the backend let go of this worker
            pass
        except BaseException as error:  # reported as the worker's death (EOF)
            # Without tracebacks: their frames would pin the shared memory's views.
            drop_frames(error)
            self.error = error
        finally:
            sock.close()
            self._ended.set()

    def host_name(self, index: int) -> str:
        return f"parent worker {index} (a thread of this process)"

    @property
    def running(self) -> bool:
        """True while the thread runs, abandoned or not (``abandoned_threads`` counts those)."""
        return not self._ended.is_set()

    def poll(self) -> int | None:
        """0 once it ended after CLOSE, 1 if something ended it, ``_ABANDONED`` once abandoned;
        ``None`` while it serves."""
        if self.returncode is None:
            if self.abandoned:
                self.returncode = _ABANDONED
            elif self._ended.is_set():
                self.returncode = 0 if self.error is None else 1
        return self.returncode

    def exitcode(self) -> int | None:
        return self.poll()

    def signal(self, signum: int) -> None:
        """Any signal that would end a worker process abandons this one: from now on it
        writes nothing into shared memory."""
        if self.poll() is None:
            self._guard.revoke()
            self.abandoned = True

    async def wait(self, timeout: float) -> int | None:
        if self.poll() is None:
            with anyio.move_on_after(timeout):
                await anyio.to_thread.run_sync(self._ended.wait, timeout,
                                               abandon_on_cancel=True)
        return self.poll()

    def wait_blocking(self, timeout: float | None) -> int | None:
        if self.poll() is None:
            self._ended.wait(timeout)
        return self.poll()

    def close(self) -> None:
        return

    @property
    def thread(self) -> threading.Thread:
        """The thread itself: let go of, it runs on to close its sub-envs (a worker process
        would end at once)."""
        return self._thread

    def describe_exit(self) -> str:
        code = self.poll()
        if code is None:
            return "still running"
        if self.abandoned:
            return ("abandoned (a thread cannot be killed: it ends by itself once the sub-env "
                    "call it is in returns)")
        if self.error is not None:
            return f"its thread ended: {self.error!r}"
        return "its thread ended"
