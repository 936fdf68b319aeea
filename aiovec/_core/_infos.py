"""Merging per-sub-env info dicts into one batched info dict, exactly as Gymnasium does.

Every key gets an array with one entry per sub-env and a boolean mask ``_key`` telling which
sub-envs set it; nested dicts merge recursively and ``final_obs`` stays an object array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["merge_info"]

_SCALAR_TYPES = (int, float, bool)


def _empty_column(value: Any, num_envs: int) -> np.ndarray[Any, Any]:
    """An all-zero (or all-``None``) column able to hold ``value`` for every sub-env."""
    if type(value) in _SCALAR_TYPES or isinstance(value, np.number):
        return np.zeros(num_envs, dtype=type(value))
    if isinstance(value, np.ndarray):
        return np.zeros((num_envs, *value.shape), dtype=value.dtype)
    return np.full(num_envs, fill_value=None, dtype=object)


def merge_info(
    batched: dict[str, Any], env_info: dict[str, Any], env_index: int, num_envs: int
) -> dict[str, Any]:
    """Add sub-env ``env_index``'s ``env_info`` into ``batched`` (in place) and return it."""
    for key, value in env_info.items():
        if key == "final_obs":
            column = batched.get(key)
            if column is None:
                column = np.full(num_envs, fill_value=None, dtype=object)
            column[env_index] = value
        elif isinstance(value, dict):
            column = merge_info(batched.get(key, {}), value, env_index, num_envs)
        else:
            column = batched.get(key)
            if column is None:
                column = _empty_column(value, num_envs)
            column[env_index] = value
        mask = batched.get(f"_{key}")
        if mask is None:
            mask = np.zeros(num_envs, dtype=np.bool_)
        mask[env_index] = True
        batched[key] = column
        batched[f"_{key}"] = mask
    return batched
