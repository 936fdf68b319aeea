"""Step environments served by ``aiovec.serve`` from another program, as vector envs.

Needs the ``remote`` extra (``pip install 'aiovec[remote]'``)::

    from aiovec.remote import AsyncRemoteVectorEnv

    async with AsyncRemoteVectorEnv("http://127.0.0.1:8000", "CartPole-v1", 8) as envs:
        obs, infos = await envs.reset(seed=0)
        obs, rewards, terminations, truncations, infos = await envs.step(actions)

``RemoteVectorEnv`` is the same as a synchronous ``gymnasium.vector.VectorEnv``. Errors:
``aiovec.RemoteError`` (the server refused or failed; ``.code``), ``aiovec.ServerGoneError``
(the connection or the session is gone), ``aiovec.EnvTimeoutError`` (a deadline passed; the
server's step was cancelled), and the local env's own ``ValueError``/``TypeError`` for bad
actions and seeds, raised before anything is sent.
"""

from aiovec._remote._sync_vector_env import RemoteVectorEnv as RemoteVectorEnv
from aiovec._remote._vector_env import AsyncRemoteVectorEnv as AsyncRemoteVectorEnv

__all__ = ["AsyncRemoteVectorEnv", "RemoteVectorEnv"]

AsyncRemoteVectorEnv.__module__ = __name__
RemoteVectorEnv.__module__ = __name__
