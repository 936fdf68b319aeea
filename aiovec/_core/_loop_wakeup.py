"""Waking an awaiting task from another thread, on whichever event loop runs it; and the
loop's clock, readable in the callbacks such a wake-up runs (where ``anyio.current_time``
cannot tell which loop it is on)."""

from __future__ import annotations

from collections.abc import Callable

import sniffio

__all__ = ["ThreadsafeCaller", "loop_clock", "threadsafe_caller"]

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


def loop_clock() -> Callable[[], float]:
    """The current event loop's clock (the one ``anyio.current_time`` reads), as a function
    that also works in the loop's callbacks."""
    if sniffio.current_async_library() == "asyncio":
        import asyncio

        return asyncio.get_running_loop().time
    import trio

    return trio.current_time
