"""Both sync shims keep Gymnasium's call-ordering rules, the same way: a pending
``step_async`` must be collected by ``step_wait`` before anything else runs, nothing runs
once closed, and ``close`` collects a pending step first, with a warning."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import aiovec
from aiovec.testing import CountingEnv
from tests.multiagent.envs import Arena

NUM_ENVS = 2


class Shim(NamedTuple):
    envs: aiovec.VectorEnv | aiovec.ParallelVectorEnv
    actions: Any  # one batch of actions for every sub-env


def _single_agent() -> Shim:
    return Shim(aiovec.VectorEnv([CountingEnv] * NUM_ENVS, backend="thread"),
                np.ones(NUM_ENVS, np.int64))


def _multi_agent() -> Shim:
    return Shim(aiovec.ParallelVectorEnv([Arena] * NUM_ENVS, backend="thread"),
                {agent: np.ones(NUM_ENVS, np.int64) for agent in ("scout_0", "scout_1")})


@pytest.fixture(params=[_single_agent, _multi_agent], ids=["VectorEnv", "ParallelVectorEnv"])
def shim(request: pytest.FixtureRequest) -> Iterator[Shim]:
    made: Shim = request.param()
    yield made
    made.envs.close()


def _every_call(shim: Shim) -> dict[str, Callable[[], object]]:
    """Each public call of both shims (but ``step_wait`` and ``close``), with valid arguments."""
    envs, actions = shim
    return {
        "reset": lambda: envs.reset(seed=1),
        "step": lambda: envs.step(actions),
        "step_async": lambda: envs.step_async(actions),
        "send": lambda: envs.send(actions),
        "recv": lambda: envs.recv(),
        "call": lambda: envs.call("render"),
        "get_attr": lambda: envs.get_attr("metadata"),
        "set_attr": lambda: envs.set_attr("render_mode", None),
        "render": lambda: envs.render(),
    }


def test_a_pending_step_refuses_every_other_call_and_stays_collectable(shim: Shim) -> None:
    envs, actions = shim
    envs.reset(seed=0)
    envs.step_async(actions)
    for method, attempt in _every_call(shim).items():
        with pytest.raises(AlreadyPendingCallError, match="pending call to `step`") as caught:
            attempt()
        assert caught.value.name == "step", method
    envs.step_wait()
    assert envs.statistics().steps == 1  # the refused calls ran nothing, the step ran once
    with pytest.raises(NoAsyncCallError, match="without any prior call to `step_async`"):
        envs.step_wait()
    envs.step(actions)  # nothing is pending any more
    assert envs.statistics().steps == 2


def test_after_close_every_call_raises_closed_error(shim: Shim) -> None:
    envs, _ = shim
    envs.reset(seed=0)
    envs.close()
    envs.close()  # idempotent
    assert envs.closed
    for method, attempt in {**_every_call(shim), "step_wait": envs.step_wait}.items():
        with pytest.raises(aiovec.ClosedError, match=r"after a call to `close\(\)`") as caught:
            attempt()
        assert isinstance(caught.value, ClosedEnvironmentError), method


def test_close_collects_a_pending_step_first(shim: Shim) -> None:
    envs, actions = shim
    envs.reset(seed=0)
    envs.step_async(actions)
    with pytest.warns(UserWarning, match="`close` while waiting for a pending call to `step`"):
        envs.close()
    assert envs.closed
    assert envs.statistics().steps == 1  # step_wait ran: the step was collected, not dropped


def test_close_with_terminate_drops_a_pending_step() -> None:
    envs = aiovec.VectorEnv([CountingEnv] * NUM_ENVS, backend="thread")
    envs.reset(seed=0)
    envs.step_async(np.ones(NUM_ENVS, np.int64))
    with pytest.warns(UserWarning, match="pending call to `step`"):
        envs.close(terminate=True)
    assert envs.closed and envs.statistics().steps == 0
