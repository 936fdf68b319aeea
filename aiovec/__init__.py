"""aiovec: many Gymnasium environments behind one awaitable vector env.

``AsyncVectorEnv`` is the async core; ``VectorEnv`` is its drop-in synchronous shim (a real
``gymnasium.vector.VectorEnv``); ``make_vec`` / ``make_async_vec`` build them from an env id.
"""

from aiovec._core._async_env import AsyncEnv as AsyncEnv
from aiovec._core._first_ready import StepBatch as StepBatch
from aiovec._core._restart import RestartPolicy as RestartPolicy
from aiovec._core._statistics import LatencySummary as LatencySummary
from aiovec._core._statistics import Statistics as Statistics
from aiovec._core._vector_env import AsyncVectorEnv as AsyncVectorEnv
from aiovec._exceptions import AiovecError as AiovecError
from aiovec._exceptions import BusyError as BusyError
from aiovec._exceptions import ClosedError as ClosedError
from aiovec._exceptions import EnvTimeoutError as EnvTimeoutError
from aiovec._exceptions import NothingSentError as NothingSentError
from aiovec._exceptions import NotStartedError as NotStartedError
from aiovec._exceptions import ResetNeededError as ResetNeededError
from aiovec._exceptions import SerializationError as SerializationError
from aiovec._exceptions import SubEnvError as SubEnvError
from aiovec._exceptions import SubEnvErrorGroup as SubEnvErrorGroup
from aiovec._exceptions import WorkerDiedError as WorkerDiedError
from aiovec._make import make_async_vec as make_async_vec
from aiovec._make import make_vec as make_vec
from aiovec._make import register_envs as register_envs
from aiovec._multiagent._vector_env import AsyncParallelVectorEnv as AsyncParallelVectorEnv
from aiovec._shim._parallel_vector_env import ParallelVectorEnv as ParallelVectorEnv
from aiovec._shim._vector_env import VectorEnv as VectorEnv

__version__ = "0.1.0"

__all__ = (
    "AiovecError",
    "AsyncEnv",
    "AsyncParallelVectorEnv",
    "AsyncVectorEnv",
    "BusyError",
    "ClosedError",
    "EnvTimeoutError",
    "LatencySummary",
    "NotStartedError",
    "NothingSentError",
    "ParallelVectorEnv",
    "ResetNeededError",
    "RestartPolicy",
    "SerializationError",
    "Statistics",
    "StepBatch",
    "SubEnvError",
    "SubEnvErrorGroup",
    "VectorEnv",
    "WorkerDiedError",
    "make_async_vec",
    "make_vec",
    "register_envs",
)

# Report the public names as aiovec's own: shorter tracebacks, stable pickles.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
