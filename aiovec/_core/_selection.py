"""Choosing a backend by name, and loading it lazily (an optional dependency such as Ray is
imported only when its backend is used). The core names backends by module path only, so
``aiovec._core`` never imports ``aiovec._backends``: the dependency runs one way."""

from __future__ import annotations

import importlib
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiovec._core._async_env import makes_async_envs

if TYPE_CHECKING:
    from aiovec._core._backend import Backend

__all__ = ["BACKEND_NAMES", "ActorOptions", "load_backend", "resolve_backend_name"]

#: The Ray backend's ``actor_options``: one mapping for every actor, or one per actor.
ActorOptions = Mapping[str, Any] | Sequence[Mapping[str, Any]]

# name -> (module, class, the pip extra that provides its dependencies, if any)
_REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "inline": ("aiovec._backends._inline", "InlineBackend", None),
    "thread": ("aiovec._backends._thread", "ThreadBackend", None),
    "process": ("aiovec._backends._process._backend", "ProcessBackend", None),
    "async": ("aiovec._backends._async", "AsyncBackend", None),
    "ray": ("aiovec._backends._ray._backend", "RayBackend", "ray"),
}

BACKEND_NAMES = ("auto", *_REGISTRY)

#: Keyword options only some backends understand, and which.
BACKEND_OPTIONS = {
    "num_workers": ("process", "ray"),
    "start_method": ("process",),
    "max_concurrency": ("async", "thread", "inline", "process", "ray"),
    "address": ("ray",),
    "actor_options": ("ray",),
}
PROCESS_OPTIONS = ("num_workers", "start_method")
RAY_OPTIONS = ("address", "actor_options")


def _processes_available() -> bool:
    return os.name == "posix" and bool(
        {"forkserver", "spawn"} & set(multiprocessing.get_all_start_methods()))


def resolve_backend_name(name: str, env_fns: Sequence[Any], options: dict[str, Any]) -> str:
    """Pick the concrete backend for ``name``; the rule for ``"auto"`` is in docs/guide/backends.md.

    ``"auto"``: ``"async"`` when the factories are ``AsyncEnv`` classes; else ``"ray"`` when
    Ray options were given; else ``"process"``
    when process options were given, or when there are at least two sub-envs, at least two
    usable CPUs, and the platform can start workers; else ``"thread"``.
    """
    if name == "auto":
        name = _auto_backend(env_fns, options)
    if name not in _REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    for key, backends in BACKEND_OPTIONS.items():
        if options.get(key) is not None and name not in backends:
            raise ValueError(f"{key} applies to the {_listed(backends)} backend"
                             f"{'s' if len(backends) > 1 else ''}, not {name!r}")
    return name


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _auto_backend(env_fns: Sequence[Any], options: dict[str, Any]) -> str:
    if makes_async_envs(env_fns[0]):
        return "async"
    if any(options.get(key) is not None for key in RAY_OPTIONS):
        return "ray"
    if any(options.get(key) is not None for key in PROCESS_OPTIONS):
        return "process"
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    processes = len(env_fns) >= 2 and cpus >= 2 and _processes_available()
    return "process" if processes else "thread"


def load_backend(name: str) -> type[Backend]:
    """Import and return the backend class registered as ``name``."""
    module_name, class_name, extra = _REGISTRY[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f": pip install 'aiovec[{extra}]'" if extra else ""
        raise ImportError(f"the {name!r} backend needs extra dependencies{hint}") from exc
    backend: type[Backend] = getattr(module, class_name)
    return backend
