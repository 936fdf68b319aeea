"""``VectorEnv``: a real ``gymnasium.vector.VectorEnv`` that drives an ``AsyncVectorEnv``.

It is a drop-in for ``gymnasium.vector.AsyncVectorEnv``: the same constructor, the same
``*_async``/``*_wait`` pairs and error types, plus aiovec's ``backend`` and ``timeout``.
The async core runs on a private event loop, in the caller's thread during each call, even
where that thread runs an event loop already (notebooks, async web handlers: the call borrows
the blocked thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector import VectorEnv as GymVectorEnv

from aiovec._core._engine import PausedStep
from aiovec._core._first_ready import StepBatch
from aiovec._core._options import VectorOptions, takes_options
from aiovec._core._seeding import ResetOptions
from aiovec._core._spaces import ObservationMode
from aiovec._core._vector_env import AsyncVectorEnv, EnvFactory, StepResult
from aiovec._shim._sync_face import SyncFace

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["VectorEnv"]


class VectorEnv(SyncFace[Any, StepResult, StepBatch],
                GymVectorEnv[Any, Any, np.ndarray[Any, Any]]):
    """A synchronous vector env over aiovec's async core; a drop-in for Gymnasium's.

    Takes Gymnasium's ``AsyncVectorEnv`` arguments (``context`` is the process backend's start
    method, also accepted as SB3's ``start_method``; workers are always daemonic and shared
    memory is used whenever the spaces allow; ``max_concurrency`` caps how many sub-envs
    execute at once, as in Gymnasium) and ``aiovec.AsyncVectorEnv``'s keywords
    (``VectorOptions``: ``backend``, ``timeout``, ``restart``, ...). A ``timeout=None`` in
    a ``*_wait`` call means the construction ``timeout``. ``send``/``recv`` offer first-ready
    batches, as EnvPool's do.
    """

    _env: AsyncVectorEnv

    @takes_options(VectorOptions)
    def __init__(
        self,
        env_fns: Sequence[EnvFactory],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: None = None,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        **options: Unpack[VectorOptions],
    ) -> None:
        if worker is not None:
            raise ValueError("aiovec runs its own sub-env hosts: "
                             "a custom `worker` is not supported")
        start_method = options.get("start_method")
        if start_method is not None and context is not None and start_method != context:
            raise ValueError(f"context={context!r} and start_method={start_method!r} are two "
                             "names for the process backend's start method: pass one")
        context = options["start_method"] = context if context is not None else start_method
        self.shared_memory = shared_memory
        self.context = context
        self.daemon = daemon
        self.env_fns = env_fns
        env = AsyncVectorEnv(env_fns, copy=copy, observation_mode=observation_mode,
                             autoreset_mode=autoreset_mode, **options)
        self.num_envs = env.num_envs
        self.copy = copy
        self.observation_mode = observation_mode
        self.autoreset_mode = env.autoreset_mode
        super().__init__(env)
        #: What the shim calls in the thread it runs in (``_steps_here``) or to finish the
        #: halves of a call it started on the loop.
        self._engine = env._engine
        #: Steps run in this thread with no event loop (the backend serves in the caller).
        self._steps_here = env._engine.steps_here
        self.single_observation_space = env.single_observation_space
        self.observation_space = env.observation_space
        self.single_action_space = env.single_action_space
        self.action_space = env.action_space
        self.metadata = env.metadata
        self.render_mode = env.render_mode

    @property
    def async_env(self) -> AsyncVectorEnv:
        """The ``AsyncVectorEnv`` this shim drives (await it only on the shim's own loop)."""
        return self._env

    def __repr__(self) -> str:
        env_id = "" if self.spec is None else f"{self.spec.id}, "
        return f"aiovec.VectorEnv({env_id}num_envs={self.num_envs}, backend={self.backend_name!r})"

    # ------------------------------------------------------------------ gymnasium's API
    # step_async, step_wait, send, recv, get_attr, set_attr and render are SyncFace's.

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: ResetOptions = None,
        out: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs and return the batched observations and infos; ``out`` as for
        ``step``."""
        self._begin("reset")
        return self._loop.run(self._env.reset, seed=seed, options=options, out=out)

    def reset_async(
        self,
        seed: int | list[int | None] | None = None,
        options: ResetOptions = None,
    ) -> None:
        """Start resetting the sub-envs; collect the result with ``reset_wait``."""
        self._start("reset", self._env._submit_reset, seed, options)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for ``reset_async``; ``timeout`` seconds at most (``EnvTimeoutError``)."""
        return self._loop.run(self._engine.finish_reset, *self._wait("reset", timeout))

    def step(self, actions: Any, *, out: Any = None) -> StepResult:
        """Step every sub-env and return the batched results.

        ``out``: your own buffer for the observations (exactly the batched shape and dtype,
        e.g. preallocated pinned memory), filled with one copy and returned as the
        observations; a wrong one raises before any sub-env steps (``AsyncVectorEnv.step``).
        """
        self._begin("step")
        if not self._steps_here:
            return self._loop.run(self._env.step, actions, out=out)
        # Waited for in this thread (inline: run here), with no event loop unless something
        # must be awaited (a restart).
        # Ctrl-C in the step or as it ended: its sub-envs moved unseen (interrupted_step).
        engine = self._engine
        outcome = self._loop.call(engine.step_here, actions, out,
                                  interrupted=engine.interrupted_step)
        if not isinstance(outcome, PausedStep):
            return outcome
        try:
            return self._loop.run(outcome.resume)
        finally:
            engine.drop_paused(outcome)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` on every sub-env (or read it, if not callable)."""
        # As Gymnasium's AsyncVectorEnv does: one call_async/call_wait pair.
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start calling ``name`` on every sub-env; collect the results with ``call_wait``."""
        self._start("call", self._env._submit_call, name, args, kwargs)

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for ``call_async``; ``timeout`` seconds at most (``EnvTimeoutError``)."""
        return self._loop.run(self._engine.finish_call, *self._wait("call", timeout))

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each sub-env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # Gymnasium's AsyncVectorEnv has no setter either
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each sub-env's random generator."""
        return self.get_attr("np_random")

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the sub-envs and the event loop; a pending call is waited for first.

        ``terminate=True`` skips waiting for a pending call; either way closing is bounded
        by the ``close_timeout`` given at construction.
        """
        self._shut_down(timeout, terminate)

    def __enter__(self) -> VectorEnv:
        """``with aiovec.VectorEnv(...) as envs:`` closes the sub-envs on the way out."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
