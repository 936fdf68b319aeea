"""Choosing a backend by name, and loading it lazily (an optional dependency such as Ray is
imported only when its backend is used). The core names backends by module path only, so
``aiovec._core`` never imports ``aiovec._backends``: the dependency runs one way."""

from __future__ import annotations

import importlib
import logging
import math
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiovec._core._async_env import CoroutineEnvError, makes_async_envs
from aiovec._core._probe import Workload, measure_workload

if TYPE_CHECKING:
    from aiovec._core._backend import Backend

__all__ = ["BACKEND_NAMES", "COROUTINE_ENVS_FOUND", "ActorOptions", "BackendChoice",
           "BackendSelection", "choose_by_measuring", "choose_by_workload", "load_backend",
           "resolve_backend_name", "rule_of_thumb", "usable_cpus"]

logger = logging.getLogger("aiovec")

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
    "parent_worker": ("process",),
    "max_concurrency": ("async", "thread", "inline", "process", "ray"),
    "address": ("ray",),
    "actor_options": ("ray",),
    "limits": ("async", "thread", "inline", "process", "ray"),
}
PROCESS_OPTIONS = ("num_workers", "start_method", "parent_worker")
RAY_OPTIONS = ("address", "actor_options")


@dataclass(frozen=True)
class BackendChoice:
    """What ``backend="auto"`` picked, and why (``AsyncVectorEnv.backend_reason``)."""

    name: str
    reason: str
    #: Estimated seconds per vector step on each backend the rule weighed.
    estimates: Mapping[str, float] = field(default_factory=dict)


def _processes_available() -> bool:
    return os.name == "posix" and bool(
        {"forkserver", "spawn"} & set(multiprocessing.get_all_start_methods()))


def resolve_backend_name(name: str, env_fns: Sequence[Any], options: dict[str, Any]) -> str:
    """Pick the concrete backend for ``name``, ``"auto"`` by ``rule_of_thumb``; refuse
    options the backend does not take."""
    if name == "auto":
        name = rule_of_thumb(env_fns, options).name
    if name not in _REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    for key, backends in BACKEND_OPTIONS.items():
        if options.get(key) is not None and name not in backends:
            raise ValueError(f"{key} applies to the {_listed(backends)} backend"
                             f"{'s' if len(backends) > 1 else ''}, not {name!r}")
    return name


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def rule_of_thumb(env_fns: Sequence[Any], options: dict[str, Any]) -> BackendChoice:
    """``"auto"`` before it measures anything (docs/guide/backends.md has the whole rule).

    ``"async"`` when the factories are ``AsyncEnv`` classes; else ``"ray"`` when Ray options
    were given; else ``"process"`` when process options were given, or when there are at
    least two sub-envs, at least two usable CPUs, and the platform can start workers (the
    probe may then pick another); else ``"thread"``.
    """
    if makes_async_envs(env_fns[0]):
        return BackendChoice("async", "the factories make coroutine envs (aiovec.AsyncEnv)")
    if any(options.get(key) is not None for key in RAY_OPTIONS):
        return BackendChoice("ray", "Ray options (address, actor_options) were given")
    if any(options.get(key) is not None for key in PROCESS_OPTIONS):
        return BackendChoice("process", "process options (num_workers, start_method) were given")
    if len(env_fns) < 2:
        return BackendChoice("thread", "one sub-env: no worker process pays for itself")
    if usable_cpus() < 2:
        return BackendChoice("thread", "one usable CPU: worker processes cannot run in parallel")
    if not _processes_available():
        return BackendChoice("thread", "this platform cannot start worker processes")
    return BackendChoice("process", "at least two sub-envs and two usable CPUs")


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


# What a sub-env step costs each backend beyond the step itself, in seconds (measured on the
# machine of the README's benchmark; only their order of magnitude matters to the choice).
#: A hop to the sub-env's thread and back (thread backend).
THREAD_HOP = 25e-6
#: Bookkeeping per sub-env on the inline backend, and per sub-env inside a worker.
INLINE_PER_ENV = 1.3e-6
PROCESS_PER_ENV = 1.0e-6
#: Copying one observation byte once (into a batch, or out of shared memory).
COPY_PER_BYTE = 1.6e-11


#: What ``"auto"`` switches to when a start finds coroutine envs made by plain callables.
COROUTINE_ENVS_FOUND = BackendChoice(
    "async", "the sub-envs turned out to be coroutine envs (async def step)")


def estimate_step_seconds(workload: Workload, num_envs: int, cpus: int,
                          max_concurrency: int | None) -> dict[str, float]:
    """Seconds per vector step of ``num_envs`` such sub-envs on the inline, thread and
    process backends: the cost model behind ``choose_by_workload``.

    Inline steps them one after another. Threads overlap the waiting part of their steps
    (``max_concurrency`` at a time) but not the CPU part (the GIL), and each step pays a hop.
    Each of ``min(cpus, max_concurrency)`` workers steps its share one after another, the
    vector step pays one round trip, and observations are copied out of shared memory.
    """
    # Waiting for a CPU (a busy machine) counts as computing: threads cannot overlap it.
    step, computing = workload.step_seconds, workload.step_seconds - workload.waiting_seconds
    copy = workload.observation_bytes * COPY_PER_BYTE
    concurrent = min(num_envs, max_concurrency or num_envs)
    workers = max(1, min(num_envs, cpus, max_concurrency or num_envs))
    return {
        "inline": num_envs * (step + INLINE_PER_ENV + 2 * copy),
        "thread": (max(math.ceil(num_envs / concurrent) * step, num_envs * computing)
                   + num_envs * (THREAD_HOP + 2 * copy)),
        "process": (workload.round_trip_seconds
                    + math.ceil(num_envs / workers) * (step + PROCESS_PER_ENV + copy)
                    + num_envs * copy),
    }


