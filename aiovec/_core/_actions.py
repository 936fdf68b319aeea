"""Checking a batch of actions, and splitting it into one action per sub-env.

The check runs in the caller's task before any sub-env is touched, so a wrong batch size,
shape or dtype raises ``ValueError`` (a scalar where a batch belongs: ``TypeError``) and no
sub-env has stepped. The checked batch keeps the caller's dtype, as Gymnasium does: a float32
Box stepped with float64 actions receives float64 rows on every backend. It is a private copy
(nothing sees later changes to the caller's array), unless the backend consumes the actions
before the call returns (``Backend.keeps_actions``): then the caller's arrays are passed on
as they are and written once, where the sub-envs read them.

With ``values`` (``validate_actions=True``) each value must also lie within the space's
bounds, compared as the real numbers they are whatever the two dtypes (``_Limits``), so the
verdict is the same at every batch size and no cast can warn or round a value inside.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import iterate

from aiovec._core._batching import batch_space

__all__ = ["ActionChecker", "ActionCheckers", "accepted_kinds"]

Check = Callable[[Any, str, bool], Any]
Split = Callable[[Any], list[Any]]


@dataclass(frozen=True, slots=True)  # read on every check: slots read faster than a tuple
class _Limits:
    """A space's bounds for actions of one dtype, in a dtype where both are exact, so that a
    value is inside exactly when ``low <= value <= high`` there, as real numbers: a float
    action is compared with float bounds in the wider of their dtypes; an integer action with
    the integers its bounds hold (``ceil`` of a low, ``floor`` of a high, within its dtype's
    range). NaN is inside no limits: a comparison with it is False, both ways."""

    low: np.ndarray[Any, Any]  # the space's shape, element by element
    high: np.ndarray[Any, Any]
    # Where one pair bounds every element (else None), that pair in two forms: NumPy scalars
    # of the limits' dtype (for a batch's minimum and maximum) and Python numbers (for
    # values read with ``tolist``). Never a Python number against a NumPy scalar: NumPy
    # would first cast the number to the scalar's dtype.
    lowest: np.generic | None
    highest: np.generic | None
    lowest_number: Any
    highest_number: Any


def _space_bounds(space: spaces.Space[Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The lowest and highest value ``space`` allows, element by element: a Box's in its
    dtype, the others' as Python ints (``start + n - 1`` cannot overflow there)."""
    if isinstance(space, spaces.Box):
        return space.low, space.high
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return np.array(start, object), np.array(start + int(space.n) - 1, object)
    if isinstance(space, spaces.MultiDiscrete):
        starts = space.start.astype(object)
        return starts, starts + space.nvec.astype(object) - 1
    assert isinstance(space, spaces.MultiBinary)
    return np.zeros(space.shape, np.int8), np.ones(space.shape, np.int8)


def _limits(space: spaces.Space[Any], dtype: np.dtype[Any]) -> _Limits:
    """``space``'s bounds for actions of ``dtype`` (a dtype the space accepts)."""
    low, high = _space_bounds(space)
    if dtype.kind == "f":  # only a float Box takes floats; both exact in the wider float
        wider = np.promote_types(dtype, low.dtype)
        low, high = low.astype(wider), high.astype(wider)
    else:  # bools compare as the integers 0 and 1
        low, high = _whole(low, high, np.dtype(np.uint8) if dtype.kind == "b" else dtype)
    if low.size and (low == low.flat[0]).all() and (high == high.flat[0]).all():
        lowest, highest = low.flat[0], high.flat[0]
        return _Limits(low, high, lowest, highest, lowest.item(), highest.item())
    return _Limits(low, high, None, None, None, None)


