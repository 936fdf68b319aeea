"""Batching a space: aiovec's one ``batch_space``, equal to Gymnasium's, without its copy per row.

Gymnasium batches a space that has no array form (``Text``, ``Sequence``, ``Graph``,
``OneOf``, a custom space) as a ``Tuple`` of ``n`` deep copies of it, each seeded apart. One
deep copy of a ``Text`` with a wide charset takes milliseconds: seconds for thousands of rows,
and a first-ready loop batches again at each new batch size. Here the rows of such a ``Tuple``
are one space, shared: a private copy of the given space (sampling the batch never moves the
given space's generator), seeded as Gymnasium seeds its first row. The batch is equal (``==``)
to Gymnasium's. Sampling it draws from the shared row once per row, so the rows still differ
(row 0 as Gymnasium's row 0; the others otherwise); seeding it with one seed per row seeds the
shared row with each in turn, so the last one holds.

Array spaces (``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``) are batched by
Gymnasium itself; ``Dict`` and ``Tuple`` are recursed into as Gymnasium does. A batch of a
space batched into rows is a tuple of values, one per sub-env (``batches_into_rows``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from gymnasium import Space
from gymnasium.spaces import Box, Dict, Tuple
from gymnasium.vector import utils as gym_utils

from aiovec._core._observations import copy_observations

__all__ = ["TUPLE_OF_VALUES", "batch_differing_spaces", "batch_space", "batches_into_rows",
           "concatenate_afresh", "concatenate_into", "copied_rows", "copy_batch", "shared_rows",
           "take_rows"]

#: Gymnasium's batching of a space it cannot batch into arrays (a Tuple of copies), and of
#: Dict and Tuple spaces: the implementations its ``batch_space`` dispatches to.
_COPY_PER_ROW = gym_utils.batch_space.dispatch(Space)
_DICT = gym_utils.batch_space.dispatch(Dict)
_TUPLE = gym_utils.batch_space.dispatch(Tuple)
#: Gymnasium's first row seed is the first of ``n`` integers below this.
_ROW_SEEDS = int(1e8)
#: Gymnasium's ``concatenate`` of values of a space batched into rows: the tuple of them
#: (``out`` unused).
TUPLE_OF_VALUES = gym_utils.concatenate.dispatch(Space)


def shared_rows(space: Space[Any], n: int = 1) -> Tuple[Any]:
    """``n`` rows that are one private copy of ``space`` (see the module docstring)."""
    row = copy.deepcopy(space)
    row.seed(int(copy.deepcopy(space.np_random).integers(0, _ROW_SEEDS)))
    return Tuple((row,) * n, seed=copy.deepcopy(space.np_random))


def batches_into_rows(space: Space[Any]) -> bool:
    """Whether a batch of ``space``'s values is a tuple of them, one per sub-env (``Text``,
    ``Sequence``, ``Graph``, ``OneOf``, ``aiovec.ObjectSpace``, custom spaces), rather than
    arrays or a ``Dict`` or ``Tuple`` of batches."""
    how = gym_utils.batch_space.dispatch(type(space))
    return how is _COPY_PER_ROW or how is shared_rows


def batch_space(space: Space[Any], n: int = 1) -> Space[Any]:
    """The space of a batch of ``n`` values of ``space``: equal to
    ``gymnasium.vector.utils.batch_space(space, n)``, its rows shared where Gymnasium copies
    them."""
    how = gym_utils.batch_space.dispatch(type(space))
    if how is _COPY_PER_ROW or how is shared_rows:
        return shared_rows(space, n)
    if how is _DICT:
        assert isinstance(space, Dict)
        return Dict({key: batch_space(child, n) for key, child in space.spaces.items()},
                    seed=copy.deepcopy(space.np_random), sort_keys=space.sort_keys)
    if how is _TUPLE:
        assert isinstance(space, Tuple)
        return Tuple(tuple(batch_space(child, n) for child in space.spaces),
                     seed=copy.deepcopy(space.np_random))
    batched: Space[Any] = how(space, n)
    return batched


def batch_differing_spaces(spaces: Sequence[Space[Any]]) -> Space[Any]:
    """The space of a batch of values of ``spaces``, one each: equal to
    ``gymnasium.vector.utils.batch_differing_spaces(spaces)``. Rows of spaces batched into
    rows are private copies, one per distinct space object (sub-envs that share their space
    share its row)."""
    if spaces and all(type(space) is type(spaces[0]) for space in spaces):
        first = spaces[0]
        gymnasium_batches = type(first) in gym_utils.batch_differing_spaces.registry
        if batches_into_rows(first) and gymnasium_batches:
            return copied_rows(spaces)
        if isinstance(first, Dict):  # (every one is: the same type)
            dicts = cast("Sequence[Dict]", spaces)
            if all(space.spaces.keys() == first.spaces.keys() for space in dicts):
                return Dict({key: batch_differing_spaces([space[key] for space in dicts])
                             for key in first.spaces},
                            seed=copy.deepcopy(first.np_random), sort_keys=first.sort_keys)
        if isinstance(first, Tuple):
            tuples = cast("Sequence[Tuple[Any]]", spaces)
            if all(len(space.spaces) == len(first.spaces) for space in tuples):
                return Tuple(tuple(batch_differing_spaces(children)
                                   for children in zip(*(space.spaces for space in tuples))),
                             seed=copy.deepcopy(first.np_random))
    # Arrays, and whatever Gymnasium refuses (it says why).
    batched: Space[Any] = gym_utils.batch_differing_spaces(spaces)
    return batched


def copied_rows(spaces: Sequence[Space[Any]]) -> Tuple[Any]:
    """The batch of values of ``spaces`` (one each) of a space batched into rows: a private
    copy of each distinct space object (sub-envs that share their space share its row)."""
    copies: dict[int, Space[Any]] = {}
    for space in spaces:
        if id(space) not in copies:
            copies[id(space)] = copy.deepcopy(space)
    return Tuple([copies[id(space)] for space in spaces],
                 seed=copy.deepcopy(spaces[0].np_random))


#: Bytes of a batch up to which ``concatenate_into`` stacks it first: past that, the second
#: copy costs more than ``np.stack``'s fixed ~3 µs.
_SMALL_BATCH = 1 << 14


def concatenate_into(space: Space[Any], values: Sequence[Any], out: Any) -> Any:
    """``gymnasium.vector.utils.concatenate(space, values, out)``, and the same batch, with
    a fast path for a small ``Box`` batch: rows that NumPy stacks into exactly ``out``'s
    shape and dtype are copied in at once (~1.5 µs for 8 rows, against ~5 µs through
    ``np.stack``). Any other rows (of another dtype, which Gymnasium casts; a misfit, which
    it refuses) take its way, as do large batches (``np.stack`` into ``out`` copies once,
    this path twice)."""
    if type(space) is Box and type(out) is np.ndarray and out.nbytes <= _SMALL_BATCH:
        try:
            batch = np.asarray(values)
        except (ValueError, TypeError):  # ragged rows: Gymnasium's error names the misfit
            batch = None
        if batch is not None and batch.shape == out.shape and batch.dtype == out.dtype:
            out[...] = batch
            return out
    return gym_utils.concatenate(space, values, out)


def concatenate_afresh(space: Space[Any], values: Sequence[Any]) -> Any:
    """``values`` (one per sub-env) as a new batch: ``gymnasium.vector.utils.concatenate``
    into a new ``create_empty_array``, without the empty array where the batch is a tuple
    of the values (no string per row for ``Text`` to build and throw away)."""
    if gym_utils.concatenate.dispatch(type(space)) is TUPLE_OF_VALUES:
        return tuple(values)
    out: Any = gym_utils.create_empty_array(space, len(values), np.zeros)
    return gym_utils.concatenate(space, values, out)


def take_rows(batch: Any, rows: Any, space: Space[Any]) -> Any:
    """Rows ``rows`` (a slice, or a sequence or array of indices) of a batch of ``space``'s
    values, as a new batch: arrays indexed, tuples of rows picked from, Dict and Tuple
    batches part by part."""
    if isinstance(space, Dict):
        return {key: take_rows(batch[key], rows, child) for key, child in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(take_rows(part, rows, child) for part, child in zip(batch, space.spaces))
    if batches_into_rows(space):
        if isinstance(rows, slice):
            return tuple(batch[rows])
        return tuple(batch[row] for row in rows)
    return batch[rows]


def copy_batch(space: Space[Any], batch: Any) -> Any:
    """A batch just made (``concatenate_afresh``, ``take_rows``, a checked batch of actions)
    as one its receiver owns: its numeric arrays are new already and kept; the values of a
    space batched into rows (the sub-envs' or the caller's own objects) are copied
    (``copy_observations``, arrays inside them too); Dict and Tuple batches part by part."""
    if isinstance(space, Dict):
        return {key: copy_batch(child, batch[key]) for key, child in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(copy_batch(child, part) for child, part in zip(space.spaces, batch))
    if batches_into_rows(space):
        return tuple([copy_observations(value) for value in batch])
    if isinstance(batch, np.ndarray) and batch.dtype != object:
        return batch
    return copy_observations(batch)  # a custom batching: whatever it holds, copied
