"""The vocabulary the core and the backends speak: requests (``Op`` and their payloads) and
replies (outcomes, descriptions, ``Failure``), and the one marker for a reply still owed.

A backend's reply to ``Op.STEP`` is a ``StepOutcome`` (or ``None`` / ``(info, final)`` once the
backend writes results in place, into the ``BatchBuffers`` it returned from ``attach``); any
reply may be a ``Failure``. This module decides nothing; it only names what travels.
"""

from __future__ import annotations

import enum
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "NO_REPLY", "BatchBuffers", "CallRequest", "EnvDescription", "Failure", "Op", "Remade",
    "ResetOutcome", "StepOutcome",
]

# What a sub-env step hands back: obs, reward, terminated, truncated, info, and for a
# same-step autoreset the ``{"final_obs": ..., "final_info": ...}`` entry (else ``None``).
StepOutcome = tuple[Any, Any, bool, bool, dict[str, Any], "dict[str, Any] | None"]


# What an explicit reset hands back: obs, info, and the env's ``np_random_seed`` afterwards.
ResetOutcome = tuple[Any, dict[str, Any], "int | None"]

# What a call asks of one sub-env: an attribute or method name, or a function taking the env
# first (it must pickle for the process and Ray backends); then the call's arguments.
CallRequest = tuple["str | Callable[..., Any]", tuple[Any, ...], dict[str, Any]]


class Op(enum.Enum):
    """The requests a sub-env host serves; the value is the phase named in errors."""

    MAKE = "make"
    RESET = "reset"
    STEP = "step"
    CALL = "call"
    SET_ATTR = "set_attr"
    #: The reset options queued for a sub-env's next episodes (``Autoreset.queue_options``).
    OPTIONS = "options"
    CLOSE = "close"

    # Members are singletons: hash them by identity, in C. Enum's own ``__hash__`` is a
    # Python call, paid on every dict lookup by op (a host dispatches each sub-env step so).
    __hash__ = object.__hash__


@dataclass(frozen=True)
class EnvDescription:
    """What the parent needs to know about a freshly made sub-env."""

    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    metadata: dict[str, Any]
    render_mode: str | None


@dataclass(frozen=True)
class Failure:
    """A sub-env raised while serving a request (a reply, not an exception)."""

    env_index: int
    phase: str
    exception: BaseException | None
    description: str
    traceback: str

    @classmethod
    def capture(cls, env_index: int, phase: str, exception: BaseException) -> Failure:
        """Record ``exception``, currently being handled, with its formatted traceback."""
        text = "".join(traceback.format_exception(type(exception), exception,
                                                  exception.__traceback__))
        return cls(env_index, phase, exception, f"{type(exception).__name__}: {exception}", text)


class _NoReply:
    """Marks a position in ``Pending.replies`` whose sub-env has not answered yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_REPLY"


NO_REPLY: Any = _NoReply()


@dataclass(frozen=True)
class BatchBuffers:
    """Arrays a backend's sub-envs write their results into directly (shared memory).

    With these, step replies are ``None`` or ``(info, final)`` and reset replies are
    ``(info, seed)``: observations, rewards and episode ends are already in place.
    """

    observations: Any
    rewards: np.ndarray[Any, np.dtype[np.float64]]
    terminations: np.ndarray[Any, np.dtype[np.bool_]]
    truncations: np.ndarray[Any, np.dtype[np.bool_]]


@dataclass(frozen=True)
class Remade:
    """What ``Backend.remake`` did: the sub-envs made afresh (more than asked for when they
    share a host) and those whose factory failed (their slots stay empty)."""

    env_indices: list[int]
    failures: list[Failure]
