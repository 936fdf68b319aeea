"""Which batches of actions a vector env with ``validate_actions=True`` accepts, written
plainly, for tests to hold the checker (``aiovec._core._actions``) and the server to; and
batches that probe it where it is easiest to get wrong.

Nothing here shares code with the checker: each value is turned into a Python number
(``.item()``) and compared with the space's bounds as Python numbers, which compare exactly
(an int with a float too), one value at a time. NaN is inside nothing; ``inf <= inf``.

The probes (``edge_batches``): every dtype a batch may come in, values at the bounds and one
ulp beyond them (in the bound's precision and in the action's), NaN, infinities, integers
past 2**24 and 2**53 (where float32 and float64 stop holding every integer) and the ends of
each integer dtype; rows mostly inside with a few such values, and whole batches of one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

__all__ = ["DTYPES", "Refusal", "dtype_accepted", "edge_batches", "element_bounds", "inside",
           "random_batch", "refusal"]

#: Every dtype a batch of actions is checked in (others are refused by kind).
DTYPES = [np.dtype(name) for name in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                      "uint16", "uint32", "uint64", "float16", "float32",
                                      "float64")]
#: Numbers probed for every space: where float32 and float64 stop holding every integer, the
#: ends of int64 and uint64, and floats no float32 (or float16) holds.
_EVERYWHERE: list[int | float] = [
    0, 1, -1, 0.5, math.nan, math.inf, -math.inf, 2**24, 2**24 + 1, -(2**24) - 1, 2**53,
    2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 2**64 - 1, 70000.0, 1e300, -1e300]


class Refusal(NamedTuple):
    """Why a batch is refused: ``where`` in it (``actions['key'][0]``) and, for actions
    outside the space, the first sub-env (row) whose action is (None: a shape, dtype or
    structure the space does not take)."""

    where: str
    row: int | None


def dtype_accepted(space: spaces.Space[Any], dtype: np.dtype[Any]) -> bool:
    """Whether a batch of ``dtype`` is taken for ``space``: bools for a Box or MultiBinary
    (never a Discrete index); integers for any integer space, but no signed one for an
    unsigned space; floats for a float Box only; all of them for a float Box."""
    kind, own = dtype.kind, space.dtype.kind if space.dtype is not None else ""
    if isinstance(space, spaces.Box) and own == "f":
        return kind in "biuf"
    if isinstance(space, spaces.Box) and own == "b":
        return kind == "b"
    if kind == "b":
        return isinstance(space, (spaces.Box, spaces.MultiBinary))
    if kind == "u":
        return True
    return kind == "i" and own == "i"


def element_bounds(space: spaces.Space[Any]) -> list[tuple[int | float, int | float]]:
    """The lowest and highest value ``space`` allows for each element of one action, in
    order (``ravel``), as Python numbers."""
    if isinstance(space, spaces.Box):
        return list(zip(space.low.ravel().tolist(), space.high.ravel().tolist()))
    if isinstance(space, spaces.Discrete):
        return [(int(space.start), int(space.start) + int(space.n) - 1)]
    if isinstance(space, spaces.MultiDiscrete):
        return [(int(start), int(start) + int(count) - 1)
                for start, count in zip(space.start.ravel(), space.nvec.ravel())]
    if isinstance(space, spaces.MultiBinary):
        return [(0, 1)] * int(np.prod(space.shape))
    raise NotImplementedError(space)


def inside(space: spaces.Space[Any], action: np.ndarray[Any, Any]) -> bool:
    """Whether one sub-env's action (an array of ``space``'s shape) lies in ``space``."""
    values = [value.item() for value in action.ravel()]
    return all(low <= value <= high
               for value, (low, high) in zip(values, element_bounds(space), strict=True))


def refusal(space: spaces.Space[Any], num_envs: int, actions: Any,
            where: str = "actions") -> Refusal | None:
    """Why a batch for ``num_envs`` sub-envs is refused, or None if it is accepted."""
    if isinstance(space, spaces.Dict):
        if not isinstance(actions, Mapping) or set(actions) != set(space.spaces):
            return Refusal(where, None)
        parts: list[tuple[str, spaces.Space[Any], Any]] = [
            (f"{where}[{key!r}]", child, actions[key]) for key, child in space.spaces.items()]
    elif isinstance(space, spaces.Tuple):
        if not isinstance(actions, (tuple, list)) or len(actions) != len(space.spaces):
            return Refusal(where, None)
        parts = [(f"{where}[{position}]", child, part)
                 for position, (child, part) in enumerate(zip(space.spaces, actions))]
    else:
        return _array_refusal(space, num_envs, actions, where)
    for part_where, child, part in parts:  # the first part refused is the one reported
        found = refusal(child, num_envs, part, part_where)
        if found is not None:
            return found
    return None


def _array_refusal(space: spaces.Space[Any], num_envs: int, actions: Any,
                   where: str) -> Refusal | None:
    array = np.asarray(actions)
    if array.shape != (num_envs, *space.shape) or not dtype_accepted(space, array.dtype):
        return Refusal(where, None)
    for row, action in enumerate(array):
        if not inside(space, action):
            return Refusal(where, row)
    return None


def _numbers_near(low: int | float, high: int | float, bound_dtype: np.dtype[Any],
                  dtype: np.dtype[Any]) -> list[int | float]:
    """Python numbers at and around one element's bounds, for actions of ``dtype``."""
    numbers = [low, high, *_EVERYWHERE]
    for bound in (low, high):
        if isinstance(bound, int):
            numbers += [bound - 1, bound + 1]
            continue
        if math.isfinite(bound):
            numbers += [math.floor(bound) - 1, math.ceil(bound) + 1]
        for precision in (precision for precision in (bound_dtype, dtype)
                          if precision.kind == "f"):
            with np.errstate(over="ignore"):
                near = np.array(bound, precision)
            numbers += [np.nextafter(near, -np.inf).item(), np.nextafter(near, np.inf).item()]
    return numbers


