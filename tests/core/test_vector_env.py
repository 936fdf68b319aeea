"""AsyncVectorEnv: lifecycle, bad input, errors from sub-envs, timeouts and cancellation."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import anyio
import anyio.to_thread
import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec.testing import CountingEnv, EpisodeEnv
from tests.backends_matrix import LOCAL_SYNC_BACKENDS
from tests.envs import ActionDtypeEnv, GatedEnv, RaisingEnv, failing_factory

pytestmark = pytest.mark.anyio
backends = pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)


def counting(n: int = 3, **kwargs: Any) -> list[Any]:
    return [lambda: CountingEnv(**kwargs)] * n


async def steps_taken(envs: aiovec.AsyncVectorEnv) -> list[int]:
    return list(await envs.get_attr("steps"))


@backends
async def test_reset_step_and_attributes(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(counting(3), backend=backend) as envs:
        assert f"{backend} backend" in repr(envs) and "3 envs" in repr(envs)
        assert envs.num_envs == 3
        assert envs.single_observation_space == CountingEnv.observation_space
        assert envs.observation_space.shape == (3, 2)
        assert envs.action_space.shape == (3,)
        assert envs.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
        obs, infos = await envs.reset(seed=5)
        assert obs.tolist() == [[0, 1]] * 3 and infos == {}
        assert envs.np_random_seed == (5, 6, 7)
        obs, rewards, terminations, truncations, infos = await envs.step(np.array([1, 0, 1]))
        assert obs.tolist() == [[1, 1]] * 3
        assert rewards.tolist() == [1.0, 0.0, 1.0] and rewards.dtype == np.float64
        assert not terminations.any() and not truncations.any()
        assert [o.tolist() for o in await envs.call("_observation")] == obs.tolist()
        await envs.set_attr("episode_length", [1, 2, 3])
        assert await envs.get_attr("episode_length") == (1, 2, 3)
        await envs.set_attr("episode_length", 9)
        assert await envs.get_attr("episode_length") == (9, 9, 9)
        with pytest.raises(ValueError, match="length equal to the number of environments"):
            await envs.set_attr("episode_length", [1, 2])
    assert envs.closed


@backends
async def test_render_and_seed_lists(backend: str) -> None:
    factories = [lambda: EpisodeEnv("box", render_mode="rgb_array")] * 2
    async with aiovec.AsyncVectorEnv(factories, backend=backend) as envs:
        assert envs.render_mode == "rgb_array"
        await envs.reset(seed=[10, None])
        assert envs.np_random_seed[0] == 10
        frames = await envs.render()
        assert len(frames) == 2 and frames[0].shape == (4, 4, 3)
        with pytest.raises(ValueError, match="length must match num_envs=2"):
            await envs.reset(seed=[1, 2, 3])
        with pytest.raises(TypeError, match="seed must be"):
            await envs.reset(seed="7")  # type: ignore[arg-type]


@backends
async def test_double_close_and_use_after_close(backend: str) -> None:
    envs = aiovec.AsyncVectorEnv(counting(2), backend=backend)
    await envs.reset()
    await envs.aclose()
    await envs.aclose()
    for attempt in (envs.reset(), envs.step(np.zeros(2, np.int64)), envs.get_attr("steps")):
        with pytest.raises(aiovec.ClosedError, match="closed"):
            await attempt
    with pytest.raises(gym.error.ClosedEnvironmentError):
        await envs.reset()


async def test_never_started_close_and_lazy_start() -> None:
    envs = aiovec.AsyncVectorEnv(counting(2), backend="thread")
    with pytest.raises(aiovec.NotStartedError, match="async with"):
        _ = envs.observation_space
    assert "created" in repr(envs)
    obs, _ = await envs.reset()  # starts on first use
    assert obs.shape == (2, 2)
    await envs.aclose()
    never_started = aiovec.AsyncVectorEnv(counting(2), backend="thread")
    await never_started.aclose()
    assert never_started.closed


def test_bad_constructor_arguments() -> None:
    with pytest.raises(TypeError, match=r"env_fns\[1\] is CountingEnv, not a callable"):
        aiovec.AsyncVectorEnv([CountingEnv, CountingEnv()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="empty"):
        aiovec.AsyncVectorEnv([])
    with pytest.raises(TypeError, match="sequence of callables"):
        aiovec.AsyncVectorEnv(CountingEnv)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown backend 'warp'"):
        aiovec.AsyncVectorEnv(counting(1), backend="warp")
    with pytest.raises(ValueError, match="timeout must be a positive"):
        aiovec.AsyncVectorEnv(counting(1), timeout=-1)
    with pytest.raises(ValueError, match="NoSuchMode"):
        aiovec.AsyncVectorEnv(counting(1), autoreset_mode="NoSuchMode")
    with pytest.raises(ValueError, match="observation_mode"):
        aiovec.AsyncVectorEnv(counting(1), observation_mode="weird")


@backends
async def test_step_before_reset_is_rejected(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(counting(2), backend=backend) as envs:
        with pytest.raises(aiovec.ResetNeededError, match="before reset"):
            await envs.step(np.zeros(2, np.int64))
        with pytest.raises(gym.error.ResetNeeded):
            await envs.step(np.zeros(2, np.int64))
        assert await steps_taken(envs) == [0, 0]


BAD_DISCRETE_BATCHES = [
    pytest.param(np.zeros(3, np.int64), "expected shape \\(2,\\)", id="batch-too-big"),
    pytest.param(np.zeros((2, 1), np.int64), "expected shape", id="extra-dimension"),
    pytest.param(np.zeros(2, np.float32), "expected dtype int64", id="float-for-discrete"),
    pytest.param(["a", "b"], "expected dtype", id="strings"),
    pytest.param({"move": [0, 1]}, "expected a batch of 2 actions, got a dict",
                 id="dict-for-discrete"),
]


@backends
@pytest.mark.parametrize(("actions", "message"), BAD_DISCRETE_BATCHES)
async def test_bad_actions_touch_no_sub_env(backend: str, actions: Any, message: str) -> None:
    async with aiovec.AsyncVectorEnv(counting(2), backend=backend) as envs:
        await envs.reset()
        with pytest.raises((ValueError, TypeError), match=message):
            await envs.step(actions)
        assert await steps_taken(envs) == [0, 0]
        await envs.step([1, 1])  # a plain list of ints is a fine batch
        assert await steps_taken(envs) == [1, 1]


BAD_STRUCTURED_BATCHES = [
    pytest.param("dict", {"move": np.zeros(2, np.int64)}, "expected keys", id="missing-key"),
    pytest.param("dict", {"move": np.zeros(2, np.int64), "force": np.zeros((2, 2), np.float32)},
                 r"actions\['force'\]: expected shape \(2, 1\)", id="wrong-leaf-shape"),
    pytest.param("box", np.zeros((2, 2), np.complex64), "expected dtype float32", id="complex"),
    pytest.param("tuple", (np.zeros(2, np.int64),), "expected a tuple of 2", id="short-tuple"),
]


@backends
@pytest.mark.parametrize(("kind", "actions", "message"), BAD_STRUCTURED_BATCHES)
async def test_bad_structured_actions(backend: str, kind: str, actions: Any, message: str) -> None:
    async with aiovec.AsyncVectorEnv([lambda: EpisodeEnv(kind)] * 2, backend=backend) as envs:
        await envs.reset(seed=0)
        with pytest.raises(ValueError, match=message):
            await envs.step(actions)
        assert await envs.get_attr("elapsed") == (0, 0)


@backends
async def test_sub_env_errors_name_every_failed_env(backend: str) -> None:
    factories = [CountingEnv, lambda: RaisingEnv("step", after=1), CountingEnv,
                 lambda: RaisingEnv("step", after=1, error=KeyError("lost key"))]
    async with aiovec.AsyncVectorEnv(factories, backend=backend) as envs:
        await envs.reset()
        await envs.step(np.ones(4, np.int64))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.ones(4, np.int64))
        group = caught.value
        assert group.env_ids == (1, 3)
        assert "sub-env(s) 1, 3 failed" in str(group)
        first, second = group.exceptions
        assert (first.env_id, first.phase) == (1, "step")
        assert isinstance(first.__cause__, ValueError)
        assert isinstance(second.__cause__, KeyError)
        assert "injected failure in step" in first.remote_traceback
        assert "in step" in first.remote_traceback  # the frame inside the env
        assert "Remote traceback" in str(first)

        # The failed sub-envs must be reset before the vector env steps again.
        with pytest.raises(aiovec.ResetNeededError, match="sub-env\\(s\\) 1, 3 need a reset"):
            await envs.step(np.ones(4, np.int64))
        mask = np.array([False, True, False, True])
        await envs.reset(options={"reset_mask": mask})
        obs, *_ = await envs.step(np.ones(4, np.int64))
        assert obs[:, 0].tolist() == [3, 3, 3, 3]


@backends
async def test_factory_and_reset_failures(backend: str) -> None:
    made: list[CountingEnv] = []

    def tracked() -> CountingEnv:
        made.append(CountingEnv())
        return made[-1]

    envs = aiovec.AsyncVectorEnv([tracked, failing_factory, tracked], backend=backend)
    with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
        await envs.start()
    assert caught.value.env_ids == (1,)
    assert caught.value.exceptions[0].phase == "make"
    assert "the factory exploded" in caught.value.exceptions[0].remote_traceback
    assert envs.closed
    if backend != "process":  # in a worker process, `made` is the worker's own list
        assert [env.closed for env in made] == [True, True]

    async with aiovec.AsyncVectorEnv([CountingEnv, lambda: RaisingEnv("reset")],
                                     backend=backend) as envs:
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.reset()
        assert caught.value.exceptions[0].phase == "reset"
        obs, _ = await envs.reset()  # the one-shot failure is over
        assert obs.tolist() == [[0, 2], [0, 2]]


@backends
async def test_missing_attribute_is_a_sub_env_error(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(counting(2), backend=backend) as envs:
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.get_attr("no_such_attribute")
        assert caught.value.env_ids == (0, 1)
        assert isinstance(caught.value.exceptions[0].__cause__, AttributeError)


def test_factory_returning_a_non_env() -> None:
    async def main() -> None:
        envs = aiovec.AsyncVectorEnv([lambda: "not an env"], backend="inline")  # type: ignore[list-item]
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.start()
        assert "not a gymnasium.Env" in str(caught.value.exceptions[0])

    anyio.run(main)


@backends
async def test_the_caller_may_reuse_its_actions_once_sent(backend: str) -> None:
    # The process backend writes actions straight into shared memory (no private copy), so
    # what the sub-envs read must be fixed by then; other backends keep a copy.
    async with aiovec.AsyncVectorEnv(counting(4), backend=backend) as envs:
        await envs.reset()
        actions = np.array([1, 0, 1, 0])
        envs.send(actions)
        actions[:] = [0, 1, 0, 1]
        batch = await envs.recv(batch_size=4)
        assert dict(zip(batch.env_ids.tolist(), batch.rewards.tolist())) == {
            0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}

        async def overwrite_soon() -> None:
            actions[:] = [0, 0, 0, 0]

        actions[:] = [1, 1, 0, 1]
        async with anyio.create_task_group() as group:
            group.start_soon(overwrite_soon)  # runs once step awaits: the actions were sent
            _, rewards, *_ = await envs.step(actions)
        assert rewards.tolist() == [1.0, 1.0, 0.0, 1.0]


@backends
async def test_copy_false_returns_the_reused_buffer(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(counting(2), backend=backend, copy=False) as envs:
        first, _ = await envs.reset()
        second, *_ = await envs.step(np.ones(2, np.int64))
        assert second is first and first[:, 0].tolist() == [1, 1]
    async with aiovec.AsyncVectorEnv(counting(2), backend=backend, copy=True) as envs:
        first, _ = await envs.reset()
        second, *_ = await envs.step(np.ones(2, np.int64))
        assert second is not first and first[:, 0].tolist() == [0, 0]


@backends
async def test_observation_mode_checks(backend: str) -> None:
    small = lambda: EpisodeEnv("box")  # noqa: E731
    other = lambda: EpisodeEnv("discrete")  # noqa: E731
    with pytest.raises(RuntimeError, match=r"not equivalent\. Sub-env 1's observation space "
                                           r"differs from sub-env 0's at the top: Discrete"):
        async with aiovec.AsyncVectorEnv([small, other], backend=backend):
            pass


@backends
async def test_disabled_autoreset_demands_a_reset(backend: str) -> None:
    factories = [lambda: CountingEnv(episode_length=1), lambda: CountingEnv(episode_length=5)]
    async with aiovec.AsyncVectorEnv(factories, backend=backend,
                                     autoreset_mode="Disabled") as envs:
        await envs.reset()
        *_, truncations, _ = await envs.step(np.zeros(2, np.int64))
        assert truncations.tolist() == [True, False]
        with pytest.raises(aiovec.ResetNeededError, match="sub-env\\(s\\) 0 need a reset"):
            await envs.step(np.zeros(2, np.int64))
        assert await steps_taken(envs) == [1, 1]
        await envs.reset(options={"reset_mask": np.array([True, False])})
        await envs.step(np.zeros(2, np.int64))


@backends
async def test_reset_mask_is_checked(backend: str) -> None:
    async with aiovec.AsyncVectorEnv(counting(2), backend=backend) as envs:
        with pytest.raises(TypeError, match="must be a numpy array"):
            await envs.reset(options={"reset_mask": [True, False]})
        with pytest.raises(ValueError, match="must have shape"):
            await envs.reset(options={"reset_mask": np.ones(3, bool)})
        with pytest.raises(TypeError, match=r"dtype=np\.bool_"):
            await envs.reset(options={"reset_mask": np.ones(2, int)})
        with pytest.raises(ValueError, match="at least one True"):
            await envs.reset(options={"reset_mask": np.zeros(2, bool)})
        options = {"reset_mask": np.array([True, False])}
        await envs.reset(options=options)
        assert "reset_mask" in options  # the caller's dict is left alone
        assert await envs.get_attr("resets") == (1, 0)


async def test_timeout_names_the_late_env_abandons_its_thread_and_reset_recovers() -> None:
    gated = GatedEnv()
    made = []

    def second() -> GatedEnv:
        env = gated if not made else GatedEnv(gated=False)
        made.append(env)
        return env

    factories = [lambda: GatedEnv(gated=False), second, lambda: GatedEnv(gated=False)]
    async with aiovec.AsyncVectorEnv(factories, backend="thread", timeout=30) as envs:
        await envs.reset()
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            await envs.step(np.ones(3, np.int64), timeout=0.2)
        assert caught.value.env_ids == (1,)
        assert isinstance(caught.value, TimeoutError)
        assert "sub-env(s) 1 did not answer within 0.2 s" in str(caught.value)
        # The healthy sub-envs' step is not lost: it rides on the error.
        obs, rewards, _, _, _ = caught.value.partial_result
        assert obs[:, 0].tolist() == [1, 0, 1] and rewards.tolist() == [1.0, 0.0, 1.0]
        # Its thread is stuck in step: abandoned, counted, and the slot needs a reset.
        assert envs.unusable_envs == (1,)
        assert envs.statistics().abandoned_threads == 1
        assert envs.statistics().timeouts == 1
        with pytest.raises(aiovec.ResetNeededError, match="sub-env"):
            await envs.step(np.ones(3, np.int64))
        obs, _ = await envs.reset(options={"reset_mask": np.array([False, True, False])})
        assert len(made) == 2 and made[1] is not gated  # a fresh env on a fresh thread
        obs, *_ = await envs.step(np.ones(3, np.int64))
        assert obs[:, 0].tolist() == [2, 1, 2]
        gated.release.set()  # the abandoned thread finishes, closes its env, and exits
    assert await anyio.to_thread.run_sync(gated.closed_event.wait, 10)


async def test_caller_cancel_scope_is_honoured() -> None:
    gated = GatedEnv()
    async with aiovec.AsyncVectorEnv([lambda: gated, CountingEnv], backend="thread") as envs:
        await envs.reset()
        with anyio.move_on_after(0.2) as scope:
            await envs.step(np.ones(2, np.int64))
        assert scope.cancelled_caught
        assert "in flight" not in repr(envs)
        # Both sub-envs may have stepped unseen: neither steps again before a reset.
        assert envs.unusable_envs == (0, 1)
        gated.gated = False
        gated.release.set()
        await envs.reset()  # queued behind the cancelled step, whose late reply is dropped
        obs, *_ = await envs.step(np.ones(2, np.int64))
        assert obs.tolist() == [[2, 2], [2, 2]]  # [steps, resets]: the cancelled step ran


async def test_two_tasks_cannot_step_at_once() -> None:
    gated = GatedEnv()
    async with aiovec.AsyncVectorEnv([lambda: gated], backend="thread") as envs:
        await envs.reset()
        async with anyio.create_task_group() as group:
            group.start_soon(envs.step, np.ones(1, np.int64))
            await anyio.to_thread.run_sync(gated.entered.wait)
            assert "step in flight" in repr(envs)
            with pytest.raises(aiovec.BusyError, match="another task is still running step"):
                await envs.step(np.ones(1, np.int64))
            with pytest.raises(aiovec.BusyError):
                await envs.get_attr("steps")
            gated.release.set()
        assert await steps_taken(envs) == [1]


def test_unclosed_env_warns_and_stops_its_threads() -> None:
    forgotten: list[aiovec.AsyncVectorEnv] = []

    async def leak() -> None:
        forgotten.append(aiovec.AsyncVectorEnv(counting(2), backend="thread"))
        await forgotten[0].reset()

    anyio.run(leak)
    with pytest.warns(ResourceWarning, match="unclosed"):
        forgotten.clear()  # the last reference (no cycles): __del__ runs right here
    threads = [thread for thread in threading.enumerate()
               if thread.name.startswith("aiovec-env-")]
    for thread in threads:
        thread.join(timeout=10)
    assert [thread.name for thread in threads if thread.is_alive()] == []


def test_exceptions_pickle() -> None:
    error = aiovec.SubEnvError(2, "step", "ValueError: boom", "Traceback ...")
    error.__cause__ = ValueError("boom")
    group = aiovec.SubEnvErrorGroup("step", [error])
    timeout = aiovec.EnvTimeoutError("reset", [1, 4], 0.5)
    for original in (error, group, timeout, aiovec.ClosedError("closed"),
                     aiovec.BusyError("busy"), aiovec.ResetNeededError("reset first")):
        copy = pickle.loads(pickle.dumps(original))
        assert type(copy) is type(original) and str(copy) == str(original)
    copy = pickle.loads(pickle.dumps(group))
    assert copy.env_ids == (2,) and copy.operation == "step"
    assert isinstance(copy.exceptions[0].__cause__, ValueError)
    assert copy.exceptions[0].remote_traceback == "Traceback ..."
    assert pickle.loads(pickle.dumps(timeout)).env_ids == (1, 4)
    assert group.derive([error]).env_ids == (2,)


def test_the_former_names_of_env_ids_still_work_and_warn() -> None:
    """``env_indices`` and ``env_index`` were renamed ``env_ids`` and ``env_id`` (one name per
    idea, as ``send(..., env_ids)`` and ``StepBatch.env_ids``); the old names live one release."""
    error = aiovec.SubEnvError(3, "step", "boom")
    died = aiovec.WorkerDiedError("worker 0 died", [0, 1], -9)
    errors = [(error, "env_index", 3),
              (aiovec.SubEnvErrorGroup("step", [error]), "env_indices", (3,)),
              (aiovec.EnvTimeoutError("step", [2], 1.0), "env_indices", (2,)),
              (died, "env_indices", (0, 1))]
    for raised, old_name, value in errors:
        with pytest.warns(DeprecationWarning, match=f"{old_name} is deprecated, use env_id"):
            assert getattr(raised, old_name) == value


@backends
async def test_error_group_is_also_the_original_type(backend: str) -> None:
    factories = [CountingEnv, lambda: RaisingEnv("step"), lambda: RaisingEnv("step")]
    async with aiovec.AsyncVectorEnv(factories, backend=backend) as envs:
        await envs.reset()
        with pytest.raises(ValueError, match="injected failure in step") as caught:
            await envs.step(np.zeros(3, np.int64))  # Gymnasium-style `except ValueError` works
        assert isinstance(caught.value, aiovec.SubEnvErrorGroup)
        assert caught.value.env_ids == (1, 2)
        copy = pickle.loads(pickle.dumps(caught.value))
        assert isinstance(copy, ValueError) and isinstance(copy, aiovec.SubEnvErrorGroup)

    mixed = [lambda: RaisingEnv("step"), lambda: RaisingEnv("step", error=KeyError("k"))]
    async with aiovec.AsyncVectorEnv(mixed, backend=backend) as envs:
        await envs.reset()
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.zeros(2, np.int64))
        assert not isinstance(caught.value, (ValueError, KeyError))


async def test_scalar_action_is_a_type_error() -> None:
    async with aiovec.AsyncVectorEnv(counting(2), backend="inline") as envs:
        await envs.reset()
        with pytest.raises(TypeError, match="expected a batch of 2 actions, got a scalar"):
            await envs.step(0)


@backends
async def test_actions_reach_sub_envs_in_the_callers_dtype(backend: str) -> None:
    async with aiovec.AsyncVectorEnv([ActionDtypeEnv] * 2, backend=backend) as envs:
        await envs.reset()
        for dtype in (np.float32, np.float64, np.float32):
            *_, infos = await envs.step(np.full(2, 0.5, dtype))
            assert infos["dtype"].tolist() == [np.dtype(dtype).name] * 2
