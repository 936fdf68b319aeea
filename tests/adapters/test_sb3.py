"""``aiovec.sb3.SB3VecEnv`` against Stable-Baselines3's own ``DummyVecEnv`` (the oracle): same
batches, same info conventions, same sub-env access; plus aiovec's errors, deadlines and
restarts through SB3's interface, SB3's vector wrappers on top, and a short PPO run."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure as configure_logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

import aiovec
from aiovec.sb3 import SB3VecEnv
from aiovec.testing import CountingEnv, Fault, FaultLedger, release_hangs
from tests.backends_matrix import IN_AND_OUT_OF_PROCESS, SYNC_BACKENDS
from tests.envs import GatedEnv
from tests.faults.envs import faulty
from tests.leaks import child_pids, wait_for_exit

NUM_ENVS = 3
#: Short episodes, so a few hundred steps see terminations and time-limit truncations alike.
CARTPOLE = {"max_episode_steps": 15}


@pytest.fixture
def no_orphans() -> Iterator[None]:
    """The test leaves no worker process running."""
    before = child_pids()
    yield
    assert not wait_for_exit(sorted(child_pids() - before), timeout=10)


def cartpole(vec_env_cls: type[VecEnv], seed: int = 7, **vec_env_kwargs: Any) -> VecEnv:
    """SB3's own helper builds both sides: Monitor-wrapped CartPoles, seeded alike."""
    return make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=seed, env_kwargs=CARTPOLE,
                        vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs or None)


