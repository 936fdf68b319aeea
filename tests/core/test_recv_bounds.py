"""``recv(batch_size=, min_size=, wait=)``: at most B results, at least k, waiting at most t."""

from __future__ import annotations

import math
from typing import Any

import anyio
import numpy as np
import pytest
from anyio import wait_all_tasks_blocked

import aiovec
from tests.backends_matrix import LOCAL_BACKENDS, LOCAL_DEADLINE_BACKENDS
from tests.core.held import Gates

pytestmark = pytest.mark.anyio

#: Backends whose steps run beside the loop, so a held one holds back only its own result.
#: (The bounds are the engine's, the same on every backend: Ray's landings are tested with
#: the cap and abort, in tests/core/test_in_flight_cap.py and test_abort.py.)
HOLDING_BACKENDS = LOCAL_DEADLINE_BACKENDS
#: A wait long enough to tell apart from none, short enough for a test.
WAIT = 0.5


def workers(backend: str, count: int) -> dict[str, Any]:
    """One worker (or actor) per sub-env: a held step then holds back no other sub-env."""
    return {"num_workers": count} if backend in ("process", "ray") else {}


def ids(batch: aiovec.StepBatch) -> list[int]:
    return sorted(batch.env_ids.tolist())


@pytest.mark.parametrize("backend", HOLDING_BACKENDS)
async def test_min_size_and_wait_return_what_is_ready(anyio_backend: Any, backend: str,
                                                      gates: Gates) -> None:
    """Two of four results can be ready: ``min_size=2`` returns them once ``wait`` passed,
    not before; the held two come with the next ``recv``, intact."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     **workers(backend, 4)) as envs:
        await envs.reset()
        gates.hold(2, 3)
        envs.send(np.arange(4))
        started = anyio.current_time()
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=4, min_size=2, wait=WAIT)
        assert anyio.current_time() - started >= WAIT
        assert ids(batch) == [0, 1]
        assert envs.num_stepping == 2
        gates.release(2, 3)
        with anyio.fail_after(30):
            rest = await envs.recv()
        assert ids(rest) == [2, 3]
        order = np.argsort(rest.env_ids)
        assert rest.rewards[order].tolist() == [2.0, 3.0]
        assert rest.observations[order, 0].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("backend", HOLDING_BACKENDS)
async def test_a_full_batch_returns_without_waiting(anyio_backend: Any, backend: str,
                                                    gates: Gates) -> None:
    """``batch_size`` ready: returned at once, whatever ``wait`` says; ``min_size`` alone
    waits for nothing beyond it; ``wait`` alone means at least one."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     **workers(backend, 4)) as envs:
        await envs.reset()
        gates.hold(3)
        envs.send(np.arange(4))
        with anyio.fail_after(30):  # far less than the wait
            batch = await envs.recv(batch_size=3, min_size=1, wait=3600)
        assert ids(batch) == [0, 1, 2]
        gates.hold(1, 2)
        envs.send(np.arange(3), [0, 1, 2])
        with anyio.fail_after(30):
            first = await envs.recv(batch_size=4, min_size=1)  # only sub-env 0 can finish
        assert ids(first) == [0]
        gates.release(3)
        with anyio.fail_after(30):
            second = await envs.recv(batch_size=4, wait=0)  # whatever is ready, at least one
        assert ids(second) == [3]
        gates.release(1, 2)
        with anyio.fail_after(30):
            last = await envs.recv(batch_size=4, min_size=2, wait=3600)  # all two owed
        assert ids(last) == [1, 2]


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_never_more_than_batch_size_nor_fewer_than_owed(anyio_backend: Any,
                                                               backend: str,
                                                               gates: Gates) -> None:
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend) as envs:
        await envs.reset()
        envs.send(np.arange(4))
        received: list[int] = []
        with anyio.fail_after(30):
            while len(received) < 4:
                batch = await envs.recv(batch_size=3, min_size=3, wait=0)
                assert 1 <= len(batch.env_ids) <= 3
                assert len(batch.env_ids) >= min(3, 4 - len(received))
                received += batch.env_ids.tolist()
        assert sorted(received) == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", HOLDING_BACKENDS)
