"""Copying batched observations out of the vector env's reusable buffer, and into it; and the
caller's own buffer (``out=``), checked before a call is sent and filled with one copy."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from aiovec._core._requests import Failure

__all__ = ["check_out", "copy_into", "copy_observations", "misfit_failure", "put_rows",
           "read_row"]


#: Values nothing can change, kept as they are in a copy (a NumPy scalar too, but a
#: structured one, which may be a view of an array).
_IMMUTABLE = frozenset({str, bytes, int, float, bool, complex, type(None)})
#: Containers nested deeper than this are deep-copied whole (which also copes with cycles).
_REBUILT_LEVELS = 32


def copy_observations(observations: Any) -> Any:
    """A copy the caller owns, equal to what ``copy.deepcopy`` gives at a fraction of its
    cost: numeric arrays copied; dicts, lists and tuples rebuilt (an object twice inside
    comes out as two copies); immutable values kept (strings, bytes, numbers, ``None``: a
    batch of ``Text`` costs nothing); anything else deep-copied. (A batch whose arrays were
    just made: ``_batching.copy_batch``.)"""
    return _copied(observations, 0)


def _copied(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value.copy()
    if depth > _REBUILT_LEVELS:
        return copy.deepcopy(value)
    if kind is tuple:
        if all(type(item) in _IMMUTABLE for item in value):
            return value
        return tuple([_copied(item, depth + 1) for item in value])
    if kind is list:
        return [_copied(item, depth + 1) for item in value]
    if kind is dict:
        return {key: _copied(item, depth + 1) for key, item in value.items()}
    if isinstance(value, np.generic) and not isinstance(value, np.void):
        return value
    return copy.deepcopy(value)


def read_row(views: Any, env_index: int) -> Any:
    """A private copy of row ``env_index`` of a (tree of) batched views, as a sub-env's value."""
    if isinstance(views, np.ndarray):
        return views[env_index].copy()
    if isinstance(views, dict):
        return {key: read_row(child, env_index) for key, child in views.items()}
    return tuple(read_row(child, env_index) for child in views)


def put_rows(observations: Any, rows: Any, batch: Any, batch_rows: Any = None) -> None:
    """Copy rows ``batch_rows`` (default: all) of ``batch``, a batch of the same tree shape,
    into rows ``rows`` (a slice or an index array) of a (tree of) batched arrays."""
    if isinstance(observations, np.ndarray):
        observations[rows] = batch if batch_rows is None else batch[batch_rows]
    elif isinstance(observations, dict):
        for key, child in observations.items():
            put_rows(child, rows, batch[key], batch_rows)
    else:
        for child, part in zip(observations, batch):
            put_rows(child, rows, part, batch_rows)


def check_out(out: Any, batch: Any, path: str = "out") -> None:
    """Refuse an ``out=`` buffer that is not exactly like ``batch`` (the batch arrays): the
    same tree of dicts and tuples, each leaf a writeable ``np.ndarray`` of the same shape and
    dtype. ``TypeError`` for the wrong kind of object, ``ValueError`` for the wrong array."""
    if isinstance(batch, np.ndarray) and batch.dtype != object:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{path} must be a numpy array of shape {batch.shape} and dtype "
                            f"{batch.dtype}, got {type(out).__name__}")
        if out.shape != batch.shape or out.dtype != batch.dtype:
            raise ValueError(f"{path} must have the batched observation's shape {batch.shape} "
                             f"and dtype {batch.dtype}, got shape {out.shape} and dtype "
                             f"{out.dtype}")
        if not out.flags.writeable:
            raise ValueError(f"{path} is read-only: the observations are written into it")
    elif isinstance(batch, dict):
        if not isinstance(out, dict):
            raise TypeError(f"{path} must be a dict of arrays like the batched observation, "
                            f"got {type(out).__name__}")
        if out.keys() != batch.keys():
            raise ValueError(f"{path} must have the keys {sorted(batch)}, got {sorted(out)}")
        for key, child in batch.items():
            check_out(out[key], child, f"{path}[{key!r}]")
    elif type(batch) is tuple and batch and all(
            isinstance(child, (np.ndarray, dict, tuple)) for child in batch):
        if not isinstance(out, tuple) or len(out) != len(batch):
            raise TypeError(f"{path} must be a tuple of {len(batch)} arrays like the batched "
                            f"observation, got {type(out).__name__}")
        for index, (part, child) in enumerate(zip(out, batch)):
            check_out(part, child, f"{path}[{index}]")
    else:
        raise TypeError(f"out= needs an observation space that batches into numpy arrays (Box, "
                        f"Discrete, MultiBinary, MultiDiscrete, Dict and Tuple of those); "
                        f"{path} would hold {type(batch).__name__} values")


def copy_into(out: Any, batch: Any) -> Any:
    """Copy a batch into ``out`` (checked by ``check_out``) → ``out``."""
    if isinstance(out, np.ndarray):
        np.copyto(out, batch)
    elif isinstance(out, dict):
        for key, child in out.items():
            copy_into(child, batch[key])
    else:
        for part, child in zip(out, batch):
            copy_into(part, child)
    return out


def misfit_failure(env_index: int, phase: str, observation: Any, space: Any,
                   error: Exception) -> Failure:
    """The failure of a sub-env whose observation does not fit its batch row."""
    expected = getattr(space, "shape", None)
    shape = getattr(observation, "shape", None)
    try:
        if shape is not None and expected is not None and shape != expected:
            raise ValueError(f"sub-env {env_index} returned an observation of shape {shape}; "
                             f"its observation space has shape {expected}") from error
        raise ValueError(f"sub-env {env_index} returned an observation that does not fit its "
                         f"observation space {space}: {error}") from error
    except ValueError as refused:
        return Failure.capture(env_index, phase, refused)