def assert_same_infos(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(actual) == len(expected)
    for index, (mine, theirs) in enumerate(zip(actual, expected)):
        assert mine.keys() == theirs.keys(), (index, mine, theirs)
        for key, value in theirs.items():
            if key == "episode":  # Monitor's wall-clock "t" differs run to run
                assert (mine[key]["r"], mine[key]["l"]) == (value["r"], value["l"])
                # SB3's types, Python numbers: json.dumps takes them as it takes SB3's.
                assert {name: type(item) for name, item in mine[key].items()} == \
                    {name: type(item) for name, item in value.items()}
                json.dumps(mine[key])
            else:
                if not isinstance(value, np.ndarray):
                    assert type(mine[key]) is type(value), (index, key, mine[key], value)
                np.testing.assert_array_equal(mine[key], value, err_msg=f"env {index}, {key}")


@pytest.mark.parametrize("backend", SYNC_BACKENDS)
def test_steps_match_dummy_vec_env(backend: str, no_orphans: None) -> None:
    mine = cartpole(SB3VecEnv, backend=backend)
    oracle = cartpole(DummyVecEnv)
    try:
        assert mine.observation_space == oracle.observation_space
        assert mine.action_space == oracle.action_space
        assert mine.render_mode == oracle.render_mode
        np.testing.assert_array_equal(mine.reset(), oracle.reset())
        assert_same_infos(mine.reset_infos, oracle.reset_infos)
        actions = np.random.default_rng(0).integers(0, 2, (300, NUM_ENVS))
        ends = {"terminated": 0, "truncated": 0}
        for step_actions in actions:
            obs, rewards, dones, infos = mine.step(step_actions)
            expected = oracle.step(step_actions)
            for value, wanted in zip((obs, rewards, dones), expected[:3]):
                np.testing.assert_array_equal(value, wanted)
                assert value.dtype == wanted.dtype and value.shape == wanted.shape
            assert_same_infos(infos, expected[3])
            assert_same_infos(mine.reset_infos, oracle.reset_infos)
            for info in infos:
                if "terminal_observation" in info:
                    ends["truncated" if info["TimeLimit.truncated"] else "terminated"] += 1
        assert min(ends.values()) > 5, ends  # both kinds of ending were compared
    finally:
        mine.close()
        oracle.close()


@pytest.mark.slow  # spawn: fresh interpreters
def test_subproc_vec_env_keywords_are_understood(no_orphans: None) -> None:
    """``start_method``, SubprocVecEnv's one keyword, means the same here."""
    vec_env = make_vec_env("CartPole-v1", n_envs=2, vec_env_cls=SB3VecEnv,
                           vec_env_kwargs={"start_method": "spawn"})
    try:
        assert "process backend" in repr(vec_env.vector.async_env)
        assert "start method 'spawn'" in repr(vec_env.vector.async_env)
        assert vec_env.reset().shape == (2, 4)
    finally:
        vec_env.close()


def test_seed_and_per_env_options_reach_the_next_reset_only() -> None:
    mine, oracle = cartpole(SB3VecEnv, backend="thread"), cartpole(DummyVecEnv)
    try:
        for vec_env in (mine, oracle):
            assert vec_env.seed(123) == [123, 124, 125]
            vec_env.set_options([{"low": -0.01, "high": 0.01}, {"low": 0.3, "high": 0.4},
                                 {"low": -0.01, "high": 0.01}])
        obs = mine.reset()
        np.testing.assert_array_equal(obs, oracle.reset())
        assert (obs[1] >= 0.3).all() and (np.abs(obs[[0, 2]]) <= 0.01).all()
        # Seeds and options are used once: the next reset draws from CartPole's default range.
        obs = mine.reset()
        np.testing.assert_array_equal(obs, oracle.reset())
        assert (np.abs(obs) <= 0.05).all() and not (obs[1] >= 0.3).all()
    finally:
        mine.close()
        oracle.close()


def test_attributes_and_methods_reach_only_the_chosen_envs(no_orphans: None) -> None:
    vec_env = SB3VecEnv([functools.partial(CountingEnv) for _ in range(4)], backend="process",
                        num_workers=2)
    try:
        vec_env.reset()
        vec_env.step(np.ones(4, np.int64))
        assert vec_env.get_attr("steps") == [1, 1, 1, 1]
        vec_env.set_attr("steps", 40, indices=[1, 3])
        assert vec_env.get_attr("steps") == [1, 40, 1, 40]
        assert vec_env.get_attr("steps", indices=2) == [1]
        assert vec_env.env_method("step", 1, indices=[3, 0])[0][1] == 1.0
        assert vec_env.get_attr("steps", indices=(0, 3)) == [2, 41]
        assert vec_env.has_attr("resets") and not vec_env.has_attr("no_such_attribute")
        assert vec_env.env_is_wrapped(Monitor) == [False] * 4
        with pytest.raises(IndexError, match="out of range"):
            vec_env.get_attr("steps", indices=[4])
    finally:
        vec_env.close()
        vec_env.close()  # a second close is a no-op


def test_indices_count_from_the_end_as_in_sb3() -> None:
    mine = SB3VecEnv([CountingEnv] * 3, backend="thread")
    oracle = DummyVecEnv([CountingEnv] * 3)
    try:
        for vec_env in (mine, oracle):
            vec_env.reset()
            vec_env.set_attr("steps", 7, indices=-1)
            vec_env.set_attr("steps", 5, indices=[-3])
            assert vec_env.get_attr("steps") == [5, 0, 7]
            assert vec_env.get_attr("steps", indices=range(-2, 0)) == [0, 7]
            assert vec_env.env_method("step", 1, indices=np.array([-1]))[0][0].tolist() == [8, 1]
        with pytest.raises(IndexError, match="index -4 is out of range for 3 sub-envs"):
            mine.get_attr("steps", indices=-4)
    finally:
        mine.close()
        oracle.close()


class InnerSetting(gym.Wrapper[Any, Any, Any, Any]):
    """A wrapper above an env with a ``bias`` setting its ``step`` reads."""


class BiasedEnv(CountingEnv):
    bias = 0.0

    def step(self, action: int) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + self.bias, terminated, truncated, info


def test_set_attr_reaches_the_env_below_the_wrappers() -> None:
    """The documented choice: set where ``get_attr`` finds it, so the env sees it (SB3's
    DummyVecEnv sets it on the outer wrapper: get_attr reads it back, the env never sees it)."""
    mine = SB3VecEnv([lambda: InnerSetting(BiasedEnv())] * 2, backend="thread")
    oracle = DummyVecEnv([lambda: InnerSetting(BiasedEnv())] * 2)
    try:
        for vec_env in (mine, oracle):
            vec_env.reset()
            vec_env.set_attr("bias", 100.0, indices=[1])
            assert vec_env.get_attr("bias") == [0.0, 100.0]
        assert mine.step(np.ones(2, np.int64))[1].tolist() == [1.0, 101.0]
        assert oracle.step(np.ones(2, np.int64))[1].tolist() == [1.0, 1.0]
    finally:
        mine.close()
        oracle.close()


class DictActionEnv(CountingEnv):
    action_space = gym.spaces.Dict({"move": gym.spaces.Discrete(3),
                                    "aim": gym.spaces.Box(-1, 1, (2,), np.float32)})

    def step(self, action: Any) -> Any:
        obs, _, terminated, truncated, info = super().step(0)
        return obs, float(action["move"]) + float(action["aim"].sum()), terminated, truncated, info


class TupleActionEnv(CountingEnv):
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiBinary(2)))

    def step(self, action: Any) -> Any:
        obs, _, terminated, truncated, info = super().step(0)
        return obs, float(action[0]) + float(action[1].sum()), terminated, truncated, info


