"""``SkyRLEnv``: a SkyRL-gym text environment, one episode per dataset row, as an aiovec sub-env.

SkyRL makes one env instance per sample: ``skyrl_gym.make(row["env_class"],
env_config=..., extras=row minus prompt and env_class)``, then ``init(prompt)`` and a
``step(text)`` per turn until ``done``. ``SkyRLEnv`` does exactly that per episode, the row
coming from the reset's options (``episode_options=`` hands each episode its own, automatic
resets included). The observation is the chat so far, as SkyRL's generator keeps it (the
prompt, then each reply followed by the env's messages); the reward is the env's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from aiovec._adapters._sessions import Session
from aiovec._object_space import ObjectSpace

__all__ = ["SkyRLEnv"]

#: A chat: OpenAI-style message dicts (``{"role": ..., "content": ...}``).
Chat = list[dict[str, Any]]
#: Makes a SkyRL env from ``env_config=`` and ``extras=`` (as ``skyrl_gym.make`` with an id).
EnvMaker = Callable[..., Any]

#: The keys of a SkyRL dataset row that are not the env's ``extras``.
_NOT_EXTRAS = ("prompt", "env_class")


def _skyrl_make(env_id: str, **kwargs: Any) -> Any:
    import skyrl_gym  # type: ignore[import-not-found,unused-ignore]  # the skyrl extra

    return skyrl_gym.make(env_id, **kwargs)


def _close_env(env: Any) -> None:
    env.close()


#: Per env class: whether its ``close`` is its own (``_releases_something``).
_RELEASES: dict[type, bool] = {}


def _releases_something(env: Any) -> bool:
    """Whether the env's ``close`` is its own, not SkyRL's base classes' (which do nothing):
    only then is it worth a registered cleanup (a message to the keeper per episode). Asked
    once per class, not per episode."""
    env_class: type = type(env)
    known = _RELEASES.get(env_class)
    if known is None:
        owner = next((klass for klass in env_class.__mro__ if "close" in vars(klass)), None)
        known = _RELEASES[env_class] = owner is not None and not owner.__module__.startswith(
            ("skyrl_gym.core", "skyrl_gym.envs.base_text_env"))
    return known


class SkyRLEnv(gym.Env[Chat, str]):
    """One SkyRL-gym env per episode, made from the row in the reset's ``options``.

    ``options`` is a SkyRL dataset row: ``prompt`` (a chat), ``env_class`` (a registered id,
    unless given here) and the env's extras (``reward_spec``, ``extra_info``, ...). ``env_class``
    here overrides the row's: a registered id, or a callable taking ``env_config=`` and
    ``extras=`` (a ``BaseTextEnv`` subclass). ``max_turns`` goes into the extras as SkyRL's
    generator puts it there (the envs enforce it). Each step's info carries the env's
    ``metadata``; the last one also its ``get_metrics()``.

    The SkyRL env is closed when its episode ends, when the next reset replaces it, and when
    this sub-env closes; if the process hosting it dies first, an env with a ``close`` of its
    own (not SkyRL's base one, which does nothing) is closed all the same, by a registered
    cleanup (``aiovec.register_cleanup``), on a copy of it on the process backend (an env
    that does not pickle, as SkyRL's text2sql and search, is closed where it runs only).
    """

    def __init__(self, env_class: str | EnvMaker | None = None, *, env_config: Any = None,
                 max_turns: int | None = None) -> None:
        self.observation_space = ObjectSpace(list)
        self.action_space = ObjectSpace(str)
        self._env_class = env_class
        self._env_config = env_config
        self._max_turns = max_turns
        self._session = Session(self)
        self._chat: Chat = []

    def _make(self, row: Mapping[str, Any]) -> Any:
        env_class = self._env_class if self._env_class is not None else row.get("env_class")
        if env_class is None:
            raise ValueError("the episode's row names no env_class, and SkyRLEnv was given none")
        extras = {key: value for key, value in row.items() if key not in _NOT_EXTRAS}
        if self._max_turns is not None:
            extras["max_turns"] = self._max_turns
        make: EnvMaker = (functools.partial(_skyrl_make, env_class)
                          if isinstance(env_class, str) else env_class)
        return make(env_config=self._env_config, extras=extras)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Chat, dict[str, Any]]:
        super().reset(seed=seed)
        if options is None or "prompt" not in options:
            raise ValueError("SkyRLEnv needs the episode's dataset row as its reset options "
                             "(a 'prompt' and the env's extras): pass episode_options= or "
                             "reset(options=[row, ...])")
        self._session.close()
        env = self._make(options)
        # Its close is its cleanup too: an env holding a sandbox or a session releases it there.
        self._session.adopt(env, _close_env, functools.partial(_close_env, env)
                            if _releases_something(env) else None)
        chat, metadata = env.init(list(options["prompt"]))
        self._chat = list(chat)
        return list(self._chat), {"metadata": metadata}

    def step(self, action: str) -> tuple[Chat, float, bool, bool, dict[str, Any]]:
        env = self._session.current
        if env is None:
            raise RuntimeError("SkyRLEnv.step before reset (or after its episode ended)")
        output = env.step(action)
        reply = output.get("postprocessed_action") or action  # SkyRL keeps the env's version
        self._chat.append({"role": "assistant", "content": reply})
        self._chat.extend(output["observations"])
        info: dict[str, Any] = {"metadata": output.get("metadata", {})}
        done = bool(output["done"])
        if done:
            info["metrics"] = env.get_metrics()
            self._session.close()
        return list(self._chat), float(output["reward"]), done, False, info

    def close(self) -> None:
        self._session.close()
