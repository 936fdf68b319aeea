"""The server accepts exactly the actions a local vector env accepts: for random batches of
random dtypes, shapes and values, in JSON (lists, as a client's JSON decodes) and in binary
frames (arrays of any dtype), over every action space the wire carries."""

from __future__ import annotations

import json
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import batch_space

from aiovec._core._actions import ActionChecker
from aiovec._serve._errors import ServeError
from aiovec._serve._operations import actions_from

SPACES: list[gym.Space[Any]] = [
    gym.spaces.Discrete(3),
    gym.spaces.Discrete(4, start=-2),
    gym.spaces.MultiDiscrete([2, 5]),
    gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
    gym.spaces.Box(0, 10, (2,), np.int32),
    gym.spaces.Box(0, 255, (2,), np.uint8),
    gym.spaces.MultiBinary(3),
]
DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64]


def _batch(rng: np.random.Generator, space: gym.Space[Any], num_envs: int) -> np.ndarray:
    """Actions for ``space`` of a random dtype, mostly of the right shape, with values in the
    space, just past its edges, or far off."""
    shape = (num_envs, *(space.shape or ()))
    if rng.random() < 0.1:
        shape = (num_envs + 1, *shape[1:])
    values = rng.choice([rng.integers(-3, 12, shape).astype(float),
                         rng.uniform(-1.5, 1.5, shape),
                         rng.integers(0, 2, shape).astype(float),
                         rng.choice([1e9, -1e9, 300.0, 2.0**40], shape)])
    dtype = DTYPES[rng.integers(len(DTYPES))]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(values).astype(dtype)


def _as_a_local_caller_would_have_it(value: Any, space: gym.Space[Any]) -> np.ndarray:
    """The array a local caller would pass for a JSON batch: JSON has one integer type, so
    whole numbers stand for the space's integer dtype where every value fits it (an array of
    that dtype locally); booleans stay booleans, floats floats."""
    array = np.asarray(value)
    dtype = space.dtype
    if dtype is not None and dtype.kind in "iu" and array.dtype.kind in "iu":
        with np.errstate(over="ignore"):
            cast = array.astype(dtype)
        if np.array_equal(cast, array):
            return cast
    return array


def _accepted(check: ActionChecker, actions: Any) -> bool:
    try:
        check.check(actions)
    except (ValueError, TypeError):
        return False
    return True


def _served(check: ActionChecker, value: Any, space: gym.Space[Any],
            single: gym.Space[Any]) -> bool:
    """Whether the server accepts ``value``: decoded into arrays, then the local check."""
    try:
        actions = actions_from(value, space, single)
    except ServeError:
        return False
    return _accepted(check, actions)


@pytest.mark.parametrize("seed", range(300))
def test_the_server_accepts_exactly_what_a_local_env_accepts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    single = SPACES[seed % len(SPACES)]
    num_envs = int(rng.integers(1, 4))
    batched = batch_space(single, num_envs)
    check = ActionChecker(single, num_envs, values=True)  # as served sessions check them
    for _ in range(20):
        actions = _batch(rng, single, num_envs)
        # A binary frame carries the array itself; the local caller passes the same array.
        assert _served(check, actions, batched, single) == _accepted(check, actions), actions
        # JSON carries lists of numbers and booleans: a local caller passing the same list
        # gets it as NumPy reads it.
        if actions.dtype.kind == "f" and not np.isfinite(actions).all():
            continue
        as_json = json.loads(json.dumps(actions.tolist()))
        assert _served(check, as_json, batched, single) == _accepted(
            check, _as_a_local_caller_would_have_it(as_json, single)), as_json


def test_a_frame_s_int64_is_no_uint8_box_action_here_either() -> None:
    """Locally, int64 actions for a uint8 Box are refused (they do not cast safely); a frame
    carries its dtype, so the server refuses them too. In JSON, whole numbers that fit are
    read as uint8."""
    space = gym.spaces.Box(0, 255, (2,), np.uint8)
    check = ActionChecker(space, 1, values=True)
    batched = batch_space(space, 1)
    actions = np.array([[0, 1]], np.int64)
    assert not _accepted(check, actions) and not _served(check, actions, batched, space)
    assert _served(check, actions.tolist(), batched, space)
    assert not _served(check, [[0, 256]], batched, space)


@pytest.mark.parametrize("space", SPACES[:3], ids=str)
def test_booleans_are_no_discrete_index_here_either(space: gym.Space[Any]) -> None:
    check = ActionChecker(space, 2, values=True)
    batched = batch_space(space, 2)
    booleans = np.ones((2, *(space.shape or ())), np.bool_)
    assert not _accepted(check, booleans)
    assert not _served(check, booleans, batched, space)
    assert not _served(check, booleans.tolist(), batched, space)