def choose_by_workload(workload: Workload, num_envs: int, *, cpus: int | None = None,
                       max_concurrency: int | None = None,
                       timeout: float | None = None) -> BackendChoice:
    """The backend ``"auto"`` runs these sub-envs on, from what the probe measured.

    The cheapest estimate wins, but the process backend (which isolates crashes and can end
    a hung sub-env) keeps the sub-envs unless another backend is at least 10 % faster, and
    the inline backend, which cannot interrupt a hung step, is never picked when the vector
    env has a ``timeout``.
    """
    cpus = cpus or usable_cpus()
    estimates = estimate_step_seconds(workload, num_envs, cpus, max_concurrency)
    candidates = {name: seconds for name, seconds in estimates.items()
                  if not (name == "inline" and timeout is not None)}
    best = min(candidates, key=candidates.__getitem__)
    if candidates[best] > candidates["process"] / 1.1:
        best = "process"
    shown = ", ".join(f"{name} {seconds * 1e3:.3g} ms" for name, seconds in estimates.items())
    reason = f"measured one sub-env: {workload.describe()}; estimated per vector step: {shown}"
    return BackendChoice(best, reason, estimates)


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


async def choose_by_measuring(env_fn: Callable[[], Any], rule: BackendChoice, num_envs: int, *,
                              max_concurrency: int | None,
                              timeout: float | None) -> BackendChoice:
    """Step one instance of ``env_fn`` aside (``measure_workload``), then pick by the cost
    model. If measuring fails, ``rule`` stands and says why, unless the failure shows
    coroutine envs (``"async"`` then)."""
    try:
        workload = await measure_workload(env_fn)
    except Exception as error:
        if any(isinstance(cause, CoroutineEnvError) for cause in _causes(error)):
            return COROUTINE_ENVS_FOUND
        root = _root_cause(error)
        return BackendChoice(rule.name, f"{rule.reason}; measuring a sub-env failed "
                             f"({type(root).__name__}: {root}), so the rule of thumb stands")
    return choose_by_workload(workload, num_envs, max_concurrency=max_concurrency,
                              timeout=timeout)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, the errors it groups, and what caused each of them."""
    stack = [error]
    while stack:
        error = stack.pop()
        yield error
        stack.extend(getattr(error, "exceptions", ()))
        if error.__cause__ is not None:
            stack.append(error.__cause__)


def _root_cause(error: BaseException) -> BaseException:
    """What went wrong first: the first grouped error's cause, not the group around it."""
    while True:
        grouped = getattr(error, "exceptions", ())
        if grouped:
            error = grouped[0]
        elif error.__cause__ is not None:
            error = error.__cause__
        else:
            return error


class BackendSelection:
    """Which backend hosts a vector env's sub-envs and why; with ``"auto"``, settled at start.

    ``"auto"`` starts from ``rule_of_thumb``. Where that says ``"process"`` and the caller
    pinned nothing, ``settle`` measures a sub-env first; where it says anything but
    ``"async"``, a start that finds coroutine envs switches to ``"async"``.
    """

    def __init__(self, backend: str, env_fns: Sequence[Any], options: dict[str, Any],
                 autoreset_mode: Any) -> None:
        choice = (rule_of_thumb(env_fns, options) if backend == "auto"
                  else BackendChoice(backend, f"backend={backend!r} was given"))
        self.name = resolve_backend_name(choice.name, env_fns, options)
        self.reason = choice.reason
        self.options = {key: value for key, value in options.items() if value is not None}
        self._env_fns = list(env_fns)
        self._autoreset_mode = autoreset_mode
        # "auto" stays free to choose (and to switch) with options every backend takes.
        free = backend == "auto" and all(
            set(BACKEND_OPTIONS.get(key, _REGISTRY)) == set(_REGISTRY) for key in self.options)
        #: "auto" could not tell coroutine envs made by plain callables: start finds out.
        self.may_switch_to_async = free and self.name != "async"
        self._measure = free and self.name == "process"
        if backend == "auto" and not self._measure:
            self._log()

    def make(self) -> Backend:
        """A backend instance of the chosen kind (nothing started)."""
        options = self.options
        if self.name == "process" and self.may_switch_to_async:
            # Coroutine envs met there make "auto" switch to the async backend (as anywhere
            # else) rather than run on worker processes, which only an explicit choice does.
            options = {**options, "hosts_coroutines": False}
        return load_backend(self.name)(self._env_fns, self._autoreset_mode, **options)

    async def settle(self, num_envs: int, timeout: float | None) -> bool:
        """Measure a sub-env if "auto" still has to; True if the backend changed."""
        if not self._measure:
            return False
        self._measure = False
        return self.switch(await choose_by_measuring(
            self._env_fns[0], BackendChoice(self.name, self.reason), num_envs,
            max_concurrency=self.options.get("max_concurrency"), timeout=timeout))

    def switch(self, choice: BackendChoice) -> bool:
        """Take ``choice`` (before any sub-env was made); True if the backend changed."""
        changed = choice.name != self.name
        self.name, self.reason = choice.name, choice.reason
        self.may_switch_to_async = self.may_switch_to_async and choice.name != "async"
        self._log()
        return changed

    def _log(self) -> None:
        logger.info("backend='auto' picked %r for %d sub-envs: %s", self.name,
                    len(self._env_fns), self.reason)
