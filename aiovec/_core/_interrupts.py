"""Ctrl-C during a blocking call that runs with no event loop (the sync shim's steps).

With Python's own handler, ``KeyboardInterrupt`` strikes at whichever bytecode the main
thread runs: between reading a worker's reply from its socket and handing it to its request,
say, which would leave the worker's stream out of step for good. So while such a call runs
(``deferred``), a press is only noted; it is raised where nothing is half done: inside a
blocking wait (``wait_point``: the wait is abandoned, nothing read yet), or once the call is
over. A second press interrupts at once, as the shim's event loop does. Installed only over
Python's own handler, in the main thread: a program's own SIGINT handler is left be.

No wake-up descriptor is set (two more system calls per call): a waiting thread looks up
every ``WAIT_SLICE`` seconds at most, which a press the kernel hands another thread waits for.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from aiovec._internals import INTERNALS

__all__ = ["WAIT_SLICE", "deferred", "wait_point"]

T = TypeVar("T")

#: Seconds a blocking wait under ``deferred`` sleeps at most before it looks up: Python runs
#: a signal's handler in the main thread only once that thread runs bytecode.
WAIT_SLICE = 0.1

_MAIN_THREAD = threading.main_thread()
_SIGINT = int(signal.SIGINT)
_DEFAULT_HANDLER = signal.default_int_handler
_signal_handler = INTERNALS.signal_handler
_set_signal_handler = INTERNALS.set_signal_handler


class _Guard:
    """The presses of one deferred call, and whether it is in a blocking wait."""

    __slots__ = ("pressed", "waiting")

    def __init__(self) -> None:
        self.pressed = False
        self.waiting = False

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.waiting or self.pressed:  # inside the wait, or a second press: at once
            raise KeyboardInterrupt
        self.pressed = True


#: The guard of the deferred call running in the main thread, if any.
_active: _Guard | None = None


def deferred(function: Callable[..., T], *args: object,
             interrupted: Callable[[], object] | None = None) -> T:
    """``function(*args)``, a press of Ctrl-C meanwhile raised at a ``wait_point`` or once
    it returns (it then wins over what it returned or raised); ``interrupted()`` is called
    first whenever a ``KeyboardInterrupt`` ends the call."""
    global _active
    guard = None
    if (threading.current_thread() is _MAIN_THREAD and _active is None
            and _signal_handler(_SIGINT) is _DEFAULT_HANDLER):
        guard = _active = _Guard()
        _set_signal_handler(_SIGINT, guard.on_sigint)
    try:
        result = function(*args)
        if guard is not None and guard.pressed:  # as it ran: an interrupt all the same
            raise KeyboardInterrupt
        return result
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) or (guard is not None and guard.pressed):
            if interrupted is not None:
                interrupted()
            if not isinstance(error, KeyboardInterrupt):
                raise KeyboardInterrupt from None
        raise
    finally:
        if guard is not None:
            if _signal_handler(_SIGINT) == guard.on_sigint:  # else set meanwhile: theirs
                _set_signal_handler(_SIGINT, _DEFAULT_HANDLER)
            _active = None


def wait_point(wait: Callable[[], T]) -> T:
    """``wait()``, a blocking wait that a press under ``deferred`` interrupts (raising
    ``KeyboardInterrupt`` out of it, before it returns anything); one pressed before it
    began is raised here."""
    guard = _active
    if guard is None or threading.current_thread() is not _MAIN_THREAD:
        return wait()
    guard.waiting = True
    try:
        if guard.pressed:
            raise KeyboardInterrupt
        return wait()
    finally:
        guard.waiting = False