async def test_a_cancelled_bounded_recv_loses_nothing(anyio_backend: Any, backend: str,
                                                      gates: Gates) -> None:
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     **workers(backend, 4)) as envs:
        await envs.reset()
        gates.hold(2, 3)
        envs.send(np.arange(4))
        with anyio.move_on_after(WAIT) as scope:
            await envs.recv(batch_size=4, min_size=3, wait=0)  # only two can be ready
        assert scope.cancelled_caught
        gates.release(2, 3)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=4)
        assert ids(batch) == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", ["thread", "async"])
async def test_batches_take_the_same_bounds(anyio_backend: Any, backend: str,
                                            gates: Gates) -> None:
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend) as envs:
        await envs.reset()
        gates.hold(3)
        envs.send(np.arange(4))
        sizes, received = [], []
        with anyio.fail_after(30):
            async for batch in envs.batches(batch_size=4, min_size=3, wait=WAIT):
                sizes.append(len(batch.env_ids))
                received += batch.env_ids.tolist()
                gates.release(3)
        assert sizes == [3, 1]
        assert sorted(received) == [0, 1, 2, 3]


BAD_BOUNDS = [
    ({"batch_size": 5}, "batch_size must be at most num_envs=4"),
    ({"batch_size": 0}, "batch_size must be a positive int"),
    ({"min_size": 0}, "min_size must be a positive int"),
    ({"min_size": True}, "min_size must be a positive int"),
    ({"min_size": 2.0}, "min_size must be a positive int"),
    ({"batch_size": 2, "min_size": 3}, "min_size must be at most batch_size=2"),
    ({"min_size": 5}, "min_size must be at most num_envs=4"),
    ({"wait": -1}, "wait must be a number of seconds at least 0"),
    ({"wait": math.nan}, "wait must be a number of seconds at least 0"),
    ({"wait": True}, "wait must be a number of seconds at least 0"),
    ({"wait": "1"}, "wait must be a number of seconds at least 0"),
]


@pytest.mark.parametrize("backend", ["inline", "thread"])
async def test_bad_bounds_are_refused_before_anything_changes(anyio_backend: Any,
                                                              backend: str,
                                                              gates: Gates) -> None:
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     batch_size=2) as envs:
        await envs.reset()
        envs.send(np.arange(4))
        for bounds, message in BAD_BOUNDS:
            with pytest.raises(ValueError, match=message):
                await envs.recv(**bounds)
            with pytest.raises(ValueError, match=message):
                await anext(envs.batches(**bounds))
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=4)
        assert ids(batch) == [0, 1, 2, 3]  # nothing was taken by a refused call
        assert batch.observations[:, 0].tolist() == [1.0] * 4


async def test_the_defaults_wait_for_a_full_batch(anyio_backend: Any, gates: Gates) -> None:
    """Neither ``min_size`` nor ``wait``: the constructor's ``batch_size``, as before."""
    async with aiovec.AsyncVectorEnv(gates.factories("thread", 4), backend="thread",
                                     batch_size=3) as envs:
        await envs.reset()
        gates.hold(3)
        envs.send(np.arange(4))
        with anyio.fail_after(30):
            batch = await envs.recv()
        assert ids(batch) == [0, 1, 2]
        with anyio.move_on_after(WAIT) as scope:
            await envs.recv()  # one owed, held: waits for it
        assert scope.cancelled_caught
        gates.release(3)
        with anyio.fail_after(30):
            assert ids(await envs.recv()) == [3]


@pytest.mark.parametrize("backend", HOLDING_BACKENDS)
async def test_sends_made_while_recv_waits_do_not_raise_its_count(anyio_backend: Any,
                                                                  backend: str,
                                                                  gates: Gates) -> None:
    """One result owed when ``recv(batch_size=3)`` is called: it returns one, though two
    sent while it waited landed before it; the rest wait for the next ``recv``."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 3), backend=backend,
                                     **workers(backend, 3)) as envs:
        await envs.reset()
        gates.hold(0)
        envs.send(np.zeros(1, np.int64), [0])
        got: list[aiovec.StepBatch] = []

        async def receive() -> None:
            got.append(await envs.recv(batch_size=3))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(receive)
                await wait_all_tasks_blocked()  # recv is waiting for sub-env 0
                envs.send(np.array([1, 2]), [1, 2])
        assert len(ids(got[0])) == 1 and ids(got[0])[0] in (1, 2)
        gates.release(0)
        with anyio.fail_after(30):
            rest = await envs.recv(batch_size=3)
        assert sorted(ids(got[0]) + ids(rest)) == [0, 1, 2]
