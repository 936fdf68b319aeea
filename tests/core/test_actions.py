"""ActionChecker: per-sub-env actions equal Gymnasium's ``iterate``; bad batches say why."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

from aiovec._core._actions import ActionChecker
from tests.helpers import assert_identical

SPACES = [
    spaces.Discrete(4),
    spaces.Box(-1, 1, (2, 3), np.float32),
    spaces.MultiDiscrete([3, 4]),
    spaces.MultiBinary(5),
    spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(0, 1, (2,))}),
    spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(2))),
    spaces.Text(5),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda space: type(space).__name__)
def test_split_equals_gymnasium_iterate(space: spaces.Space[Any]) -> None:
    batched = batch_space(space, 3)
    batched.seed(0)
    actions = batched.sample()
    checker = ActionChecker(space, 3)
    assert_identical(checker.split(checker.check(actions)), list(iterate(batched, actions)))


def test_split_copies_the_callers_array() -> None:
    actions = np.zeros((2, 2), np.float32)
    checker = ActionChecker(spaces.Box(-1, 1, (2,), np.float32), 2)
    per_env = checker.split(checker.check(actions))
    actions[:] = 1
    assert per_env[0].tolist() == [0, 0]


@pytest.mark.parametrize(("space", "actions", "message"), [
    (spaces.Discrete(4), np.zeros(2, np.int64), r"expected shape \(3,\)"),
    (spaces.Discrete(4), np.zeros(3, np.float64), "expected dtype int64"),
    (spaces.MultiBinary(2), np.zeros((3, 2), np.float32), "expected dtype int8"),
    (spaces.Box(0, 1, (2,), np.int32), np.zeros((3, 2), np.float32), "expected dtype int32"),
    (spaces.Box(0, 1, (2,)), [[0.0, 1.0], [1.0]], "cannot be read as an array"),
    (spaces.Dict({"a": spaces.Discrete(2)}), np.zeros(3), "expected a dict"),
    (spaces.Text(5), ["a", "b"], "expected 3 actions, got 2"),
])
def test_bad_batches(space: spaces.Space[Any], actions: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ActionChecker(space, 3).check(actions)


def test_checked_batch_keeps_the_callers_dtype() -> None:
    checker = ActionChecker(spaces.Box(0, 1, (), np.float32), 3)
    batch = checker.check(np.array([0.1, 0.2, 0.3]))
    assert batch.dtype == np.float64  # as Gymnasium passes it: some envs rely on it
    assert type(checker.split(batch)[0]) is np.float64
