"""What both transports share: reading bounded JSON, running an operation on a session under
the client's watch, and rendering results (big ones off the event loop)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import numpy as np

from aiovec._exceptions import AiovecError
from aiovec._serve._config import Limits
from aiovec._serve._errors import ServeError
from aiovec._serve._json import JSONRejected, parse_json
from aiovec._serve._operations import OPERATIONS, prepare, restarts_in
from aiovec._serve._sessions import Session
from aiovec._serve._telemetry import Telemetry
from aiovec._wire._codec import to_jsonable

__all__ = ["dump_json", "parse_bounded", "parse_json_object", "perform", "watched"]

T = TypeVar("T")


def parse_json_object(body: bytes, limits: Limits) -> dict[str, Any]:
    """``body`` as a JSON object, within ``limits`` (here, on this thread)."""
    try:
        value = parse_json(body, max_depth=limits.max_json_depth,
                           max_bytes=limits.max_body_bytes)
    except JSONRejected as rejected:
        raise ServeError(rejected.code, rejected.detail) from None
    if not isinstance(value, dict):
        raise ServeError("bad_json", "the body must be a JSON object")
    return value


async def parse_bounded(body: bytes, limits: Limits) -> dict[str, Any]:
    """``body`` as a JSON object, within ``limits``; parsed in a worker thread when big."""
    if len(body) > limits.offload_bytes:
        return await anyio.to_thread.run_sync(parse_json_object, body, limits)
    return parse_json_object(body, limits)


def _nbytes(value: Any) -> int:
    """Roughly how big ``value`` is on the wire (its arrays' bytes)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_nbytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(item) for item in value)
    return 0


def _dumps(value: Any) -> bytes:
    # allow_nan: a NaN reward or observation is data, sent as NaN (which Python, numpy and
    # most JSON libraries read), not an error of the server's.
    return json.dumps(to_jsonable(value), allow_nan=True, separators=(",", ":")).encode()


async def dump_json(value: Any, limits: Limits) -> bytes:
    """``value`` as JSON bytes; encoded in a worker thread when its arrays are big."""
    if _nbytes(value) > limits.offload_bytes:
        return await anyio.to_thread.run_sync(_dumps, value)
    return _dumps(value)


async def watched(gone: Callable[[], Awaitable[None]],
                  work: Callable[[], Awaitable[T]]) -> tuple[bool, T | None]:
    """Run ``work`` unless ``gone`` returns first (the client went away): then the work is
    cancelled. Returns ``(finished, result)``; ``work``'s errors propagate as themselves."""
    outcome: list[T] = []
    errors: list[Exception] = []
    async with anyio.create_task_group() as group:
        async def watch() -> None:
            await gone()
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            outcome.append(await work())
        except Exception as error:  # raised as itself, not wrapped in an exception group
            errors.append(error)
        group.cancel_scope.cancel()
    if errors:
        raise errors[0]
    return (True, outcome[0]) if outcome else (False, None)


async def perform(session: Session, op: str, request: Mapping[str, Any],
                  telemetry: Telemetry, *, big: bool = False) -> dict[str, Any]:
    """Run operation ``op`` on ``session`` (which the caller holds) and count it; a ``big``
    request's actions are turned into arrays in a worker thread.

    A ``ValueError``/``TypeError`` raised here, not by a sub-env, is the vector env's check of
    the client's values (actions, seeds): ``invalid``, nothing was sent."""
    operation = OPERATIONS.get(op)
    if operation is None:
        raise ServeError("not_found", f"no operation {op!r}; use one of {sorted(OPERATIONS)}")
    started = time.perf_counter()
    try:
        if big:
            request = await anyio.to_thread.run_sync(prepare, session, op, request)
        result = await operation(session, request)
    except (ValueError, TypeError) as error:
        telemetry.operation_failed(op, time.perf_counter() - started)
        if isinstance(error, AiovecError):  # a sub-env's failure: its group derives from it
            raise
        raise ServeError("invalid", str(error)) from None
    except BaseException as error:
        telemetry.operation_failed(op, time.perf_counter() - started,
                                   cancelled=isinstance(error, anyio.get_cancelled_exc_class()))
        raise
    telemetry.operation_done(session, op, time.perf_counter() - started, result,
                             restarts_in(result))
    return result
