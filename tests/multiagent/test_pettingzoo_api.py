"""PettingZoo's own API and seeding tests pass on sub-envs seen through aiovec's hosting.

``ThroughAiovec`` is a one-sub-env ``ParallelVectorEnv`` (autoreset off) looked at as a plain
``ParallelEnv``: every reset and step crosses the backend (a thread, a worker process, a Ray
actor) and the packing, so what PettingZoo's checks see is what a user of the vector env gets.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test, parallel_seed_test

import aiovec
from tests.backends_matrix import IN_AND_OUT_OF_PROCESS, SYNC_BACKENDS
from tests.multiagent.envs import Arena, mpe2_env, pettingzoo_env


class ThroughAiovec(ParallelEnv[str, Any, Any]):
    """Sub-env 0 of a ``ParallelVectorEnv``, unbatched again."""

    def __init__(self, env_fn: Callable[[], Any], backend: str) -> None:
        self.vector = aiovec.ParallelVectorEnv([env_fn], backend=backend,
                                               autoreset_mode=AutoresetMode.DISABLED)
        self.possible_agents = list(self.vector.possible_agents)
        self.agents: list[str] = []
        self.metadata = self.vector.metadata
        self.render_mode = None

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self.vector.single_observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self.vector.single_action_space(agent)

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, infos = self.vector.reset(seed=seed, options=options)
        self.agents = [agent for agent in self.possible_agents if infos["active"][agent][0]]
        return {agent: obs[agent][0] for agent in self.agents}, self._infos(infos, self.agents)

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        batch = {agent: np.asarray([action]) for agent, action in actions.items()}
        obs, rewards, terminations, truncations, infos = self.vector.step(batch)
        present = [agent for agent in self.possible_agents if infos["active"][agent][0]]
        self.agents = [agent for agent in present
                       if not (terminations[agent][0] or truncations[agent][0])]
        return ({agent: obs[agent][0] for agent in present},
                {agent: float(rewards[agent][0]) for agent in present},
                {agent: bool(terminations[agent][0]) for agent in present},
                {agent: bool(truncations[agent][0]) for agent in present},
                self._infos(infos, present))

    @staticmethod
    def _infos(infos: dict[str, Any], agents: list[str]) -> dict[str, Any]:
        """Sub-env 0's own info per agent, out of Gymnasium's batched layout."""
        unbatched: dict[str, Any] = {}
        for agent in agents:
            merged = infos.get(agent, {})
            unbatched[agent] = {key: value[0] for key, value in merged.items()
                                if not key.startswith("_") and merged[f"_{key}"][0]}
        return unbatched

    def state(self) -> Any:
        return self.vector.call("state")[0]

    def close(self) -> None:
        self.vector.close()


ENVS: dict[str, Callable[[], Any]] = {
    "arena": functools.partial(Arena, max_steps=30, health=40),
    "mpe2-simple_tag": mpe2_env("simple_tag_v3", max_cycles=30),
    "butterfly-knights_archers_zombies": pettingzoo_env(
        "butterfly/knights_archers_zombies-v11", max_cycles=60, spawn_delay=2),
    "sisl-pursuit": pettingzoo_env("sisl/pursuit-v5", max_cycles=30),
}


@pytest.mark.parametrize("env_name", sorted(ENVS))
@pytest.mark.parametrize("backend", SYNC_BACKENDS)
def test_parallel_api_test_passes_through_aiovec(backend: str, env_name: str) -> None:
    env = ThroughAiovec(ENVS[env_name], backend)
    try:
        with warnings.catch_warnings():
            # The api test's own notes about the env's design (e.g. agents with nothing left
            # to do while others play on) are not failures of the hosting.
            warnings.filterwarnings("ignore", message="No agents present but not all")
            parallel_api_test(env, num_cycles=100)
        assert env.vector.statistics().steps > 0
    finally:
        env.close()


@pytest.mark.parametrize("backend", IN_AND_OUT_OF_PROCESS)
def test_parallel_seed_test_passes_through_aiovec(backend: str) -> None:
    parallel_seed_test(functools.partial(ThroughAiovec, ENVS["sisl-pursuit"], backend))
