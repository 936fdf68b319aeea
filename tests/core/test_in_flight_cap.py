"""``max_in_flight``: at most that many sub-envs step at once among first-ready sends; the
rest wait in aiovec's queue, in send order, and go out as results land."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

import aiovec
from tests.backends_matrix import DEADLINE_BACKENDS, LOCAL_BACKENDS
from tests.core.held import Gates, HeldEchoEnv
from tests.core.test_recv_bounds import ids, workers

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
async def test_the_third_waits_until_one_lands(anyio_backend: Any, backend: str,
                                               gates: Gates) -> None:
    """Cap 2, four sent, all held: two step, two wait; one released and received lets the
    next one (in send order) out; no step ever saw more than two running."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     max_in_flight=2, **workers(backend, 4)) as envs:
        await envs.reset()
        gates.hold(0, 1, 2, 3)
        envs.send(np.arange(4))
        assert (envs.num_stepping, envs.num_queued) == (2, 2)
        await gates.until(gates.entered, 0, 1)
        await gates.until(gates.entered, 1, 1)
        assert (envs.num_stepping, envs.num_queued, envs.num_ready) == (2, 2, 0)
        gates.release(0)
        with anyio.fail_after(30):
            first = await envs.recv(batch_size=1)
        assert ids(first) == [0]
        assert (envs.num_stepping, envs.num_queued) == (2, 1)
        await gates.until(gates.entered, 2, 1)  # the oldest queued went out
        assert not gates.entered(3, 1)
        gates.release(1, 2, 3)
        with anyio.fail_after(30):
            rest = await envs.recv(batch_size=3)
        assert ids(rest) == [1, 2, 3]
        assert rest.observations[:, 0].tolist() == [1.0] * 3
        assert gates.most_at_once() == 2
        assert envs.statistics().timeouts == 0


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_sends_go_out_in_send_order(anyio_backend: Any, backend: str,
                                          gates: Gates) -> None:
    """Cap 1: one at a time, so results land in the order the sends were made, even across
    sends; ``recv`` dispatches the queue as it collects (inline runs them there)."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     max_in_flight=1) as envs:
        await envs.reset()
        if backend != "inline":  # (inline steps run in recv: they cannot be held)
            gates.hold(2)
        for env_ids in ([2], [0, 3], [1]):
            envs.send(np.array(env_ids) * 10, env_ids)
        assert (envs.num_stepping, envs.num_queued) == (1, 3)
        gates.release(2)
        order = []
        with anyio.fail_after(30):
            for _ in range(4):
                batch = await envs.recv(batch_size=1)
                order += batch.env_ids.tolist()
                assert batch.rewards.tolist() == [10.0 * order[-1]]
        assert order == [2, 0, 3, 1]
        assert gates.most_at_once() == 1


@pytest.mark.parametrize("backend", ["thread", "async"])
async def test_queued_steps_go_out_as_results_land_without_recv(
        anyio_backend: Any, backend: str, gates: Gates) -> None:
    """Nobody in ``recv`` (the caller awaits its policy): a landing result still lets the
    next queued step out."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 3), backend=backend,
                                     max_in_flight=1) as envs:
        await envs.reset()
        envs.send(np.arange(3))
        await gates.until(lambda: envs.num_ready == 3)  # 0 landed, 1 went out, landed; 2 too
        assert (envs.num_stepping, envs.num_queued) == (0, 0)
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=3, wait=0)) == [0, 1, 2]


