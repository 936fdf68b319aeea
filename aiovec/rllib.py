"""RLlib support: ``env_creator`` makes RLlib's env runners step aiovec vector envs.

Registered with ``ray.tune.register_env``, the creator reaches every env runner (in the driver
or remote); each calls it with its ``env_config`` plus ``"num_envs"`` when
``gym_env_vectorize_mode="vector_entry_point"``. This module never imports Ray itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

from aiovec._make import Wrapper, _EnvMaker, _make_shim
from aiovec._shim._vector_env import VectorEnv

__all__ = ["EnvCreator", "env_creator"]


class EnvCreator:
    """A picklable RLlib env creator: an ``aiovec.VectorEnv`` of ``env_id`` when RLlib asks for
    ``num_envs`` sub-envs, a single ``gymnasium.make`` env otherwise.

    The id is resolved to its ``EnvSpec`` here, so an env registered only in the driver still
    reaches remote env runners (its entry point must be importable there).
    """

    def __init__(self, env_id: str | EnvSpec, vector_kwargs: Mapping[str, Any],
                 wrappers: Sequence[Wrapper] = ()) -> None:
        # Fail in the driver, not later in a remote env runner, on a misspelt keyword.
        inspect.signature(VectorEnv).bind([], **vector_kwargs)
        autoreset_mode = vector_kwargs.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if AutoresetMode(autoreset_mode) is not AutoresetMode.NEXT_STEP:
            raise ValueError("RLlib's env runners expect next-step autoreset (Gymnasium's "
                             f"default), not {autoreset_mode!r}")
        self.spec = env_id if isinstance(env_id, EnvSpec) else gym.spec(env_id)
        self.vector_kwargs = dict(vector_kwargs)
        self.wrappers = tuple(wrappers)

    def __call__(self, config: Mapping[str, Any]) -> gym.Env[Any, Any] | VectorEnv:
        """Build the env RLlib asks for; ``config`` (RLlib's ``env_config``) holds its kwargs."""
        env_kwargs = dict(config)
        num_envs = env_kwargs.pop("num_envs", None)
        if num_envs is not None:
            return _make_shim(self.spec, num_envs, None, self.vector_kwargs, self.wrappers,
                              env_kwargs)
        return _EnvMaker(self.spec, env_kwargs, self.wrappers)()

    def __repr__(self) -> str:
        return f"EnvCreator({self.spec.id!r}, {self.vector_kwargs!r})"


def env_creator(env_id: str | EnvSpec, *, wrappers: Sequence[Wrapper] = (),
                **vector_kwargs: Any) -> EnvCreator:
    """An RLlib env creator whose env runners step ``env_id`` in an ``aiovec.VectorEnv``.

    ``vector_kwargs`` go to ``VectorEnv`` (``backend``, ``timeout``, ``restart``, ...);
    ``wrappers`` wrap each sub-env; RLlib's ``env_config`` goes to ``gymnasium.make``::

        ray.tune.register_env("aiovec-CartPole",
                              aiovec.rllib.env_creator("CartPole-v1", backend="process"))
        config = PPOConfig().environment("aiovec-CartPole").env_runners(
            num_envs_per_env_runner=8, gym_env_vectorize_mode="vector_entry_point")
        algo = config.build_algo()
    """
    return EnvCreator(env_id, vector_kwargs, wrappers)
