"""One rule for every deadline a caller passes (``check_timeout``): ``None`` or a number of
seconds above zero (``inf`` included); a bool, NaN, zero, a negative or a non-number is
refused, by the constructor and by each call, before any sub-env is sent anything."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import aiovec
from aiovec._core._arguments import check_timeout
from aiovec._core._in_flight import CallerDeadline
from aiovec.testing import CountingEnv

pytestmark = pytest.mark.anyio

REFUSED = [True, False, np.True_, 0, 0.0, -1, -0.5, -math.inf, math.nan, "1", [1], 1j]
ACCEPTED = [(1, 1.0), (2.5, 2.5), (math.inf, math.inf), (np.float32(0.5), 0.5),
            (np.int64(3), 3.0), (10**400, math.inf), (1e-9, 1e-9)]


def _name(value: Any) -> str:
    return repr(value) if len(repr(value)) < 20 else f"{type(value).__name__} too big for a float"


def refused(value: Any, what: str = "timeout") -> pytest.RaisesExc[ValueError]:
    """Expects exactly the rule's refusal of ``value``."""
    message = f"{what} must be a positive number of seconds or None, got {value!r}"
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


@pytest.mark.parametrize("value", REFUSED, ids=_name)
def test_a_bool_nan_zero_negative_or_non_number_is_refused(value: Any) -> None:
    with refused(value):
        check_timeout(value, "timeout")


@pytest.mark.parametrize(("value", "seconds"), ACCEPTED, ids=_name)
def test_a_positive_number_is_its_seconds_as_a_float(value: Any, seconds: float) -> None:
    checked = check_timeout(value, "timeout")
    assert type(checked) is float and checked == seconds
    assert check_timeout(None, "timeout") is None


def test_a_caller_deadline_stays_one() -> None:
    deadline = CallerDeadline(0.5)
    assert check_timeout(deadline, "timeout") is deadline


@pytest.mark.parametrize("value", REFUSED, ids=_name)
def test_the_restart_policys_make_timeout_is_a_deadline_like_any_other(value: Any) -> None:
    with refused(value, "make_timeout"):
        aiovec.RestartPolicy(make_timeout=value)
    assert aiovec.RestartPolicy(make_timeout=math.inf).make_timeout == math.inf


@pytest.mark.parametrize("value", [True, 0, math.nan, "1"], ids=_name)
def test_the_constructor_refuses_what_the_rule_refuses(value: Any) -> None:
    for keyword in ("timeout", "close_timeout"):
        with refused(value, keyword):
            aiovec.AsyncVectorEnv([CountingEnv], **{keyword: value})


async def test_each_call_refuses_a_bool_before_anything_is_sent() -> None:
    """``timeout=True`` is no 1-second deadline: each call refuses it, and no
    sub-env moved (their step counts are unchanged, the env still works)."""
    envs = aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="thread")
    with refused(True):
        await envs.start(timeout=True)
    async with envs:
        with refused(True):
            await envs.reset(timeout=True)
        await envs.reset(seed=0)
        actions = np.zeros(2, np.int64)
        with refused(True):
            await envs.step(actions, timeout=True)
        with refused(True):
            envs.send(actions, timeout=True)
        assert list(await envs.get_attr("steps")) == [0, 0]
        await envs.step(actions, timeout=math.inf)
        envs.send(actions, timeout=np.float32(30))
        batch = await envs.recv()
        assert sorted(batch.env_ids.tolist()) == [0, 1]
        assert list(await envs.get_attr("steps")) == [2, 2]
