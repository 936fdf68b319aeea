"""Interpreter exit, in order: vector envs left open are closed, the threads still closing
sub-envs are waited for, the event loops of sync shims are closed, then what waits for all that.

One ``atexit`` handler, registered when the core is imported: so it runs after the handlers a
program registered later (atexit runs the last registered first), whose ``close`` of a vector
env must still find it open, and while the modules a teardown needs still exist (a
``__del__`` run later finds them half torn down). What must wait for every vector env to be
closed (the process backend reaps its zygote) registers with ``after_envs_closed``.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = ["abandon_at_exit", "after_envs_closed", "close_at_exit", "join_at_exit"]


class _Closable(Protocol):
    @property
    def closed(self) -> bool: ...

    def _close_unclosed(self) -> None: ...


class _Abandonable(Protocol):
    def abandon(self) -> None: ...


#: Vector envs started and not closed yet.
_running: weakref.WeakSet[_Closable] = weakref.WeakSet()
#: The event loops of sync shims (``LoopDriver``), closed here if still open: later, in a
#: ``__del__`` at interpreter teardown, closing one can need a module already torn down
#: (asyncio's debug mode formats a handle's traceback, and so imports ``os``, on 3.13).
_loops: weakref.WeakSet[_Abandonable] = weakref.WeakSet()
#: Threads closing sub-envs of vector envs closed without a loop (``close_nowait``), each with
#: the monotonic time until which exit waits for it.
_closing: weakref.WeakKeyDictionary[threading.Thread, float] = weakref.WeakKeyDictionary()
#: Seconds at most that exit waits for one of those threads, counted from its close.
EXIT_WAIT = 10.0
#: What runs once they are closed, in the order registered.
_after: list[Callable[[], None]] = []


def close_at_exit(envs: _Closable) -> None:
    """``envs`` (started) is closed at exit if it is still open then."""
    _running.add(envs)


def join_at_exit(threads: Iterable[threading.Thread], timeout: float) -> None:
    """At exit, wait for ``threads`` until ``timeout`` seconds from now, ``EXIT_WAIT`` at
    most (they close sub-envs and run their cleanups: the interpreter would stop them
    wherever they are)."""
    until = time.monotonic() + min(timeout, EXIT_WAIT)
    for thread in threads:
        _closing[thread] = max(until, _closing.get(thread, until))


def _join_closing() -> None:
    """Wait for the threads of ``join_at_exit``, each until its own time; Ctrl-C ends the
    wait (not the rest of the exit)."""
    me = threading.current_thread()
    try:
        for thread, until in sorted(_closing.items(), key=lambda item: item[1]):
            if thread.ident is not None and thread is not me:  # started, and not this one
                thread.join(max(0.0, until - time.monotonic()))
    except KeyboardInterrupt:
        return


def abandon_at_exit(loop: _Abandonable) -> None:
    """``loop.abandon()`` at exit, once the vector envs left open are closed (idempotent)."""
    _loops.add(loop)


def after_envs_closed(handler: Callable[[], None]) -> None:
    """Run ``handler`` at exit, after the vector envs left open were closed."""
    _after.append(handler)


@atexit.register
def _at_exit() -> None:
    """Each step runs even if one before it raised (a warning turned into an error by
    ``-W error``, say); the first error is raised at the end."""
    first: Exception | None = None
    steps: list[Callable[[], None]] = [envs._close_unclosed for envs in list(_running)
                                       if not envs.closed]
    for step in [*steps, _join_closing, *(loop.abandon for loop in list(_loops)), *_after]:
        try:
            step()
        except Exception as error:
            first = first or error
    if first is not None:
        raise first
