"""Gymnasium registrations made in the parent, carried to the fresh interpreters that host
sub-envs (process workers, Ray actors).

A script or notebook that calls ``gymnasium.register("MyEnv-v0", entry_point=MyEnv)`` and then
makes ``lambda: gym.make("MyEnv-v0")`` sub-envs expects them to exist wherever the sub-envs
run; a fresh interpreter has only Gymnasium's own. So the parent exports every registration
that is not Gymnasium's, by value (``cloudpickle``: an entry point defined in ``__main__`` or a
notebook cell travels as code), and a worker installs the ones it lacks before it makes its
sub-envs. A registration that cannot be pickled stays behind (its ``gym.make`` then fails in
the worker as it would have).
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import cloudpickle
import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

__all__ = ["export_registrations", "install_registrations"]

#: One exported registration: its id and its pickled ``EnvSpec``.
Exported = list[tuple[str, bytes]]


def _is_gymnasiums(spec: EnvSpec) -> bool:
    """Registered by Gymnasium itself, so present in every interpreter that imports it."""
    entry = spec.entry_point
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
    return module.split(".", 1)[0].split(":", 1)[0] == "gymnasium"


def _portable(spec: EnvSpec) -> EnvSpec:
    """``spec`` with an entry point that names the parent's ``__main__`` (which a worker's
    ``__main__`` is not) replaced by the object it names."""
    entry = spec.entry_point
    if isinstance(entry, str) and entry.startswith("__main__:"):
        creator: Any = load_env_creator(entry)
        return dataclasses.replace(spec, entry_point=creator)
    return spec


def export_registrations() -> Exported:
    """Every registration in this interpreter that is not Gymnasium's own, pickled."""
    exported = []
    for env_id, spec in list(gym.registry.items()):
        if _is_gymnasiums(spec):
            continue
        try:
            exported.append((env_id, cloudpickle.dumps(_portable(spec))))
        except Exception:  # unpicklable (say, a closure over a lock): it stays behind
            continue
    return exported


def install_registrations(exported: Exported) -> None:
    """Register in this interpreter the exported registrations it lacks.

    Installed directly into the registry: the module that made a registration may still be
    imported here later (by ``gym.make`` loading an entry point) and register it again, which
    is then no surprise worth Gymnasium's "Overriding environment" warning.
    """
    for env_id, pickled in exported:
        if env_id in gym.registry:
            continue
        try:
            spec: Any = cloudpickle.loads(pickled)
        except Exception:  # needs a module this interpreter cannot import: gym.make will say
            continue
        gym.registry[env_id] = spec
        warnings.filterwarnings(
            "ignore", message=rf".*Overriding environment {re.escape(env_id)} already in registry")
