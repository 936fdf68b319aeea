"""``abort(env_ids)``: sub-envs' outstanding first-ready steps cancelled (queued, stepping or
waiting for ``recv``), never received; they need a reset, which may run while others step."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
from tests.backends_matrix import DEADLINE_BACKENDS
from tests.core.held import Gates
from tests.core.test_recv_bounds import ids, workers

pytestmark = pytest.mark.anyio


def mask(num_envs: int, *env_ids: int) -> dict[str, Any]:
    reset_mask = np.zeros(num_envs, dtype=np.bool_)
    reset_mask[list(env_ids)] = True
    return {"reset_mask": reset_mask}


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
async def test_nothing_of_an_aborted_step_is_ever_received(anyio_backend: Any, backend: str,
                                                           gates: Gates) -> None:
    """Sub-env 0 stepping, 2 landed and waiting, 3 queued: aborted, none of them comes back,
    not even once 0's step ends; they need a reset, which runs while sub-env 1 still steps."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     max_in_flight=3, **workers(backend, 4)) as envs:
        await envs.reset()
        gates.hold(0, 1)
        envs.send(np.arange(4))
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=2)) == [2, 3]
        envs.send(np.array([2]), [2])
        await gates.until(lambda: envs.num_ready == 1)
        envs.max_in_flight = 2
        envs.send(np.array([3]), [3])
        assert (envs.num_stepping, envs.num_queued, envs.num_ready) == (2, 1, 1)
        await gates.until(gates.entered, 0, 1)

        envs.abort([0, 2, 3])
        # 0's step runs on, and counts, until it ends, unless the backend cancels it (async).
        running = 1 if backend == "async" else 2
        assert (envs.num_stepping, envs.num_queued, envs.num_ready) == (running, 0, 0)
        statistics = envs.statistics()
        assert statistics.aborts == 3
        assert (statistics.errors, statistics.timeouts, statistics.restarts) == (0, 0, 0)
        assert envs.unusable_envs == (0, 2, 3)
        with pytest.raises(aiovec.ResetNeededError, match=r"\[0\]"):
            envs.send(np.array([0]), [0])
        gates.release(0)  # its step ends (unless cancelled): its result is thrown away
        if backend == "async":
            await gates.until(gates.cancelled, 0, 1)
        else:
            await gates.until(gates.finished, 0, 1)

        with anyio.fail_after(30):
            await envs.reset(options=mask(4, 0, 2, 3))  # sub-env 1 still steps meanwhile
        assert envs.unusable_envs == ()
        assert envs.num_stepping == 1
        with pytest.raises(aiovec.BusyError, match=r"\[1\]"):
            await envs.reset(options=mask(4, 1))
        gates.release(1)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=4)
        assert ids(batch) == [1]  # nothing of 0, 2 or 3
        with pytest.raises(aiovec.NothingSentError):
            await envs.recv()
        envs.send(np.arange(4) + 10)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=4)
        order = np.argsort(batch.env_ids)
        assert batch.rewards[order].tolist() == [10.0, 11.0, 12.0, 13.0]
        # Steps each sub-env started: 3 never stepped while queued, 2's landed one counts.
        assert batch.observations[order, 0].tolist() == [2.0, 2.0, 3.0, 2.0]
        assert envs.statistics().aborts == 3


async def test_an_aborted_async_step_is_cancelled(anyio_backend: Any, gates: Gates) -> None:
    """The step's coroutine is cancelled (a tool call stops); the sub-env's host goes on
    serving it: its reset and next step run."""
    async with aiovec.AsyncVectorEnv(gates.factories("async", 2), backend="async") as envs:
        await envs.reset()
        gates.hold(0)
        envs.send(np.arange(2))
        await gates.until(gates.entered, 0, 1)
        envs.abort([0])
        await gates.until(gates.cancelled, 0, 1)
        gates.release(0)
        assert not gates.finished(0, 1)
        with anyio.fail_after(30):
            assert ids(await envs.recv()) == [1]
            await envs.reset(options=mask(2, 0))
        envs.send(np.array([5]), [0])
        with anyio.fail_after(30):
            batch = await envs.recv()
        assert batch.rewards.tolist() == [5.0]
        assert gates.finished(0, 2) and not gates.finished(0, 1)


async def test_an_aborted_inline_step_never_runs(anyio_backend: Any, gates: Gates) -> None:
    """Inline steps run when ``recv`` waits: one aborted before that is never run."""
    async with aiovec.AsyncVectorEnv(gates.factories("inline", 3), backend="inline") as envs:
        await envs.reset()
        envs.send(np.arange(3))
        envs.abort([0, 2])
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=3)) == [1]
        assert not gates.entered(0, 1) and not gates.entered(2, 1)
        assert await envs.get_attr("steps") == (0, 1, 0)


