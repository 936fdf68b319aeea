"""Every private internal of Python's standard library that aiovec uses, looked up here once,
each checked and each with a fallback on public API (slower, never wrong).

=====================================  ============================  =========================
internal                               used for                      fallback
=====================================  ============================  =========================
``BaseEventLoop._run_once`` and        the sync shim steps its own   ``loop.run_forever()``
``run_forever``'s set-up around it     loop, without ``run_forever``
(``_thread_id``, ``_stopping``, the    at each call (``_shim.
async generator hooks)                 _loop_driver``)
``asyncio._get_running_loop``          is a loop running here?       ``get_running_loop()``
``asyncio._set_running_loop``,         a sync call from inside a     the call's loop runs in a
``asyncio.tasks._swap_current_task``   running loop borrows its      thread of its own while
(3.12+)                                thread                        the caller's waits
``_signal.signal``, ``getsignal``      Ctrl-C during a call, twice   ``signal``'s wrappers
                                       a step (``signal``'s enum
                                       wrappers cost ~5 µs a call)
``JSONDecoder.scan_once``              a frame's tree, one value     ``JSONDecoder.raw_decode``
``json.encoder.c_make_encoder``        compact JSON text without a   ``JSONEncoder.encode``
                                       new C encoder per call
=====================================  ============================  =========================

Each is checked where it is looked up (present, callable, and where a harmless probe call
can tell, doing what aiovec relies on); a failed check means the fallback, never an error.
``AIOVEC_PRIVATE_INTERNALS=0`` in the environment makes every look-up take its fallback: the
tests run the shim and the codec that way (tests/test_internals.py). ``INTERNALS.found``
says which internals are in use.

``run_forever``'s set-up, as written in asyncio's ``base_events.py`` of Python 3.10 to 3.13:
check the loop is neither closed nor running, coroutine origin tracking on in debug mode,
the async generator hooks and the running thread and loop set; and undone, ``_stopping``
cleared. The stepping here does the same but the checks (the loop driver runs one call at a
time, never on a closed loop), and leaves debug mode to ``run_forever`` itself.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import json.encoder
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, NamedTuple

__all__ = ["INTERNALS", "SWITCH", "Internals", "look_up"]

#: The environment variable that, set to ``0``, makes every look-up take its fallback.
SWITCH = "AIOVEC_PRIVATE_INTERNALS"

SignalHandler = Callable[[int, FrameType | None], Any] | int | None
#: Runs an event loop in this thread until a task is done; the task stops the loop as it ends
#: (``loop.stop()``: ``run_forever`` returns only then).
LoopRunner = Callable[["asyncio.Task[Any]"], None]


class Internals(NamedTuple):
    """What the look-ups found: each internal, or its fallback."""

    #: The event loop running in this thread, or ``None``.
    running_loop: Callable[[], asyncio.AbstractEventLoop | None]
    #: Sets the running loop of this thread, or ``None``: no way to set one aside.
    set_running_loop: Callable[[asyncio.AbstractEventLoop | None], None] | None
    #: Swaps the task asyncio counts as running on a loop (``None``: before 3.12, or missing).
    swap_current_task: Callable[[asyncio.AbstractEventLoop, Any], Any] | None
    #: True if a thread whose asyncio loop runs can run another loop in place meanwhile.
    borrows_threads: bool
    #: ``runner_for(loop)``: how to run ``loop`` until a task is done.
    runner_for: Callable[[asyncio.AbstractEventLoop], LoopRunner]
    #: ``signal.getsignal`` and ``signal.signal``, for ``SIGINT``.
    signal_handler: Callable[[int], SignalHandler]
    set_signal_handler: Callable[[int, SignalHandler], SignalHandler]
    #: One JSON value of a text from a position: ``(value, end)``; raises ``StopIteration`` or
    #: ``ValueError`` if there is none there.
    scan_json: Callable[[str, int], tuple[Any, int]]
    #: The compact JSON text of a tree of dicts, lists, strings, numbers (NaN as ``NaN``),
    #: booleans and ``None``; ASCII, not checked for cycles.
    json_text: Callable[[Any], str]
    #: Whether each internal is in use, by name.
    found: Mapping[str, bool]


# ---------------------------------------------------------------- the running loop

def _running_loop_public() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _running_loop_getter(found: dict[str, bool],
                         use: bool) -> Callable[[], asyncio.AbstractEventLoop | None]:
    getter = getattr(asyncio, "_get_running_loop", None) if use else None
    ok = callable(getter) and getter() is _running_loop_public()
    found["asyncio._get_running_loop"] = ok
    return getter if ok else _running_loop_public  # type: ignore[return-value]


def _running_loop_setter(
        found: dict[str, bool], use: bool,
        running_loop: Callable[[], asyncio.AbstractEventLoop | None],
) -> Callable[[asyncio.AbstractEventLoop | None], None] | None:
    setter = getattr(asyncio, "_set_running_loop", None) if use else None
    ok = callable(setter)
    if ok:
        try:  # set to what it is already: harmless
            setter(running_loop())  # type: ignore[misc]
        except Exception:
            ok = False
    found["asyncio._set_running_loop"] = ok
    return setter if ok else None


def _task_swapper(found: dict[str, bool],
                  use: bool) -> Callable[[asyncio.AbstractEventLoop, Any], Any] | None:
    swap = getattr(asyncio.tasks, "_swap_current_task", None) if use else None
    found["asyncio.tasks._swap_current_task"] = callable(swap)
    return swap if callable(swap) else None


# ---------------------------------------------------------------- stepping asyncio's loop

def _runs_forever(loop: asyncio.AbstractEventLoop) -> LoopRunner:
    """The public way: ``run_forever`` until the task is done (it stops the loop as it ends;
    a stop meant for an earlier call only ends a ``run_forever`` early)."""
    def run_until_done(task: asyncio.Task[Any]) -> None:
        while not task.done():
            loop.run_forever()
    return run_until_done


#: Set and restored on a loop around its steps (instance attributes: checked on each loop).
_LOOP_ATTRIBUTES = ("_thread_id", "_stopping")
#: Methods whose loop-specific versions would do set-up the stepping does not copy.
_SET_UP_METHODS = ("run_forever", "_run_forever_setup", "_run_forever_cleanup")


def _asyncio_steps() -> bool:
    """True if asyncio's loop class has the step and the hooks the stepping uses."""
    base = asyncio.BaseEventLoop
    run_once = getattr(base, "_run_once", None)
    if not (callable(run_once) and callable(getattr(base, "_asyncgen_firstiter_hook", None))
            and callable(getattr(base, "_asyncgen_finalizer_hook", None))):
        return False
    try:
        return list(inspect.signature(run_once).parameters) == ["self"]
    except (TypeError, ValueError):
        return False


