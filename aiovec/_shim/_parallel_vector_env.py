"""``ParallelVectorEnv``: the synchronous face of ``AsyncParallelVectorEnv``.

For scripts, notebooks and training loops written in plain Python; the async core runs on a
private event loop, driven as for ``aiovec.VectorEnv`` (``_loop_driver``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gymnasium import spaces

from aiovec._core._in_flight import USE_DEFAULT, Timeout
from aiovec._core._options import ParallelOptions, takes_options
from aiovec._multiagent._packing import AgentID, ParallelEnvFactory
from aiovec._multiagent._vector_env import (
    AsyncParallelVectorEnv,
    MultiAgentStepResult,
    ParallelStepBatch,
)
from aiovec._shim._sync_face import SyncFace

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ParallelVectorEnv"]


class ParallelVectorEnv(SyncFace[Mapping[AgentID, Any], MultiAgentStepResult,
                                 ParallelStepBatch]):
    """PettingZoo ``ParallelEnv`` sub-envs, vectorized, with blocking ``reset`` and ``step``.

    Takes ``AsyncParallelVectorEnv``'s arguments and returns what it returns (dicts of agents,
    each batched over the sub-envs; ``infos["active"]`` marks the agents present). Close it
    with ``close()`` or use it as a context manager.
    """

    _env: AsyncParallelVectorEnv

    @takes_options(ParallelOptions)
    def __init__(self, env_fns: Sequence[ParallelEnvFactory],
                 **options: Unpack[ParallelOptions]) -> None:
        env = AsyncParallelVectorEnv(env_fns, **options)
        self.num_envs = env.num_envs
        super().__init__(env)
        self.possible_agents = env.possible_agents
        self.num_agents = env.num_agents
        self.total_agents = env.total_agents
        self.metadata = env.metadata

    @property
    def async_env(self) -> AsyncParallelVectorEnv:
        """The ``AsyncParallelVectorEnv`` this shim drives (await it only on the shim's loop)."""
        return self._env

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

    def __repr__(self) -> str:
        return (f"aiovec.ParallelVectorEnv(num_envs={self.num_envs}, "
                f"agents={list(self.possible_agents)}, backend={self.backend_name!r})")

    # step_async, step_wait, send, recv, call, get_attr, set_attr and render are SyncFace's.

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None,
              timeout: Timeout = USE_DEFAULT) -> tuple[dict[AgentID, Any], dict[Any, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``, else all) → ``(obs, infos)``."""
        self._begin("reset")
        return self._loop.run(self._env.reset, seed=seed, options=options, timeout=timeout)

    def step(self, actions: Mapping[AgentID, Any], *,
             timeout: Timeout = USE_DEFAULT) -> MultiAgentStepResult:
        """Step every sub-env with ``{agent: batch of actions}``."""
        self._begin("step")
        return self._loop.run(self._env.step, actions, timeout=timeout)

    def close(self) -> None:
        """Close the sub-envs and the event loop; a pending ``step_async`` is waited
        for first (up to the construction ``timeout``). Idempotent."""
        if self.closed:
            return
        try:
            self._shut_down()
        finally:
            self.closed = True

    def __enter__(self) -> ParallelVectorEnv:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
