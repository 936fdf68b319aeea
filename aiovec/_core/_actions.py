"""Checking a batch of actions, and splitting it into one action per sub-env.

The check runs in the caller's task before any sub-env is touched, so a wrong batch size,
shape or dtype raises ``ValueError`` (a scalar where a batch belongs: ``TypeError``) and no
sub-env has stepped. The checked batch keeps the caller's dtype, as Gymnasium does: a float32
Box stepped with float64 actions receives float64 rows on every backend. It is a private copy
(nothing sees later changes to the caller's array), unless the backend consumes the actions
before the call returns (``Backend.keeps_actions``): then the caller's arrays are passed on
as they are and written once, where the sub-envs read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

__all__ = ["ActionChecker", "accepted_kinds"]

Check = Callable[[Any, str, bool], Any]
Split = Callable[[Any], list[Any]]


def _outside(space: spaces.Space[Any], batch: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """For each row of ``batch`` (one sub-env's action), True if ``space`` does not contain
    it: one vectorized comparison per space, not ``num_envs`` calls to ``contains``."""
    if isinstance(space, spaces.Box):
        inside: np.ndarray[Any, Any] = (batch >= space.low) & (batch <= space.high)  # NaN: out
    elif isinstance(space, spaces.Discrete):
        inside = np.asarray((batch >= space.start) & (batch < space.start + space.n))
    elif isinstance(space, spaces.MultiDiscrete):
        inside = np.asarray((batch >= space.start) & (batch < space.start + space.nvec))
    else:  # MultiBinary
        inside = np.asarray((batch == 0) | (batch == 1))
    return np.asarray(~inside.reshape(len(batch), -1).all(axis=1))


def _bounds(space: spaces.Space[Any]) -> tuple[Any, Any] | None:
    """``(lowest, highest)`` allowed values when one pair bounds every element (Discrete,
    MultiBinary, a MultiDiscrete or Box with uniform bounds): then two reductions check a
    whole batch."""
    if isinstance(space, spaces.Discrete):
        return space.start, space.start + space.n - 1
    if isinstance(space, spaces.MultiBinary):
        return 0, 1
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.size:
        start, count = space.start.flat[0], space.nvec.flat[0]
        if (space.start == start).all() and (space.nvec == count).all():
            return start, start + count - 1
    if isinstance(space, spaces.Box) and space.low.size and space.dtype is not None:
        low, high = space.low.flat[0], space.high.flat[0]
        if (space.low == low).all() and (space.high == high).all():
            return low, high
    return None


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
    bounds = _bounds(space) if values else None
    accepted: set[np.dtype[Any]] = set()  # dtypes seen to pass: a set lookup, not can_cast

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
        if array.dtype not in accepted:
            if array.dtype.kind not in kinds or not np.can_cast(array.dtype, dtype, "same_kind"):
                raise ValueError(f"{where}: expected dtype {dtype} for {space}, "
                                 f"got {array.dtype}")
            accepted.add(array.dtype)
        if values and not (bounds is not None and _within(array, bounds)):
            offenders = np.flatnonzero(_outside(space, array)).tolist()
            if offenders:
                raise _Outside(space, where, offenders, array[offenders[0]].tolist())
        return np.array(array) if copy else array

    return check, list


#: Up to this many values, bounds are checked in Python: faster than two reductions.
_FEW_VALUES = 16


def _within(array: np.ndarray[Any, Any], bounds: tuple[Any, Any]) -> bool:
    """Every value within ``bounds`` (False when empty: the slow path then finds none
    outside). NaN is within no bounds: a comparison with it is False, both ways."""
    low, high = bounds
    size = array.size
    if size > _FEW_VALUES:
        return bool(array.min() >= low and array.max() <= high)
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
    """The ``ActionChecker`` and batched action space of each batch size, made on first use
    and kept: a first-ready ``send`` may name any number of sub-envs. The local vector env,
    the remote client and the server each keep one."""

    __slots__ = ("_by_size", "_spaces", "full", "single_action_space", "values")

    def __init__(self, single_action_space: spaces.Space[Any], num_envs: int,
                 values: bool = False) -> None:
        self.single_action_space = single_action_space
        self.values = values
        #: The checker of a whole batch (``step``), made at once.
        self.full = ActionChecker(single_action_space, num_envs, values)
        self._by_size = {num_envs: self.full}
        self._spaces: dict[int, spaces.Space[Any]] = {}

    def of_size(self, count: int) -> ActionChecker:
        """The checker of a batch for ``count`` sub-envs."""
        checker = self._by_size.get(count)
        if checker is None:
            checker = self._by_size[count] = ActionChecker(self.single_action_space, count,
                                                           self.values)
        return checker

    def space(self, count: int) -> spaces.Space[Any]:
        """The action space of a batch for ``count`` sub-envs."""
        space = self._spaces.get(count)
        if space is None:
            space = self._spaces[count] = batch_space(self.single_action_space, count)
        return space


__all__ += ["ActionCheckers"]  # (kept apart from the list above while that part is rewritten)