def _as_dtype(number: int | float, dtype: np.dtype[Any]) -> Any:
    """``number`` as a value of ``dtype`` (rounded to a float dtype's precision), or None
    where an integer dtype does not hold it."""
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return np.array(float(number), dtype)[()]
    if not (isinstance(number, int) or (math.isfinite(number) and number == int(number))):
        return None
    lowest, highest = (0, 1) if dtype.kind == "b" else (
        int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    return np.array(int(number), dtype)[()] if lowest <= int(number) <= highest else None


class _Probe(NamedTuple):
    """Values of one dtype to try at each element of an action (``ravel`` order): all of
    them, and those inside the element's bounds (all of them where none is)."""

    anywhere: list[np.ndarray[Any, Any]]
    inside: list[np.ndarray[Any, Any]]


def _probe(space: spaces.Space[Any], dtype: np.dtype[Any]) -> _Probe:
    bound_dtype = np.dtype(space.dtype)
    anywhere, within = [], []
    for low, high in element_bounds(space):
        values = [_as_dtype(number, dtype)
                  for number in _numbers_near(low, high, bound_dtype, dtype)]
        distinct = np.unique(np.array([value for value in values if value is not None], dtype))
        inner = np.array([value for value in distinct if low <= value.item() <= high], dtype)
        anywhere.append(distinct)
        within.append(inner if inner.size else distinct)
    return _Probe(anywhere, within)


def random_batch(space: spaces.Space[Any], num_envs: int, rng: np.random.Generator,
                 dtype: np.dtype[Any] | None = None) -> Any:
    """One batch of actions: rows inside the space but for up to three probed values (each
    array of a dtype from ``DTYPES`` drawn by ``rng``, unless ``dtype`` is given)."""
    if isinstance(space, spaces.Dict):
        return {key: random_batch(child, num_envs, rng) for key, child in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(random_batch(child, num_envs, rng) for child in space.spaces)
    dtype = DTYPES[rng.integers(len(DTYPES))] if dtype is None else dtype
    return _batch_of(_probe(space, dtype), space, num_envs, dtype, rng)


def _batch_of(probe: _Probe, space: spaces.Space[Any], num_envs: int, dtype: np.dtype[Any],
              rng: np.random.Generator) -> np.ndarray[Any, Any]:
    flat = np.empty((num_envs, len(probe.inside)), dtype)
    for position, values in enumerate(probe.inside):
        flat[:, position] = rng.choice(values, num_envs)
    for _ in range(rng.integers(4)):
        row, position = rng.integers(num_envs), rng.integers(len(probe.anywhere))
        flat[row, position] = rng.choice(probe.anywhere[position])
    return flat.reshape(num_envs, *space.shape)


def edge_batches(space: spaces.Space[Any], num_envs: int, rng: np.random.Generator
                 ) -> Iterator[Any]:
    """Batches for ``space`` that probe its bounds: for a Box, Discrete, MultiDiscrete or
    MultiBinary, in every dtype of ``DTYPES``, a few random batches and, for every probed
    value, a batch of nothing else; for a Dict or Tuple, random batches of random dtypes."""
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        for _ in range(40):
            yield random_batch(space, num_envs, rng)
        return
    shape = (num_envs, *space.shape)
    for dtype in DTYPES:
        probe = _probe(space, dtype)
        for _ in range(4):
            yield _batch_of(probe, space, num_envs, dtype, rng)
        for value in np.unique(np.concatenate(probe.anywhere)):
            yield np.full(shape, value, dtype)
