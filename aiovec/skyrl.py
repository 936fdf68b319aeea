"""SkyRL-gym support: ``SkyRLEnv`` runs SkyRL-gym text environments as aiovec sub-envs.

Needs ``skyrl-gym`` (``pip install aiovec[skyrl]``). Each episode's dataset row comes from its
reset options::

    import aiovec
    from aiovec.skyrl import SkyRLEnv

    rows = iter(dataset)  # SkyRL rows: prompt, env_class, reward_spec, ...
    envs = aiovec.AsyncVectorEnv([SkyRLEnv] * 64, backend="process",
                                 episode_options=lambda env_index: next(rows))
"""

from aiovec._adapters._skyrl import SkyRLEnv as SkyRLEnv

__all__ = ["SkyRLEnv"]

SkyRLEnv.__module__ = __name__
