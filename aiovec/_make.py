"""``make_vec`` and ``make_async_vec``: vector envs from a registered id, like Gymnasium's;
``register_envs``: ids through which ``gymnasium.make_vec`` itself builds aiovec vector envs."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from aiovec._core._vector_env import AsyncVectorEnv
from aiovec._shim._vector_env import VectorEnv

__all__ = ["BACKEND_OF_MODE", "make_async_vec", "make_vec", "register_envs"]

Wrapper = Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]


class _EnvMaker:
    """A picklable factory: ``gym.make(spec, **kwargs)`` wrapped by ``wrappers`` in order."""

    def __init__(self, spec: EnvSpec, kwargs: dict[str, Any], wrappers: Sequence[Wrapper]) -> None:
        self.spec = spec
        self.kwargs = kwargs
        self.wrappers = tuple(wrappers)

    def __call__(self) -> gym.Env[Any, Any]:
        env = gym.make(self.spec, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


def _factories(
    env_id: str | EnvSpec, num_envs: int, wrappers: Sequence[Wrapper] | None,
    env_kwargs: dict[str, Any],
) -> tuple[list[_EnvMaker], EnvSpec]:
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    spec = env_id if isinstance(env_id, EnvSpec) else gym.spec(env_id)
    if spec.entry_point is None:
        raise gym.error.Error(f"Cannot create vectorized environment for {spec.id} because it "
                              "doesn't have an entry point defined.")
    maker = _EnvMaker(spec, dict(env_kwargs), wrappers or ())
    return [maker] * num_envs, spec


def _vector_spec(
    spec: EnvSpec, num_envs: int, env_kwargs: dict[str, Any],
    vector_kwargs: dict[str, Any], wrappers: Sequence[Wrapper] | None, mode: str,
) -> EnvSpec:
    """The spec Gymnasium's ``make_vec`` would attach, recording how the vector env was built."""
    vector_spec = copy.deepcopy(spec)
    vector_spec.kwargs = dict(env_kwargs)
    if num_envs != 1:
        vector_spec.kwargs["num_envs"] = num_envs
    vector_spec.kwargs["vectorization_mode"] = mode
    if vector_kwargs:
        vector_spec.kwargs["vector_kwargs"] = vector_kwargs
    if wrappers:
        vector_spec.kwargs["wrappers"] = wrappers
    return vector_spec


#: What each of Gymnasium's vectorization modes means on aiovec: the backend that does what
#: Gymnasium's vector env of that mode does (``None``: aiovec's own choice, ``"auto"`` unless
#: ``vector_kwargs`` name one).
BACKEND_OF_MODE: dict[str, str | None] = {"sync": "inline", "async": "process"}
_VECTOR_ENTRY_POINT = "vector_entry_point"


def _mode(vectorization_mode: Any) -> str | None:
    """``vectorization_mode`` as a string (a ``gymnasium.VectorizeMode`` gives its value);
    ``ValueError`` for anything but Gymnasium's modes, before any sub-env starts."""
    if vectorization_mode is None:
        return None
    value = getattr(vectorization_mode, "value", vectorization_mode)
    valid = [*BACKEND_OF_MODE, _VECTOR_ENTRY_POINT]
    if value not in valid:
        raise ValueError(f"Invalid vectorization mode: {vectorization_mode!r}, "
                         f"valid modes: {valid}")
    return str(value)


