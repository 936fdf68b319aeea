"""Stable-Baselines3 support: ``SB3VecEnv`` is an SB3 ``VecEnv`` over any aiovec backend.

Needs the ``sb3`` extra (``pip install aiovec[sb3]``)::

    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from aiovec.sb3 import SB3VecEnv

    vec_env = make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=SB3VecEnv,
                           vec_env_kwargs={"backend": "process", "timeout": 5.0})
    PPO("MlpPolicy", vec_env).learn(100_000)
"""

from aiovec._adapters._sb3 import SB3VecEnv as SB3VecEnv

__all__ = ["SB3VecEnv"]

SB3VecEnv.__module__ = __name__
