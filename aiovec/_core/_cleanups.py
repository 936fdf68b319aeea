"""Cleanups for what a sub-env holds that is not a process: a container, a remote sandbox
session, a temporary directory, a licence checked out of a server.

A sub-env registers a cleanup with ``register_cleanup(self, function)``. It runs exactly once:
where the sub-env lives, right after its ``close()`` (when the vector env closes it, or a
restart replaces it); or, if its worker process dies without closing it, in the fork server
that supervised the worker, once whatever the sub-env started is gone. Each run is bounded
(``timeout``); a cleanup that raises or overruns is logged and counted
(``statistics().cleanups_failed``), and never holds up a close past its bound.

In a supervised worker, a registration is forwarded to the fork server at once (the function
pickled with cloudpickle), and a cleanup about to run in the worker is first claimed there, so
that the server never runs it a second time (``set_forwarder``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import logging
import math
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["CLEANUP_TIMEOUT", "Cleanup", "CleanupHandle", "CleanupTally", "register_cleanup",
           "run_bounded", "run_cleanups", "set_forwarder", "take_cleanups"]

#: Seconds a cleanup may run before it is reported as failed and abandoned.
CLEANUP_TIMEOUT = 10.0

logger = logging.getLogger("aiovec")

#: ``forward(kind, cleanup)``: ``kind`` is ``"add"`` (registered) or ``"claim"`` (about to run
#: here); set in a worker process whose fork server runs its cleanups if it dies.
Forwarder = Callable[[str, "Cleanup"], None]


@dataclass(frozen=True, eq=False)
class Cleanup:
    """One registered cleanup: a function of no arguments, with its time bound."""

    id: int
    function: Callable[[], object]
    timeout: float
    description: str


class CleanupTally:
    """How many cleanups ran to completion, and how many raised or overran."""

    __slots__ = ("failed", "run")

    def __init__(self) -> None:
        self.run = 0
        self.failed = 0

    def add(self, run: int, failed: int) -> None:
        self.run += run
        self.failed += failed


_ids = itertools.count(1)
_lock = threading.Lock()
_registered: weakref.WeakKeyDictionary[Any, list[Cleanup]] = weakref.WeakKeyDictionary()
_forwarder: Forwarder | None = None

#: True in the calls of a sub-env hosted in this process (the async, thread and inline
#: backends, a parent worker): its cleanups go to this process's keeper (``KeeperStarter``).
hosted: contextvars.ContextVar[bool] = contextvars.ContextVar("aiovec_hosted", default=False)
#: Starts this process's cleanup keeper (a process that runs the cleanups left unclaimed if
#: this one dies, SIGKILL included) and sets the forwarder to it → its pid and the channel's
#: descriptor, or ``None`` where it cannot run.
KeeperStarter = Callable[[], "tuple[int, int] | None"]
_keeper_starter: KeeperStarter | None = None
#: This process's cleanup keeper once started: (pid, channel descriptor).
keeper: tuple[int, int] | None = None


def set_forwarder(forwarder: Forwarder | None) -> None:
    """Forward registrations and claims (a supervised worker process calls this once)."""
    global _forwarder
    _forwarder = forwarder


def set_keeper_starter(starter: KeeperStarter) -> None:
    """How this process starts its cleanup keeper, on the first cleanup a hosted sub-env
    registers with no supervisor to forward to (set once the backends are loaded)."""
    global _keeper_starter
    _keeper_starter = starter


def _start_keeper() -> None:
    """Start this process's keeper (once; under ``_lock``)."""
    global keeper, _keeper_starter
    starter, _keeper_starter = _keeper_starter, None
    if starter is not None:
        keeper = starter()


class CleanupHandle:
    """A registered cleanup, to ``discard`` once its resource is gone by other means (a
    sandbox deleted at the end of its episode): it then runs nowhere, keeper included."""

    __slots__ = ("_entry", "_env")

    def __init__(self, env: Any, entry: Cleanup) -> None:
        self._env = weakref.ref(env)  # registered, so weakly referenceable
        self._entry = entry

    @property
    def description(self) -> str:
        return self._entry.description

    def discard(self) -> bool:
        """Forget the cleanup → True, or False if it was discarded already or is running (or
        ran) because its sub-env was done with first. Call it right after freeing the resource
        yourself; a cleanup kept past it runs (on every way out) and must tolerate a resource
        already gone."""
        env = self._env()
        with _lock:
            entries = _registered.get(env, []) if env is not None else []
            if self._entry not in entries:
                return False
            entries.remove(self._entry)
        if _forwarder is not None:
            _forwarder("claim", self._entry)  # the keeper or fork server drops it too
        return True

    def __repr__(self) -> str:
        return f"<CleanupHandle {self._entry.description}>"


def register_cleanup(env: Any, cleanup: Callable[[], object], *,
                     timeout: float = CLEANUP_TIMEOUT) -> CleanupHandle:
    """Run ``cleanup()`` exactly once when the sub-env ``env`` is done with: after its
    ``close()``, or in the supervising process if its worker dies without closing it.

    Call it from the env (``aiovec.register_cleanup(self, ...)``) for what dies with no
    process: a container, a remote session, a temporary directory, a licence. ``cleanup`` takes
    no arguments (use ``functools.partial``) and must pickle (cloudpickle) on the process
    backend. It may be a coroutine function (``async def``, a sandbox lease's delete): on the
    async backend it is awaited on the sub-env's event loop, shielded from cancellation;
    elsewhere (a worker, a thread, a fork server) in an event loop of its own. It runs within
    ``timeout`` seconds or is reported as failed (logged, and counted in
    ``statistics().cleanups_failed``). Outside a vector env nothing runs it.

    The returned handle's ``discard()`` forgets it once the resource is freed by other means:
    register a lease's delete before creating it, discard it after deleting it.
    """
    if not callable(cleanup):
        raise TypeError(f"cleanup must be callable, got {type(cleanup).__name__}")
    if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    entry = Cleanup(next(_ids), cleanup, float(timeout), _describe(cleanup))
    if _forwarder is None and hosted.get():
        with _lock:  # (another thread starting it: wait, then forward to it too)
            if _forwarder is None and _keeper_starter is not None:
                _start_keeper()
    if _forwarder is not None:  # first: a cleanup that cannot be pickled is refused here
        try:
            _forwarder("add", entry)
        except TypeError:
            if keeper is None:  # a worker's: its supervisor is the only one to run it then
                raise
            # This process's keeper: one it cannot take still runs here, on every way out
            # but this process's death.
            logger.debug("aiovec: %s does not pickle: not kept past this process",
                         entry.description)
    with _lock:
        _registered.setdefault(env, []).append(entry)
    return CleanupHandle(env, entry)


