"""Checks of the caller's arguments, made before anything is sent: a clear error that names
the argument (seeds and options are checked in ``_seeding``, actions in ``_actions``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["RecvBounds", "check_count", "check_env_fns", "check_env_ids", "check_recv_bounds",
           "check_timeout", "check_wait"]


def check_env_fns(env_fns: Any) -> None:
    """A non-empty sequence of callables that make envs."""
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Sequence):
        raise TypeError(f"env_fns must be a sequence of callables, got {type(env_fns)}")
    if not env_fns:
        raise ValueError("env_fns is empty: a vector env needs at least one sub-env")
    for index, env_fn in enumerate(env_fns):
        if not callable(env_fn):
            raise TypeError(
                f"env_fns[{index}] is {type(env_fn).__name__}, not a callable that makes "
                "an env (pass `lambda: gym.make(...)`, not `gym.make(...)`)"
            )


def check_count(value: int | None, what: str, maximum: int | None = None) -> int | None:
    """A positive int (at most ``maximum``) or ``None``; else ``ValueError`` naming ``what``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive int or None, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be at most num_envs={maximum}, got {value}")
    return int(value)


def check_timeout(timeout: object, what: str) -> float | None:
    """``timeout`` as seconds: ``None`` (no deadline) or a real number above zero, ``inf``
    included (no deadline either); else ``ValueError`` naming ``what``.

    The one rule for every deadline a caller passes, checked the same by the local vector env,
    the remote client and the server: a bool is not a number of seconds (``True`` is no
    1-second deadline), NaN and zero are refused (use ``None`` for no deadline). An ``int``, a
    ``float`` or a NumPy integer or float works; a float comes back as it is (a
    ``CallerDeadline`` stays one), the others as the float they stand for.
    """
    if timeout is None:
        return None
    if (isinstance(timeout, bool)
            or not isinstance(timeout, (int, float, np.integer, np.floating))
            or not timeout > 0):  # (NaN is not above zero)
        raise ValueError(f"{what} must be a positive number of seconds or None, got "
                         f"{timeout!r}")
    if isinstance(timeout, float):
        return timeout
    try:
        return float(timeout)
    except OverflowError:  # an int beyond any float: longer than any deadline
        return math.inf


def check_wait(wait: object, what: str) -> float | None:
    """``wait`` as seconds: ``None`` (not given) or a real number at least zero, ``inf``
    included; else ``ValueError`` naming ``what``. As ``check_timeout``, but zero is a wait
    (do not wait at all), not a deadline."""
    if wait is None:
        return None
    if (isinstance(wait, bool) or not isinstance(wait, (int, float, np.integer, np.floating))
            or not wait >= 0):  # (NaN is not at least zero)
        raise ValueError(f"{what} must be a number of seconds at least 0 or None, got {wait!r}")
    try:
        return float(wait)
    except OverflowError:  # an int beyond any float: longer than any wait
        return math.inf


class RecvBounds(NamedTuple):
    """How many results ``recv`` returns and how long it waits for them: at most
    ``batch_size``; at least ``min_size`` (fewer only if fewer are owed), and more up to
    ``batch_size`` only while less than ``wait`` seconds have passed since it was called."""

    batch_size: int
    min_size: int
    wait: float


def check_recv_bounds(batch_size: int | None, min_size: int | None, wait: float | None, *,
                      default_batch_size: int, num_envs: int) -> RecvBounds:
    """``recv``'s ``batch_size``, ``min_size`` and ``wait``, checked in that order, with their
    defaults: ``batch_size`` the vector env's; with neither of the other two, a full batch
    (``min_size=batch_size``); with ``wait`` alone, ``min_size=1``; with ``min_size`` alone,
    ``wait=0`` (whatever is ready once ``min_size`` are)."""
    size = check_count(batch_size, "batch_size", num_envs)
    size = default_batch_size if size is None else size
    least = check_count(min_size, "min_size", num_envs)
    if least is not None and least > size:
        raise ValueError(f"min_size must be at most batch_size={size}, got {least}")
    seconds = check_wait(wait, "wait")
    if least is None:
        least = size if seconds is None else 1
    return RecvBounds(size, least, 0.0 if seconds is None else seconds)


def check_env_ids(env_ids: Any, num_envs: int) -> list[int]:
    """``env_ids`` (``None``: all) as a list of distinct sub-env indices below ``num_envs``;
    else ``ValueError`` saying what is wrong (``send``'s check, local and remote alike)."""
    if env_ids is None:
        return list(range(num_envs))
    ids = np.asarray(env_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise ValueError(f"env_ids must be a 1-D sequence of sub-env indices, got {env_ids!r}")
    listed: list[int] = ids.tolist()
    if not listed:
        raise ValueError("env_ids is empty: send at least one sub-env an action")
    if min(listed) < 0 or max(listed) >= num_envs:
        raise ValueError(f"env_ids must lie in [0, {num_envs}), got {listed}")
    if len(set(listed)) != len(listed):
        raise ValueError(f"env_ids lists a sub-env twice: {listed}")
    return listed