def _whole(low: np.ndarray[Any, Any], high: np.ndarray[Any, Any], dtype: np.dtype[Any]
           ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The values of the integer ``dtype`` within ``[low, high]``, as bounds in ``dtype``
    (``(max, min)``, which nothing is within, where there are none). Worked out in Python
    numbers, where integers and floats compare exactly, once per distinct bound."""
    info = np.iinfo(dtype)
    lowest, none_above = _inward(low, info, dtype, lower=True)
    highest, none_below = _inward(high, info, dtype, lower=False)
    empty = none_above | none_below
    return (np.where(empty, np.asarray(info.max, dtype), lowest),
            np.where(empty, np.asarray(info.min, dtype), highest))


def _inward(bound: np.ndarray[Any, Any], info: np.iinfo[Any], dtype: np.dtype[Any], *,
            lower: bool) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Each bound (``lower``: a low one) rounded inward and clipped to ``info``'s range, and
    where it lies past the far end of that range (no value of ``dtype`` is on its inside)."""
    distinct, where = np.unique(bound, return_inverse=True)
    limits, past = [], []
    for value in distinct.tolist():  # Python ints or floats (a bound is never NaN)
        if value < info.min:
            limit, beyond = info.min, not lower
        elif value > info.max:
            limit, beyond = info.max, lower
        else:
            limit, beyond = math.ceil(value) if lower else math.floor(value), False
        limits.append(limit)
        past.append(beyond)
    where = where.reshape(bound.shape)
    return np.array(limits, dtype)[where], np.array(past, bool)[where]


def _outside(batch: np.ndarray[Any, Any], limits: _Limits) -> np.ndarray[Any, Any]:
    """For each row of ``batch`` (one sub-env's action), True if it is outside ``limits``:
    one vectorized comparison, not ``num_envs`` calls to ``contains``."""
    inside = (batch >= limits.low) & (batch <= limits.high)
    return np.asarray(~inside.reshape(len(batch), -1).all(axis=1))


class _Outside(Exception):
    """Actions outside the space, by position in the batch (named by sub-env on the way out)."""

    def __init__(self, space: spaces.Space[Any], where: str, positions: Sequence[int],
                 action: Any) -> None:
        super().__init__(where)
        self.space, self.where, self.positions, self.action = space, where, positions, action

    def describe(self, env_ids: Sequence[int] | None) -> str:
        named = [position if env_ids is None else env_ids[position]
                 for position in self.positions]
        others = f" (so are those of sub-envs {named[1:]})" if len(named) > 1 else ""
        return (f"{self.where}: sub-env {named[0]}'s action {self.action!r} is outside "
                f"{self.space}{others}; nothing was sent")


def _array_rules(space: spaces.Space[Any], num_envs: int, kinds: str,
                 values: bool) -> tuple[Check, Split]:
    shape = (num_envs, *(space.shape or ()))
    dtype = np.dtype(space.dtype)
    # Dtypes seen to pass (a dict lookup, not can_cast), each with its limits (with values).
    accepted: dict[np.dtype[Any], _Limits | None] = {}

    def check(actions: Any, where: str, copy: bool) -> Any:
        try:
            array = np.asarray(actions)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: cannot be read as an array: {exc}") from None
        if array.ndim == 0:  # one action, not a batch (Gymnasium raises TypeError here too)
            what = "a scalar" if array.dtype != object else f"a {type(actions).__name__}"
            raise TypeError(f"{where}: expected a batch of {num_envs} actions, got {what}")
        if array.shape != shape:
            raise ValueError(
                f"{where}: expected shape {shape} for {num_envs} sub-envs of {space}, "
                f"got {array.shape}"
            )
        try:
            limits = accepted[array.dtype]
        except KeyError:
            if array.dtype.kind not in kinds or not np.can_cast(array.dtype, dtype, "same_kind"):
                raise ValueError(f"{where}: expected dtype {dtype} for {space}, "
                                 f"got {array.dtype}") from None
            limits = accepted[array.dtype] = _limits(space, array.dtype) if values else None
        if limits is not None and (limits.lowest is None or not _within(array, limits)):
            offenders = np.flatnonzero(_outside(array, limits)).tolist()
            if offenders:
                raise _Outside(space, where, offenders, array[offenders[0]].tolist())
        return np.array(array) if copy else array

    return check, list


#: Up to this many values, bounds are checked in Python: faster than two reductions.
_FEW_VALUES = 16


def _within(array: np.ndarray[Any, Any], limits: _Limits) -> bool:
    """Every value within ``limits``, one pair bounding every element (False when empty: the
    slow path then finds none outside), each compared in a form holding both sides exactly."""
    size = array.size
    if size > _FEW_VALUES:
        return bool(array.min() >= limits.lowest and array.max() <= limits.highest)
    low, high = limits.lowest_number, limits.highest_number
    return size > 0 and all(low <= value <= high for value in array.ravel().tolist())


def _dict_rules(space: spaces.Dict, num_envs: int, values: bool) -> tuple[Check, Split]:
    children = {key: _rules(child, num_envs, values) for key, child in space.spaces.items()}
    expected = sorted(children)

    def check(actions: Any, where: str, copy: bool) -> Any:
        if not isinstance(actions, Mapping):
            raise ValueError(f"{where}: expected a dict for {space}, got {type(actions).__name__}")
        if sorted(actions) != expected:
            raise ValueError(f"{where}: expected keys {expected}, got {sorted(actions)}")
        return {key: rules[0](actions[key], f"{where}[{key!r}]", copy)
                for key, rules in children.items()}

    def split(batch: Any) -> list[Any]:
        columns = {key: rules[1](batch[key]) for key, rules in children.items()}
        return [{key: column[index] for key, column in columns.items()}
                for index in range(num_envs)]

    return check, split


def _tuple_rules(space: spaces.Tuple[Any], num_envs: int,
                 values: bool) -> tuple[Check, Split]:
    children = [_rules(child, num_envs, values) for child in space.spaces]

    def check(actions: Any, where: str, copy: bool) -> Any:
        if not isinstance(actions, (tuple, list)) or len(actions) != len(children):
            length = f" of length {len(actions)}" if isinstance(actions, (tuple, list)) else ""
            raise ValueError(f"{where}: expected a tuple of {len(children)} batches for {space}, "
                             f"got {type(actions).__name__}{length}")
        return tuple(rules[0](part, f"{where}[{position}]", copy)
                     for position, (rules, part) in enumerate(zip(children, actions)))

    def split(batch: Any) -> list[Any]:
        return list(zip(*(rules[1](part) for rules, part in zip(children, batch))))

    return check, split


def _generic_rules(space: spaces.Space[Any], num_envs: int,
                   values: bool) -> tuple[Check, Split]:
    batched = batch_space(space, num_envs)

    def check(actions: Any, where: str, copy: bool) -> Any:
        # A new list either way; its items are the caller's (no batched array to copy).
        if isinstance(actions, Sequence) and len(actions) != num_envs:
            raise ValueError(f"{where}: expected {num_envs} actions, got {len(actions)}")
        per_env = list(iterate(batched, actions))
        if len(per_env) != num_envs:
            raise ValueError(f"{where}: expected {num_envs} actions, got {len(per_env)}")
        if values:  # no batched form to compare against: one contains() per sub-env
            offenders = [index for index, action in enumerate(per_env)
                         if not space.contains(action)]
            if offenders:
                raise _Outside(space, where, offenders, per_env[offenders[0]])
        return per_env

    return check, list


def accepted_kinds(space: spaces.Space[Any]) -> str | None:
    """The NumPy dtype kinds a batch of actions for ``space`` may have (each must also cast to
    its dtype ``same_kind``): bools are no Discrete index, floats no integer; ``None`` for
    spaces checked otherwise (Dict, Tuple, custom)."""
    if isinstance(space, spaces.Box):
        return "biuf" if space.dtype is not None and space.dtype.kind == "f" else "biu"
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return "iu"
    if isinstance(space, spaces.MultiBinary):
        return "biu"
    return None


def _rules(space: spaces.Space[Any], num_envs: int, values: bool) -> tuple[Check, Split]:
    kinds = accepted_kinds(space)
    if kinds is not None:
        return _array_rules(space, num_envs, kinds, values)
    if isinstance(space, spaces.Dict):
        return _dict_rules(space, num_envs, values)
    if isinstance(space, spaces.Tuple):
        return _tuple_rules(space, num_envs, values)
    return _generic_rules(space, num_envs, values)


class ActionChecker:
    """Validates batches of actions for ``single_action_space`` and splits them per sub-env;
    with ``values``, every action must also lie in the space (``validate_actions=True``)."""

    __slots__ = ("_check", "split")

    def __init__(self, single_action_space: spaces.Space[Any], num_envs: int,
                 values: bool = False) -> None:
        self._check, self.split = _rules(single_action_space, num_envs, values)

    def check(self, actions: Any, env_ids: Sequence[int] | None = None, *,
              copy: bool = True) -> Any:
        """The batch as a private copy (with ``copy=False``: its arrays are the caller's), or
        an error saying what is wrong with it (``env_ids``: the sub-envs the batch's rows are
        for, when not all of them in order)."""
        try:
            return self._check(actions, "actions", copy)
        except _Outside as outside:
            raise ValueError(outside.describe(env_ids)) from None


class ActionCheckers:
    """The ``ActionChecker`` of each batch size, made on first use and kept: a first-ready
    ``send`` may name any number of sub-envs. The vector env and the remote client each keep
    one; the server uses its vector env's."""

    __slots__ = ("_by_size", "full", "single_action_space", "values")

    def __init__(self, single_action_space: spaces.Space[Any], num_envs: int,
                 values: bool = False) -> None:
        self.single_action_space = single_action_space
        self.values = values
        #: The checker of a whole batch (``step``), made at once.
        self.full = ActionChecker(single_action_space, num_envs, values)
        self._by_size = {num_envs: self.full}

    def of_size(self, count: int) -> ActionChecker:
        """The checker of a batch for ``count`` sub-envs."""
        checker = self._by_size.get(count)
        if checker is None:
            checker = self._by_size[count] = ActionChecker(self.single_action_space, count,
                                                           self.values)
        return checker
