"""``OpenEnvEnv``: one OpenEnv session (an ``EnvClient`` over WebSocket) as an aiovec sub-env.

OpenEnv serves each environment behind a FastAPI app, one env instance per WebSocket session;
its async ``EnvClient`` resets and steps it. ``OpenEnvEnv`` holds one such session per sub-env,
across episodes: each reset passes the episode's options to the server's ``reset`` as keywords
(the task: ``episode_options=`` hands each episode its own), each step the action, and the
server's reward is the step's. A call cut short (a deadline, an abort) leaves the connection
out of step with its replies, so the next reset opens a new session.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import sniffio

from aiovec._adapters._sessions import Session
from aiovec._core._async_env import AsyncEnv
from aiovec._object_space import ObjectSpace

__all__ = ["OpenEnvEnv"]

#: Makes an ``EnvClient`` (or an awaitable of one, as ``from_docker_image`` in openenv-core).
ClientMaker = Callable[[], Any]


def _generic_client(base_url: str) -> Any:
    from openenv.core.generic_client import (  # type: ignore[import-not-found,unused-ignore]
        GenericEnvClient,
    )

    return GenericEnvClient(base_url=base_url)


async def _close_client(client: Any) -> None:
    await client.close()


def _stop_provider(provider: Any) -> None:
    """Stop the container or runtime an OpenEnv client started (its close's second half)."""
    stop = getattr(provider, "stop_container", None) or provider.stop
    stop()


class OpenEnvEnv(AsyncEnv[Any, Any]):
    """One OpenEnv session: ``client`` is the server's URL (then a ``GenericEnvClient``:
    actions and observations are dicts) or a function of no arguments making the env's own
    client (``functools.partial(EchoEnv, base_url=url)``: its typed actions and observations).

    ``reset(seed=s, options=o)`` calls ``client.reset(seed=s, **o)``; ``step(a)`` calls
    ``client.step(a)``; the observation is the server's, the reward its ``reward`` (0.0 when
    it has none), ``terminated`` its ``done`` (OpenEnv has no truncation). The session is
    closed when the sub-env closes; if its process dies first, the server ends it as the
    connection drops, and a container the client started (``from_docker_image``) is stopped
    by a registered cleanup (``aiovec.register_cleanup``).

    OpenEnv's client runs on asyncio only: on trio, host these sub-envs on the process
    backend, whose workers run asyncio.
    """

    def __init__(self, client: str | ClientMaker) -> None:
        if not (isinstance(client, str) or callable(client)):
            raise TypeError("client must be the server's URL or a function making an "
                            f"EnvClient, got {type(client).__name__}")
        self.observation_space = ObjectSpace()
        self.action_space = ObjectSpace()
        self._make = client
        self._session = Session(self)
        #: False while a call runs, and after one cut short (its reply may come later, out of turn).
        self._answered = True

    async def _client(self) -> Any:
        """The session's client, opened anew if there is none or a call was cut short."""
        if self._session.current is not None and self._answered:
            return self._session.current
        await self._session.aclose()
        library = sniffio.current_async_library()
        if library != "asyncio":
            raise RuntimeError(f"OpenEnv's client runs on asyncio only, not {library}: host "
                               "these sub-envs on backend='process' (its workers run asyncio)")
        make = self._make
        client = _generic_client(make) if isinstance(make, str) else make()
        if inspect.isawaitable(client):
            client = await client
        # The session ends with its connection (the server sees it drop); a container the
        # client started (``from_docker_image``) must be stopped even after a SIGKILL.
        provider = getattr(client, "_provider", None)
        self._session.adopt(client, _close_client, None if provider is None
                            else functools.partial(_stop_provider, provider))
        self._answered = True
        return client

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(seed=seed)
        client = await self._client()
        keywords = dict(options or {})
        if seed is not None:
            keywords["seed"] = seed
        self._answered = False
        result = await client.reset(**keywords)
        self._answered = True
        return result.observation, {}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        client = self._session.current
        if client is None:
            raise RuntimeError("OpenEnvEnv.step before reset")
        if not self._answered:
            raise RuntimeError("OpenEnvEnv: the last call was cut short; reset first")
        self._answered = False
        result = await client.step(action)
        self._answered = True
        reward = 0.0 if result.reward is None else float(result.reward)
        return result.observation, reward, bool(result.done), False, {}

    async def close(self) -> None:
        await self._session.aclose()