def _describe(function: Callable[..., object]) -> str:
    text = repr(function)
    return text if len(text) <= 200 else text[:197] + "..."


def take_cleanups(env: Any) -> list[Cleanup]:
    """Remove and return the cleanups registered on ``env`` or any env it wraps."""
    layers = []
    while env is not None and env not in layers:
        layers.append(env)
        env = getattr(env, "env", None)  # a gymnasium.Wrapper's inner env
    taken: list[Cleanup] = []
    with _lock:
        for layer in layers:
            try:
                taken += _registered.pop(layer, [])
            except TypeError:  # not weakly referenceable: nothing was registered on it
                continue
    return sorted(taken, key=lambda cleanup: cleanup.id)


def run_cleanups(cleanups: list[Cleanup], env_index: int, tally: CleanupTally) -> None:
    """Run each cleanup once (claimed first where a fork server also holds it), bounded."""
    for cleanup in cleanups:
        if _forwarder is not None:
            _forwarder("claim", cleanup)
        ok = run_bounded(cleanup.function, cleanup.timeout,
                         f"cleanup {cleanup.description} of sub-env {env_index}")
        tally.add(int(ok), int(not ok))


async def _awaited(awaitable: Awaitable[object], timeout: float) -> None:
    await asyncio.wait_for(awaitable, timeout)  # cancelled at its bound, not left running


def is_async(cleanup: Cleanup) -> bool:
    """True for a coroutine function (or a ``functools.partial`` of one)."""
    return inspect.iscoroutinefunction(cleanup.function)


#: asyncio tasks running the cleanups of a host that was cancelled meanwhile (asyncio cancels
#: a task past any shield of anyio's): ``cleanups_finished`` awaits them.
_detached: set[asyncio.Task[None]] = set()


async def run_cleanups_async(cleanups: list[Cleanup], env_index: int,
                             tally: CleanupTally) -> None:
    """``run_cleanups`` from an event loop (the async backend): coroutine cleanups awaited on
    it, each within its bound, the others in a thread as ``run_cleanups`` runs them; all of
    them even if the caller is cancelled (on asyncio, in a task of their own that carries on:
    ``cleanups_finished``)."""
    import anyio
    import sniffio

    if sniffio.current_async_library() != "asyncio":
        with anyio.CancelScope(shield=True):
            await _run_each(cleanups, env_index, tally)
        return
    task = asyncio.get_running_loop().create_task(_run_each(cleanups, env_index, tally))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            _detached.add(task)
            task.add_done_callback(_detached.discard)
        raise


async def cleanups_finished() -> None:
    """Return once the cleanups carried on past their cancelled hosts in this event loop
    have run (each is bounded)."""
    import sniffio

    if sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()
        mine = [task for task in _detached if task.get_loop() is loop]
        if mine:
            await asyncio.wait(mine)


async def _run_each(cleanups: list[Cleanup], env_index: int, tally: CleanupTally) -> None:
    import anyio
    import anyio.to_thread

    for cleanup in cleanups:
        if _forwarder is not None:  # (this process is supervised itself: claimed first)
            _forwarder("claim", cleanup)
        what = f"cleanup {cleanup.description} of sub-env {env_index}"
        if not is_async(cleanup):
            ok = await anyio.to_thread.run_sync(run_bounded, cleanup.function, cleanup.timeout,
                                                what)
        else:
            ok = False
            with anyio.move_on_after(cleanup.timeout) as bound:
                try:
                    await cast(Awaitable[object], cleanup.function())
                    ok = True
                except Exception:
                    logger.warning("aiovec: %s raised", what, exc_info=True)
            if bound.cancelled_caught:
                logger.warning("aiovec: %s did not finish within %s s: cancelled", what,
                               cleanup.timeout)
        tally.add(int(ok), int(not ok))


def run_bounded(function: Callable[[], object], timeout: float, what: str) -> bool:
    """Run ``function()`` in a thread for at most ``timeout`` seconds; False (and a log
    record) if it raised or is still running, in which case it is abandoned."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result = function()
            if inspect.isawaitable(result):  # an async cleanup, here in a loop of its own
                asyncio.run(_awaited(result, timeout))
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="aiovec-cleanup", daemon=True)
    try:
        thread.start()
    except RuntimeError as error:
        if "shutdown" not in str(error):
            raise
        # At exit, Python 3.12.0 and 3.12.1 start no thread: run it here, unbounded (it was
        # claimed already, so it would run nowhere else).
        logger.warning("aiovec: %s runs unbounded: no thread starts at interpreter exit", what)
        run()
    else:
        thread.join(timeout)
    if thread.is_alive():
        logger.warning("aiovec: %s did not finish within %s s: abandoned", what, timeout)
        return False
    if failure:
        logger.warning("aiovec: %s raised", what, exc_info=failure[0])
        return False
    return True
