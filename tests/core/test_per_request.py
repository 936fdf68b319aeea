"""The per-request loop: each row's action is sent from a task of its own as its reply lands
(one request per row to a continuously batching server), and ``batches(follow=True)``
receives the results. Owing nothing (every row waiting on the server) it waits for the next
send instead of ending; it ends when the vector env closes. Left early, it is closed with
``contextlib.aclosing`` (trio requires it of any async generator)."""

from __future__ import annotations

import functools
from contextlib import aclosing
from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
import aiovec.testing
from tests.backends_matrix import LOCAL_BACKENDS
from tests.envs import task_envs

pytestmark = pytest.mark.anyio


async def first_followed_batch(envs: aiovec.AsyncVectorEnv, received: list[int]) -> None:
    """Follow ``envs.batches`` until its first batch; its sub-envs into ``received``."""
    async with aclosing(envs.batches(min_size=1, follow=True)) as batches:
        async for batch in batches:
            received.extend(batch.env_ids.tolist())
            return


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_following_batches_wait_for_sends_while_nothing_is_owed(
        backend: str, no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(task_envs(backend, 3, length=5), backend=backend,
                                     timeout=60) as envs:
        await envs.reset(seed=0)
        assert [batch async for batch in envs.batches()] == []  # owing nothing: it ends
        received: list[int] = []
        landed = anyio.Event()

        async def follow() -> None:
            nonlocal landed
            async with aclosing(envs.batches(min_size=1, follow=True)) as batches:
                async for batch in batches:
                    received.extend(batch.env_ids.tolist())
                    landed.set()
                    landed = anyio.Event()
                    if len(received) == 6:
                        return

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(follow)
                for env_id in [2, 0, 1, 1, 0, 2]:
                    # Each send is received before the next one: between them the loop owes
                    # nothing and waits in it (a plain batches() would have ended).
                    await anyio.wait_all_tasks_blocked()
                    waiting_for = landed
                    envs.send(np.array([0]), [env_id])
                    await waiting_for.wait()
        assert received == [2, 0, 1, 1, 0, 2]


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_following_batches_end_when_the_vector_env_closes(
        backend: str, no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv(task_envs(backend, 2), backend=backend, timeout=60)
    received: list[Any] = []
    async with envs:
        await envs.reset(seed=0)

        async def follow() -> None:
            async with aclosing(envs.batches(min_size=1, follow=True)) as batches:
                async for batch in batches:
                    received.append(batch)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(follow)
                await anyio.wait_all_tasks_blocked()  # it waits for a send
                await envs.aclose()  # and ends, quietly
    assert received == []
    with pytest.raises(aiovec.ClosedError, match="closed"):
        async for _ in envs.batches(follow=True):
            pass  # a closed vector env still refuses to start one


async def test_an_aborted_row_is_forgotten_and_the_loop_waits_on(
        no_leaks: None) -> None:
    """Sub-env 0's step is aborted before it lands: the loop owes nothing and waits on;
    sub-env 1's result, sent after, is the first it yields."""
    async with aiovec.AsyncVectorEnv(task_envs("async", 2), backend="async",
                                     timeout=60) as envs:
        await envs.reset(seed=0)
        received: list[int] = []
        follow = functools.partial(first_followed_batch, envs, received)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                envs.send(np.array([0]), [0])
                envs.abort([0])
                tasks.start_soon(follow)
                await anyio.wait_all_tasks_blocked()
                assert received == []
                envs.send(np.array([0]), [1])
        assert received == [1]


class GateEnv(aiovec.AsyncEnv[np.ndarray, int]):
    """Action 1 steps at once; action 0 waits until cancelled (a call still out)."""

    observation_space = aiovec.testing.CountingEnv.observation_space
    action_space = aiovec.testing.CountingEnv.action_space

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.zeros(2, np.int64), {}

    async def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == 0:
            await anyio.sleep_forever()
        return np.ones(2, np.int64), 1.0, False, False, {}


async def test_a_row_aborted_while_the_loop_waits_for_it_leaves_the_loop_waiting(
        no_leaks: None) -> None:
    """The loop waits inside ``recv`` for sub-env 0's result; 0 is aborted: nothing is owed
    any more, and the loop waits for the next send instead of ending."""
    async with aiovec.AsyncVectorEnv([GateEnv] * 2, backend="async", timeout=60) as envs:
        await envs.reset(seed=0)
        received: list[int] = []
        follow = functools.partial(first_followed_batch, envs, received)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                envs.send(np.array([0]), [0])
                tasks.start_soon(follow)
                await anyio.wait_all_tasks_blocked()  # it waits in recv, for sub-env 0
                envs.abort([0])
                await anyio.wait_all_tasks_blocked()  # and, owing nothing, for a send
                assert received == []
                envs.send(np.array([1]), [1])
        assert received == [1]