@pytest.mark.parametrize("backend", IN_AND_OUT_OF_PROCESS)
def test_per_env_action_lists_for_dict_and_tuple_spaces(backend: str,
                                                        no_orphans: None) -> None:
    """SB3 steps these spaces with one action per sub-env: the same list gives the same
    rewards as on DummyVecEnv."""
    dict_actions = [{"move": 2, "aim": np.array([0.5, 0.25], np.float32)},
                    {"move": 0, "aim": np.array([-1.0, 0.0], np.float32)}]
    tuple_actions = [(1, np.array([1, 1], np.int8)), (2, np.array([0, 1], np.int8))]
    for env_class, actions in ((DictActionEnv, dict_actions), (TupleActionEnv, tuple_actions)):
        mine = SB3VecEnv([env_class] * 2, backend=backend)
        oracle = DummyVecEnv([env_class] * 2)
        try:
            for vec_env in (mine, oracle):
                vec_env.reset()
            expected = oracle.step(actions)[1].tolist()
            assert mine.step(actions)[1].tolist() == expected
            assert expected in ([2.75, -1.0], [3.0, 3.0])
            with pytest.raises(ValueError, match="per-sub-env actions do not fit"):
                mine.step([actions[0], {"wrong": 1}] if env_class is DictActionEnv
                          else [actions[0], (1,)])
        finally:
            mine.close()
            oracle.close()


def test_env_is_wrapped_sees_through_every_layer() -> None:
    def wrapped() -> gym.Env[Any, Any]:
        return gym.wrappers.RecordEpisodeStatistics(Monitor(gym.make("CartPole-v1")))

    vec_env = SB3VecEnv([wrapped, lambda: gym.make("CartPole-v1")], backend="process")
    try:
        assert vec_env.env_is_wrapped(Monitor) == [True, False]
        assert vec_env.env_is_wrapped(Monitor, indices=[1]) == [False]
        assert vec_env.env_is_wrapped(gym.wrappers.TimeLimit) == [True, True]
    finally:
        vec_env.close()


def test_a_failing_sub_env_raises_aiovec_error_with_index_and_traceback(
        tmp_path: Path, no_orphans: None) -> None:
    factories = faulty(3, FaultLedger(tmp_path), {2: [Fault("raise", "step", at=2)]})
    vec_env = SB3VecEnv(factories, backend="process", num_workers=3)
    try:
        vec_env.reset()
        vec_env.step(np.ones(3))
        vec_env.step(np.ones(3))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            vec_env.step(np.ones(3))
        assert caught.value.env_ids == (2,)
        (error,) = caught.value.exceptions
        assert error.env_id == 2 and error.phase == "step"
        assert "InjectedFault" in error.remote_traceback and "_strike" in error.remote_traceback
    finally:
        vec_env.close()


def test_a_hung_sub_env_times_out_and_a_crashed_one_restarts(
        tmp_path: Path, no_orphans: None) -> None:
    hang = SB3VecEnv(faulty(2, FaultLedger(tmp_path / "hang"), {0: [Fault("hang", "step", at=1)]}),
                     backend="process", num_workers=2, timeout=0.5)
    try:
        hang.reset()
        hang.step(np.ones(2))
        started = time.monotonic()
        with pytest.raises(aiovec.EnvTimeoutError) as caught:
            hang.step(np.ones(2))
        assert caught.value.env_ids == (0,) and time.monotonic() - started < 10
    finally:
        release_hangs()
        hang.close()

    exits = {1: [Fault("exit", "step", at=3, instance=0)]}
    crash = SB3VecEnv(faulty(2, FaultLedger(tmp_path / "crash"), exits, episode_length=100),
                      backend="process", num_workers=2, restart=True)
    try:
        first = crash.reset()
        for _ in range(3):
            crash.step(np.ones(2))
        obs, rewards, dones, infos = crash.step(np.ones(2))
        assert dones.tolist() == [False, True] and rewards[1] == 0.0
        assert infos[1]["TimeLimit.truncated"] is True and "restart" in infos[1]
        np.testing.assert_array_equal(infos[1]["terminal_observation"][:2], [3.0, 1.0])
        assert obs[1][0] == 0.0 and obs[1][3] == 1.0  # instance 1, at its episode's start
        assert first[1][3] == 0.0 and crash.reset_infos[1] == {"restart": infos[1]["restart"]}
        obs, _, dones, _ = crash.step(np.ones(2))
        assert not dones.any() and obs[:, 0].tolist() == [5.0, 1.0]
    finally:
        crash.close()


