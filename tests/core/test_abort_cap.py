"""``abort`` under ``max_in_flight``: a step the backend cannot stop keeps its room under the
cap until it ends, so the cap still bounds how many steps run at once (a shared judge or
sandbox pool sees no more than that); one it stops frees its room at once."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
from tests.core.held import Gates
from tests.core.test_recv_bounds import ids, workers

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", ["thread", "process"])
async def test_an_aborted_step_that_runs_on_keeps_its_room(anyio_backend: Any, backend: str,
                                                           gates: Gates) -> None:
    """Cap 2: both steps held, aborted, and two more sent. The aborted steps run on (a thread
    cannot be stopped; a worker is stopped only at a deadline), so the new ones wait; each goes
    out as an aborted one ends, with a ``recv`` waiting meanwhile, and no step ever saw more
    than two running. Nothing of the aborted steps is received."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     max_in_flight=2, **workers(backend, 4)) as envs:
        first_ready = envs._engine.first_ready
        assert first_ready is not None
        await envs.reset()
        gates.hold(0, 1, 2, 3)
        envs.send(np.array([0, 1]), [0, 1])
        await gates.until(gates.entered, 0, 1)
        await gates.until(gates.entered, 1, 1)
        envs.abort([0, 1])
        envs.send(np.array([2, 3]), [2, 3])
        # The aborted two still step: they fill the cap, and are what ``num_stepping`` counts.
        assert (envs.num_stepping, envs.num_queued, envs.num_ready) == (2, 2, 0)
        received: list[list[int]] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                @group.start_soon
                async def receive() -> None:
                    received.append(ids(await envs.recv(batch_size=2)))

                await gates.until(lambda: first_ready.receiving)
                gates.release(0)
                await gates.until(gates.entered, 2, 1)  # 0 ended: its room went to 2
                assert envs.num_queued == 1
                assert not gates.entered(3, 1)  # 1 still runs: 3 waits
                gates.release(1)
                await gates.until(gates.entered, 3, 1)
                assert (envs.num_stepping, envs.num_queued) == (2, 0)
                gates.release(2, 3)
        assert received == [[2, 3]]
        assert gates.most_at_once() == 2
        assert gates.finished(0, 1) and gates.finished(1, 1)
        with pytest.raises(aiovec.NothingSentError):
            await envs.recv()
        assert envs.num_stepping == 0
        assert envs.statistics().aborts == 2


async def test_an_aborted_async_step_frees_its_room_at_once(anyio_backend: Any,
                                                            gates: Gates) -> None:
    """The async backend cancels an aborted step's coroutine: its room goes to the next
    queued step at once."""
    async with aiovec.AsyncVectorEnv(gates.factories("async", 4), backend="async",
                                     max_in_flight=2) as envs:
        await envs.reset()
        gates.hold(0, 1)
        envs.send(np.array([0, 1]), [0, 1])
        await gates.until(gates.entered, 0, 1)
        await gates.until(gates.entered, 1, 1)
        envs.abort([0, 1])
        envs.send(np.array([2, 3]), [2, 3])
        assert (envs.num_stepping, envs.num_queued) == (2, 0)
        await gates.until(gates.cancelled, 0, 1)
        await gates.until(gates.cancelled, 1, 1)
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=2)) == [2, 3]
        assert not gates.finished(0, 1) and not gates.finished(1, 1)
        assert envs.num_stepping == 0
