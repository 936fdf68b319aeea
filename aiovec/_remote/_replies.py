"""What the server's answers become on the client: arrays of the local dtypes, infos as the
local env's, refusals as the local env's errors, and rows of a batch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from aiovec._core._batching import batches_into_rows
from aiovec._exceptions import (
    BusyError,
    EnvTimeoutError,
    NothingSentError,
    RemoteError,
    ResetNeededError,
    ServerGoneError,
)
from aiovec._remote._websocket import WebSocketRejected
from aiovec._wire._codes import CODES

__all__ = ["arrays_of", "infos_of", "refusal", "rejection", "rows_of"]


def arrays_of(value: Any, space: spaces.Space[Any]) -> Any:
    """A decoded batch of values of ``space`` (one sub-env's) as the local env batches them:
    arrays of its dtype, a tuple of rows (``Text``, ``aiovec.ObjectSpace``, ...), or dicts
    and tuples of those."""
    if isinstance(space, spaces.Dict):
        return {key: arrays_of(value[key], sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(arrays_of(item, sub) for item, sub in zip(value, space.spaces))
    if batches_into_rows(space):
        return tuple(value)
    return np.asarray(value, dtype=space.dtype)


def infos_of(infos: Any) -> dict[str, Any]:
    """Infos from JSON: lists of numbers and booleans back as arrays, as the local env's."""
    if not isinstance(infos, dict):
        return {}
    restored: dict[str, Any] = {}
    for key, value in infos.items():
        if isinstance(value, list):
            try:
                array = np.asarray(value)
            except ValueError:  # ragged
                array = None
            if array is not None and array.dtype != object and array.dtype.kind != "U":
                value = array
        elif isinstance(value, dict):
            value = infos_of(value)
        restored[key] = value
    return restored


def rejection(rejected: WebSocketRejected) -> RemoteError:
    """A refused handshake (an HTTP answer, with the server's JSON error body)."""
    try:
        body = json.loads(rejected.body)
        code, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        code, detail = "rejected", rejected.body.decode(errors="replace")[:200]
    return RemoteError(code, detail, rejected.status)


def refusal(reply: Mapping[str, Any], operation: str,
             deadline: float | None = None) -> Exception:
    """The error a refusal from the server stands for, as the local env would raise it."""
    code, detail = str(reply.get("error")), str(reply.get("detail", ""))
    env_ids = [int(index) for index in reply.get("env_ids", ()) or ()]
    status = CODES.get(code)
    if code == "timeout":
        return EnvTimeoutError(operation, env_ids, deadline)
    if code == "reset_needed":
        return ResetNeededError(detail)
    if code == "busy":
        return BusyError(detail)
    if code == "nothing_sent":
        return NothingSentError(detail)
    if code == "unknown_session":  # reaped, or closed by its owner elsewhere
        return ServerGoneError(code, detail, status, env_ids)
    return RemoteError(code, detail, status, env_ids)


def rows_of(part: Any, rows: list[int]) -> Any:
    """Rows ``rows`` of a batch's rewards, episode ends, ids or infos: arrays indexed, lists
    picked from (infos that JSON did not make arrays of: strings, ragged rows), dicts part by
    part. Its observations: ``_core._batching.take_rows``, which follows their space (these
    parts have none)."""
    if isinstance(part, dict):
        return {key: rows_of(value, rows) for key, value in part.items()}
    if isinstance(part, list):
        return [part[row] for row in rows]
    return part[rows] if isinstance(part, np.ndarray) else part
