"""Serve aiovec vector envs over HTTP and WebSocket: ``EnvServer`` is an ASGI app (Starlette)
of allow-listed envs, hardened for the network.

Needs the ``serve`` extra (``pip install 'aiovec[serve]'``)::

    import aiovec.serve

    server = aiovec.serve.EnvServer({"CartPole-v1": aiovec.serve.ServedEnv("CartPole-v1")})
    aiovec.serve.run(server, host="127.0.0.1", port=8000)     # or: uvicorn on server.app

Inside a FastAPI or Starlette app, mount ``server.app`` (or add ``server.routes``) and enter
``server.lifespan()`` in the app's lifespan. Clients: ``aiovec.remote``, or any HTTP or
WebSocket client speaking the JSON protocol (docs/guide/serving.md).
"""

from collections.abc import Callable as _Callable
from collections.abc import Mapping as _Mapping
from typing import Any as _Any

import gymnasium as _gym
from starlette.applications import Starlette as _Starlette

from aiovec._serve._config import Limits as Limits
from aiovec._serve._config import ServedEnv as ServedEnv
from aiovec._serve._errors import CODES as ERROR_CODES
from aiovec._serve._guard import Authenticate as Authenticate
from aiovec._serve._run import run as run
from aiovec._serve._run import uvicorn_config as uvicorn_config
from aiovec._serve._server import EnvServer as EnvServer

__all__ = ["ERROR_CODES", "Authenticate", "EnvServer", "Limits", "ServedEnv", "create_app",
           "run", "uvicorn_config"]


def create_app(envs: _Mapping[str, ServedEnv | str | _Callable[[], _gym.Env[_Any, _Any]]],
               **options: _Any) -> _Starlette:
    """``EnvServer(envs, **options).app``: the ASGI app alone, owning its lifespan."""
    return EnvServer(envs, **options).app


for _name in ("Limits", "ServedEnv", "EnvServer", "run", "uvicorn_config"):
    globals()[_name].__module__ = __name__
