"""``out=``: observations written into the caller's own buffer, on every backend and loop.

A rollout into ``out`` matches ``SyncVectorEnv`` bit for bit; ``out`` is what the call
returns, never a view of the vector env's own buffers; a wrong ``out`` is refused before any
sub-env is sent anything; failures and restarts fill ``out`` exactly as they fill the batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import create_empty_array

import aiovec
from aiovec.testing import CountingEnv, EpisodeEnv, Fault
from tests.backends_matrix import LOCAL_BACKENDS, for_backend, slow_on
from tests.core.test_differential import (
    ENV_KINDS,
    NUM_ENVS,
    Record,
    as_async,
    check_rollout,
    env_factory,
    rollout,
    run_without_loop,
)
from tests.envs import TextEnv
from tests.faults.envs import faulty
from tests.helpers import assert_identical

pytestmark = pytest.mark.anyio

#: Long enough for episodes to end both ways (3 to 40 steps each, 4 sub-envs).
OUT_STEPS = 200

modes = pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.value)


def snapshot(observations: Any) -> Any:
    """A copy of a (tree of) batched arrays, of the same types."""
    if isinstance(observations, np.ndarray):
        return observations.copy()
    if isinstance(observations, dict):
        return {key: snapshot(value) for key, value in observations.items()}
    return tuple(snapshot(value) for value in observations)


@functools.cache
def reference(kind: str, mode: AutoresetMode, seed: int) -> list[Record]:
    envs = SyncVectorEnv([env_factory(kind)] * NUM_ENVS, autoreset_mode=mode)
    try:
        return run_without_loop(rollout(as_async(envs.reset), as_async(envs.step),
                                        envs.action_space, mode, seed, OUT_STEPS))
    finally:
        envs.close()


@pytest.mark.parametrize("backend", slow_on(LOCAL_BACKENDS, "process"))
@modes
@pytest.mark.parametrize("kind", ENV_KINDS)
async def test_rollouts_into_out_match_sync_vector_env(backend: str, mode: AutoresetMode,
                                                       kind: str) -> None:
    """Every other step goes into ``out``, the others come back as views (``copy=False``):
    the batch arrays stay right whichever way the previous call went."""
    seed = 99 + ENV_KINDS.index(kind)
    factories = [env_factory(kind, backend)] * NUM_ENVS
    async with aiovec.AsyncVectorEnv(factories, backend=backend, autoreset_mode=mode,
                                     copy=False) as envs:
        out = create_empty_array(envs.single_observation_space, NUM_ENVS, np.zeros)
        calls = 0

        async def reset(**kwargs: Any) -> tuple[Any, dict[str, Any]]:
            obs, infos = await envs.reset(**kwargs, out=out)
            assert obs is out
            return snapshot(obs), infos

        async def step(actions: Any) -> tuple[Any, ...]:
            nonlocal calls
            calls += 1
            if calls % 2:  # a view of the batch arrays, which the next call reuses
                obs, *rest = await envs.step(actions)
                assert obs is not out
            else:
                obs, *rest = await envs.step(actions, out=out)
                assert obs is out
            return (snapshot(obs), *rest)

        actual = await rollout(reset, step, envs.action_space, mode, seed, OUT_STEPS)
    check_rollout(actual, reference(kind, mode, seed))


@pytest.mark.ray
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Ray on every loop: test_ray.py
@pytest.mark.parametrize("kind", ["box", "dict"])
async def test_ray_rollouts_into_out_match_sync_vector_env(kind: str) -> None:
    """Ray's actors write their blocks into the batch arrays, as the process workers write
    shared memory: ``out`` is filled from them the same way."""
    mode = AutoresetMode.SAME_STEP
    seed = 7
    async with aiovec.AsyncVectorEnv([env_factory(kind)] * NUM_ENVS, backend="ray",
                                     autoreset_mode=mode, num_workers=2) as envs:
        out = create_empty_array(envs.single_observation_space, NUM_ENVS, np.zeros)

        async def reset(**kwargs: Any) -> tuple[Any, dict[str, Any]]:
            obs, infos = await envs.reset(**kwargs, out=out)
            assert obs is out
            return snapshot(obs), infos

        async def step(actions: Any) -> tuple[Any, ...]:
            obs, *rest = await envs.step(actions, out=out)
            assert obs is out
            return (snapshot(obs), *rest)

        actual = await rollout(reset, step, envs.action_space, mode, seed, OUT_STEPS)
    check_rollout(actual, reference(kind, mode, seed))


def twins(factories: list[Callable[[], Any]], backend: str,
          **options: Any) -> tuple[aiovec.AsyncVectorEnv, aiovec.AsyncVectorEnv]:
    """Two vector envs of the same sub-envs: one is stepped into ``out``, one is not."""
    return (aiovec.AsyncVectorEnv(factories, backend=backend, **options),
            aiovec.AsyncVectorEnv(factories, backend=backend, **options))


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_out_can_be_a_row_of_rollout_storage_and_stays_the_callers(backend: str) -> None:
    """``out=storage[t]`` (a view into a bigger preallocated array, as a trainer's rollout
    buffer is): each row keeps what its step wrote, whatever the later steps do."""
    factories = for_backend(backend, [functools.partial(EpisodeEnv, "box")] * 3)
    into, plain = twins(factories, backend)
    async with into, plain:
        storage = np.full((9, 3, *into.single_observation_space.shape), -1.0,
                          into.single_observation_space.dtype)
        expected = [(await plain.reset(seed=3))[0]]
        row = storage[0]
        assert (await into.reset(seed=3, out=row))[0] is row
        into.action_space.seed(0)
        for t in range(1, 9):
            actions = into.action_space.sample()
            expected.append((await plain.step(actions))[0])
            row = storage[t]
            obs, *_ = await into.step(actions, out=row)
            assert obs is row
        await into.step(into.action_space.sample())  # without out: storage is not touched
        for t, want in enumerate(expected):
            assert_identical(storage[t], want, f"storage[{t}]")


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_a_wrong_out_is_refused_before_anything_is_sent(backend: str) -> None:
    factories = for_backend(backend, [CountingEnv] * 3)
    async with aiovec.AsyncVectorEnv(factories, backend=backend, restart=True) as envs:
        good = np.zeros((3, 2), np.int64)
        read_only = good.copy()
        read_only.flags.writeable = False
        wrong: list[tuple[Any, type[Exception], str]] = [
            (np.zeros((2, 2), np.int64), ValueError, r"shape \(3, 2\).*got shape \(2, 2\)"),
            (np.zeros((2, 3), np.int64), ValueError, r"got shape \(2, 3\)"),
            (np.zeros((3, 2), np.int32), ValueError, "dtype int32"),
            (np.zeros((3, 2), np.float64), ValueError, "dtype float64"),
            (read_only, ValueError, "read-only"),
            (good.tolist(), TypeError, "must be a numpy array.*got list"),
            ({"obs": good}, TypeError, "got dict"),
            ((good,), TypeError, "got tuple"),
        ]
        for out, error, match in wrong:  # the first reset: sub-envs made, none reset
            with pytest.raises(error, match=match):
                await envs.reset(seed=0, out=out)
        assert await envs.get_attr("resets") == (0, 0, 0)
        assert envs.unusable_envs == (0, 1, 2)
        await envs.reset(seed=0)
        for out, error, match in wrong:
            with pytest.raises(error, match=match):
                await envs.step(np.ones(3, np.int64), out=out)
            with pytest.raises(error, match=match):
                await envs.reset(out=out)
        assert await envs.get_attr("steps") == (0, 0, 0)
        assert await envs.get_attr("resets") == (1, 1, 1)
        statistics = envs.statistics()
        assert (statistics.steps, statistics.resets, statistics.errors,
                statistics.restarts) == (0, 1, 0, 0)
        assert envs.unusable_envs == ()
        obs, rewards, *_ = await envs.step(np.ones(3, np.int64), out=good)
        assert obs is good and good.tolist() == [[1, 1]] * 3 and rewards.tolist() == [1.0] * 3


@pytest.mark.parametrize("backend", ["inline", "process"])
async def test_out_must_have_the_observations_tree(backend: str) -> None:
    async with aiovec.AsyncVectorEnv([lambda: EpisodeEnv("dict")] * 2,
                                     backend=backend) as envs:
        good = create_empty_array(envs.single_observation_space, 2, np.zeros)
        await envs.reset(seed=1, out=good)
        key = next(iter(good))
        missing = {name: value for name, value in good.items() if name != key}
        with pytest.raises(ValueError, match="must have the keys"):
            await envs.step(envs.action_space.sample(), out=missing)
        wrong_leaf = {**good, key: good[key].astype(np.float16)}
        with pytest.raises(ValueError, match=rf"out\[{key!r}\] must have .* dtype float16"):
            await envs.step(envs.action_space.sample(), out=wrong_leaf)
        with pytest.raises(TypeError, match="must be a dict"):
            await envs.step(envs.action_space.sample(), out=good[key])
        assert statistics_steps(envs) == 0
    async with aiovec.AsyncVectorEnv([lambda: EpisodeEnv("tuple")] * 2,
                                     backend=backend) as envs:
        good = create_empty_array(envs.single_observation_space, 2, np.zeros)
        assert (await envs.reset(seed=1, out=good))[0] is good
        with pytest.raises(TypeError, match=f"tuple of {len(good)} arrays"):
            await envs.step(envs.action_space.sample(), out=good[:-1])
        assert (await envs.step(envs.action_space.sample(), out=good))[0] is good


def statistics_steps(envs: aiovec.AsyncVectorEnv) -> int:
    return envs.statistics().steps


@pytest.mark.parametrize("backend", ["inline", "process"])
async def test_out_needs_observations_that_batch_into_arrays(backend: str) -> None:
    async with aiovec.AsyncVectorEnv([TextEnv] * 2, backend=backend) as envs:
        with pytest.raises(TypeError, match="batches into numpy arrays"):
            await envs.reset(out=np.zeros(2, object))
        assert envs.unusable_envs == (0, 1)
        obs, _ = await envs.reset()
        assert obs == ("start", "start")


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
@pytest.mark.parametrize("restart", [False, True], ids=["raise", "restart"])
@modes
async def test_failures_and_restarts_fill_out_as_they_fill_the_batch(
    backend: str, restart: bool, mode: AutoresetMode
) -> None:
    """Sub-env 1 raises at its third step: without a restart policy the error's
    ``partial_result`` holds ``out`` (the broken row keeps its last observation), with one
    the step returns ``out`` holding the restarted sub-env's row; as the batch does."""
    faults = {1: [Fault("raise", "step", at=2)]}
    factories = faulty(3, faults=faults, backend=backend)
    into, plain = twins(factories, backend, restart=restart, autoreset_mode=mode)
    async with into, plain:
        out = create_empty_array(into.single_observation_space, 3, np.zeros)
        assert_identical((await into.reset(seed=5, out=out))[0], (await plain.reset(seed=5))[0])
        for step in range(4):
            actions = np.full(3, float(step + 1))
            results = []
            for envs, options in ((into, {"out": out}), (plain, {})):
                if step == 2 and not restart:
                    with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
                        await envs.step(actions, **options)
                    assert caught.value.env_ids == (1,)
                    results.append(caught.value.partial_result)
                else:
                    results.append(await envs.step(actions, **options))
            got, want = results
            assert got[0] is out
            got_obs, want_obs = got[0].copy(), want[0].copy()
            if restart and step >= 2:  # its new instance reset unseeded: a random draw
                got_obs[1, 2] = want_obs[1, 2] = 0.0
            assert_identical(got_obs, want_obs, f"step {step}: obs")
            assert_identical(got[1:4], want[1:4], f"step {step}")
            assert_identical(got[4].get("restart"), want[4].get("restart"))
            if step == 2 and (not restart or mode is AutoresetMode.DISABLED):
                break  # sub-env 1 needs the caller's reset now
        assert (into.statistics().restarts, into.statistics().errors) == (int(restart), 1)


async def test_a_reset_that_remakes_a_dead_worker_fills_out() -> None:
    """Sub-env 1's worker dies in a step: the error's partial result is ``out``; the reset
    that makes it afresh (before resetting everyone) fills ``out`` too."""
    faults = {1: [Fault("exit", "step", at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(2, faults=faults, backend="process"),
                                     backend="process", num_workers=2) as envs:
        out = np.full((2, 4), -1.0)
        await envs.reset(seed=0, out=out)
        await envs.step(np.full(2, 5.0), out=out)
        assert out[:, :2].tolist() == [[1.0, 5.0], [1.0, 5.0]]
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.full(2, 6.0), out=out)
        assert caught.value.env_ids == (1,)
        assert caught.value.partial_result[0] is out
        assert out[:, :2].tolist() == [[2.0, 6.0], [1.0, 5.0]]  # sub-env 1 keeps its last
        obs, _ = await envs.reset(seed=1, out=out)
        assert obs is out and out[:, :2].tolist() == [[0.0, 0.0], [0.0, 0.0]]
        assert envs.statistics().restarts == 1
