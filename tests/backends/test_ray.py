"""The Ray backend against the session's real Ray runtime (tests/ray_runtime.py), on asyncio,
uvloop and trio: batched actors, first-ready batches, options passed to Ray, clear errors.

Differential and fault-injection runs on ``backend="ray"`` live with the other backends'
(tests/core/test_differential.py, tests/faults/).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec._core._requests import Op
from aiovec.testing import CountingEnv, Fault, FaultyEnv, InjectedFault
from tests.envs import MisshapenEnv, TextEnv
from tests.helpers import assert_identical
from tests.leaks import wait_for_exit
from tests.ray_runtime import RAY_ENVIRONMENT, TEST_RESOURCE, actor_pids

pytestmark = pytest.mark.ray


@pytest.fixture
def no_leaks_sync() -> Iterator[None]:
    """``no_leaks`` for tests without an event loop: every actor the test made has exited."""
    actors = actor_pids()
    yield
    assert not wait_for_exit(sorted(actor_pids() - actors), timeout=20)


def cartpoles(count: int) -> list[functools.partial[gym.Env]]:
    return [functools.partial(gym.make, "CartPole-v1")] * count


@pytest.mark.anyio
async def test_steps_match_sync_vector_env_with_several_envs_per_actor(no_leaks: None) -> None:
    reference = gym.vector.SyncVectorEnv(cartpoles(5))
    actions = np.random.default_rng(0).integers(0, 2, size=(60, 5))
    try:
        expected = [reference.reset(seed=7)] + [reference.step(a) for a in actions]
        expected_attribute = reference.get_attr("steps_beyond_terminated")
    finally:
        reference.close()
    async with aiovec.AsyncVectorEnv(cartpoles(5), backend="ray", num_workers=2) as envs:
        assert "ray backend, 2/2 actors alive" in repr(envs)
        actual = [await envs.reset(seed=7)] + [await envs.step(a) for a in actions]
        # Each sub-env's own value, from whichever actor hosts it (None after a reset).
        assert await envs.get_attr("steps_beyond_terminated") == expected_attribute
    assert_identical(actual, expected)


@pytest.mark.anyio
async def test_a_failed_sub_env_does_not_cost_its_actor_neighbours_their_results(
        no_leaks: None) -> None:
    """Two sub-envs per actor; in one step sub-env 1 raises and sub-env 2's info cannot be
    pickled (one on each actor): the error names both, each with the traceback from its actor,
    and every other sub-env's result is in the partial result (the actors' step blocks)."""
    faults = {1: [Fault("raise", "step", at=1)], 2: [Fault("unpicklable_info", "step", at=1)]}
    factories = [functools.partial(FaultyEnv, index, faults=faults.get(index, ()))
                 for index in range(4)]
    async with aiovec.AsyncVectorEnv(factories, backend="ray", num_workers=2) as envs:
        await envs.reset(seed=0)
        await envs.step(np.full(4, 3.0))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.array([5.0, 6.0, 7.0, 8.0]))
        assert caught.value.env_ids == (1, 2)
        raised, unpicklable = caught.value.exceptions
        assert isinstance(raised, aiovec.SubEnvError) and raised.env_id == 1
        assert isinstance(raised.__cause__, InjectedFault)
        assert "InjectedFault" in raised.remote_traceback
        assert isinstance(unpicklable, aiovec.SubEnvError) and unpicklable.env_id == 2
        assert isinstance(unpicklable.__cause__, aiovec.SerializationError)
        assert "could not be pickled" in str(unpicklable)
        obs, rewards, terminations, truncations, _ = caught.value.partial_result
        # [episode step, last action]: the failed sub-envs keep their previous observation.
        assert obs[:, :2].tolist() == [[2, 5], [1, 3], [1, 3], [2, 8]]
        assert rewards.tolist() == [5, 0, 0, 8]
        assert not terminations.any() and not truncations.any()
        obs, _ = await envs.reset(seed=1, options={"reset_mask": np.array([0, 1, 1, 0], bool)})
        obs, rewards, *_ = await envs.step(np.array([1.0, 2.0, 3.0, 4.0]))
        assert obs[:, :2].tolist() == [[3, 1], [1, 2], [1, 3], [3, 4]]
        assert rewards.tolist() == [1, 2, 3, 4]


@pytest.mark.anyio
async def test_an_observation_that_does_not_fit_its_space_fails_only_its_sub_env_on_ray(
        no_leaks: None) -> None:
    """The actor cannot batch the step (one observation is short), so its replies come one by
    one; the one that does not fit the batch arrays fails its sub-env, by name."""
    async with aiovec.AsyncVectorEnv([MisshapenEnv] * 4, backend="ray", num_workers=2) as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.array([0, 1, 0, 0]))
        assert caught.value.env_ids == (1,)
        assert isinstance(caught.value.exceptions[0].__cause__, ValueError)
        obs, rewards, *_ = caught.value.partial_result
        assert obs.tolist() == [[1, 1], [0, 1], [1, 1], [1, 1]]
        assert rewards.tolist() == [0, 0, 0, 0]


@pytest.mark.anyio
async def test_a_step_its_caller_gave_up_on_writes_nothing_into_the_batch(
        no_leaks: None) -> None:
    """An actor's answers to a cancelled step and to the next call may settle in either order
    (CI once saw a late step's rows land over the reset after it): an abandoned request's
    answers are never written into the batch arrays."""
    async with aiovec.AsyncVectorEnv([CountingEnv] * 4, backend="ray", num_workers=2,
                                     copy=False) as envs:
        observations, _ = await envs.reset(seed=0)
        after_reset = observations.copy()
        backend = envs._engine.backend  # type: ignore[attr-defined]
        abandoned = backend.submit(Op.STEP, backend.every_env, np.zeros(4, dtype=np.int64))
        abandoned.abandon()  # what the core does when the caller is cancelled
        await abandoned.wait()  # every actor answered: the step ran, its rows were not placed
        assert np.array_equal(observations, after_reset)
        assert (await envs.get_attr("steps")) == (1, 1, 1, 1)  # it did run
        observations, _ = await envs.reset(seed=1)
        assert observations.tolist() == [[1, 2]] * 4


@pytest.mark.anyio
async def test_observations_that_do_not_batch_into_arrays_travel_one_by_one(
        no_leaks: None) -> None:
    reference = gym.vector.SyncVectorEnv([TextEnv] * 3)
    actions = [("ab", "c", ""), ("x", "yy", "zzz"), ("", "", "q")]
    try:
        expected = [reference.reset(seed=0)] + [reference.step(a) for a in actions]
    finally:
        reference.close()
    async with aiovec.AsyncVectorEnv([TextEnv] * 3, backend="ray", num_workers=2) as envs:
        actual = [await envs.reset(seed=0)] + [await envs.step(a) for a in actions]
        envs.send(("w",), env_ids=[1])
        batch = await envs.recv()
        assert batch.observations == ("wyycstar",)
    assert_identical(actual, expected)


@pytest.mark.anyio
async def test_first_ready_batches_and_calls_reach_the_right_sub_envs(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([CountingEnv] * 4, backend="ray", num_workers=2,
                                     batch_size=2) as envs:
        await envs.reset(seed=0)
        envs.send(np.array([1, 1]), env_ids=[1, 3])
        batch = await envs.recv()
        assert sorted(batch.env_ids.tolist()) == [1, 3]
        assert batch.observations[:, 0].tolist() == [1, 1]
        envs.send(np.array([0, 1, 0]), env_ids=[0, 2, 3])
        seen = []
        async for batch in envs.batches():
            seen += batch.env_ids.tolist()
        assert sorted(seen) == [0, 2, 3]
        assert await envs.get_attr("steps") == (1, 1, 1, 2)
        await envs.set_attr("episode_length", [None, 5, None, 5])
        observations = await envs.call("_observation")  # [steps, resets] of each sub-env
        assert [obs.tolist() for obs in observations] == [[1, 1], [1, 1], [1, 1], [2, 1]]
        assert await envs.get_attr("episode_length") == (None, 5, None, 5)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # placement does not involve the loop
async def test_actor_options_reach_ray_and_an_unplaceable_actor_times_out(
    no_leaks: None,
) -> None:
    placed = {"num_cpus": 0, "resources": {TEST_RESOURCE: 1}}
    async with aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="ray",
                                     actor_options=[placed, placed]) as envs:
        obs, _ = await envs.reset()
        assert obs.tolist() == [[0, 1], [0, 1]]
    # No node has this resource: the actors wait to be placed until the start deadline.
    unplaceable = {"num_cpus": 0, "resources": {"no_such_resource": 1}}
    envs = aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="ray", actor_options=unplaceable)
    with pytest.raises(aiovec.EnvTimeoutError) as caught:
        await envs.start(timeout=3)
    assert caught.value.env_ids == (0, 1)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the cap does not involve the loop
async def test_max_concurrency_caps_the_actors(no_leaks: None) -> None:
    """An actor steps its sub-envs one at a time: at most ``max_concurrency`` actors."""
    async with aiovec.AsyncVectorEnv([CountingEnv] * 5, backend="ray",
                                     max_concurrency=2) as envs:
        assert "2/2 actors alive" in repr(envs)
        obs, _ = await envs.reset()
        assert obs.shape[0] == 5
    with pytest.raises(ValueError, match="num_workers=3 exceeds max_concurrency=2"):
        aiovec.AsyncVectorEnv([CountingEnv] * 5, backend="ray", num_workers=3,
                              max_concurrency=2)


def test_actor_options_aiovec_owns_are_refused() -> None:
    for key in ("max_restarts", "max_task_retries", "max_concurrency"):
        with pytest.raises(ValueError, match=f"may not set '{key}'"):
            aiovec.AsyncVectorEnv([CountingEnv], backend="ray", actor_options={key: 1})
    with pytest.raises(ValueError, match="2 entries for num_workers=1"):
        aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="ray", num_workers=1,
                              actor_options=[{}, {}])
    with pytest.raises(ValueError, match="address applies to the ray backend"):
        aiovec.AsyncVectorEnv([CountingEnv], backend="thread", address="auto")
    assert aiovec.AsyncVectorEnv([CountingEnv], address="auto").backend_name == "ray"


def test_sync_shim_on_ray(no_leaks_sync: None) -> None:
    envs = aiovec.VectorEnv(cartpoles(3), backend="ray")
    try:
        obs, _ = envs.reset(seed=3)
        obs, rewards, *_ = envs.step(np.array([0, 1, 0]))
        assert obs.shape == (3, 4) and rewards.tolist() == [1.0, 1.0, 1.0]
    finally:
        envs.close()
    envs.close()  # a second close is harmless


def _run_alone(code: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (no Ray runtime of this session's)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("RAY_")}
    env.update(RAY_ENVIRONMENT, **environment)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=90, check=False)


def test_ray_started_by_aiovec_serves_every_later_vector_env() -> None:
    """``address="local"`` starts Ray once; it outlives each vector env (it had died with
    the first shim's loop thread, and Ray aborted the program 60 s later) and serves vector
    envs made in a row, in parallel, from the shim and from ``await`` on asyncio and trio."""
    finished = _run_alone("""
        import functools, threading
        import anyio, gymnasium as gym, numpy as np, ray
        import aiovec
        fns = [functools.partial(gym.make, "CartPole-v1")] * 2
        # print() writes its arguments and the newline one by one: two threads printing
        # at once interleave ("parallel 0parallel 1 [1.0, 1.0]"), so lines go out whole.
        printing = threading.Lock()

        def report(name, rewards):
            with printing:
                print(f"{name} {rewards}", flush=True)

        def shim_round(name, **options):
            envs = aiovec.VectorEnv(fns, backend="ray", address="local", **options)
            envs.reset(seed=0)
            report(name, envs.step(np.array([0, 1]))[1].tolist())
            envs.close()

        for index in range(3):
            shim_round(f"row {index}")
        # One actor (one CPU) each: by default a vector env takes an actor per CPU of the
        # runtime (2 here), and two made at once could each get one placed and wait for
        # the other's CPU until the start deadline (it did: the script timed out).
        threads = [threading.Thread(target=shim_round, args=(f"parallel {index}",),
                                    kwargs={"num_workers": 1})
                   for index in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        async def awaited():
            async with aiovec.AsyncVectorEnv(fns, address="local") as envs:
                await envs.reset(seed=0)
                report("awaited", (await envs.step(np.array([1, 1])))[1].tolist())

        anyio.run(awaited, backend="asyncio")
        anyio.run(awaited, backend="trio")
        assert ray.is_initialized()  # still the user's to shut down
        ray.shutdown()
    """)
    assert finished.returncode == 0, finished.stderr[-3000:]
    expected = [*(f"row {index} [1.0, 1.0]" for index in range(3)),
                "parallel 0 [1.0, 1.0]", "parallel 1 [1.0, 1.0]",
                "awaited [1.0, 1.0]", "awaited [1.0, 1.0]"]
    assert sorted(finished.stdout.splitlines()) == sorted(expected)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_without_a_runtime_or_without_ray_the_error_says_what_to_do() -> None:
    no_runtime = _run_alone("""
        import anyio, aiovec, ray
        from aiovec.testing import CountingEnv
        async def main():
            try:
                async with aiovec.AsyncVectorEnv([CountingEnv], backend="ray") as envs:
                    await envs.reset()
            except RuntimeError as error:
                print(error)
            assert not ray.is_initialized()  # no cluster started behind the user's back
            # Asked to, aiovec starts Ray here ("auto" also picks the ray backend):
            async with aiovec.AsyncVectorEnv([CountingEnv], address="local") as envs:
                print(envs.backend_name, (await envs.reset())[0].tolist())
        anyio.run(main)
    """)
    assert no_runtime.returncode == 0, no_runtime.stderr
    assert "backend='ray' found no Ray runtime: call ray.init" in no_runtime.stdout
    assert "address='local'" in no_runtime.stdout
    assert "ray [[0, 1]]" in no_runtime.stdout
    no_ray = _run_alone("""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        import aiovec
        from aiovec.testing import CountingEnv
        aiovec.AsyncVectorEnv([CountingEnv], backend="ray")
    """)
    assert no_ray.returncode == 1
    assert "pip install 'aiovec[ray]'" in no_ray.stderr