def test_sb3_vector_wrappers_behave_as_on_dummy_vec_env() -> None:
    def wrapped(vec_env_cls: type[VecEnv], **kwargs: Any) -> VecEnv:
        factories = [functools.partial(gym.make, "CartPole-v1", **CARTPOLE)] * NUM_ENVS
        vec_env = VecNormalize(VecFrameStack(VecMonitor(vec_env_cls(factories, **kwargs)), 2))
        vec_env.seed(7)
        return vec_env

    mine, oracle = wrapped(SB3VecEnv, backend="thread"), wrapped(DummyVecEnv)
    try:
        np.testing.assert_allclose(mine.reset(), oracle.reset())
        for step_actions in np.random.default_rng(1).integers(0, 2, (60, NUM_ENVS)):
            obs, rewards, dones, infos = mine.step(step_actions)
            expected = oracle.step(step_actions)
            np.testing.assert_allclose(obs, expected[0], rtol=1e-6)
            np.testing.assert_allclose(rewards, expected[1], rtol=1e-6)
            np.testing.assert_array_equal(dones, expected[2])
            for info, wanted in zip(infos, expected[3]):
                if "terminal_observation" in wanted:
                    np.testing.assert_allclose(info["terminal_observation"],
                                               wanted["terminal_observation"], rtol=1e-6)
    finally:
        mine.close()
        oracle.close()


@pytest.mark.slow
def test_ppo_learns_from_a_process_backed_vec_env(tmp_path: Path, no_orphans: None) -> None:
    vec_env = make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_cls=SB3VecEnv,
                           vec_env_kwargs={"backend": "process", "num_workers": 2})
    try:
        model = PPO("MlpPolicy", vec_env, n_steps=128, batch_size=128, n_epochs=2, seed=0,
                    device="cpu")
        model.set_logger(configure_logger(str(tmp_path), []))  # not SB3's folder under /tmp
        model.learn(total_timesteps=2048)
        assert model.num_timesteps >= 2048
        episodes = list(model.ep_info_buffer)
        assert len(episodes) >= 20 and all(episode["l"] >= 8 for episode in episodes)
        obs = vec_env.reset()
        actions, _ = model.predict(obs, deterministic=True)
        assert actions.shape == (4,) and set(actions.tolist()) <= {0, 1}
    finally:
        vec_env.close()


def test_step_async_returns_at_once_and_calls_keep_their_order(no_orphans: None) -> None:
    gate = GatedEnv()
    vec_env = SB3VecEnv([lambda: gate, CountingEnv], backend="thread")
    try:
        vec_env.reset()
        vec_env.step_async(np.ones(2, np.int64))  # returns while sub-env 0 is still stepping
        assert gate.entered.wait(timeout=30)
        with pytest.raises(AlreadyPendingCallError):
            vec_env.get_attr("steps")
        with pytest.raises(AlreadyPendingCallError):
            vec_env.step_async(np.ones(2, np.int64))
        gate.release.set()
        obs, _, dones, _ = vec_env.step_wait()
        assert obs[:, 0].tolist() == [1, 1] and not dones.any()
        with pytest.raises(NoAsyncCallError):
            vec_env.step_wait()
        with pytest.raises(ValueError, match=r"expected shape \(2,\)"):  # nothing stepped
            vec_env.step(np.ones(3, np.int64))
        assert vec_env.get_attr("steps") == [1, 1]
        vec_env.step_async(np.ones(2, np.int64))
    finally:
        gate.release.set()
        vec_env.close()  # waits for the pending step first
    assert gate.steps == 2 and gate.closed