@pytest.mark.parametrize("backend", ["thread", "process", "async"])
async def test_moving_the_cap_while_running(anyio_backend: Any, backend: str,
                                            gates: Gates) -> None:
    """Raising the cap dispatches at once; lowering it lets the running steps finish and
    holds the next ones back."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 4), backend=backend,
                                     max_in_flight=1, **workers(backend, 4)) as envs:
        await envs.reset()
        gates.hold(0, 1, 2)
        envs.send(np.arange(3), [0, 1, 2])
        assert (envs.num_stepping, envs.num_queued) == (1, 2)
        envs.max_in_flight = 3
        assert (envs.num_stepping, envs.num_queued) == (3, 0)
        for env_index in (0, 1, 2):
            await gates.until(gates.entered, env_index, 1)
        envs.max_in_flight = 1
        assert envs.max_in_flight == 1
        envs.send(np.array([3]), [3])  # three step already: it waits for two to land
        assert (envs.num_stepping, envs.num_queued) == (3, 1)
        gates.release(0)
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=1)) == [0]
        assert (envs.num_stepping, envs.num_queued) == (2, 1)
        gates.release(1, 2)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=3)
        assert ids(batch) == [1, 2, 3]
        assert gates.most_at_once() == 3
        envs.max_in_flight = None
        gates.hold(0, 1, 2, 3)
        envs.send(np.arange(4))
        assert (envs.num_stepping, envs.num_queued) == (4, 0)
        gates.release(0, 1, 2, 3)
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=4)) == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", ["thread", "process", "async"])
async def test_a_queued_deadline_starts_when_the_step_goes_out(
        anyio_backend: Any, backend: str, gates: Gates) -> None:
    """Sub-env 1 waits in the queue far longer than its timeout, then steps in time: not
    late. Its deadline does run once it is out (a held step times out)."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 2), backend=backend,
                                     max_in_flight=1, **workers(backend, 2)) as envs:
        await envs.reset()
        gates.hold(0)
        envs.send(np.array([0]), [0])
        envs.send(np.array([1]), [1], timeout=2.0)  # a wide margin for its step itself
        with anyio.move_on_after(3.0):  # time passes while it is queued: more than that
            await envs.recv(batch_size=2)
        assert (envs.num_stepping, envs.num_queued) == (1, 1)
        gates.release(0)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=2)
        assert ids(batch) == [0, 1]
        assert envs.statistics().timeouts == 0
        gates.hold(1)
        envs.send(np.array([1]), [1], timeout=0.5)
        with anyio.fail_after(30), pytest.raises(aiovec.EnvTimeoutError) as raised:
            await envs.recv()
        assert raised.value.env_ids == (1,)
        gates.release(1)


