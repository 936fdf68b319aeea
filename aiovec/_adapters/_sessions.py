"""``Session``: what an agent-framework adapter holds for its sub-env (a SkyRL env instance, an
OpenEnv connection), closed exactly once by the adapter; and what it leaves outside the
process (a container, a sandbox) released by a registered cleanup if the process dies first.

The rule every adapter follows: open, register the cleanup (``aiovec.register_cleanup``);
close, then discard the registration. On the process backend a registration pickles its
cleanup (the supervisor runs it after a SIGKILL); one that does not pickle is not registered
there, and only the adapter's own close releases what it holds.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from aiovec._core._cleanups import CLEANUP_TIMEOUT, CleanupHandle, register_cleanup

__all__ = ["Session"]

logger = logging.getLogger("aiovec")

#: Seconds an adapter's own close may take (as long as a registered cleanup may).
CLOSE_TIMEOUT = CLEANUP_TIMEOUT


class Session:
    """The framework object one sub-env holds now (``current``), and how it is closed."""

    __slots__ = ("_close", "_handle", "_owner", "current")

    def __init__(self, owner: object) -> None:
        self._owner = owner
        #: The open object, or ``None``.
        self.current: Any = None
        self._close: Callable[[Any], Any] | None = None
        self._handle: CleanupHandle | None = None

    def adopt(self, thing: Any, close: Callable[[Any], Any],
              cleanup: Callable[[], object] | None = None) -> None:
        """Hold ``thing``, closed by ``close(thing)``; ``cleanup`` (if any) registered for
        what it leaves outside this process."""
        self.current, self._close, self._handle = thing, close, None
        if cleanup is None:
            return
        try:
            self._handle = register_cleanup(self._owner, cleanup)
        except TypeError:  # a worker's, and it does not pickle: nothing is registered, and
            # only the adapter's own close releases it
            logger.debug("aiovec: the cleanup of %s does not pickle: not registered",
                         type(thing).__name__)

    def _take(self) -> tuple[Any, Callable[[Any], Any], CleanupHandle | None] | None:
        thing, close, handle = self.current, self._close, self._handle
        self.current = self._close = self._handle = None
        return None if thing is None or close is None else (thing, close, handle)

    def close(self) -> None:
        """Close what is open (a synchronous ``close``); once that succeeded, forget its
        registration (if it raised, the registered cleanup still runs)."""
        taken = self._take()
        if taken is None:
            return
        thing, close, handle = taken
        close(thing)
        if handle is not None:
            handle.discard()

    async def aclose(self) -> None:
        """``close`` for a ``close`` that may be a coroutine function: shielded from
        cancellation (a session left half-closed would hold its server's slot) and bounded
        by ``CLOSE_TIMEOUT``; one that overran keeps its registered cleanup."""
        import anyio  # here: a synchronous adapter's worker never needs it

        taken = self._take()
        if taken is None:
            return
        thing, close, handle = taken
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT) as bound:
            closing = close(thing)
            if inspect.isawaitable(closing):
                await closing
        if bound.cancelled_caught:
            logger.warning("aiovec: closing %s took over %s s: left to its cleanup",
                           type(thing).__name__, CLOSE_TIMEOUT)
        elif handle is not None:
            handle.discard()
