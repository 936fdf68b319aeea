"""Backends, loaded lazily by name so an optional dependency is imported only when used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiovec._backends._base import Backend

__all__ = ["BACKEND_NAMES", "load_backend", "resolve_backend_name"]

# name -> (module, class, the pip extra that provides its dependencies, if any)
_REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "inline": ("aiovec._backends._inline", "InlineBackend", None),
    "thread": ("aiovec._backends._thread", "ThreadBackend", None),
}

BACKEND_NAMES = ("auto", *_REGISTRY)


def resolve_backend_name(name: str, num_envs: int) -> str:
    """Pick the concrete backend for ``name``; ``"auto"`` picks one for the workload.

    Rule (until the process backend lands): ``"thread"``, which never blocks the event loop.
    """
    if name == "auto":
        return "thread"
    if name not in _REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
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
