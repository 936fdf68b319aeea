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


def _near(space: spaces.Space[Any], rng: np.random.Generator) -> Any:
    """One action near ``space``: inside it or just outside (NaN included, for a Box)."""
    if isinstance(space, spaces.Discrete):
        return rng.integers(space.start - 2, space.start + space.n + 2)
    if isinstance(space, spaces.MultiDiscrete):
        return rng.integers(space.start - 1, space.start + space.nvec + 1)
    if isinstance(space, spaces.MultiBinary):
        return rng.integers(-1, 3, space.shape)
    if isinstance(space, spaces.Box):
        values = rng.uniform(-1.2, 1.2, space.shape)
        if rng.random() < 0.2:
            values.reshape(-1)[0] = np.nan
        return values
    raise AssertionError(space)


def _candidates(space: spaces.Space[Any], rng: np.random.Generator, count: int) -> Any:
    """``count`` actions of ``space``, up to two of them replaced by ones near it."""
    space.seed(int(rng.integers(2**31)))
    actions = np.stack([space.sample() for _ in range(count)])
    for index in rng.choice(count, int(rng.integers(0, 3)), replace=False):
        actions[index] = _near(space, rng)
    return actions


@pytest.mark.parametrize("space", [
    spaces.Discrete(4, start=-1),
    spaces.MultiDiscrete([3, 4], start=[1, 0]),
    spaces.MultiBinary((2, 2)),
    spaces.Box(-1, 1, (2, 3), np.float32),
    spaces.Box(np.array([0.0, -np.inf]), np.array([1.0, np.inf]), dtype=np.float64),
], ids=lambda space: type(space).__name__)
def test_value_check_names_the_first_action_contains_refuses(space: spaces.Space[Any]) -> None:
    """The vectorized check agrees with ``space.contains`` row by row."""
    rng = np.random.default_rng(0)
    checker = ActionChecker(space, 8, values=True)
    refused = 0
    for _ in range(200):
        actions = _candidates(space, rng, 8)
        outside = [index for index, action in enumerate(actions) if not space.contains(action)]
        if not outside:
            checker.check(actions)
            continue
        refused += 1
        with pytest.raises(ValueError, match=f"sub-env {outside[0]}'s action .* is outside"):
            checker.check(actions)
    assert 0 < refused < 200  # both paths ran


def test_value_check_reaches_inside_dicts_tuples_and_other_spaces() -> None:
    space = spaces.Dict({"move": spaces.Discrete(3),
                         "pair": spaces.Tuple((spaces.MultiBinary(2), spaces.Text(3)))})
    checker = ActionChecker(space, 2, values=True)
    good = {"move": np.array([0, 2]), "pair": (np.array([[0, 1], [1, 1]], np.int8), ["ab", "c"])}
    checker.check(good)
    with pytest.raises(ValueError, match=r"actions\['move'\]: sub-env 1's action 3 is outside"):
        checker.check({**good, "move": np.array([0, 3])})
    with pytest.raises(ValueError, match=r"actions\['pair'\]\[1\]: sub-env 0's action 'abcd'"):
        checker.check({**good, "pair": (good["pair"][0], ["abcd", "c"])})
    with pytest.raises(ValueError, match=r"sub-env 7's action 3 is outside"):
        ActionChecker(space, 1, values=True).check(
            {"move": np.array([3]), "pair": (np.array([[0, 1]], np.int8), ["a"])}, env_ids=[7])
