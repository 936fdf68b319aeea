"""Functions an adapter runs inside the sub-env hosts, through the core's call machinery.

They live apart from the adapters so that a worker process unpickling one by reference imports
only this module, never the adapter's library (Stable-Baselines3 would pull in PyTorch).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["call_method", "is_wrapped", "read_attr"]


def read_attr(env: gym.Env[Any, Any], name: str) -> Any:
    """The attribute ``name`` as found through the env's wrappers (a method is not called)."""
    return env.get_wrapper_attr(name)


def call_method(env: gym.Env[Any, Any], name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the env's method ``name`` (looked up through its wrappers)."""
    return env.get_wrapper_attr(name)(*args, **kwargs)


def is_wrapped(env: gym.Env[Any, Any], wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]],
               ) -> bool:
    """Whether a ``wrapper_class`` wrapper sits anywhere in the env's wrapper chain."""
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, wrapper_class):
            return True
        layer = layer.env
    return False
