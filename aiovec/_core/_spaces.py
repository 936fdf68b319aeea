"""Working out the vector env's spaces from its sub-envs, with Gymnasium's checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gymnasium import Space
from gymnasium.spaces import Dict, Tuple
from gymnasium.spaces.utils import is_space_dtype_shape_equiv

from aiovec._core._batching import batch_differing_spaces, batch_space
from aiovec._core._requests import EnvDescription

__all__ = ["ObservationMode", "VectorSpaces", "resolve_spaces"]

#: ``"same"``, ``"different"``, or a ``(batched, single)`` pair of observation spaces.
ObservationMode = str | tuple[Space[Any], Space[Any]]


@dataclass(frozen=True)
class VectorSpaces:
    """The single and batched observation and action spaces of a vector env."""

    single_observation_space: Space[Any]
    observation_space: Space[Any]
    single_action_space: Space[Any]
    action_space: Space[Any]


def check_observation_mode(observation_mode: ObservationMode) -> None:
    """Reject a bad ``observation_mode`` at construction, before any sub-env is made."""
    if isinstance(observation_mode, tuple):
        if len(observation_mode) != 2 or not all(isinstance(s, Space) for s in observation_mode):
            raise TypeError(
                "observation_mode as a tuple must be (batched observation space, "
                f"single observation space), got {observation_mode!r}"
            )
    elif observation_mode not in ("same", "different"):
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and "
            f"batch observation space, actual got {observation_mode}"
        )


def space_difference(space: Space[Any], other: Space[Any], path: str = "") -> str:
    """Where two unequal spaces first differ, for error messages (Dict and Tuple spaces can
    be too long to print whole)."""
    if isinstance(space, Dict) and isinstance(other, Dict):
        if list(space.spaces) != list(other.spaces):
            return f"at {path or 'the top'}: keys {list(space.spaces)} vs {list(other.spaces)}"
        for key in space.spaces:
            if space[key] != other[key]:
                return space_difference(space[key], other[key], f"{path}[{key!r}]")
    if (isinstance(space, Tuple) and isinstance(other, Tuple)
            and len(space.spaces) == len(other.spaces)):
        for index, (child, other_child) in enumerate(zip(space.spaces, other.spaces)):
            if child != other_child:
                return space_difference(child, other_child, f"{path}[{index}]")
    return f"at {path or 'the top'}: {space} vs {other}"


def resolve_spaces(
    observation_mode: ObservationMode, descriptions: Sequence[EnvDescription]
) -> VectorSpaces:
    """The vector env's spaces; ``RuntimeError`` when the sub-envs' spaces do not batch."""
    first = descriptions[0]
    num_envs = len(descriptions)
    if isinstance(observation_mode, tuple):
        observation_space, single_observation_space = observation_mode
    elif observation_mode == "same":
        single_observation_space = first.observation_space
        observation_space = batch_space(single_observation_space, num_envs)
    else:
        single_observation_space = first.observation_space
        observation_space = batch_differing_spaces([d.observation_space for d in descriptions])

    for index, description in enumerate(descriptions):
        if observation_mode == "same":
            if description.observation_space != single_observation_space:
                difference = space_difference(description.observation_space,
                                              single_observation_space)
                raise RuntimeError(
                    "observation_mode='same' but the sub-environments observation spaces are "
                    f"not equivalent. Sub-env {index}'s observation space differs from sub-env "
                    f"0's {difference}. If this is intentional, use "
                    "`observation_mode='different'` instead."
                )
        elif not is_space_dtype_shape_equiv(description.observation_space,
                                            single_observation_space):
            raise RuntimeError(
                f"sub-env {index}'s observation space {description.observation_space} does not "
                f"share shape and dtype with {single_observation_space}"
            )
        if description.action_space != first.action_space:
            raise RuntimeError(
                f"sub-env {index} has action space {description.action_space}, not "
                f"{first.action_space}: the action spaces of all sub-envs must be equal."
            )
    return VectorSpaces(
        single_observation_space=single_observation_space,
        observation_space=observation_space,
        single_action_space=first.action_space,
        action_space=batch_space(first.action_space, num_envs),
    )
