"""Waking an awaiting task from another thread, on whichever event loop runs it."""

from __future__ import annotations

from collections.abc import Callable

import sniffio

__all__ = ["ThreadsafeCaller", "threadsafe_caller"]

#: Schedules a callback to run soon in the event loop's thread; callable from any thread.
ThreadsafeCaller = Callable[[Callable[[], object]], object]


def threadsafe_caller() -> ThreadsafeCaller:
    """The current event loop's thread-safe "call soon", for asyncio (and uvloop) or trio."""
    library = sniffio.current_async_library()
    if library == "asyncio":
        import asyncio

        return asyncio.get_running_loop().call_soon_threadsafe
    if library == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    raise RuntimeError(f"aiovec does not support the {library!r} event loop")
