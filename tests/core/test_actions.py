"""ActionChecker: per-sub-env actions equal Gymnasium's ``iterate``; bad batches say why."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

from aiovec._core import _actions
from aiovec._core._actions import _FEW_VALUES, ActionChecker
from tests.action_reference import Refusal, edge_batches, refusal
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


EXACT_SPACES = [
    spaces.Box(-1, 1, (), np.float32),
    spaces.Box(-1, 1, (3,), np.float16),
    spaces.Box(-1, 1, (2,), np.float64),
    spaces.Box(np.array([-1.5, 0, -np.inf], np.float32),
               np.array([0.5, 2**24, np.inf], np.float32)),
    spaces.Box(-(2**24), 2**24, (), np.float32),
    spaces.Box(-(2**53), 2**53, (2,), np.float64),
    spaces.Box(-np.inf, np.inf, (2,), np.float32),
    spaces.Box(0.25, 0.75, (), np.float32),  # holds no integer
    spaces.Box(0, 255, (2,), np.uint8),
    spaces.Box(np.array([-5, 0]), np.array([5, 2**31 - 1]), dtype=np.int32),
    spaces.Box(-(2**63), 2**63 - 1, (), np.int64),
    spaces.Box(2**63, 2**64 - 1, (), np.uint64),
    spaces.Box(0, 1, (2,), np.bool_),
    spaces.Discrete(4, start=-2),
    spaces.Discrete(3, start=2**53 - 1),
    spaces.MultiDiscrete([3, 5], start=[-1, 2]),
    spaces.MultiDiscrete([[2, 2], [2, 2]]),
    spaces.MultiBinary(3),
    spaces.Dict({"a": spaces.Box(-1, 1, (), np.float32), "b": spaces.Discrete(3, start=-1)}),
    spaces.Tuple((spaces.MultiBinary(2), spaces.Box(-(2**24), 1, (2,), np.float32))),
]


def _refusal_of(checker: ActionChecker, actions: Any) -> Refusal | None:
    """What the checker says of ``actions``, in the reference's terms."""
    try:
        checker.check(actions)
    except (ValueError, TypeError) as error:
        outside = re.match(r"(.*?): sub-env (\d+)'s action", str(error))
        if outside:
            return Refusal(outside[1], int(outside[2]))
        return Refusal(str(error).split(": ")[0], None)
    return None


def _sizes(space: spaces.Space[Any]) -> list[int]:
    """Batch sizes on both sides of the few-values threshold, for each array in a batch of
    ``space``'s actions, and 1, 16, 17 and 40."""
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        children = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return sorted({size for child in children for size in _sizes(child)})
    per_action = max(1, math.prod(space.shape))
    return sorted({1, _FEW_VALUES // per_action, _FEW_VALUES // per_action + 1, 16, 17, 40})


@pytest.mark.parametrize("space", EXACT_SPACES, ids=str)
def test_values_are_checked_exactly_at_every_batch_size(space: spaces.Space[Any]) -> None:
    """The checker's verdict (and the first sub-env it names) is the plain-Python reference's,
    for every dtype, probed value and batch size; no NumPy warning (they are errors here)."""
    verdicts = set()
    for num_envs in _sizes(space):
        checker = ActionChecker(space, num_envs, values=True)
        rng = np.random.default_rng(num_envs)
        for actions in edge_batches(space, num_envs, rng):
            expected = refusal(space, num_envs, actions)
            assert _refusal_of(checker, actions) == expected, actions
            verdicts.add("accepted" if expected is None else
                         "outside" if expected.row is not None else "dtype")
    # Each verdict was reached (every bool is inside a bool Box).
    assert {"accepted", "outside"} - verdicts <= ({"outside"} if space.dtype == bool else set())


@pytest.mark.parametrize(("space", "low"), [
    (spaces.Box(-1, 1, (), np.float32), -1), (spaces.Discrete(3, start=-1), -1),
    (spaces.MultiBinary(2), 0), (spaces.MultiDiscrete([3, 3]), 0),
], ids=str)
def test_uniform_bounds_decide_an_accepted_batch_without_the_row_by_row_check(
        space: spaces.Space[Any], low: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within uniform bounds, the fast paths (value by value up to ``_FEW_VALUES`` values,
    the minimum and maximum beyond) accept a batch alone; the row-by-row comparison runs only
    to name the sub-envs outside."""
    rows: list[int] = []
    row_by_row = _actions._outside

    def counted(batch: np.ndarray[Any, Any], limits: Any) -> np.ndarray[Any, Any]:
        rows.append(len(batch))
        return row_by_row(batch, limits)

    monkeypatch.setattr(_actions, "_outside", counted)
    for num_envs in _sizes(space):
        checker = ActionChecker(space, num_envs, values=True)
        inside = np.full((num_envs, *space.shape), low, space.dtype)
        checker.check(inside)
        assert rows == []
        inside[-1] = low - 1
        with pytest.raises(ValueError, match=f"sub-env {num_envs - 1}'s action"):
            checker.check(inside)
        assert rows == [num_envs]
        rows.clear()