def _steppable(loop: asyncio.AbstractEventLoop) -> bool:
    """True for a loop of asyncio's own kind whose ``run_forever`` set-up is asyncio's."""
    base = asyncio.BaseEventLoop
    return (isinstance(loop, base)
            and all(getattr(type(loop), name, None) is getattr(base, name, None)
                    for name in _SET_UP_METHODS)
            and all(hasattr(loop, name) for name in _LOOP_ATTRIBUTES)
            and isinstance(loop._stopping, bool))  # type: ignore[attr-defined]


def _stepping_runner(
        set_running_loop: Callable[[asyncio.AbstractEventLoop | None], None],
) -> Callable[[asyncio.AbstractEventLoop], LoopRunner]:
    def runner_for(loop: asyncio.AbstractEventLoop) -> LoopRunner:
        public = _runs_forever(loop)
        if not _steppable(loop):
            return public
        run_once: Callable[[], None] = loop._run_once  # type: ignore[attr-defined]
        firstiter = loop._asyncgen_firstiter_hook  # type: ignore[attr-defined]
        finalizer = loop._asyncgen_finalizer_hook  # type: ignore[attr-defined]

        def step_until_done(task: asyncio.Task[Any]) -> None:
            """``run_forever``'s loop, with its set-up but the checks (module docstring)."""
            if loop.get_debug():  # run_forever's debug set-up is its own to do
                public(task)
                return
            hooks = sys.get_asyncgen_hooks()
            loop._thread_id = threading.get_ident()  # type: ignore[attr-defined]
            sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
            set_running_loop(loop)
            try:
                while not task.done():
                    run_once()
            finally:
                # The task's own stop() as it ended: moot once it is done, and a stopping
                # loop would never block in its selector again.
                loop._stopping = False  # type: ignore[attr-defined]
                loop._thread_id = None  # type: ignore[attr-defined]
                set_running_loop(None)
                sys.set_asyncgen_hooks(*hooks)
        return step_until_done
    return runner_for