@pytest.mark.parametrize("backend", ["thread", "process", "async"])
async def test_a_reset_runs_while_others_step_and_busy_still_guards(
        anyio_backend: Any, backend: str, gates: Gates) -> None:
    """Resetting sub-envs that owe nothing while others step; a sub-env stepping cannot be
    reset, nor can all; a reset drops its sub-envs' results still waiting for ``recv``."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 3), backend=backend,
                                     **workers(backend, 3)) as envs:
        await envs.reset()
        gates.hold(0)
        envs.send(np.arange(3))
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=1)) in ([1], [2])
        await gates.until(lambda: envs.num_ready == 1)
        with pytest.raises(aiovec.BusyError, match=r"\[0\]"):
            await envs.reset(options=mask(3, 0, 1))
        with pytest.raises(aiovec.BusyError, match=r"\[0\]"):
            await envs.reset()
        with pytest.raises(aiovec.BusyError, match=r"\[0, [12]\]"):
            await envs.step(np.arange(3))
        assert envs.num_ready == 1  # refused: nothing changed
        with anyio.fail_after(30):
            await envs.reset(seed=[None, 7, 8], options=mask(3, 1, 2))
        assert envs.num_ready == 0  # the waiting result belonged to the old episode
        assert envs.num_stepping == 1
        gates.release(0)
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=3)) == [0]


@pytest.mark.parametrize("backend", ["inline", "thread"])
async def test_abort_mistakes_are_refused_before_anything_changes(
        anyio_backend: Any, backend: str, gates: Gates) -> None:
    envs = aiovec.AsyncVectorEnv(gates.factories(backend, 3), backend=backend)
    envs.abort([1])  # not started: nothing owed
    async with envs:
        await envs.reset()
        envs.send(np.arange(2), [0, 1])
        for bad, message in (([3], r"must lie in \[0, 3\)"), ([1, 1], "lists a sub-env twice"),
                             ([[0]], "1-D sequence"), (["a"], "1-D sequence")):
            with pytest.raises(ValueError, match=message):
                envs.abort(bad)
        envs.abort([])  # none
        envs.abort([2])  # owes nothing: left alone
        assert envs.statistics().aborts == 0
        assert envs.unusable_envs == ()
        with pytest.raises(aiovec.BusyError):  # still owed: nothing was dropped
            envs.send(np.array([0]), [0])
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=3)) == [0, 1]
        envs.abort(None)  # all: nothing owed any more
        assert envs.statistics().aborts == 0
    with pytest.raises(aiovec.ClosedError):
        envs.abort([0])


@pytest.mark.parametrize("backend", ["thread", "process", "async"])
async def test_abort_while_recv_waits(anyio_backend: Any, backend: str,
                                      gates: Gates) -> None:
    """A ``recv`` waiting for what is then aborted returns what is left; ``batches`` ends
    when nothing is."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 2), backend=backend,
                                     **workers(backend, 2)) as envs:
        first_ready = envs._engine.first_ready
        assert first_ready is not None
        await envs.reset()
        gates.hold(0, 1)
        envs.send(np.arange(2))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                @group.start_soon
                async def receive() -> None:
                    assert ids(await envs.recv(batch_size=2)) == [1]

                await gates.until(lambda: first_ready.receiving)  # waiting for two
                envs.abort([0])
                gates.release(1)
        gates.hold(1)
        envs.send(np.array([1]), [1])
        received: list[aiovec.StepBatch] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                @group.start_soon
                async def drain() -> None:
                    async for batch in envs.batches():
                        received.append(batch)

                await gates.until(lambda: first_ready.receiving)
                envs.abort(None)
        assert received == []
        assert envs.statistics().aborts == 2
        gates.release(0, 1)
        with pytest.raises(aiovec.NothingSentError):
            await envs.recv()


async def test_abort_is_refused_while_another_call_runs(anyio_backend: Any,
                                                        gates: Gates) -> None:
    async with aiovec.AsyncVectorEnv(gates.factories("thread", 2), backend="thread") as envs:
        await envs.reset()
        envs.send(np.array([0]), [0])
        gates.hold(1)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(envs.call, "wait_for_release")
                await gates.until(lambda: "call in flight" in repr(envs))
                with pytest.raises(aiovec.BusyError, match="cannot abort"):
                    envs.abort([0])
                gates.release(1)
            assert ids(await envs.recv()) == [0]  # nothing was dropped
        assert envs.statistics().aborts == 0


async def test_abort_never_stops_a_worker_that_hosts_others(anyio_backend: Any,
                                                            gates: Gates) -> None:
    """One worker hosts all three: sub-env 1's step cannot be stopped without the others',
    so it runs and is thrown away; the worker lives on, the others' results come."""
    async with aiovec.AsyncVectorEnv(gates.factories("process", 3), backend="process",
                                     num_workers=1) as envs:
        await envs.reset()
        gates.hold(0)
        envs.send(np.arange(3))
        await gates.until(gates.entered, 0, 1)
        envs.abort([1])
        gates.release(0)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=3)
        assert ids(batch) == [0, 2]
        assert gates.finished(1, 1)  # it ran, after sub-env 0, in the same worker
        with anyio.fail_after(30):
            await envs.reset(options=mask(3, 1))
        envs.send(np.arange(3))
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=3)
        assert ids(batch) == [0, 1, 2]
        statistics = envs.statistics()
        assert (statistics.aborts, statistics.restarts, statistics.errors) == (1, 0, 0)
        assert "1/1 workers alive" in repr(envs)
