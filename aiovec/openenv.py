"""OpenEnv support: ``OpenEnvEnv`` runs OpenEnv environments (a session each) as aiovec
sub-envs.

Needs ``openenv-core`` (``pip install aiovec[openenv]``). Each episode's task goes to the
server's ``reset`` as keywords, from the episode's options::

    import functools
    import aiovec
    from aiovec.openenv import OpenEnvEnv

    tasks = iter(dataset)  # each a dict of the server env's reset keywords
    envs = aiovec.AsyncVectorEnv([functools.partial(OpenEnvEnv, "http://127.0.0.1:8000")] * 64,
                                 backend="async", episode_options=lambda i: next(tasks))
"""

from aiovec._adapters._openenv import OpenEnvEnv as OpenEnvEnv

__all__ = ["OpenEnvEnv"]

OpenEnvEnv.__module__ = __name__
