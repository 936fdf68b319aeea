"""Interpreter exit, in order: vector envs left open are closed, then the event loops sync
shims drive, then what waits for them.

One ``atexit`` handler, registered when the core is imported: so it runs after the handlers a
program registered later (atexit runs the last registered first), whose ``close`` of a vector
env must still find it open, and while the modules a teardown needs still exist (a
``__del__`` run later finds them half torn down). What must wait for every vector env to be
closed (the process backend reaps its zygote) registers with ``after_envs_closed``.
"""

from __future__ import annotations

import atexit
import functools
import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["abandon_at_exit", "after_envs_closed", "close_at_exit"]


class _Closable(Protocol):
    @property
    def closed(self) -> bool: ...

    def _close_unclosed(self, at_exit: bool = False) -> None: ...


class _Abandonable(Protocol):
    def abandon(self) -> None: ...


#: Vector envs started and not closed yet.
_running: weakref.WeakSet[_Closable] = weakref.WeakSet()
#: The event loops of sync shims (``LoopDriver``), closed here if still open: later, in a
#: ``__del__`` at interpreter teardown, closing one can need a module already torn down
#: (asyncio's debug mode formats a handle's traceback, and so imports ``os``, on 3.13).
_loops: weakref.WeakSet[_Abandonable] = weakref.WeakSet()
#: What runs once they are closed, in the order registered.
_after: list[Callable[[], None]] = []


def close_at_exit(envs: _Closable) -> None:
    """``envs`` (started) is closed at exit if it is still open then."""
    _running.add(envs)


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
    steps: list[Callable[[], None]] = [functools.partial(envs._close_unclosed, at_exit=True)
                                       for envs in list(_running) if not envs.closed]
    for step in steps + [loop.abandon for loop in list(_loops)] + _after:
        try:
            step()
        except Exception as error:
            first = first or error
    if first is not None:
        raise first
