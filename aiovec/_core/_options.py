"""The vector envs' keywords, declared once: each one's name, type, default and meaning.

Every vector env takes the ``SharedOptions``; the single-agent ones add ``batch_size`` and
``validate_actions`` (``VectorOptions``: what the sync ``VectorEnv`` takes by keyword besides
Gymnasium's own arguments); ``AsyncVectorEnv`` takes them all (``AsyncVectorOptions``), the
multi-agent vector envs the shared ones and ``autoreset_mode`` and ``copy``
(``ParallelOptions``). A constructor takes ``**options`` of its set and passes them on, so a
new keyword is one line here and its default in ``DEFAULTS``; ``takes_options`` gives each
constructor the signature ``help()`` and ``inspect`` show (every keyword by name, with its
default) and refuses a keyword outside its set, as Python refuses an unknown one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final, TypedDict, TypeVar, cast

from gymnasium.vector import AutoresetMode

from aiovec._core._restart import RestartPolicy
from aiovec._core._selection import ActorOptions
from aiovec._core._spaces import ObservationMode
from aiovec._limits._limit import Limit

__all__ = ["DEFAULTS", "AsyncVectorOptions", "ParallelOptions", "SharedOptions",
           "VectorOptions", "takes_options", "with_defaults"]


class _Options(TypedDict, total=False):
    """(The root of the keyword sets: the API reference shows each set with what it
    inherits only when no set derives from ``TypedDict`` itself.)"""


class SharedOptions(_Options, total=False):
    """The keywords every vector env of aiovec takes (``AsyncVectorEnv`` says more)."""

    backend: str
    """Where the sub-envs run: ``"auto"`` (default: picked for you), ``"inline"``,
    ``"thread"``, ``"process"``, ``"async"`` or ``"ray"``."""
    timeout: float | None
    """The default deadline of every call, in seconds (each call also takes ``timeout=``);
    ``None`` (default) or ``inf``: none. A bool, NaN, zero or a negative is refused."""
    close_timeout: float
    """Seconds closing waits for the sub-envs to close before ending them (default 10)."""
    restart: RestartPolicy | bool | int | None
    """Recreate sub-envs that raise, hang or die: a ``RestartPolicy``, ``True`` (its
    defaults) or an int (the most restarts); ``None`` (default): errors are raised."""
    max_concurrency: int | None
    """At most this many sub-envs execute at once (Gymnasium's meaning); ``None`` (default):
    no cap."""
    max_in_flight: int | None
    """At most this many sub-envs step at once among first-ready sends (``send``); sends
    past it wait in a queue, and their deadline starts when they are dispatched. Settable
    later (``envs.max_in_flight``); ``None`` (default): no cap."""
    num_workers: int | None
    """Worker processes (process backend) or actors (Ray) hosting the sub-envs; ``None``
    (default): one per usable CPU."""
    start_method: str | None
    """The process backend's start method: ``"forkserver"``, ``"spawn"`` or ``"fork"``;
    ``None`` (default): ``"forkserver"`` where there is one (Linux), else ``"spawn"``."""
    parent_worker: bool | None
    """Process backend: the last worker is a thread of this process instead of a process
    (default ``None``: not, unless the environment sets ``AIOVEC_PARENT_WORKER=1``)."""
    address: str | None
    """Ray: the cluster to join, unless Ray is initialised already (default ``None``: Ray's
    own choice)."""
    actor_options: ActorOptions | None
    """Ray: options for the actors (resources, scheduling strategy, placement group, ...),
    one mapping for all or one per actor, passed to Ray unchanged (default ``None``)."""


class _EpisodeOptions(_Options, total=False):
    autoreset_mode: str | AutoresetMode
    """When a sub-env whose episode ended is reset: Gymnasium's ``AutoresetMode`` (default
    ``NEXT_STEP``)."""
    copy: bool
    """Return a copy of the observations (default); ``False``: the reused batch buffer."""


class VectorOptions(SharedOptions, total=False):
    """The keywords of the single-agent vector envs (the sync ``VectorEnv`` takes these by
    keyword, and Gymnasium's ``copy``, ``observation_mode`` and ``autoreset_mode`` in
    Gymnasium's positions too)."""

    batch_size: int | None
    """How many results ``recv`` returns by default (first-ready batches); ``None``
    (default): every sub-env's."""
    validate_actions: bool
    """Refuse any action outside the action space (``ValueError``) before anything is sent,
    not only a wrong batch size, shape or dtype (default ``False``)."""
    episode_timeout: float | None
    """Seconds an episode may last, from the start of its reset (default ``None``: no limit).
    A step that ends past it is truncated, with ``infos["episode_timeout"]`` set (the env's
    own truncations do not set it); on the async backend a step still running then is
    cancelled and returns the latest observation. A step that was running when the time ran
    out also has ``infos["step_in_flight"]``: the seconds it had run by then. The sub-env then
    resets as after any truncation."""
    episode_options: Callable[[int], dict[str, Any] | None] | None
    """A task per episode: a function of a sub-env's index giving the reset options of its
    next episode (``None``: none), for every reset not given options of its own, automatic
    resets included. Called once per episode, as the episode before it takes its first step
    (an automatic reset happens where the sub-env runs); the options are named in
    ``infos["episode_options"]`` on the rows that start and end each episode (default
    ``None``: no such function)."""
    limits: Mapping[str, Limit] | None
    """Named shared limits the sub-envs take with ``aiovec.limit(name)`` from inside their
    calls (``{"sandbox": aiovec.Limit(concurrency=64, rate=500)}``), one line per name for
    every sub-env of this vector env, across its worker processes and actors too (default
    ``None``: none)."""


class AsyncVectorOptions(VectorOptions, _EpisodeOptions, total=False):
    """Every keyword ``AsyncVectorEnv`` takes."""

    observation_mode: ObservationMode
    """How sub-envs' observation spaces batch, as Gymnasium's: ``"same"`` (default),
    ``"different"``, or a ``(single, batched)`` pair of spaces."""


class ParallelOptions(SharedOptions, _EpisodeOptions, total=False):
    """The keywords of the multi-agent vector envs. Not ``observation_mode`` (agents'
    observations are packed per agent), ``batch_size`` (first-ready batches are sized per
    ``recv``) nor ``validate_actions`` (action values are not checked per agent yet)."""


#: Each keyword's default.
DEFAULTS: Final[AsyncVectorOptions] = {
    "backend": "auto", "timeout": None, "close_timeout": 10.0, "restart": None,
    "max_concurrency": None, "max_in_flight": None, "num_workers": None, "start_method": None,
    "parent_worker": None, "address": None, "actor_options": None,
    "batch_size": None, "validate_actions": False, "limits": None, "episode_timeout": None,
    "episode_options": None,
    "autoreset_mode": AutoresetMode.NEXT_STEP, "copy": True, "observation_mode": "same",
}

Init = TypeVar("Init", bound=Callable[..., None])


def _signature(init: Callable[..., None], options: type) -> inspect.Signature:
    """``init``'s signature with ``**options`` spelt out: one keyword-only parameter per
    key, with its default (a key without one fails here, at import)."""
    given = inspect.signature(init).parameters.values()
    annotations: dict[str, Any] = options.__annotations__
    spelt = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                               default=DEFAULTS[name],  # type: ignore[literal-required]
                               annotation=getattr(annotation, "__forward_arg__", annotation))
             for name, annotation in annotations.items()]
    return inspect.Signature([*(parameter for parameter in given
                                if parameter.kind is not parameter.VAR_KEYWORD), *spelt])


def takes_options(options: type) -> Callable[[Init], Init]:
    """For an ``__init__(self, ..., **options: Unpack[X])``, with ``options`` being ``X``:
    its signature names each keyword of ``X`` with its default, and a keyword that is
    neither ``X``'s nor a named parameter raises ``TypeError`` as Python's own check does."""
    accepted = frozenset(options.__annotations__)

    def decorate(init: Init) -> Init:
        signature = _signature(init, options)
        named = frozenset(signature.parameters)

        @functools.wraps(init)
        def checked(*args: Any, **kwargs: Any) -> None:
            for name in kwargs:
                if name not in accepted and name not in named:
                    raise TypeError(f"{init.__qualname__}() got an unexpected keyword "
                                    f"argument {name!r}")
            init(*args, **kwargs)

        cast(Any, checked).__signature__ = signature
        return cast(Init, checked)

    return decorate


def with_defaults(options: AsyncVectorOptions) -> AsyncVectorOptions:
    """``options`` with the default of every keyword not given."""
    return {**DEFAULTS, **options}
