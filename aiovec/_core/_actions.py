"""Checking a batch of actions, and splitting it into one action per sub-env.

The check runs in the caller's task before any sub-env is touched, so a wrong batch size,
shape or dtype raises ``ValueError`` (a scalar where a batch belongs: ``TypeError``) and no
sub-env has stepped. The checked batch is a private copy (nothing sees later changes to the
caller's array) that keeps the caller's dtype, as Gymnasium does: a float32 Box stepped with
float64 actions receives float64 rows on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

__all__ = ["ActionChecker"]

Check = Callable[[Any, str], Any]
Split = Callable[[Any], list[Any]]


def _array_rules(space: spaces.Space[Any], num_envs: int, kinds: str) -> tuple[Check, Split]:
    shape = (num_envs, *(space.shape or ()))
    dtype = np.dtype(space.dtype)

    def check(actions: Any, where: str) -> Any:
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
        if array.dtype.kind not in kinds or not np.can_cast(array.dtype, dtype, "same_kind"):
            raise ValueError(f"{where}: expected dtype {dtype} for {space}, got {array.dtype}")
        return np.array(array)  # always a copy

    return check, list


def _dict_rules(space: spaces.Dict, num_envs: int) -> tuple[Check, Split]:
    children = {key: _rules(child, num_envs) for key, child in space.spaces.items()}
    expected = sorted(children)

    def check(actions: Any, where: str) -> Any:
        if not isinstance(actions, Mapping):
            raise ValueError(f"{where}: expected a dict for {space}, got {type(actions).__name__}")
        if sorted(actions) != expected:
            raise ValueError(f"{where}: expected keys {expected}, got {sorted(actions)}")
        return {key: rules[0](actions[key], f"{where}[{key!r}]")
                for key, rules in children.items()}

    def split(batch: Any) -> list[Any]:
        columns = {key: rules[1](batch[key]) for key, rules in children.items()}
        return [{key: column[index] for key, column in columns.items()}
                for index in range(num_envs)]

    return check, split


def _tuple_rules(space: spaces.Tuple[Any], num_envs: int) -> tuple[Check, Split]:
    children = [_rules(child, num_envs) for child in space.spaces]

    def check(actions: Any, where: str) -> Any:
        if not isinstance(actions, (tuple, list)) or len(actions) != len(children):
            length = f" of length {len(actions)}" if isinstance(actions, (tuple, list)) else ""
            raise ValueError(f"{where}: expected a tuple of {len(children)} batches for {space}, "
                             f"got {type(actions).__name__}{length}")
        return tuple(rules[0](part, f"{where}[{position}]")
                     for position, (rules, part) in enumerate(zip(children, actions)))

    def split(batch: Any) -> list[Any]:
        return list(zip(*(rules[1](part) for rules, part in zip(children, batch))))

    return check, split


def _generic_rules(space: spaces.Space[Any], num_envs: int) -> tuple[Check, Split]:
    batched = batch_space(space, num_envs)

    def check(actions: Any, where: str) -> Any:
        if isinstance(actions, Sequence) and len(actions) != num_envs:
            raise ValueError(f"{where}: expected {num_envs} actions, got {len(actions)}")
        per_env = list(iterate(batched, actions))
        if len(per_env) != num_envs:
            raise ValueError(f"{where}: expected {num_envs} actions, got {len(per_env)}")
        return per_env

    return check, list


def _rules(space: spaces.Space[Any], num_envs: int) -> tuple[Check, Split]:
    if isinstance(space, spaces.Box):
        return _array_rules(space, num_envs, "biuf" if space.dtype.kind == "f" else "biu")
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return _array_rules(space, num_envs, "iu")
    if isinstance(space, spaces.MultiBinary):
        return _array_rules(space, num_envs, "biu")
    if isinstance(space, spaces.Dict):
        return _dict_rules(space, num_envs)
    if isinstance(space, spaces.Tuple):
        return _tuple_rules(space, num_envs)
    return _generic_rules(space, num_envs)


class ActionChecker:
    """Validates batches of actions for ``single_action_space`` and splits them per sub-env."""

    __slots__ = ("_check", "split")

    def __init__(self, single_action_space: spaces.Space[Any], num_envs: int) -> None:
        self._check, self.split = _rules(single_action_space, num_envs)

    def check(self, actions: Any) -> Any:
        """The batch as a private copy, or an error saying what is wrong with it."""
        return self._check(actions, "actions")
