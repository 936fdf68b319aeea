"""The sync shims' private event loop, run only while a call runs, in the caller's own thread.

A blocking call (``step``, ``reset``, …) runs the shim's loop in the calling thread until the
call's coroutine is done: no thread hop each way, which had cost more than the step itself
(~90 µs per call on a 2-core VM, against ~8 µs to run a loop once). Between calls the loop
stands still; the sub-envs' hosts (threads, worker processes, actors) keep working, and what
they hand back waits in the loop's queue or in a socket until the next call runs it.

A thread that runs an event loop already (a notebook cell, an async web handler, trio) is
blocked in the sync call all the same: the call *borrows* it. The outer loop's marks (asyncio's
running loop, sniffio's library name) are set aside while the shim's loop runs, and put back
before the call returns; the outer loop runs none of its callbacks meanwhile, as with any
blocking call. Calls from several threads run one at a time. Ctrl-C during a call cancels its
coroutine, lets it unwind (bounded), then raises ``KeyboardInterrupt``.

Running a loop in the caller's thread, and setting an outer loop aside, take internals of
asyncio (``aiovec._internals``, where each is looked up, with the public way as fallback:
``run_forever``, and the call's loop run in a thread of its own beside a running loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

import sniffio

from aiovec._core._exit import abandon_at_exit
from aiovec._core._interrupts import deferred
from aiovec._internals import INTERNALS

__all__ = ["LoopDriver"]

T = TypeVar("T")

_UNWIND_TIMEOUT = 10.0  # seconds a cancelled coroutine gets to finish its cleanup
_SIGNAL_CHECK_INTERVAL = 0.1  # seconds between two looks for Ctrl-C while a call runs beside


def _event_loop_running_here() -> bool:
    """True when this thread runs an event loop (asyncio, uvloop or trio) at the moment."""
    return (_running_loop() is not None
            or sniffio.thread_local.name is not None  # trio says so here
            or sniffio.current_async_library_cvar.get() is not None)


class _CtrlC:
    """Ctrl-C while the main thread drives a call: the first cancels the call's task (or the
    task about to be made), a second interrupts at once. Installed only over Python's own
    handler: a program's own SIGINT handler is left be.

    The kernel may hand SIGINT to any thread (a sub-env's, say), and Python runs the handler
    in the main thread only once that thread runs bytecode: the main thread, asleep in the
    loop's selector, must be woken. ``set_wakeup_fd`` makes the signal itself write to a
    socket the loop watches (``wakeup_fd``). A call run ``beside`` the main thread (``_beside``)
    has each press handed to its loop's thread instead.

    Its handler is set and read through ``_internals`` (``signal``'s own wrappers convert
    handlers to enums, ~5 µs a call, and this runs twice per vector step).
    """

    __slots__ = ("count", "finished", "installed", "loop", "previous_wakeup_fd", "task",
                 "wakes")

    def __init__(self, loop: asyncio.AbstractEventLoop, wakeup_fd: int, *,
                 beside: bool = False) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self.count = 0
        self.finished = False  # the call is over: a press handed over late is not for it
        self.previous_wakeup_fd = -1
        self.installed = (threading.current_thread() is _MAIN_THREAD
                          and _signal_handler(_SIGINT) is _DEFAULT_HANDLER)
        self.wakes = self.installed and not beside
        if self.wakes:
            self.previous_wakeup_fd = signal.set_wakeup_fd(wakeup_fd,
                                                           warn_on_full_buffer=False)
        if self.installed:
            _set_signal_handler(_SIGINT, self.hand_over if beside else self._on_ctrl_c)

    def uninstall(self) -> None:
        """Python's own handler back (in the thread that installed this one)."""
        if self.installed:
            _set_signal_handler(_SIGINT, _DEFAULT_HANDLER)
            if self.wakes:
                signal.set_wakeup_fd(self.previous_wakeup_fd)

    def _on_ctrl_c(self, signum: int, frame: FrameType | None) -> None:
        self.press()

    def hand_over(self, *signal_handler_arguments: Any) -> None:
        """A press, from another thread than the loop's (also SIGINT's handler)."""
        self.loop.call_soon_threadsafe(self.press)

    def press(self) -> None:
        """One Ctrl-C, in the loop's thread."""
        if self.finished:
            return
        self.count += 1
        task = self.task
        if self.count > 1 or (task is not None and task.done()):
            raise KeyboardInterrupt
        if task is not None:
            self.cancel()

    def cancel(self) -> None:
        """Cancel the call's task, which may not have started yet."""
        assert self.task is not None
        self.task.cancel()
        # Wakes the selector too. A task cancelled before its first step never runs its
        # coroutine, so never stops the loop as it ends (LoopDriver._stop_when_done): this
        # callback, queued after that first step, does.
        self.loop.call_soon_threadsafe(self._stop_if_done)

    def _stop_if_done(self) -> None:
        # Harmless if late: the driver runs the loop again until its own task is done.
        if self.task is not None and self.task.done():
            self.loop.stop()


_MAIN_THREAD = threading.main_thread()
_SIGINT = int(signal.SIGINT)
_DEFAULT_HANDLER = signal.default_int_handler
_running_loop = INTERNALS.running_loop
_set_running_loop = INTERNALS.set_running_loop
#: Swaps the task asyncio counts as running on a loop (Python 3.12+; 3.14 keeps it per
#: thread and refuses to run a task while another one runs in the thread).
_swap_current_task = INTERNALS.swap_current_task
_signal_handler = INTERNALS.signal_handler
_set_signal_handler = INTERNALS.set_signal_handler


@contextlib.contextmanager
def _outer_loop_set_aside() -> Iterator[None]:
    """While the shim's loop runs in a thread whose own loop is blocked in the sync call:
    asyncio must see no running loop nor task, and sniffio no library ("trio" is set per
    thread). Everything is put back, whatever ends the call. An asyncio loop is set aside
    only where ``INTERNALS.borrows_threads``."""
    outer_loop = _running_loop()
    outer_library = sniffio.thread_local.name
    set_running_loop = _set_running_loop if outer_loop is not None else None
    swap = _swap_current_task if set_running_loop is not None else None
    outer_task = None
    swapped = False
    try:
        if swap is not None:
            outer_task = swap(outer_loop, None)  # type: ignore[arg-type]  # while it runs
            swapped = True
        if set_running_loop is not None:
            set_running_loop(None)
        sniffio.thread_local.name = None
        yield
    finally:
        if set_running_loop is not None:
            set_running_loop(outer_loop)
        sniffio.thread_local.name = outer_library
        if swap is not None and swapped:
            swap(outer_loop, outer_task)  # type: ignore[arg-type]


def _beside(work: Callable[[], T], ctrl_c: _CtrlC | None) -> T:
    """``work()`` in a thread of its own while this one, whose asyncio loop runs, waits: the
    public way to run another loop here, where this Python cannot set that loop aside
    (``_internals``). Ctrl-C meanwhile goes to ``ctrl_c``'s loop (its handler, or a program's
    own handler's ``KeyboardInterrupt`` handed over); ``ctrl_c`` is uninstalled after."""
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(work())
        except BaseException as exc:
            outcome.set_exception(exc)

    thread = threading.Thread(target=run, name="aiovec-loop-beside")
    interrupted = False
    try:
        thread.start()
        while True:  # until the work is over, whenever a KeyboardInterrupt strikes
            try:
                while not outcome.done():
                    # In slices: Python runs a signal's handler in the main thread only once
                    # that thread runs bytecode, and the kernel may hand SIGINT to another.
                    thread.join(_SIGNAL_CHECK_INTERVAL)
                break
            except KeyboardInterrupt:
                interrupted = True
                if ctrl_c is not None:
                    ctrl_c.hand_over()
    finally:
        if ctrl_c is not None:
            ctrl_c.uninstall()
    thread.join()
    result = outcome.result()
    if interrupted:  # handed over as the call ended, or nowhere to hand it: raised here
        raise KeyboardInterrupt
    return result


class LoopDriver:
    """Owns one event loop for the lifetime of a sync shim and runs coroutines on it."""

    def __init__(self) -> None:
        # asyncio's own loop: it starts and stops each call in ~8 µs, uvloop's in ~29 µs.
        self._loop = asyncio.new_event_loop()
        # Where a signal, whichever thread receives it, wakes the loop (see _CtrlC).
        self._wakeup_reader, self._wakeup_writer = socket.socketpair()
        for end in (self._wakeup_reader, self._wakeup_writer):
            end.setblocking(False)
        self._loop.add_reader(self._wakeup_reader.fileno(), self._drain_wakeups)
        self._driving = threading.Lock()  # held by whichever thread runs the loop
        #: Runs the loop until a call's task is done: asyncio's loop stepped directly, saving
        #: ``run_forever``'s set-up and tear-down at every call (~8 µs of a CartPole x 32
        #: shim step's ~185 µs on 2 cores), where ``_internals`` found how; else
        #: ``run_forever``, which the task stops as it ends (``_stop_when_done``).
        self._run_until_task_done = INTERNALS.runner_for(self._loop)
        self._task: asyncio.Task[Any] | None = None
        self._closed = False
        abandon_at_exit(self)

    @property
    def alive(self) -> bool:
        """False once stopped, or while the interpreter shuts down (no loop may run then)."""
        return not self._closed and not sys.is_finalizing()

    def run(
        self, async_fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any
    ) -> T:
        """Run ``async_fn(*args, **kwargs)`` on the loop and return its result (from any
        thread; calls from several threads run one after another)."""
        with self._driving:
            if self._closed:
                raise RuntimeError("the vector env's event loop is closed")
            if not _event_loop_running_here():
                return self._drive(async_fn, args, kwargs)
            if not INTERNALS.borrows_threads and _running_loop() is not None:
                ctrl_c = _CtrlC(self._loop, self._wakeup_writer.fileno(), beside=True)
                return _beside(lambda: self._drive(async_fn, args, kwargs, ctrl_c), ctrl_c)
            with _outer_loop_set_aside():
                return self._drive(async_fn, args, kwargs)

    def call(self, function: Callable[..., T], *args: Any,
             interrupted: Callable[[], object] | None = None) -> T:
        """``function(*args)`` in this thread with the loop standing still, one at a time with
        ``run`` (a call that needs no event loop: a step waited for here). Ctrl-C meanwhile
        is raised only where nothing is half done, ``interrupted()`` called first, still one
        at a time (``_interrupts.deferred``)."""
        with self._driving:
            if self._closed:
                raise RuntimeError("the vector env's event loop is closed")
            return deferred(function, *args, interrupted=interrupted)

    def _drive(self, async_fn: Callable[..., Coroutine[Any, Any, T]], args: tuple[Any, ...],
               kwargs: dict[str, Any], ctrl_c: _CtrlC | None = None) -> T:
        """Run the loop in this thread until the coroutine is done."""
        loop = self._loop
        beside = ctrl_c is not None  # installed and uninstalled by the waiting thread
        if ctrl_c is None:
            ctrl_c = _CtrlC(loop, self._wakeup_writer.fileno())
        try:
            # Made in a fresh context: the caller's context variables (sniffio's "trio", for
            # one) must not reach the private asyncio loop.
            task = contextvars.Context().run(loop.create_task,
                                             self._stop_when_done(async_fn, args, kwargs))
            self._task = ctrl_c.task = task
            if ctrl_c.count:  # Ctrl-C struck before the task existed
                ctrl_c.cancel()
            self._run_until_task_done(task)
            result = task.result()
        except BaseException:
            made = ctrl_c.task
            if made is not None and not made.done():  # let the call unwind (bounded; a
                ctrl_c.cancel()                       # second Ctrl-C cuts it short)
                with contextlib.suppress(BaseException):
                    self._run_until_done(made, _UNWIND_TIMEOUT)
            if ctrl_c.count:
                raise KeyboardInterrupt from None
            raise
        finally:
            self._task = None
            ctrl_c.finished = True
            if not beside:
                ctrl_c.uninstall()
        if ctrl_c.count:  # Ctrl-C as the call finished: an interrupt all the same
            raise KeyboardInterrupt
        return result

    async def _stop_when_done(self, async_fn: Callable[..., Coroutine[Any, Any, T]],
                              args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
        """Run the call, then stop the loop from inside the task's last step.

        ``run_until_complete`` stops the loop from a done-callback, one loop iteration after
        the task ended, and wraps the task in callbacks of its own; stopping here saves that
        iteration and that wrapping (~6 µs a call). The call's coroutine is made here: one
        made outside would be left never awaited by a task cancelled before it started.
        """
        try:
            return await async_fn(*args, **kwargs)
        finally:
            self._loop.stop()

    def _run_until_done(self, task: asyncio.Task[Any], timeout: float) -> None:
        """Run the loop until ``task`` is done (it stops the loop then), ``timeout`` seconds
        at most."""
        loop = self._loop
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            loop.stop()

        expiry = loop.call_later(timeout, expire)
        try:
            while not task.done() and not expired:
                loop.run_forever()
        finally:
            expiry.cancel()

    def stop(self) -> None:
        """Cancel what is left on the loop and close it. Idempotent."""
        with self._driving:
            if self._closed:
                return
            self._closed = True
            if not _event_loop_running_here():
                self._finish()
            elif not INTERNALS.borrows_threads and _running_loop() is not None:
                _beside(self._finish, None)
            else:
                with _outer_loop_set_aside():
                    self._finish()

    def abandon(self) -> None:
        """Close the loop without running it (interpreter shutdown: no loop may run then, and
        what was left on it cannot finish). Idempotent. Left as it is while a thread, frozen
        by the shutdown mid-call, holds it."""
        if not self._driving.acquire(blocking=False):
            return
        try:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(Exception):  # shutting down: nothing left to tell
                    self._loop.remove_reader(self._wakeup_reader.fileno())
                self._close_loop()
        finally:
            self._driving.release()

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(OSError):  # BlockingIOError once empty
            while self._wakeup_reader.recv(64):
                pass

    def _finish(self) -> None:
        loop = self._loop
        try:
            loop.remove_reader(self._wakeup_reader.fileno())
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        self._loop.close()
        self._wakeup_reader.close()
        self._wakeup_writer.close()
