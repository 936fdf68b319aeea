"""What a server serves (the allow-list of ``ServedEnv``) and the limits it enforces."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = ["Limits", "ServedEnv", "allow_list"]


@dataclass(frozen=True)
class ServedEnv:
    """How sessions of one public env id are built: clients name the id, never send code.

    ``factory`` is a Gymnasium id (made with ``gymnasium.make``) or a callable returning a
    fresh env; ``vector_options`` go to ``aiovec.AsyncVectorEnv`` as they are (``restart=``,
    ``num_workers=``, ``autoreset_mode=``, ...).
    """

    factory: str | Callable[[], gym.Env[Any, Any]]
    backend: str = "thread"
    #: Sub-envs a session may hold (``num_envs`` from 1 to this).
    max_envs: int = 16
    #: Seconds a sub-env's reset or step may take: past it the sub-env is restarted under
    #: the session's restart policy (on unless ``vector_options`` say ``restart=False``), or
    #: the client gets 504 ``timeout``. A client's shorter deadline applies instead (the
    #: sub-env given up on, no restart; the serving guide's *Deadlines*).
    timeout: float | None = 10.0
    description: str = ""
    vector_options: Mapping[str, Any] = field(default_factory=dict)
    #: Whether clients may pass ``options`` to ``reset``. Off by default: options reach the
    #: env's own code, and a value it chokes on would fail (and restart) its sub-envs.
    reset_options: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.factory, str) or callable(self.factory)):
            raise TypeError(f"ServedEnv.factory must be a Gymnasium env id or a callable, "
                            f"got {self.factory!r}")
        if type(self.max_envs) is not int or self.max_envs < 1:
            raise ValueError(f"ServedEnv.max_envs must be a positive int, got {self.max_envs!r}")

    @property
    def env_fn(self) -> Callable[[], gym.Env[Any, Any]]:
        """A callable making one sub-env."""
        if isinstance(self.factory, str):
            return functools.partial(gym.make, self.factory)
        return self.factory


def allow_list(envs: Mapping[str, ServedEnv | str | Callable[[], gym.Env[Any, Any]]]
               ) -> dict[str, ServedEnv]:
    """The allow-list with every entry a ``ServedEnv`` (an id or a factory alone takes the
    defaults)."""
    if not envs:
        raise ValueError("serve at least one env: envs={'CartPole-v1': ServedEnv('CartPole-v1')}")
    listed: dict[str, ServedEnv] = {}
    for env_id, entry in envs.items():
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"public env ids are non-empty strings, got {env_id!r}")
        listed[env_id] = entry if isinstance(entry, ServedEnv) else ServedEnv(entry)
    return listed


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server; over a limit, the request is refused before
    anything else reads it."""

    #: A request body or WebSocket message larger than this is refused (413 ``too_large``).
    max_body_bytes: int = 4 * 2**20
    #: JSON nested deeper than this is refused (400 ``too_deep``) before it is parsed.
    max_json_depth: int = 32
    #: Bodies and answers larger than this are parsed and encoded in a worker thread, so one
    #: big payload never stalls the event loop (``/healthz`` and every other session).
    offload_bytes: int = 64 * 2**10
    #: Operations on sessions whose sub-envs step in the event loop's thread (the inline
    #: backend) that run at once; the others wait their turn. Hundreds of them ready together
    #: would otherwise run back to back in one loop turn, and ``/healthz`` (and every other
    #: request) would wait that long: 150 ms p99 with 512 sessions stepping flat out on 2
    #: cores, 4 ms with this limit, at the same throughput.
    in_loop_operations: int = 8
    #: Seconds a ``/ws`` connection may take to send the message that opens its session; a
    #: connection holding no session holds no lease, so it is closed (1008) after that.
    opening_seconds: float = 30.0

    def __post_init__(self) -> None:
        if not (isinstance(self.opening_seconds, (int, float)) and self.opening_seconds > 0):
            raise ValueError(f"Limits.opening_seconds must be positive, got "
                             f"{self.opening_seconds!r}")
        for name in ("max_body_bytes", "max_json_depth", "offload_bytes",
                     "in_loop_operations"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")