@pytest.mark.parametrize("backend", ["thread", "process", "async"])
async def test_a_waiting_recv_keeps_the_deadline_of_a_step_dispatched_meanwhile(
        anyio_backend: Any, backend: str, gates: Gates) -> None:
    """``recv`` waits with no deadline (the one step out has none); a result lands, the
    queued step goes out with a deadline and hangs: that same ``recv`` reports it late
    instead of waiting for it forever."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 2), backend=backend,
                                     max_in_flight=1, **workers(backend, 2)) as envs:
        await envs.reset()
        gates.hold(0, 1)
        envs.send(np.array([0]), [0])
        envs.send(np.array([1]), [1], timeout=1.0)  # queued behind sub-env 0

        async def release_the_first() -> None:
            await gates.until(gates.entered, 0, 1)
            gates.release(0)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(release_the_first)
            with anyio.fail_after(30), pytest.raises(aiovec.EnvTimeoutError) as raised:
                await envs.recv(batch_size=2)
        assert raised.value.env_ids == (1,)
        assert ids(raised.value.partial_result) == [0, 1]
        assert gates.entered(1, 1)
        gates.release(1)


@pytest.mark.parametrize("backend", ["thread", "process"])
async def test_a_queued_object_action_is_a_snapshot(anyio_backend: Any, backend: str,
                                                    gates: Gates) -> None:
    """Cap 1: a list sent while another step runs waits in the queue; changing it after
    ``send`` changes nothing its sub-env gets (pickled later, or handed over later)."""
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 2, HeldEchoEnv), backend=backend,
                                     max_in_flight=1, **workers(backend, 2)) as envs:
        await envs.reset()
        gates.hold(0)
        envs.send(([0],), [0])
        message = ["sent"]
        envs.send((message,), [1])
        assert (envs.num_stepping, envs.num_queued) == (1, 1)
        message.append("changed after send")
        gates.release(0)
        with anyio.fail_after(30):
            batch = await envs.recv(batch_size=2)
    assert dict(zip(batch.env_ids.tolist(), batch.observations)) == {0: [0], 1: ["sent"]}


@pytest.mark.parametrize("backend", ["inline", "thread"])
async def test_queued_sub_envs_are_owed(anyio_backend: Any, backend: str,
                                        gates: Gates) -> None:
    async with aiovec.AsyncVectorEnv(gates.factories(backend, 3), backend=backend,
                                     max_in_flight=1) as envs:
        await envs.reset()
        envs.send(np.arange(2), [0, 1])
        assert envs.num_queued == 1
        with pytest.raises(aiovec.BusyError, match=r"sub-env\(s\) \[1\]"):
            envs.send(np.array([1]), [1])
        with pytest.raises(aiovec.BusyError, match=r"\[0, 1\]"):
            await envs.step(np.arange(3))
        with pytest.raises(aiovec.BusyError, match=r"\[1\]"):
            await envs.reset(options={"reset_mask": np.array([False, True, False])})
        with anyio.fail_after(30):
            assert ids(await envs.recv(batch_size=3)) == [0, 1]  # the queued one too
        assert not gates.entered(2, 1)


BAD_CAPS = [0, -1, True, 1.5, "2"]


async def test_bad_caps_are_refused(anyio_backend: Any) -> None:
    for cap in BAD_CAPS:
        with pytest.raises(ValueError, match="max_in_flight must be a positive int or None"):
            aiovec.AsyncVectorEnv([aiovec.testing.CountingEnv], backend="inline",
                                  max_in_flight=cap)
    async with aiovec.AsyncVectorEnv([aiovec.testing.CountingEnv], backend="inline",
                                     max_in_flight=2) as envs:
        for cap in BAD_CAPS:
            with pytest.raises(ValueError, match="max_in_flight must be a positive int"):
                envs.max_in_flight = cap
        assert envs.max_in_flight == 2
        envs.max_in_flight = np.int64(7)
        assert envs.max_in_flight == 7 and type(envs.max_in_flight) is int


def test_the_sync_shim_has_them_too() -> None:
    with aiovec.VectorEnv([aiovec.testing.CountingEnv] * 3, backend="inline",
                          max_in_flight=1) as shim:
        shim.reset(seed=0)
        shim.send(np.ones(3, dtype=np.int64))
        assert (shim.num_stepping, shim.num_queued, shim.num_ready) == (1, 2, 0)
        batch = shim.recv(batch_size=3, min_size=1)  # inline: only the one sent out ran
        assert batch.env_ids.tolist() == [0]
        assert (shim.num_stepping, shim.num_queued) == (1, 1)
        shim.abort([2])
        assert (shim.num_stepping, shim.num_queued) == (1, 0)
        shim.max_in_flight = 2
        assert shim.max_in_flight == 2
        assert shim.recv(batch_size=2, wait=0).env_ids.tolist() == [1]
        assert shim.unusable_envs == (2,)
        assert shim.statistics().aborts == 1
        with pytest.raises(ValueError, match="max_in_flight must be a positive int"):
            shim.max_in_flight = 0


async def test_multi_agent_envs_have_them_too(anyio_backend: Any) -> None:
    from tests.multiagent.envs import Arena
    from tests.multiagent.test_vector_env import scout_actions

    async with aiovec.AsyncParallelVectorEnv([Arena] * 3, backend="inline",
                                             max_in_flight=1) as envs:
        await envs.reset(seed=0)
        envs.send(scout_actions(3))
        assert (envs.num_stepping, envs.num_queued, envs.num_ready) == (1, 2, 0)
        envs.max_in_flight = 3
        assert (envs.max_in_flight, envs.num_stepping, envs.num_queued) == (3, 3, 0)
        envs.abort([1])
        received = [batch async for batch in envs.batches(batch_size=3, min_size=1)]
        assert sorted(env for batch in received for env in batch.env_ids.tolist()) == [0, 2]
        assert isinstance(received[0], aiovec.ParallelStepBatch)
        assert envs.unusable_envs == (1,)
        assert envs.statistics().aborts == 1
