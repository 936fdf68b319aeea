"""Small PettingZoo parallel envs for the multi-agent tests: agents die, spawn, misbehave."""

from __future__ import annotations

import functools
import importlib
import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pettingzoo
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Arena(ParallelEnv[str, Any, Any]):
    """Two scouts that lose health and die, and a ``late`` agent that spawns at step 3.

    Seeded and deterministic. Each observation echoes the agent's last action and the step
    count, so a result that went to the wrong agent or sub-env, or stale data, shows.
    The scouts (``Discrete(3)`` actions) lose ``1 + action`` plus a random 0..2 health per
    step; ``late`` (``Box`` actions, a different observation space) never dies. The episode
    ends when both scouts are dead (terminations) or after ``max_steps`` (truncations).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "arena_v0", "render_modes": []}

    def __init__(self, max_steps: int = 12, health: int = 9, fail_at: int | None = None,
                 exit_at: int | None = None, hang_at: int | None = None) -> None:
        self.possible_agents = ["scout_0", "scout_1", "late"]
        self.agents: list[str] = []
        self.render_mode = None
        self.max_steps, self.health = max_steps, health
        #: Raise in step number ``fail_at``, kill the process in step ``exit_at``, or hang in
        #: step ``hang_at`` (counted over this env's life).
        self.fail_at, self.exit_at, self.hang_at = fail_at, exit_at, hang_at
        self.steps_taken = 0
        self._scout_obs = spaces.Box(-1000.0, 1000.0, (3,), dtype=np.float32)
        self._late_obs = spaces.Box(-1000, 1000, (2,), dtype=np.int64)
        self._scout_act = spaces.Discrete(3)
        self._late_act = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._late_obs if agent == "late" else self._scout_obs

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._late_act if agent == "late" else self._scout_act

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = ["scout_0", "scout_1"]
        self.step_count = 0
        self.hp = {agent: float(self.health + self._rng.integers(0, 3)) for agent in self.agents}
        self.hp["late"] = 0.0
        observations = {agent: self._observe(agent, 0.0) for agent in self.agents}
        return observations, {agent: {} for agent in self.agents}

    def _observe(self, agent: str, echo: float) -> Any:
        if agent == "late":
            return np.array([self.step_count, round(echo * 100)], dtype=np.int64)
        return np.array([self.hp[agent], echo, self.step_count], dtype=np.float32)

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.steps_taken += 1
        if self.steps_taken == self.fail_at:
            raise RuntimeError(f"arena failed in step {self.steps_taken}")
        if self.steps_taken == self.exit_at:
            os._exit(3)
        if self.steps_taken == self.hang_at:
            time.sleep(600)
        self.step_count += 1
        observations, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            action = actions[agent]
            if agent == "late":
                echo = float(np.asarray(action)[0])
                rewards[agent] = echo
                terminations[agent] = False
            else:
                echo = float(action)
                self.hp[agent] -= 1 + echo + float(self._rng.integers(0, 3))
                rewards[agent] = -echo + 0.5
                terminations[agent] = self.hp[agent] <= 0
            observations[agent] = self._observe(agent, echo)
            truncations[agent] = self.step_count >= self.max_steps
            infos[agent] = {"hp": self.hp[agent]} if agent != "late" and self.step_count % 2 else {}
        self.agents = [agent for agent in self.agents
                       if not (terminations[agent] or truncations[agent])]
        if self.step_count == 3 and self.agents and self.step_count < self.max_steps:
            self.agents.append("late")  # spawns: present from this result on
            observations["late"] = self._observe("late", 0.0)
            rewards["late"], terminations["late"], truncations["late"] = 0.0, False, False
            infos["late"] = {}
        if not any(agent.startswith("scout") for agent in self.agents):
            for agent in self.agents:  # the late agent leaves with the last scout
                truncations[agent] = True
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def state(self) -> np.ndarray[Any, Any]:
        return np.array([self.hp[agent] for agent in self.possible_agents], dtype=np.float64)

    def close(self) -> None:
        pass


def _mpe2(name: str, **kwargs: Any) -> Any:
    return importlib.import_module(f"mpe2.{name}").parallel_env(**kwargs)


def mpe2_env(name: str, **kwargs: Any) -> Callable[[], Any]:
    """MPE2's ``name.parallel_env(**kwargs)``, imported where the sub-env lives."""
    return functools.partial(_mpe2, name, **kwargs)


def pettingzoo_env(env_id: str, **kwargs: Any) -> Callable[[], Any]:
    """PettingZoo's registered parallel env ``env_id``."""
    return functools.partial(pettingzoo.make, "parallel", env_id, **kwargs)