def _vector_options(mode: str | None, vector_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``vector_kwargs`` with the backend the mode stands for; one that names another backend
    contradicts the mode and is refused."""
    options = dict(vector_kwargs or {})
    backend = BACKEND_OF_MODE.get(mode) if mode is not None else None
    if backend is not None:
        given = options.setdefault("backend", backend)
        if given != backend:
            raise ValueError(f"vectorization_mode={mode!r} runs the sub-envs on the {backend!r} "
                             f"backend; vector_kwargs asks for backend={given!r}: give one "
                             "or the other")
    return options


@overload
def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: Literal["sync", "async"] | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] | None = None,
    **kwargs: Any,
) -> VectorEnv: ...


@overload
def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: Any = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] | None = None,
    **kwargs: Any,
) -> gym.vector.VectorEnv: ...


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: Any = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] | None = None,
    **kwargs: Any,
) -> gym.vector.VectorEnv:
    """``gymnasium.make_vec``'s arguments, in its order, returning aiovec's sync ``VectorEnv``.

    ``vectorization_mode``: ``None`` (aiovec picks the backend: ``"auto"``), ``"sync"`` (the
    sub-envs step in your thread, one after another, as in ``SyncVectorEnv``: the ``"inline"``
    backend), ``"async"`` (in worker processes, as in Gymnasium's ``AsyncVectorEnv``: the
    ``"process"`` backend), or ``"vector_entry_point"`` (the env's own vector implementation,
    exactly what ``gymnasium.make_vec`` gives in that mode; aiovec's for ``register_envs``
    ids). ``gymnasium.VectorizeMode`` members work too; anything else raises ``ValueError``
    before any sub-env starts. ``vector_kwargs`` go to ``VectorEnv`` (e.g. ``{"backend":
    "thread", "timeout": 5}``); ``wrappers`` wrap each sub-env in order; other keywords go to
    ``gymnasium.make``.
    """
    mode = _mode(vectorization_mode)
    if mode == _VECTOR_ENTRY_POINT:
        gym_wrappers: Any = wrappers  # Gymnasium types them as returning its Wrapper class
        return gym.make_vec(id, num_envs, mode, vector_kwargs, gym_wrappers, **kwargs)
    return _make_shim(id, num_envs, mode, vector_kwargs, wrappers, kwargs)


def _make_shim(id: str | EnvSpec, num_envs: int, mode: str | None,
               vector_kwargs: dict[str, Any] | None, wrappers: Sequence[Wrapper] | None,
               kwargs: dict[str, Any]) -> VectorEnv:
    """``make_vec`` in a mode that gives aiovec's ``VectorEnv``."""
    options = _vector_options(mode, vector_kwargs)
    factories, spec = _factories(id, num_envs, wrappers, kwargs)
    envs = VectorEnv(factories, **options)
    envs.spec = _vector_spec(spec, num_envs, kwargs, options, wrappers, mode or "async")
    return envs


def make_async_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: Literal["sync", "async"] | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] | None = None,
    **kwargs: Any,
) -> AsyncVectorEnv:
    """Like ``make_vec`` but returns an (unstarted) ``AsyncVectorEnv``: use ``async with``.
    ``"vector_entry_point"`` is refused: the env's own vector implementation is not async."""
    mode = _mode(vectorization_mode)
    if mode == _VECTOR_ENTRY_POINT:
        raise ValueError("make_async_vec builds an aiovec.AsyncVectorEnv: "
                         "vectorization_mode='vector_entry_point' (the env's own vector "
                         "implementation) is gymnasium.make_vec's, or aiovec.make_vec's")
    options = _vector_options(mode, vector_kwargs)
    factories, spec = _factories(id, num_envs, wrappers, kwargs)
    envs = AsyncVectorEnv(factories, **options)
    envs.spec = _vector_spec(spec, num_envs, kwargs, options, wrappers, mode or "async")
    return envs


#: The vector keywords, defined once (by ``AsyncVectorEnv``'s signature): the shims, the
#: multi-agent vector env and ``make_vec`` take the same names with the same defaults
#: (``tests/test_architecture.py`` checks them against this).
VECTOR_KEYWORDS: frozenset[str] = frozenset(
    name for name, parameter in inspect.signature(AsyncVectorEnv.__init__).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY)
#: Gymnasium's ``AsyncVectorEnv`` spellings the shim also takes (``context`` is
#: ``start_method``; ``shared_memory`` and ``daemon`` are accepted, processes always share
#: memory and die with the parent).
_GYMNASIUM_SPELLINGS = frozenset({"context", "shared_memory", "daemon"})
#: ``VectorEnv`` keywords that ``gymnasium.make_vec(id, n, **kwargs)`` may pass through an id
#: made by ``register_envs`` (every other keyword goes to the sub-envs' ``gymnasium.make``).
_VECTOR_OPTIONS = VECTOR_KEYWORDS | _GYMNASIUM_SPELLINGS


def _make_registered(env_id: str, num_envs: int = 1, **kwargs: Any) -> VectorEnv:
    """The vector entry point of a ``register_envs`` id (``gymnasium.make_vec`` calls it)."""
    vector_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in _VECTOR_OPTIONS}
    return _make_shim(env_id, num_envs, None, vector_kwargs, None, kwargs)


def register_envs(*env_ids: str, namespace: str = "aiovec") -> list[str]:
    """Register ``"{namespace}/{name}"`` for each Gymnasium id (default: every id registered
    now), so ``gymnasium.make_vec("aiovec/CartPole-v1", 8, backend="process")`` returns an
    ``aiovec.VectorEnv``: its vector entry point is aiovec's, its sub-envs the original id's.

    Keywords of ``VectorEnv`` (``backend``, ``timeout``, ``restart``, ...) given to
    ``gymnasium.make_vec`` configure the vector env; the others go to each sub-env. Returns the
    new ids; registering an id again is a no-op.
    """
    registry = gym.envs.registration.registry
    originals = env_ids or tuple(env_id for env_id, spec in registry.items()
                                 if spec.namespace != namespace and spec.entry_point)
    registered = []
    for env_id in originals:
        spec = gym.spec(env_id)
        name = spec.name if spec.namespace is None else f"{spec.namespace}-{spec.name}"
        new_id = f"{namespace}/{name}" + ("" if spec.version is None else f"-v{spec.version}")
        if new_id not in registry:
            gym.register(
                id=new_id, entry_point=spec.entry_point,
                vector_entry_point=functools.partial(_make_registered, spec.id),
                reward_threshold=spec.reward_threshold, nondeterministic=spec.nondeterministic,
                max_episode_steps=spec.max_episode_steps, order_enforce=spec.order_enforce,
                disable_env_checker=spec.disable_env_checker, kwargs=dict(spec.kwargs),
            )
        registered.append(new_id)
    return registered
