"""A remote vector env refuses what a local one refuses, with the same error type and the same
words: deadlines (one rule, ``check_timeout``) and the preconditions of ``send``, ``recv`` and
a call made while another runs (``_core._refusals``). Against a real served session
(uvicorn on 127.0.0.1), on asyncio, uvloop and trio."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
from aiovec.remote import AsyncRemoteVectorEnv, RemoteVectorEnv
from aiovec.testing import CountingEnv
from tests.serve.apps import ENVS
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio

#: Deadlines the rule refuses: a bool is no number of seconds (``True`` is no 1 s deadline).
BAD_TIMEOUTS = [True, False, 0, -1.0, math.nan, "1"]

Refusal = tuple[str, str]


async def refusal(call: Callable[[], Awaitable[Any] | None]) -> Refusal:
    """What ``call`` raised (its type's name and its message), or that it was accepted."""
    try:
        result = call()
        if result is not None:
            await result
    except Exception as error:  # what was raised is what is compared
        return type(error).__name__, str(error)
    return "accepted", ""


def raised(make: Callable[[], object]) -> Refusal:
    try:
        make()
    except Exception as error:  # what was raised is what is compared
        return type(error).__name__, str(error)
    return "accepted", ""


@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=repr)
def test_the_constructors_refuse_the_same_timeouts(value: Any) -> None:
    """(No server needed: each refuses before it connects.)"""
    local = raised(lambda: aiovec.AsyncVectorEnv([CountingEnv], timeout=value))
    remote = raised(lambda: AsyncRemoteVectorEnv("http://127.0.0.1:9", "CartPole-v1",
                                                 timeout=value))
    sync_remote = raised(lambda: RemoteVectorEnv("http://127.0.0.1:9", "CartPole-v1",
                                                 timeout=value))
    expected = ("ValueError", f"timeout must be a positive number of seconds or None, got "
                              f"{value!r}")
    assert local == remote == sync_remote == expected


async def refusals_of(envs: Any) -> list[Refusal]:
    """Every mistake a caller can make with three CartPoles, in order, and what each raised;
    nothing refused moves a sub-env (the env goes on as if it had not been asked)."""
    seen: list[Refusal] = []
    actions = np.zeros(3, np.int64)
    seen.append(await refusal(lambda: envs.send(actions)))  # before the first reset
    seen.append(await refusal(lambda: envs.step(actions, timeout=True)))
    await envs.reset(seed=0)
    seen.append(await refusal(lambda: envs.recv()))  # nothing sent
    for timeout in BAD_TIMEOUTS:
        seen.append(await refusal(lambda timeout=timeout: envs.reset(timeout=timeout)))
        seen.append(await refusal(lambda timeout=timeout: envs.step(actions, timeout=timeout)))
        seen.append(await refusal(lambda timeout=timeout: envs.send(actions, timeout=timeout)))
    for env_ids in ([3], [0, 0], [], [[0]], [-1]):
        batch = np.zeros(max(len(env_ids), 1), np.int64)
        seen.append(await refusal(lambda batch=batch, env_ids=env_ids: envs.send(batch,
                                                                                  env_ids)))
    envs.send(np.array([1, 0]), [0, 2], timeout=math.inf)
    seen.append(await refusal(lambda: envs.send(np.array([1]), [2])))  # 2 owes its result
    seen.append(await refusal(lambda: envs.send(np.array([1, 1]), [1, 0])))
    seen.append(await refusal(lambda: envs.step(actions)))  # 0 and 2 owe theirs
    seen.append(await refusal(lambda: envs.recv(batch_size=0)))
    received: list[int] = []
    while len(received) < 2:
        received.extend((await envs.recv()).env_ids.tolist())
    assert sorted(received) == [0, 2]
    seen.append(await refusal(lambda: envs.recv()))  # every result received
    await envs.step(actions)  # nothing refused left a trace
    return seen


async def test_every_refusal_is_the_local_one(serve: Any) -> None:
    server: Server = serve("open")
    # Served sessions check action values (validate_actions=True): so does this local env.
    local = aiovec.AsyncVectorEnv([ENVS["CartPole-v1"].env_fn] * 3, backend="thread",
                                  validate_actions=True)
    async with local, AsyncRemoteVectorEnv(server.url, "CartPole-v1", 3) as remote:
        expected = await refusals_of(local)
        assert await refusals_of(remote) == expected
    assert "accepted" not in {kind for kind, _ in expected}
    assert {kind for kind, _ in expected} == {"ValueError", "BusyError", "ResetNeededError",
                                             "NothingSentError"}


async def busy_refusals_of(envs: Any) -> list[Refusal]:
    """What a call made while another task's call runs raises (steps take a second)."""
    seen: list[Refusal] = []
    actions = np.zeros(2, np.int64)
    await envs.reset(seed=0)
    async with anyio.create_task_group() as group:
        group.start_soon(envs.step, actions)
        await anyio.wait_all_tasks_blocked()  # the step is under way
        seen.append(await refusal(lambda: envs.send(actions)))
        seen.append(await refusal(lambda: envs.step(actions)))
        seen.append(await refusal(lambda: envs.reset()))
    envs.send(actions)
    async with anyio.create_task_group() as group:
        group.start_soon(envs.recv)
        await anyio.wait_all_tasks_blocked()  # the recv is waiting for the results
        seen.append(await refusal(lambda: envs.recv()))
    return seen


async def test_a_call_while_another_runs_is_refused_as_locally(serve: Any) -> None:
    server: Server = serve("open")
    local = aiovec.AsyncVectorEnv([ENVS["Waiting1s-v0"].env_fn] * 2, backend="thread")
    async with local, AsyncRemoteVectorEnv(server.url, "Waiting1s-v0", 2) as remote:
        expected = await busy_refusals_of(local)
        assert await busy_refusals_of(remote) == expected
    assert [kind for kind, _ in expected] == ["BusyError"] * 4
