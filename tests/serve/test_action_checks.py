"""The server accepts exactly the actions a local vector env accepts, as the plain-Python
reference (``tests/action_reference.py``) has it: for random batches of random dtypes, shapes
and values, and for batches probing the bounds, in JSON (lists, as a client's JSON decodes)
and in binary frames (arrays of any dtype), over every action space the wire carries."""

from __future__ import annotations

import json
import warnings
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
import pytest

from aiovec._core._actions import ActionChecker
from aiovec._remote._websocket import WebSocket
from aiovec._serve._errors import ServeError
from aiovec._serve._operations import actions_from
from aiovec._wire._schema import space_from_schema
from tests.action_reference import DTYPES, edge_batches, refusal
from tests.serve.conftest import Server
from tests.serve.test_http import create
from tests.serve.test_websocket import ask, ws_url

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
EDGE_SPACES: list[gym.Space[Any]] = [
    gym.spaces.Box(-1.0, 1.0, (), np.float32),
    gym.spaces.Box(-1.0, 1.0, (2,), np.float16),
    gym.spaces.Box(-(2**24), 2**24, (), np.float32),
    gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
    gym.spaces.Box(0.25, 0.75, (), np.float32),
    gym.spaces.Box(np.array([-5, 0]), np.array([5, 2**31 - 1]), dtype=np.int32),
    gym.spaces.Discrete(3, start=2**53 - 1),
    gym.spaces.MultiDiscrete([3, 5], start=[-1, 2]),
]


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


def _accepted(single: gym.Space[Any], num_envs: int, actions: Any) -> bool:
    """Whether a local vector env accepts ``actions``, as the reference has it."""
    return refusal(single, num_envs, actions) is None


def _served(check: ActionChecker, value: Any, single: gym.Space[Any]) -> bool:
    """Whether the server accepts ``value``: decoded into arrays, then the check its
    session's vector env makes."""
    try:
        check.check(actions_from(value, single))
    except (ServeError, ValueError, TypeError):
        return False
    return True


def _as_json(actions: np.ndarray[Any, Any]) -> Any:
    """``actions`` as a client's JSON carries them (None where JSON has no such number)."""
    if actions.dtype.kind == "f" and not np.isfinite(actions).all():
        return None
    return json.loads(json.dumps(actions.tolist()))


@pytest.mark.parametrize("seed", range(300))
def test_the_server_accepts_exactly_what_a_local_env_accepts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    single = SPACES[seed % len(SPACES)]
    num_envs = int(rng.integers(1, 4))
    check = ActionChecker(single, num_envs, values=True)  # as served sessions check them
    for _ in range(20):
        _assert_served_as_locally(check, _batch(rng, single, num_envs), single, num_envs)


def _assert_served_as_locally(check: ActionChecker, actions: np.ndarray[Any, Any],
                              single: gym.Space[Any], num_envs: int) -> None:
    # A binary frame carries the array itself; the local caller passes the same array.
    assert _served(check, actions, single) == _accepted(
        single, num_envs, actions), actions
    # JSON carries lists of numbers and booleans: a local caller passing the same list gets
    # it as NumPy reads it.
    as_json = _as_json(actions)
    if as_json is not None:
        assert _served(check, as_json, single) == _accepted(
            single, num_envs, _as_a_local_caller_would_have_it(as_json, single)), as_json


@pytest.mark.parametrize("single", EDGE_SPACES, ids=str)
def test_the_server_checks_values_at_the_bounds_exactly(single: gym.Space[Any]) -> None:
    """Values at the bounds, one ulp beyond, NaN, infinities, 2**24 and 2**53 and the ends of
    each dtype, in every dtype: the server decides as the reference, at batch sizes on both
    sides of the checker's few-values threshold."""
    for num_envs in (1, 16, 17):
        check = ActionChecker(single, num_envs, values=True)
        for actions in edge_batches(single, num_envs, np.random.default_rng(num_envs)):
            _assert_served_as_locally(check, actions, single, num_envs)


def test_a_frame_s_int64_is_no_uint8_box_action_here_either() -> None:
    """Locally, int64 actions for a uint8 Box are refused (they do not cast safely); a frame
    carries its dtype, so the server refuses them too. In JSON, whole numbers that fit are
    read as uint8."""
    space = gym.spaces.Box(0, 255, (2,), np.uint8)
    check = ActionChecker(space, 1, values=True)
    actions = np.array([[0, 1]], np.int64)
    assert not _accepted(space, 1, actions) and not _served(check, actions, space)
    assert _served(check, actions.tolist(), space)
    assert not _served(check, [[0, 256]], space)


@pytest.mark.parametrize("space", SPACES[:3], ids=str)
def test_booleans_are_no_discrete_index_here_either(space: gym.Space[Any]) -> None:
    check = ActionChecker(space, 2, values=True)
    booleans = np.ones((2, *(space.shape or ())), np.bool_)
    assert not _accepted(space, 2, booleans)
    assert not _served(check, booleans, space)
    assert not _served(check, booleans.tolist(), space)


@pytest.mark.anyio
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
async def test_a_real_server_decides_probed_actions_as_the_reference(
        anyio_backend: Any, serve: Any, binary: bool) -> None:
    """End to end, over a WebSocket to a real server (JSON text or binary frames): probed
    batches for a float32 Box and a Discrete are stepped or refused (``invalid``) as the
    reference says; a refused one steps nothing."""
    server: Server = serve("open")
    rng = np.random.default_rng(7)
    for env_id, num_envs in (("Box-v0", 4), ("CartPole-v1", 8)):
        async with httpx.AsyncClient(base_url=server.url) as client:
            session = await create(client, env_id, num_envs)
            single = space_from_schema(
                (await client.get(f"/sessions/{session}")).json()["single_action_space"])
        probes = list(edge_batches(single, num_envs, rng))
        chosen = [probes[index] for index in rng.choice(len(probes), 60, replace=False)]
        verdicts: list[bool] = []
        async with await WebSocket.connect(ws_url(server, session)) as socket:
            assert (await ask(socket, {"op": "reset", "id": 0, "seed": 0}, binary))["ok"]
            for request_id, actions in enumerate(chosen, 1):
                carried = actions if binary else _as_json(actions)
                if carried is None:
                    continue
                local = actions if binary else _as_a_local_caller_would_have_it(carried, single)
                expected = _accepted(single, num_envs, local)
                answer = await ask(socket, {"op": "step", "id": request_id, "actions": carried},
                                   binary)
                assert answer["ok"] == expected, (actions, answer)
                assert expected or answer["error"] == "invalid", answer
                verdicts.append(expected)
            async with httpx.AsyncClient(base_url=server.url) as client:
                described = (await client.get(f"/sessions/{session}")).json()
            await socket.send_text(json.dumps({"op": "close"}))
        assert described["steps"] == sum(verdicts)
        assert set(verdicts) == {True, False}  # both kinds of batch were sent
