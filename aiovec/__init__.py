"""aiovec: many Gymnasium environments behind one awaitable vector env.

``AsyncVectorEnv`` is the async core; ``VectorEnv`` is its drop-in synchronous shim (a real
``gymnasium.vector.VectorEnv``); ``make_vec`` / ``make_async_vec`` build them from an env id.
"""

import importlib as _importlib
import typing as _typing

from aiovec._exceptions import AiovecError as AiovecError
from aiovec._exceptions import BusyError as BusyError
from aiovec._exceptions import ClosedError as ClosedError
from aiovec._exceptions import EnvTimeoutError as EnvTimeoutError
from aiovec._exceptions import FailureBudgetError as FailureBudgetError
from aiovec._exceptions import LimitError as LimitError
from aiovec._exceptions import NothingSentError as NothingSentError
from aiovec._exceptions import NotStartedError as NotStartedError
from aiovec._exceptions import RemoteError as RemoteError
from aiovec._exceptions import ResetNeededError as ResetNeededError
from aiovec._exceptions import SerializationError as SerializationError
from aiovec._exceptions import ServerGoneError as ServerGoneError
from aiovec._exceptions import SubEnvError as SubEnvError
from aiovec._exceptions import SubEnvErrorGroup as SubEnvErrorGroup
from aiovec._exceptions import WorkerDiedError as WorkerDiedError
from aiovec._object_space import ObjectSpace as ObjectSpace

if _typing.TYPE_CHECKING:  # loaded on first use (below): see _LAZY
    from aiovec._core._async_env import AsyncEnv as AsyncEnv
    from aiovec._core._cleanups import CleanupHandle as CleanupHandle
    from aiovec._core._cleanups import register_cleanup as register_cleanup
    from aiovec._core._episodes import EpisodeCounts as EpisodeCounts
    from aiovec._core._episodes import episode_outcomes as episode_outcomes
    from aiovec._core._first_ready import StepBatch as StepBatch
    from aiovec._core._restart import RestartPolicy as RestartPolicy
    from aiovec._core._statistics import LatencySummary as LatencySummary
    from aiovec._core._statistics import Statistics as Statistics
    from aiovec._core._vector_env import AsyncVectorEnv as AsyncVectorEnv
    from aiovec._limits._limit import Limit as Limit
    from aiovec._limits._limit import LimitUsage as LimitUsage
    from aiovec._limits._take import LimitHold as LimitHold
    from aiovec._limits._take import limit as limit
    from aiovec._make import make_async_vec as make_async_vec
    from aiovec._make import make_vec as make_vec
    from aiovec._make import register_envs as register_envs
    from aiovec._multiagent._vector_env import AsyncParallelVectorEnv as AsyncParallelVectorEnv
    from aiovec._multiagent._vector_env import ParallelStepBatch as ParallelStepBatch
    from aiovec._shim._parallel_vector_env import ParallelVectorEnv as ParallelVectorEnv
    from aiovec._shim._vector_env import VectorEnv as VectorEnv

__version__ = "0.1.0"

__all__ = (
    "AiovecError",
    "AsyncEnv",
    "AsyncParallelVectorEnv",
    "AsyncVectorEnv",
    "BusyError",
    "CleanupHandle",
    "ClosedError",
    "EnvTimeoutError",
    "EpisodeCounts",
    "FailureBudgetError",
    "LatencySummary",
    "Limit",
    "LimitError",
    "LimitHold",
    "LimitUsage",
    "NotStartedError",
    "NothingSentError",
    "ObjectSpace",
    "ParallelStepBatch",
    "ParallelVectorEnv",
    "RemoteError",
    "ResetNeededError",
    "RestartPolicy",
    "SerializationError",
    "ServerGoneError",
    "Statistics",
    "StepBatch",
    "SubEnvError",
    "SubEnvErrorGroup",
    "VectorEnv",
    "WorkerDiedError",
    "episode_outcomes",
    "limit",
    "make_async_vec",
    "make_vec",
    "register_cleanup",
    "register_envs",
)

#: The public names loaded on first use, and their modules. A worker process imports aiovec's
#: worker module, which runs this file; loading the event-loop side here (asyncio, anyio, the
#: shim's thread, ...) would cost every worker ~0.1 s of start-up for nothing.
_LAZY = {
    "AsyncEnv": "aiovec._core._async_env",
    "register_cleanup": "aiovec._core._cleanups",
    "CleanupHandle": "aiovec._core._cleanups",
    "EpisodeCounts": "aiovec._core._episodes",
    "episode_outcomes": "aiovec._core._episodes",
    "StepBatch": "aiovec._core._first_ready",
    "RestartPolicy": "aiovec._core._restart",
    "LatencySummary": "aiovec._core._statistics",
    "Statistics": "aiovec._core._statistics",
    "AsyncVectorEnv": "aiovec._core._vector_env",
    "Limit": "aiovec._limits._limit",
    "LimitUsage": "aiovec._limits._limit",
    "LimitHold": "aiovec._limits._take",
    "limit": "aiovec._limits._take",
    "make_async_vec": "aiovec._make",
    "make_vec": "aiovec._make",
    "register_envs": "aiovec._make",
    "AsyncParallelVectorEnv": "aiovec._multiagent._vector_env",
    "ParallelStepBatch": "aiovec._multiagent._vector_env",
    "ParallelVectorEnv": "aiovec._shim._parallel_vector_env",
    "VectorEnv": "aiovec._shim._vector_env",
}


def _report_as_public(name: str) -> None:
    """Shorter tracebacks and stable pickles: public names report ``aiovec`` as their module."""
    globals()[name].__module__ = __name__


def _load_public_api() -> None:
    """Load every lazy name at once, so all of them report ``aiovec`` from then on."""
    for name, module in _LAZY.items():
        globals()[name] = getattr(_importlib.import_module(module), name)
        _report_as_public(name)


if not _typing.TYPE_CHECKING:  # for type checkers every name is imported above

    def __getattr__(name: str) -> _typing.Any:
        if name in _LAZY:
            _load_public_api()
            return globals()[name]
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


for _name in __all__:
    if _name not in _LAZY:
        _report_as_public(_name)
del _name