def _loop_runners(
        found: dict[str, bool], use: bool,
        set_running_loop: Callable[[asyncio.AbstractEventLoop | None], None] | None,
) -> Callable[[asyncio.AbstractEventLoop], LoopRunner]:
    ok = use and set_running_loop is not None and _asyncio_steps()
    found["BaseEventLoop._run_once"] = ok
    if ok and set_running_loop is not None:
        return _stepping_runner(set_running_loop)
    return _runs_forever


# ---------------------------------------------------------------- signals

def _signal_functions(
        found: dict[str, bool], use: bool,
) -> tuple[Callable[[int], SignalHandler], Callable[[int, SignalHandler], SignalHandler]]:
    try:
        import _signal  # type: ignore[import-not-found,unused-ignore]  # no stubs
    except ImportError:
        _signal = None
    getter = getattr(_signal, "getsignal", None) if use else None
    setter = getattr(_signal, "signal", None) if use else None
    ok = callable(getter) and callable(setter)
    if ok:
        try:
            ok = getter(signal.SIGINT) == signal.getsignal(signal.SIGINT)  # type: ignore[misc]
        except Exception:
            ok = False
    found["_signal"] = ok
    if ok:
        return getter, setter  # type: ignore[return-value]
    return signal.getsignal, signal.signal


# ---------------------------------------------------------------- JSON

_DECODER = json.JSONDecoder()
# The trees it encodes are built afresh by aiovec, so they cannot be circular.
_ENCODER = json.JSONEncoder(check_circular=False, allow_nan=True, separators=(",", ":"))
#: A tree of every kind a message holds, to probe the C encoder and scanner with.
_PROBE = {"a": [1, -2.5, -math.inf, True, None, "é\n\"", []], "b": {}, "c": 2**70}
_PROBE_TEXT = _ENCODER.encode(_PROBE)


def _json_scanner(found: dict[str, bool], use: bool) -> Callable[[str, int], tuple[Any, int]]:
    scan = getattr(_DECODER, "scan_once", None) if use else None
    ok = callable(scan)
    if ok:
        try:
            text = _PROBE_TEXT + " "
            ok = scan(text, 0) == (_PROBE, len(_PROBE_TEXT))  # type: ignore[misc]
        except Exception:
            ok = False
    found["JSONDecoder.scan_once"] = ok
    return scan if ok else _DECODER.raw_decode  # type: ignore[return-value]


def _unencodable(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")  # aiovec converts first


def _json_writer(found: dict[str, bool], use: bool) -> Callable[[Any], str]:
    make = getattr(json.encoder, "c_make_encoder", None) if use else None
    chunks: Any = None
    if callable(make):
        try:
            chunks = make(None, _unencodable, json.encoder.encode_basestring_ascii, None, ":",
                          ",", False, False, True)
            if "".join(chunks(_PROBE, 0)) != _PROBE_TEXT:
                chunks = None
        except Exception:
            chunks = None
    found["json.encoder.c_make_encoder"] = chunks is not None
    if chunks is None:
        return _ENCODER.encode

    def json_text(tree: Any) -> str:
        return "".join(chunks(tree, 0))
    return json_text


# ---------------------------------------------------------------- all of them

def look_up(use: bool = True) -> Internals:
    """Look every internal up (``use=False``: take every fallback)."""
    found: dict[str, bool] = {}
    running_loop = _running_loop_getter(found, use)
    set_running_loop = _running_loop_setter(found, use, running_loop)
    swap_current_task = _task_swapper(found, use)
    # asyncio counts the running task per loop up to 3.13 (no swap needed), per thread after.
    borrows = set_running_loop is not None and (
        swap_current_task is not None or sys.version_info < (3, 14))
    runner_for = _loop_runners(found, use, set_running_loop)
    signal_handler, set_signal_handler = _signal_functions(found, use)
    return Internals(
        running_loop=running_loop, set_running_loop=set_running_loop,
        swap_current_task=swap_current_task, borrows_threads=borrows,
        runner_for=runner_for, signal_handler=signal_handler,
        set_signal_handler=set_signal_handler, scan_json=_json_scanner(found, use),
        json_text=_json_writer(found, use), found=found)


#: The look-ups, made once for the process.
INTERNALS = look_up(os.environ.get(SWITCH, "1") != "0")
