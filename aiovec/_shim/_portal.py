"""A private event loop in a background thread, and a lean way to run coroutines on it.

One cross-thread hand-off each way per call (measured several times cheaper than a general-purpose
portal, which matters when a vector step is tens of microseconds). Ctrl-C (or any exception)
in the waiting thread cancels the coroutine and waits, bounded, for it to unwind, so nothing
keeps running behind the caller's back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["LoopThread", "Submitted"]

T = TypeVar("T")

_UNWIND_TIMEOUT = 10.0  # seconds a cancelled coroutine gets to finish its cleanup


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def _settle(task: asyncio.Task[Any], outcome: concurrent.futures.Future[Any]) -> None:
    """Copy a finished task's result, exception or cancellation to the waiting thread."""
    if task.cancelled():
        outcome.set_exception(concurrent.futures.CancelledError())
    elif (exception := task.exception()) is not None:
        outcome.set_exception(exception)
    else:
        outcome.set_result(task.result())


class Submitted(Generic[T]):
    """A coroutine started on a ``LoopThread``; ``result()`` waits for its outcome."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.task: asyncio.Task[T] | None = None

    def result(self) -> T:
        """The coroutine's result (or exception). If the caller is interrupted while waiting
        (``KeyboardInterrupt``), the coroutine is cancelled and given a bounded time to unwind
        before the interrupt propagates."""
        try:
            return self.outcome.result()
        except BaseException:
            if not self.outcome.done():
                # The loop ran ``start`` before this callback (it keeps FIFO order), so the
                # task exists; cancel it inside the loop and wait for its cleanup to finish.
                self._loop.call_soon_threadsafe(self._cancel)
                with contextlib.suppress(BaseException):
                    self.outcome.result(timeout=_UNWIND_TIMEOUT)
            raise

    def _cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class LoopThread:
    """Owns one event loop thread (uvloop when installed) for the lifetime of a sync shim."""

    def __init__(self) -> None:
        self._loop = _new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="aiovec-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    @property
    def alive(self) -> bool:
        """False once the loop thread has stopped (``stop``, or interpreter shutdown)."""
        return self._thread.is_alive()

    def run(
        self, async_fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any
    ) -> T:
        """Run ``async_fn(*args, **kwargs)`` on the loop and return its result.

        Call it from any thread but the loop's own.

        If the caller is interrupted while waiting (``KeyboardInterrupt``), the coroutine is
        cancelled and given a bounded time to unwind before the interrupt propagates.
        """
        return self.submit(async_fn, *args, **kwargs).result()

    def submit(
        self, async_fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any
    ) -> Submitted[T]:
        """Start ``async_fn(*args, **kwargs)`` on the loop and return at once; ``result()``
        on the handle waits for it (as ``run`` does)."""
        if not self._thread.is_alive():
            raise RuntimeError("the event loop thread has stopped")
        submitted = Submitted[T](self._loop)

        def start() -> None:
            task = self._loop.create_task(async_fn(*args, **kwargs))
            task.add_done_callback(lambda done: _settle(done, submitted.outcome))
            submitted.task = task

        # A fresh context: the caller's context variables (e.g. sniffio's "trio" when the
        # shim is used from trio code) must not leak into the private asyncio loop.
        self._loop.call_soon_threadsafe(start, context=contextvars.Context())
        return submitted

    def stop(self) -> None:
        """Stop the loop and join its thread. Idempotent."""
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # already closing
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
