"""``concatenate_into``: Gymnasium's batch, with a fast path for rows that stack exactly."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import concatenate, create_empty_array

from aiovec._core._batching import concatenate_into

BOX = gym.spaces.Box(-10, 10, (2, 3), np.float32)


def _both(space: gym.Space[Any], rows: list[Any]) -> tuple[Any, Any]:
    ours = create_empty_array(space, len(rows), np.zeros)
    theirs = create_empty_array(space, len(rows), np.zeros)
    returned = concatenate_into(space, rows, ours)
    if isinstance(space, gym.spaces.Box):
        assert returned is ours  # written in place
    return returned, concatenate(space, rows, theirs)


@pytest.mark.parametrize("rows", [
    [np.full((2, 3), i, np.float32) for i in range(5)],  # exact: the fast path
    [np.full((2, 3), i + 0.1, np.float64) for i in range(5)],  # cast, as Gymnasium does
    [np.full((2, 3), i, np.int64) for i in range(5)],
    [[[i] * 3] * 2 for i in range(5)],  # nested lists
    [np.full((2, 3), 1, np.float32)] * 4 + [np.full((2, 3), 2.5, np.float64)],  # mixed
], ids=["exact", "float64", "int64", "lists", "mixed"])
def test_the_batch_is_gymnasiums(rows: list[Any]) -> None:
    ours, theirs = _both(BOX, rows)
    assert ours.dtype == theirs.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)


def _gymnasiums_error(space: gym.Space[Any], rows: list[Any]) -> str:
    try:
        concatenate(space, rows, create_empty_array(space, len(rows), np.zeros))
    except ValueError as error:
        return str(error)
    raise AssertionError("Gymnasium took these rows")


@pytest.mark.parametrize("misfit", [np.zeros((3, 2), np.float32), np.zeros(6, np.float32),
                                    np.zeros((2, 3, 1), np.float32), np.float32(1.0)],
                         ids=["transposed", "flat", "extra axis", "scalar"])
def test_a_misfit_is_refused_as_gymnasium_refuses_it(misfit: Any) -> None:
    rows = [np.zeros((2, 3), np.float32)] * 3 + [misfit]
    with pytest.raises(ValueError, match=re.escape(_gymnasiums_error(BOX, rows))):
        concatenate_into(BOX, rows, create_empty_array(BOX, 4, np.zeros))


def test_rows_that_would_broadcast_are_not_taken_for_a_batch() -> None:
    # Four scalars for four rows of shape (4,): one assignment would broadcast them into
    # every row; Gymnasium refuses them, and so does the batch.
    space = gym.spaces.Box(0, 1, (4,), np.float32)
    rows = [np.float32(value) for value in (0.1, 0.2, 0.3, 0.4)]
    with pytest.raises(ValueError, match=re.escape(_gymnasiums_error(space, rows))):
        concatenate_into(space, rows, create_empty_array(space, 4, np.zeros))


def test_other_spaces_take_gymnasiums_way() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": BOX})
    rows = [{"a": i % 3, "b": np.full((2, 3), i, np.float32)} for i in range(4)]
    ours, theirs = _both(space, rows)
    for key in ("a", "b"):
        np.testing.assert_array_equal(ours[key], theirs[key])
