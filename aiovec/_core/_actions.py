"""Checking a batch of actions and splitting it into one action per sub-env.

The check runs in the caller's task before any sub-env is touched, so a wrong batch size,
shape or dtype raises ``ValueError`` and no sub-env has stepped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

__all__ = ["ActionSplitter"]

Splitter = Callable[[Any, str], list[Any]]


def _array_splitter(space: spaces.Space[Any], num_envs: int, kinds: str) -> Splitter:
    shape = (num_envs, *(space.shape or ()))
    dtype = space.dtype

    def split(actions: Any, where: str) -> list[Any]:
        try:
            # A private copy: sub-envs never see later changes to the caller's array.
            array = np.array(actions)
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
        if array.dtype.kind not in kinds or (
            dtype is not None and not np.can_cast(array.dtype, dtype, casting="same_kind")
        ):
            raise ValueError(f"{where}: expected dtype {dtype} for {space}, got {array.dtype}")
        return list(array)

    return split


def _dict_splitter(space: spaces.Dict, num_envs: int) -> Splitter:
    children = {key: _make_splitter(child, num_envs) for key, child in space.spaces.items()}
    expected = sorted(children)

    def split(actions: Any, where: str) -> list[Any]:
        if not isinstance(actions, Mapping):
            raise ValueError(f"{where}: expected a dict for {space}, got {type(actions).__name__}")
        if sorted(actions) != expected:
            raise ValueError(f"{where}: expected keys {expected}, got {sorted(actions)}")
        columns = {key: split_child(actions[key], f"{where}[{key!r}]")
                   for key, split_child in children.items()}
        return [{key: column[index] for key, column in columns.items()}
                for index in range(num_envs)]

    return split


def _tuple_splitter(space: spaces.Tuple[Any], num_envs: int) -> Splitter:
    children = [_make_splitter(child, num_envs) for child in space.spaces]

    def split(actions: Any, where: str) -> list[Any]:
        if not isinstance(actions, (tuple, list)) or len(actions) != len(children):
            raise ValueError(
                f"{where}: expected a tuple of {len(children)} batches for {space}, "
                f"got {type(actions).__name__}"
                + (f" of length {len(actions)}" if isinstance(actions, (tuple, list)) else "")
            )
        columns = [split_child(part, f"{where}[{position}]")
                   for position, (split_child, part) in enumerate(zip(children, actions))]
        return list(zip(*columns))

    return split


def _generic_splitter(space: spaces.Space[Any], num_envs: int) -> Splitter:
    batched = batch_space(space, num_envs)

    def split(actions: Any, where: str) -> list[Any]:
        if isinstance(actions, Sequence) and len(actions) != num_envs:
            raise ValueError(f"{where}: expected {num_envs} actions, got {len(actions)}")
        per_env = list(iterate(batched, actions))
        if len(per_env) != num_envs:
            raise ValueError(f"{where}: expected {num_envs} actions, got {len(per_env)}")
        return per_env

    return split


def _make_splitter(space: spaces.Space[Any], num_envs: int) -> Splitter:
    if isinstance(space, spaces.Box):
        return _array_splitter(space, num_envs, "biuf" if space.dtype.kind == "f" else "biu")
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return _array_splitter(space, num_envs, "iu")
    if isinstance(space, spaces.MultiBinary):
        return _array_splitter(space, num_envs, "biu")
    if isinstance(space, spaces.Dict):
        return _dict_splitter(space, num_envs)
    if isinstance(space, spaces.Tuple):
        return _tuple_splitter(space, num_envs)
    return _generic_splitter(space, num_envs)


class ActionSplitter:
    """Validates a batch of actions for ``single_action_space`` and splits it per sub-env."""

    __slots__ = ("_split",)

    def __init__(self, single_action_space: spaces.Space[Any], num_envs: int) -> None:
        self._split = _make_splitter(single_action_space, num_envs)

    def __call__(self, actions: Any) -> list[Any]:
        """One action per sub-env, or ``ValueError`` saying what is wrong with the batch."""
        return self._split(actions, "actions")
