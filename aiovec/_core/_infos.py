"""Merging per-sub-env info dicts into one batched info dict, exactly as Gymnasium does.

Every key gets an array with one entry per sub-env and a boolean mask ``_key`` telling which
sub-envs set it; nested dicts merge recursively and ``final_obs`` stays an object array.

A worker hosting a run of sub-envs merges their infos itself (``pack_infos``), in parallel with
the other workers; the parent then splices each run into the batch (``splice_infos``): work per
key and worker, not per key and sub-env, in the one process every vector step waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["SCALAR_TYPES", "PackedInfos", "merge_info", "pack_infos", "splice_infos"]

#: Python scalars whose column ``merge_info`` makes of their own type (as NumPy scalars').
SCALAR_TYPES = (int, float, bool)


def _empty_column(value: Any, num_envs: int) -> np.ndarray[Any, Any]:
    """An all-zero (or all-``None``) column able to hold ``value`` for every sub-env."""
    if type(value) in SCALAR_TYPES or isinstance(value, np.number):
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


class PackedInfos(NamedTuple):
    """The infos of a run of consecutive sub-envs, merged where they were made (a worker)
    so that the parent splices one array per key into the batch instead of merging every
    sub-env's dict (``splice_infos``).

    ``infos`` is ``merge_info``'s result over the run's own rows; ``kinds`` the one type
    (``_kind``) each key's values had, nested as the infos are.
    """

    infos: dict[str, Any]
    kinds: dict[str, Any]


def _kind(value: Any) -> Any:
    """What a value must share with the others of its key for their merge to be exact."""
    if isinstance(value, np.ndarray):
        return (np.ndarray, value.dtype, value.shape)
    return type(value)


def _same_kinds(info: dict[str, Any], kinds: dict[str, Any]) -> bool:
    """Record ``info``'s kinds in ``kinds``; False if a key's value differs in kind from the
    ones seen before."""
    for key, value in info.items():
        if isinstance(value, dict) and key != "final_obs":
            nested = kinds.setdefault(key, {})
            if not isinstance(nested, dict) or not _same_kinds(value, nested):
                return False
            continue
        kind = _kind(value)
        if kinds.setdefault(key, kind) != kind:
            return False
    return True


def pack_infos(entries: Sequence[tuple[int, dict[str, Any] | None, dict[str, Any] | None]],
               count: int) -> PackedInfos | None:
    """Merge ``(row, info, final)`` of a run of ``count`` sub-envs as the whole batch would
    merge them (``final`` first, then ``info``, row by row); ``None`` when some key's values
    differ in kind between rows: then only merging them one by one into the batch is exact."""
    infos: dict[str, Any] = {}
    kinds: dict[str, Any] = {}
    for row, info, final in entries:
        if final is not None:
            if not _same_kinds(final, kinds):
                return None
            merge_info(infos, final, row, count)
        if info:
            if not _same_kinds(info, kinds):
                return None
            merge_info(infos, info, row, count)
    return PackedInfos(infos, kinds)


def splice_infos(batched: dict[str, Any], packed: PackedInfos, first_row: int,
                 num_envs: int) -> None:
    """Add a run's ``packed`` infos, whose rows start at ``first_row``, into ``batched`` (in
    place): the result ``merge_info`` would give for each of its sub-envs in turn."""
    _splice(batched, packed.infos, packed.kinds, first_row, num_envs)


def _splice(batched: dict[str, Any], infos: dict[str, Any], kinds: dict[str, Any],
            first_row: int, num_envs: int) -> None:
    for key, column in infos.items():
        kind = kinds.get(key)
        if isinstance(column, dict):
            nested = batched.get(key)
            if nested is None:
                nested = batched[key] = {}
            _splice(nested, column, kind if isinstance(kind, dict) else {}, first_row,
                    num_envs)
            continue
        rows = slice(first_row, first_row + len(column))
        target = batched.get(key)
        if target is None and len(column) == num_envs:
            # The run is the whole batch, and the column its own (packed infos are spliced
            # once): it is the column the lines below would make and fill.
            batched[key] = column
            continue
        if target is None:  # as ``_empty_column`` makes it for the run's first value
            arrays = isinstance(kind, tuple) and key != "final_obs"  # an object column always
            target = batched[key] = (
                np.full(num_envs, fill_value=None, dtype=object)
                if column.dtype == object and not arrays
                else np.zeros((num_envs, *column.shape[1:]), dtype=column.dtype))
        if (isinstance(target, np.ndarray) and target.dtype == column.dtype
                and target.shape[1:] == column.shape[1:]):
            target[rows] = column  # what setting each row would give, at once
            continue
        # Another run created the column with another dtype (or, oddly, as a dict): set the
        # rows one by one from the original values, as merging each sub-env's info would.
        mask = infos.get(f"_{key}")
        if mask is None:  # ``column`` is a mask, met with another sub-env's key of its name
            for offset in np.flatnonzero(column).tolist():
                target[first_row + offset] = True
            continue
        python_scalar = kind in SCALAR_TYPES
        for offset in np.flatnonzero(mask).tolist():
            value = column[offset]
            target[first_row + offset] = value.item() if python_scalar else value
