"""A PettingZoo ``ParallelEnv`` seen as one Gymnasium env, so every backend can host it.

``PackedParallelEnv`` runs where the sub-env lives (the loop's thread, a thread, a worker
process, a Ray actor). Each reset or step packs the dict-of-agents result into one observation
of fixed layout, ``packed_observation_space``: a dict of agents for each of observations,
rewards, terminations, truncations and the ``active`` mask, every agent of
``possible_agents`` present in each. The engine then batches, shares (shared memory on the
process backend), autoresets and restarts it like any other sub-env; batched, each entry is
already what the multi-agent vector env hands out, ``(num_envs, ...)`` per agent.

An agent absent from a result (dead, not spawned yet) gets placeholders, never stale data:
zeros for its observation, reward 0, not terminated, not truncated, ``active`` False.
The sub-env's episode ends, for autoreset, when no agent is left or every agent that answered
is terminated or truncated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["PackedParallelEnv", "ParallelEnvFactory", "packed_observation_space", "placeholder"]

#: PettingZoo agent names are strings in practice (other hashables work but are not typed).
AgentID = str
#: Makes one PettingZoo ``ParallelEnv`` (a picklable callable for the process and Ray backends).
ParallelEnvFactory = Callable[[], Any]


def placeholder(space: spaces.Space[Any]) -> Any:
    """What an absent agent's observation reads as: zeros of the space's shape and dtype."""
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, spaces.Discrete):
        return space.dtype.type(0)
    if isinstance(space, spaces.Dict):
        return {key: placeholder(child) for key, child in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(placeholder(child) for child in space.spaces)
    return None


def packed_observation_space(
    observation_spaces: dict[AgentID, spaces.Space[Any]],
) -> spaces.Dict:
    """The layout of one packed result for agents with these observation spaces."""
    flag = spaces.Box(0, 1, (), dtype=np.bool_)  # type: ignore[arg-type]
    reward = spaces.Box(-np.inf, np.inf, (), dtype=np.float64)
    agents = list(observation_spaces)
    return spaces.Dict({
        "observations": spaces.Dict(observation_spaces),
        "rewards": spaces.Dict(dict.fromkeys(agents, reward)),
        "terminations": spaces.Dict(dict.fromkeys(agents, flag)),
        "truncations": spaces.Dict(dict.fromkeys(agents, flag)),
        "active": spaces.Dict(dict.fromkeys(agents, flag)),
    })


class PackedParallelEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """Hosts one ``ParallelEnv``: takes a dict of actions, answers with packed observations.

    Actions of agents not in ``env.agents`` are ignored. ``call``/``get_attr``/``set_attr``
    reach the ``ParallelEnv``. Infos are ``{agent: info}`` for the agents whose info is not
    empty.
    """

    def __init__(self, env_fn: ParallelEnvFactory) -> None:
        env = env_fn()
        if callable(getattr(env, "agent_iter", None)):
            raise TypeError(f"the env factory returned {type(env).__name__}, a PettingZoo AEC "
                            "env: wrap it with pettingzoo.utils.aec_to_parallel")
        if not (hasattr(env, "possible_agents") and callable(getattr(env, "step", None))
                and callable(getattr(env, "observation_space", None))):
            raise TypeError(f"the env factory returned {type(env).__name__}, "
                            "not a PettingZoo ParallelEnv")
        self.parallel_env = env
        self.possible_agents: tuple[AgentID, ...] = tuple(env.possible_agents)
        if not self.possible_agents:
            raise ValueError("the ParallelEnv's possible_agents is empty")
        observation_spaces = {agent: env.observation_space(agent)
                              for agent in self.possible_agents}
        self.observation_space = packed_observation_space(observation_spaces)
        self.action_space = spaces.Dict({agent: env.action_space(agent)
                                         for agent in self.possible_agents})
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self._placeholders = {agent: placeholder(space)
                              for agent, space in observation_spaces.items()}
        self._zeros = dict.fromkeys(self.possible_agents, 0.0)
        self._falses = dict.fromkeys(self.possible_agents, False)

    def get_wrapper_attr(self, name: str) -> Any:
        """The ``ParallelEnv``'s attribute ``name`` (the adapter's own only if it has none)."""
        if hasattr(self.parallel_env, name):
            return getattr(self.parallel_env, name)
        return getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        """Set attribute ``name`` on the ``ParallelEnv`` (only if it has one, unless ``force``)."""
        if force or hasattr(self.parallel_env, name):
            setattr(self.parallel_env, name, value)
            return True
        return False

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)  # keeps ``np_random_seed`` meaningful for the engine
        observations, infos = self.parallel_env.reset(seed=seed, options=options)
        return self._pack(observations, {}, {}, {}), self._infos(infos)

    def step(self, action: dict[AgentID, Any]) -> tuple[dict[str, Any], float, bool, bool,
                                                       dict[str, Any]]:
        env = self.parallel_env
        observations, rewards, terminations, truncations, infos = env.step(
            {agent: action[agent] for agent in env.agents})
        packed = self._pack(observations, rewards, terminations, truncations)
        answered = observations.keys()
        episode_over = not env.agents or all(
            terminations.get(agent) or truncations.get(agent) for agent in answered)
        truncated = episode_over and any(truncations.get(agent) for agent in answered)
        total_reward = float(sum(rewards.values()))
        return packed, total_reward, episode_over and not truncated, truncated, self._infos(infos)

    def _pack(self, observations: dict[AgentID, Any], rewards: dict[AgentID, Any],
              terminations: dict[AgentID, Any],
              truncations: dict[AgentID, Any]) -> dict[str, Any]:
        unknown = (observations.keys() | rewards.keys()) - self._placeholders.keys()
        if unknown:
            raise ValueError(f"agents {sorted(map(str, unknown))} are not in possible_agents "
                             f"{list(self.possible_agents)}")
        return {
            "observations": {**self._placeholders, **observations},
            "rewards": {**self._zeros, **rewards},
            "terminations": {**self._falses, **terminations},
            "truncations": {**self._falses, **truncations},
            "active": {agent: agent in observations for agent in self.possible_agents},
        }

    @staticmethod
    def _infos(infos: dict[AgentID, Any] | None) -> dict[str, Any]:
        return {agent: info for agent, info in (infos or {}).items() if info}

    def render(self) -> Any:
        return self.parallel_env.render()

    def close(self) -> None:
        self.parallel_env.close()
