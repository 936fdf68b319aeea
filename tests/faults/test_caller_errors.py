"""A caller's mistake is the caller's: refused before anything is sent, with an error that
names the argument, never counted as a sub-env failure and never restarted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import aiovec
from aiovec.testing import CountingEnv
from tests.backends_matrix import ALL_BACKENDS, WORKER_BACKENDS, for_backend

pytestmark = pytest.mark.anyio

BAD_RESETS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"seed": -1}, ValueError, r"seed must be a non-negative int.*got -1"),
    ({"seed": [0, -5, 1]}, ValueError, r"seed\[1\] must be a non-negative int"),
    ({"seed": 1.5}, TypeError, "seed must be None, an int or a list of ints, got float"),
    ({"seed": [0, 1.0, 2]}, TypeError, r"seed\[1\] must be None or an int, got float"),
    ({"seed": True}, TypeError, "got bool"),
    ({"seed": [0, 1]}, ValueError, "length must match num_envs=3"),
    ({"seed": "7"}, TypeError, "got str"),
    ({"options": "reset_mask"}, TypeError, "options must be None, a dict, or one dict"),
    ({"options": ["reset_mask"]}, ValueError, "options given per sub-env must be 3 entries"),
    ({"options": [None, None, "task"]}, TypeError, "sub-env 2 must be None or a dict"),
    ({"options": {"reset_mask": np.ones(2, bool)}}, ValueError, "must have shape"),
    ({"options": {"reset_mask": np.zeros(3, bool)}}, ValueError, "at least one True"),
]


def _options(backend: str) -> dict[str, Any]:
    return {"num_workers": 3} if backend in WORKER_BACKENDS else {}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_bad_reset_arguments_are_refused_before_anything_is_sent(
        backend: str, no_leaks: None) -> None:
    """With a restart policy on: a bad seed restarts nothing (it had restarted a sub-env
    ten times over 33 s, then failed)."""
    async with aiovec.AsyncVectorEnv(for_backend(backend, [CountingEnv] * 3), backend=backend,
                                     restart=True, **_options(backend)) as envs:
        obs, _ = await envs.reset(seed=0)
        obs, *_ = await envs.step(np.ones(3, np.int64))
        for arguments, error, message in BAD_RESETS:
            with pytest.raises(error, match=message):
                await envs.reset(**arguments)
        assert envs.unusable_envs == ()  # nothing was reset: the episodes go on
        obs, *_ = await envs.step(np.ones(3, np.int64))
        assert obs.tolist() == [[2, 1]] * 3  # [steps, resets]: no bad reset reached one
        statistics = envs.statistics()
        assert (statistics.errors, statistics.restarts, statistics.resets) == (0, 0, 1)
        obs, _ = await envs.reset(seed=np.arange(3))  # numpy seeds are seeds too
        assert obs.tolist() == [[2, 2]] * 3


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_validate_actions_refuses_actions_outside_the_space(backend: str,
                                                                  no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(for_backend(backend, [CountingEnv] * 3), backend=backend,
                                     restart=True, validate_actions=True, batch_size=1,
                                     **_options(backend)) as envs:
        await envs.reset(seed=0)
        with pytest.raises(ValueError,
                           match=r"sub-env 1's action 5 is outside Discrete\(2\) \(so are "
                                 r"those of sub-envs \[2\]\); nothing was sent"):
            await envs.step(np.array([0, 5, -1]))
        with pytest.raises(ValueError, match="sub-env 2's action 2 is outside"):
            envs.send(np.array([2]), env_ids=[2])
        obs, *_ = await envs.step(np.array([0, 1, 1]))
        assert obs[:, 0].tolist() == [1, 1, 1]  # no sub-env took the refused actions
        statistics = envs.statistics()
        assert (statistics.errors, statistics.restarts) == (0, 0)


async def test_actions_are_not_checked_against_the_space_by_default(no_leaks: None) -> None:
    """As in Gymnasium: the env sees the action (CountingEnv takes any int)."""
    async with aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="inline") as envs:
        assert not envs.validate_actions
        await envs.reset(seed=0)
        _, rewards, *_ = await envs.step(np.array([5, 1]))
        assert rewards.tolist() == [5.0, 1.0]  # CountingEnv's reward is its action


def test_the_shim_validates_actions_too() -> None:
    envs = aiovec.VectorEnv([CountingEnv] * 2, backend="thread", validate_actions=True)
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="sub-env 1's action 7 is outside"):
            envs.step(np.array([1, 7]))
        obs, *_ = envs.step(np.array([1, 1]))
        assert obs[:, 0].tolist() == [1, 1]
    finally:
        envs.close()
