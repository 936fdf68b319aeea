"""Backends, loaded lazily by name so an optional dependency is imported only when used."""

from __future__ import annotations

import importlib
import multiprocessing
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiovec._backends._base import Backend

__all__ = ["BACKEND_NAMES", "load_backend", "resolve_backend_name"]

# name -> (module, class, the pip extra that provides its dependencies, if any)
_REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "inline": ("aiovec._backends._inline", "InlineBackend", None),
    "thread": ("aiovec._backends._thread", "ThreadBackend", None),
    "process": ("aiovec._backends._process", "ProcessBackend", None),
}

BACKEND_NAMES = ("auto", *_REGISTRY)

#: Keyword options only the process backend understands.
PROCESS_OPTIONS = ("num_workers", "start_method")


def _processes_available() -> bool:
    return os.name == "posix" and bool(
        {"forkserver", "spawn"} & set(multiprocessing.get_all_start_methods()))


def resolve_backend_name(name: str, num_envs: int, options: dict[str, Any]) -> str:
    """Pick the concrete backend for ``name``; the rule for ``"auto"`` is in the README.

    ``"auto"``: ``"process"`` when process options were given, or when there are at least two
    sub-envs, at least two usable CPUs, and the platform can start workers; else ``"thread"``.
    """
    if name == "auto":
        if any(options.get(key) is not None for key in PROCESS_OPTIONS):
            return "process"
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            cpus = os.cpu_count() or 1
        return "process" if num_envs >= 2 and cpus >= 2 and _processes_available() else "thread"
    if name not in _REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name != "process":
        given = [key for key in PROCESS_OPTIONS if options.get(key) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} apply to the process backend, not {name!r}")
    return name


def load_backend(name: str) -> type[Backend]:
    """Import and return the backend class registered as ``name``."""
    module_name, class_name, extra = _REGISTRY[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - exercised once optional backends exist
        hint = f": pip install 'aiovec[{extra}]'" if extra else ""
        raise ImportError(f"the {name!r} backend needs extra dependencies{hint}") from exc
    backend: type[Backend] = getattr(module, class_name)
    return backend
