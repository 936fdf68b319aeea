"""The oracle for multi-agent rollouts: the sub-envs stepped one by one, batched by hand.

Written from the documented semantics only (placeholders for absent agents, next-step
autoreset once every agent is done, Gymnasium's info merging), not from aiovec's code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv


def _absent(space: spaces.Space[Any]) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: _absent(child) for key, child in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_absent(child) for child in space.spaces)
    return np.zeros(space.shape, dtype=space.dtype)


def _stack(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {key: _stack([value[key] for value in values]) for key in first}
    if isinstance(first, tuple):
        return tuple(_stack([value[index] for value in values]) for index in range(len(first)))
    return np.stack([np.asarray(value) for value in values])


class _InfoMerger(SyncVectorEnv):
    """Only for Gymnasium's own ``_add_info`` (no sub-envs are made)."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


class SerialParallelEnvs:
    """``num_envs`` ParallelEnvs stepped in a loop, answering like ``AsyncParallelVectorEnv``."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], autoreset: bool = True) -> None:
        self.envs = [env_fn() for env_fn in env_fns]
        self.agents = list(self.envs[0].possible_agents)
        self.autoreset = autoreset
        self.needs_reset = [False] * len(self.envs)
        self.last: list[dict[str, Any]] = [{} for _ in self.envs]
        self.merger = _InfoMerger(len(self.envs))

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _batch(self, results: list[tuple[Any, ...]],
               answered: list[bool] | None = None) -> tuple[Any, ...]:
        """The batched results; infos only of the sub-envs that ``answered`` (default: all)."""
        observations: dict[str, Any] = {}
        rewards, terminations, truncations, active = {}, {}, {}, {}
        for agent in self.agents:
            space = self.envs[0].observation_space(agent)
            observations[agent] = _stack([result[0].get(agent, _absent(space))
                                          for result in results])
            rewards[agent] = np.array([float(result[1].get(agent, 0.0)) for result in results])
            terminations[agent] = np.array([bool(result[2].get(agent, False))
                                            for result in results])
            truncations[agent] = np.array([bool(result[3].get(agent, False))
                                           for result in results])
            active[agent] = np.array([agent in result[0] for result in results])
        infos: dict[str, Any] = {}
        for index, result in enumerate(results):
            if answered is not None and not answered[index]:
                continue
            own = {agent: info for agent, info in result[4].items() if info}
            infos = self.merger._add_info(infos, own, index)
        infos["active"] = active
        return observations, rewards, terminations, truncations, infos

    def reset(self, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        seeds = seed if isinstance(seed, list) else [
            None if seed is None else seed + index for index in range(len(self.envs))]
        for index, env in enumerate(self.envs):
            if mask is None or mask[index]:
                observations, infos = env.reset(seed=seeds[index], options=options or None)
                self.last[index] = (observations, {}, {}, {}, infos)
                self.needs_reset[index] = False
        answered = [mask is None or bool(mask[index]) for index in range(len(self.envs))]
        observations, _, _, _, infos = self._batch(self.last, answered)
        return observations, infos

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        for index, env in enumerate(self.envs):
            if self.needs_reset[index]:
                observations, infos = env.reset()
                self.last[index] = (observations, {}, {}, {}, infos)
                self.needs_reset[index] = False
                continue
            result = env.step({agent: actions[agent][index] for agent in env.agents})
            self.last[index] = result
            observations, _, terminations, truncations, _ = result
            done = not env.agents or all(terminations[agent] or truncations[agent]
                                         for agent in observations)
            self.needs_reset[index] = done and self.autoreset
        return self._batch(self.last)

    def episode_over(self, index: int) -> bool:
        """Whether sub-env ``index``'s last step ended its episode."""
        observations, _, terminations, truncations, _ = self.last[index]
        return not self.envs[index].agents or all(
            terminations.get(agent) or truncations.get(agent) for agent in observations)
