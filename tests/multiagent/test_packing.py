"""PackedParallelEnv: one ParallelEnv seen as one Gymnasium env with a fixed packed layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from aiovec._multiagent._packing import PackedParallelEnv, placeholder
from tests.multiagent.envs import Arena


def test_placeholders_are_zeros_of_every_space_kind() -> None:
    space = spaces.Dict({
        "box": spaces.Box(-1, 1, (2, 3), dtype=np.float32),
        "pick": spaces.Discrete(4, start=1),
        "bits": spaces.MultiBinary(3),
        "pair": spaces.Tuple((spaces.MultiDiscrete([2, 5]), spaces.Discrete(2))),
    })
    value = placeholder(space)
    assert value["box"].dtype == np.float32 and not value["box"].any()
    assert value["box"].shape == (2, 3)
    assert value["pick"] == 0 and isinstance(value["pick"], np.int64)
    assert value["bits"].tolist() == [0, 0, 0]
    assert value["pair"][0].tolist() == [0, 0] and value["pair"][1] == 0


def test_a_step_packs_every_possible_agent() -> None:
    env = PackedParallelEnv(Arena)
    packed, info = env.reset(seed=0)
    assert env.observation_space["observations"].contains(packed["observations"])
    assert packed["active"] == {"scout_0": True, "scout_1": True, "late": False}
    assert packed["observations"]["late"].tolist() == [0, 0]
    assert info == {}  # the agents' infos are all empty
    packed, reward, terminated, truncated, info = env.step(
        {"scout_0": 2, "scout_1": 0, "late": np.zeros(2, np.float32)})
    assert packed["rewards"] == {"scout_0": -1.5, "scout_1": 0.5, "late": 0.0}
    assert reward == -1.0 and not terminated and not truncated
    assert set(info) == {"scout_0", "scout_1"}  # odd steps report hp
    assert env.np_random_seed == 0


def test_the_episode_ends_when_every_agent_is_done() -> None:
    env = PackedParallelEnv(lambda: Arena(max_steps=2, health=50))
    env.reset(seed=0)
    actions: dict[str, Any] = {"scout_0": 0, "scout_1": 0}
    *_, terminated, truncated, _ = env.step(actions)
    assert not (terminated or truncated)
    packed, _, terminated, truncated, _ = env.step(actions)
    assert truncated and not terminated
    assert packed["truncations"] == {"scout_0": True, "scout_1": True, "late": False}


def test_attributes_reach_the_parallel_env() -> None:
    env = PackedParallelEnv(Arena)
    assert env.get_wrapper_attr("max_steps") == 12
    assert env.set_wrapper_attr("max_steps", 3)
    assert env.parallel_env.max_steps == 3
    assert not env.set_wrapper_attr("no_such_thing", 1, force=False)
    assert env.get_wrapper_attr("possible_agents") == ["scout_0", "scout_1", "late"]


def test_an_agent_outside_possible_agents_is_an_error() -> None:
    class Stray(Arena):
        def reset(self, seed: int | None = None,
                  options: dict[str, Any] | None = None) -> Any:
            observations, infos = super().reset(seed=seed)
            return {**observations, "stray": np.zeros(3)}, infos

    env = PackedParallelEnv(Stray)
    with pytest.raises(ValueError, match=r"agents \['stray'\] are not in possible_agents"):
        env.reset()
