"""Copying batched observations out of the vector env's reusable buffer, and into it."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from aiovec._core._requests import Failure

__all__ = ["copy_observations", "misfit_failure", "put_rows", "read_row", "take_rows"]


def copy_observations(observations: Any) -> Any:
    """A copy the caller owns: arrays copied, dicts and tuples rebuilt, anything else deep-copied.

    Equivalent to ``copy.deepcopy`` for what ``gymnasium.vector.utils.concatenate`` produces,
    at a fraction of its cost for plain arrays.
    """
    if isinstance(observations, np.ndarray) and observations.dtype != object:
        return observations.copy()
    if type(observations) is dict:
        return {key: copy_observations(value) for key, value in observations.items()}
    if type(observations) is tuple:
        return tuple(copy_observations(value) for value in observations)
    return copy.deepcopy(observations)


def take_rows(observations: Any, rows: np.ndarray[Any, np.dtype[np.intp]]) -> Any:
    """A new batch of the given rows of a batched observation (a tree of arrays)."""
    if isinstance(observations, np.ndarray):
        return observations[rows]
    if isinstance(observations, dict):
        return {key: take_rows(value, rows) for key, value in observations.items()}
    return tuple(take_rows(value, rows) for value in observations)


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
