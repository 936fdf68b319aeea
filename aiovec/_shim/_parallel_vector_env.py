"""``ParallelVectorEnv``: the synchronous face of ``AsyncParallelVectorEnv``.

For scripts, notebooks and training loops written in plain Python; the async core runs on a
private event loop in a background thread, as for ``aiovec.VectorEnv``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode

from aiovec._core._in_flight import USE_DEFAULT, InFlight, Timeout
from aiovec._core._restart import RestartPolicy
from aiovec._core._selection import ActorOptions
from aiovec._core._statistics import Statistics
from aiovec._exceptions import ClosedError
from aiovec._multiagent._packing import AgentID, ParallelEnvFactory
from aiovec._multiagent._vector_env import (
    AsyncParallelVectorEnv,
    MultiAgentStepResult,
    ParallelStepBatch,
)
from aiovec._shim._portal import LoopThread

__all__ = ["ParallelVectorEnv"]


class ParallelVectorEnv:
    """PettingZoo ``ParallelEnv`` sub-envs, vectorized, with blocking ``reset`` and ``step``.

    Takes ``AsyncParallelVectorEnv``'s arguments and returns what it returns (dicts of agents,
    each batched over the sub-envs; ``infos["active"]`` marks the agents present). Close it
    with ``close()`` or use it as a context manager.
    """

    def __init__(
        self,
        env_fns: Sequence[ParallelEnvFactory],
        *,
        backend: str = "auto",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        timeout: float | None = None,
        close_timeout: float = 10.0,
        restart: RestartPolicy | bool | int | None = None,
        max_concurrency: int | None = None,
        num_workers: int | None = None,
        start_method: str | None = None,
        address: str | None = None,
        actor_options: ActorOptions | None = None,
    ) -> None:
        self._env = AsyncParallelVectorEnv(
            env_fns, backend=backend, autoreset_mode=autoreset_mode, copy=copy,
            timeout=timeout, close_timeout=close_timeout, restart=restart,
            max_concurrency=max_concurrency, num_workers=num_workers,
            start_method=start_method, address=address, actor_options=actor_options)
        self.num_envs = self._env.num_envs
        self.closed = False
        self._stepping: InFlight | None = None
        self._loop = LoopThread()
        try:
            self._loop.run(self._env.start)
        except BaseException:
            self._loop.stop()
            self.closed = True
            raise
        self.possible_agents = self._env.possible_agents
        self.num_agents = self._env.num_agents
        self.total_agents = self._env.total_agents
        self.metadata = self._env.metadata

    @property
    def async_env(self) -> AsyncParallelVectorEnv:
        """The ``AsyncParallelVectorEnv`` this shim drives (await it only on the shim's loop)."""
        return self._env

    @property
    def backend_name(self) -> str:
        """The backend the sub-envs run on (``"auto"`` resolved)."""
        return self._env.backend_name

    def single_observation_space(self, agent: AgentID) -> spaces.Space[Any]:
        """One sub-env's observation space for ``agent``."""
        return self._env.single_observation_space(agent)

    def single_action_space(self, agent: AgentID) -> spaces.Space[Any]:
        """One sub-env's action space for ``agent``."""
        return self._env.single_action_space(agent)

    def observation_space(self, agent: AgentID) -> spaces.Space[Any]:
        """The batched observation space for ``agent``."""
        return self._env.observation_space(agent)

    def action_space(self, agent: AgentID) -> spaces.Space[Any]:
        """The batched action space for ``agent``."""
        return self._env.action_space(agent)

    def statistics(self) -> Statistics:
        """Counters and per-sub-env latency; see ``AsyncVectorEnv.statistics``."""
        return self._env.statistics()

    @property
    def unusable_envs(self) -> tuple[int, ...]:
        """Sub-envs that cannot step until reset."""
        return self._env.unusable_envs

    def __repr__(self) -> str:
        return (f"aiovec.ParallelVectorEnv(num_envs={self.num_envs}, "
                f"agents={list(self.possible_agents)}, backend={self.backend_name!r})")

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None,
              timeout: Timeout = USE_DEFAULT) -> tuple[dict[AgentID, Any], dict[Any, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``, else all) → ``(obs, infos)``."""
        self._check_open("reset")
        return self._loop.run(self._env.reset, seed=seed, options=options, timeout=timeout)

    def step(self, actions: Mapping[AgentID, Any], *,
             timeout: Timeout = USE_DEFAULT) -> MultiAgentStepResult:
        """Step every sub-env with ``{agent: batch of actions}``."""
        self._check_open("step")
        if self._stepping is not None:
            raise AlreadyPendingCallError("Calling `step` while waiting for a pending call to "
                                          "`step` to complete.", "step")
        return self._loop.run(self._env.step, actions, timeout=timeout)

    def step_async(self, actions: Mapping[AgentID, Any]) -> None:
        """Send the actions (checked first); collect the result with ``step_wait``."""
        self._check_open("step_async")
        if self._stepping is not None:
            raise AlreadyPendingCallError("Calling `step_async` while waiting for a pending "
                                          "call to `step` to complete.", "step")
        self._stepping = self._loop.run(self._env._submit_step, actions)

    def step_wait(self, timeout: float | None = None) -> MultiAgentStepResult:
        """Wait for ``step_async``: ``timeout`` seconds at most (``None``: the vector env's
        own deadline), then ``EnvTimeoutError``."""
        self._check_open("step_wait")
        if self._stepping is None:
            raise NoAsyncCallError("Calling `step_wait` without any prior call to "
                                   "`step_async`.", "step")
        stepping, self._stepping = self._stepping, None
        return self._loop.run(self._env._finish_step, stepping,
                              USE_DEFAULT if timeout is None else timeout)

    def send(self, actions: Mapping[AgentID, Any], env_ids: Any = None, *,
             timeout: float | None = None) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all); see
        ``AsyncParallelVectorEnv.send``."""
        self._check_open("send")
        self._loop.run(self._send, actions, env_ids, USE_DEFAULT if timeout is None else timeout)

    async def _send(self, actions: Mapping[AgentID, Any], env_ids: Any, timeout: Timeout) -> None:
        self._env.send(actions, env_ids, timeout=timeout)

    def recv(self, *, batch_size: int | None = None) -> ParallelStepBatch:
        """The first ``batch_size`` results to land; see ``AsyncParallelVectorEnv.recv``."""
        self._check_open("recv")
        return self._loop.run(self._env.recv, batch_size=batch_size)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every ``ParallelEnv`` (or read it, if not callable)."""
        self._check_open("call")
        return self._loop.run(self._env.call, name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read attribute ``name`` of every ``ParallelEnv``."""
        self._check_open("get_attr")
        return self._loop.run(self._env.get_attr, name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` on every ``ParallelEnv``: one value each, or one for all."""
        self._check_open("set_attr")
        self._loop.run(self._env.set_attr, name, values)

    def render(self) -> tuple[Any, ...]:
        """Each sub-env's rendered frame."""
        return self.call("render")

    def close(self) -> None:
        """Close the sub-envs and stop the loop thread. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if not self._loop.alive:  # the interpreter is shutting down
            self._env.close_nowait()
            return
        try:
            self._loop.run(self._env.aclose)
        finally:
            self._loop.stop()

    def __enter__(self) -> ParallelVectorEnv:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_loop"):
            self.close()

    def _check_open(self, method: str) -> None:
        if self.closed:
            raise ClosedError(f"cannot {method}: the ParallelVectorEnv was closed")
