"""``AsyncParallelVectorEnv``: PettingZoo ``ParallelEnv`` sub-envs on the same engine.

Each sub-env is hosted as a ``PackedParallelEnv`` by an ordinary ``AsyncVectorEnv``, so the
backends, shared memory, timeouts, cancellation, restarts and error types are exactly the
single-agent ones. This class only turns dicts of agents into the packed layout and back.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from aiovec._core._arguments import check_env_ids, check_recv_bounds
from aiovec._core._batching import batch_space, take_rows
from aiovec._core._first_ready import StepBatch, received_batches
from aiovec._core._in_flight import (
    START_TIMEOUT,
    USE_DEFAULT,
    InFlight,
    Timeout,
    checked_timeout,
)
from aiovec._core._options import DEFAULTS, ParallelOptions, takes_options
from aiovec._core._statistics import Statistics
from aiovec._core._vector_env import AsyncVectorEnv, StepResult
from aiovec._exceptions import EnvTimeoutError, SubEnvErrorGroup
from aiovec._multiagent._packing import AgentID, PackedParallelEnv, ParallelEnvFactory

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AsyncParallelVectorEnv", "MultiAgentStepResult", "ParallelStepBatch"]

AgentArrays = dict[AgentID, np.ndarray[Any, Any]]
#: ``(observations, rewards, terminations, truncations, infos)``, each a dict of agents.
MultiAgentStepResult = tuple[dict[AgentID, Any], AgentArrays, AgentArrays, AgentArrays,
                             dict[Any, Any]]



class ParallelStepBatch(NamedTuple):
    """What the multi-agent ``recv`` returns: each field a dict of agents (as ``step``'s),
    row ``i`` for sub-env ``env_ids[i]``; unpacks like ``step``'s 5-tuple plus the ids."""

    observations: dict[AgentID, Any]
    rewards: AgentArrays
    terminations: AgentArrays
    truncations: AgentArrays
    infos: dict[Any, Any]
    env_ids: np.ndarray[Any, np.dtype[np.intp]]


_BACKENDS = ("auto", "inline", "thread", "process", "ray")
_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED)


class AsyncParallelVectorEnv:
    """Runs ``len(env_fns)`` PettingZoo ``ParallelEnv`` sub-envs behind an awaitable API.

    Everything is batched per agent: ``obs[agent]`` has shape ``(num_envs, *obs_shape)``,
    ``rewards[agent]``, ``terminations[agent]`` and ``truncations[agent]`` shape
    ``(num_envs,)``; ``step`` takes ``{agent: (num_envs, *action_shape)}``. ``infos["active"]``
    (``{agent: bool array}``) says which agents are present in each sub-env's result; an absent
    agent (dead, not spawned yet) reads as zeros, reward 0, not terminated, not truncated, and
    its actions are ignored (and may be left out). ``infos[agent]`` holds the agents' own infos,
    merged as Gymnasium merges infos (``_key`` masks).

    A sub-env's episode ends when no agent is left (or every agent that answered is done);
    it is then reset on its next step (``AutoresetMode.NEXT_STEP``: that step's actions are
    ignored and its rewards are 0) or left for ``reset(options={"reset_mask": ...})``
    (``DISABLED``). ``backend``, ``timeout``, ``restart`` and the other keywords are
    ``aiovec.AsyncVectorEnv``'s; a restarted sub-env's agents read as truncated.
    """

    @takes_options(ParallelOptions)
    def __init__(self, env_fns: Sequence[ParallelEnvFactory],
                 **options: Unpack[ParallelOptions]) -> None:
        backend = options.get("backend", DEFAULTS["backend"])
        if backend not in _BACKENDS:
            raise ValueError(f"backend {backend!r} cannot host ParallelEnv sub-envs; "
                             f"choose one of {', '.join(_BACKENDS)}")
        mode = options["autoreset_mode"] = AutoresetMode(
            options.get("autoreset_mode", DEFAULTS["autoreset_mode"]))
        if mode not in _MODES:
            raise ValueError(
                f"autoreset_mode {mode.value!r} is not offered for multi-agent envs: its "
                "observations would belong to the new episode while rewards and the active "
                "mask belong to the old one; use AutoresetMode.NEXT_STEP or DISABLED")
        candidate: object = env_fns
        if isinstance(candidate, (str, bytes)) or not isinstance(candidate, Sequence):
            raise TypeError(f"env_fns must be a sequence of callables, got {type(env_fns)}")
        for index, env_fn in enumerate(env_fns):
            if not callable(env_fn):
                raise TypeError(f"env_fns[{index}] is {type(env_fn).__name__}, not a callable "
                                "that makes a ParallelEnv")
        self._env = AsyncVectorEnv(
            [functools.partial(PackedParallelEnv, env_fn) for env_fn in env_fns], **options)
        self.num_envs: int = self._env.num_envs
        self.autoreset_mode = mode
        self._possible_agents: tuple[AgentID, ...] | None = None
        self._agent_observation_spaces: dict[AgentID, spaces.Space[Any]] = {}
        self._agent_action_spaces: dict[AgentID, spaces.Space[Any]] = {}
        self._batched_observation_spaces: dict[AgentID, spaces.Space[Any]] = {}
        self._batched_action_spaces: dict[AgentID, spaces.Space[Any]] = {}
        #: Which agents act in which sub-env on the next step (their actions are required).
        self._acting: AgentArrays = {}
        self._idle_actions: dict[AgentID, np.ndarray[Any, Any]] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, timeout: float | None = START_TIMEOUT) -> None:
        """Make every sub-env; ``reset`` does it on first use, ``async with`` up front."""
        if self._possible_agents is not None:
            return
        await self._env.start(timeout=timeout)
        everyone = await self._env.get_attr("possible_agents")
        agents = tuple(everyone[0])
        for index, others in enumerate(everyone):
            if tuple(others) != agents:
                await self._env.aclose()
                raise ValueError(f"sub-env {index} has possible_agents {list(others)}, "
                                 f"sub-env 0 has {list(agents)}: they must agree")
        if "active" in agents:
            await self._env.aclose()
            raise ValueError("an agent is named 'active', which infos['active'] uses")
        packed = self._env.single_observation_space
        actions = self._env.single_action_space
        assert isinstance(packed, spaces.Dict)
        assert isinstance(actions, spaces.Dict)
        observations = packed["observations"]
        assert isinstance(observations, spaces.Dict)
        self._agent_observation_spaces = {agent: observations[agent] for agent in agents}
        self._agent_action_spaces = {agent: actions[agent] for agent in agents}
        self._idle_actions = {agent: _idle_batch(space, self.num_envs)
                              for agent, space in self._agent_action_spaces.items()}
        self._acting = {agent: np.zeros(self.num_envs, dtype=np.bool_) for agent in agents}
        self._possible_agents = agents

    async def aclose(self) -> None:
        """Close every sub-env and release the workers. Idempotent."""
        await self._env.aclose()

    def close_nowait(self) -> None:
        """Tear everything down without waiting (for ``__del__`` and emergencies)."""
        self._env.close_nowait()

    @property
    def _how_to_close(self) -> str:
        """What the warning of one left open says to do (a sync shim says its own)."""
        return self._env._how_to_close

    @_how_to_close.setter
    def _how_to_close(self, advice: str) -> None:
        self._env._how_to_close = advice

    async def __aenter__(self) -> AsyncParallelVectorEnv:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, traceback: TracebackType | None) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        """True once ``aclose`` ran (or start failed)."""
        return self._env.closed

    def __repr__(self) -> str:
        agents = "" if self._possible_agents is None else f" x {len(self._possible_agents)} agents"
        return (f"<AsyncParallelVectorEnv {self.num_envs} envs{agents}, "
                f"{self._env.backend_name} backend>")

    # ------------------------------------------------------------------ description

    @property
    def vector_env(self) -> AsyncVectorEnv:
        """The single-agent engine underneath (packed observations; for diagnostics)."""
        return self._env

    @property
    def backend_name(self) -> str:
        """The backend the sub-envs run on (``"auto"`` resolved)."""
        return self._env.backend_name

    @property
    def backend_reason(self) -> str:
        """Why they run there (what ``"auto"`` measured, or that the backend was given)."""
        return self._env.backend_reason

    @property
    def possible_agents(self) -> tuple[AgentID, ...]:
        """Every agent that may appear, in the sub-envs' order (known once started)."""
        return self._started()

    @property
    def num_agents(self) -> int:
        """``len(possible_agents)``."""
        return len(self._started())

    @property
    def total_agents(self) -> int:
        """Agents over all sub-envs: ``num_envs * num_agents``."""
        return self.num_envs * self.num_agents

    def single_observation_space(self, agent: AgentID) -> spaces.Space[Any]:
        """One sub-env's observation space for ``agent``."""
        return self._agent_observation_spaces[self._known(agent)]

    def single_action_space(self, agent: AgentID) -> spaces.Space[Any]:
        """One sub-env's action space for ``agent``."""
        return self._agent_action_spaces[self._known(agent)]

    def observation_space(self, agent: AgentID) -> spaces.Space[Any]:
        """The batched observation space for ``agent``: ``num_envs`` rows; the same object at
        every call (PettingZoo's API requires it: its ``seed`` and ``sample`` keep state)."""
        batched = self._batched_observation_spaces.get(agent)
        if batched is None:
            batched = batch_space(self.single_observation_space(agent), self.num_envs)
            self._batched_observation_spaces[agent] = batched
        return batched

    def action_space(self, agent: AgentID) -> spaces.Space[Any]:
        """The batched action space for ``agent``: ``num_envs`` rows; the same object at
        every call, so ``action_space(agent).seed(s)`` fixes its later ``sample()``s."""
        batched = self._batched_action_spaces.get(agent)
        if batched is None:
            batched = batch_space(self.single_action_space(agent), self.num_envs)
            self._batched_action_spaces[agent] = batched
        return batched

    @property
    def metadata(self) -> dict[str, Any]:
        """The first sub-env's metadata."""
        return self._env.metadata

    def statistics(self) -> Statistics:
        """Counters and per-sub-env latency; see ``AsyncVectorEnv.statistics``."""
        return self._env.statistics()

    @property
    def unusable_envs(self) -> tuple[int, ...]:
        """Sub-envs that cannot step until reset; see ``AsyncVectorEnv.unusable_envs``."""
        return self._env.unusable_envs

    def _started(self) -> tuple[AgentID, ...]:
        if self._possible_agents is None:
            raise RuntimeError("the agents are known once the vector env has started: "
                               "await start() (or reset(), or use `async with`) first")
        return self._possible_agents

    def _known(self, agent: AgentID) -> AgentID:
        if agent not in self._agent_observation_spaces:
            raise KeyError(f"{agent!r} is not one of possible_agents {list(self._started())}")
        return agent

    # ------------------------------------------------------------------ the API

    async def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> tuple[dict[AgentID, Any], dict[Any, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``, else all) → ``(obs, infos)``."""
        await self.start()
        try:
            result = await self._env.reset(seed=seed, options=options, timeout=timeout)
        except (SubEnvErrorGroup, EnvTimeoutError) as error:
            if error.partial_result is not None:
                error.partial_result = self._unpack_reset(error.partial_result, options)
            raise
        return self._unpack_reset(result, options)

    async def step(self, actions: Mapping[AgentID, Any], *,
                   timeout: Timeout = USE_DEFAULT) -> MultiAgentStepResult:
        """Step every sub-env with ``{agent: batch of actions}``; see the class docstring.

        Errors are the single-agent ones; their ``partial_result`` is in this layout too.
        """
        timeout = checked_timeout(timeout)  # before anything is sent
        return await self._finish_step(await self._submit_step(actions), timeout)

    async def _submit_step(self, actions: Mapping[AgentID, Any]) -> InFlight:
        """Check and send a step (the shim's ``step_async``)."""
        return await self._env._submit_step(self._full_actions(actions))

    async def _finish_step(self, in_flight: InFlight, timeout: Timeout) -> MultiAgentStepResult:
        """Collect a step sent by ``_submit_step`` (the shim's ``step_wait``)."""
        try:
            result = await self._env._finish_step(in_flight, timeout)
        except (SubEnvErrorGroup, EnvTimeoutError) as error:
            if error.partial_result is not None:
                error.partial_result = self._unpack_step(error.partial_result,
                                                         failed=list(error.env_ids))
            raise
        return self._unpack_step(result)

    def _unpack_reset(self, result: tuple[Any, dict[str, Any]],
                      options: dict[str, Any] | None) -> tuple[dict[AgentID, Any], dict[Any, Any]]:
        packed, infos = result
        active = self._ordered(packed["active"])
        mask = None if options is None else options.get("reset_mask")
        rows = slice(None) if mask is None else np.asarray(mask, dtype=np.bool_)
        for agent, acting in self._acting.items():
            acting[rows] = active[agent][rows]
        infos["active"] = active
        return self._ordered(packed["observations"]), infos

    def _unpack_step(self, result: StepResult | StepBatch, failed: Sequence[int] = (),
                     env_ids: np.ndarray[Any, Any] | None = None) -> MultiAgentStepResult:
        """The per-agent step result of every sub-env, or of ``env_ids`` (a ``recv`` batch,
        row ``i`` for sub-env ``env_ids[i]``); ``failed`` sub-envs (of an error's
        ``partial_result``) hold their last observation with reward 0 and no episode end, as
        single-agent ones do.

        The packed result of a failed or restarted sub-env is the last one it returned: its
        rewards, ends and active mask belong to the step before, so they are replaced here.
        The agents present at a cut are those still in the episode (acting), not those of
        the last result, which may include one that ended in it.
        """
        packed, _, terminated, truncated, infos = result[:5]
        rows: Any = slice(None) if env_ids is None else env_ids
        rewards = self._ordered(packed["rewards"])
        terminations = self._ordered(packed["terminations"])
        truncations = self._ordered(packed["truncations"])
        active = self._ordered(packed["active"])
        stale = np.zeros(len(terminated), dtype=np.bool_)
        if failed:
            stale[[int(np.flatnonzero(env_ids == env_id)[0]) if env_ids is not None
                   else env_id for env_id in failed
                   if env_ids is None or env_id in env_ids]] = True
        restarted = infos.get("_restart")
        cut = (truncated & restarted) if restarted is not None else np.zeros_like(stale)
        if (stale | cut).any():
            for agent, acting in self._acting.items():
                was = acting[rows]
                rewards[agent][stale | cut] = 0.0
                terminations[agent][stale | cut] = False
                truncations[agent][stale] = False
                truncations[agent][cut] = was[cut]  # a restart cut their episode
                active[agent][stale | cut] = was[stale | cut]
        reset_next = self.autoreset_mode is AutoresetMode.NEXT_STEP
        for agent, acting in self._acting.items():
            now = np.logical_and(active[agent], ~(terminations[agent] | truncations[agent]))
            if reset_next:
                now &= ~(terminated | truncated)
            acting[rows] = now
        infos["active"] = active
        return (self._ordered(packed["observations"]), rewards, terminations, truncations,
                infos)

    # ------------------------------------------------------------------ first-ready batches

    def send(self, actions: Mapping[AgentID, Any], env_ids: Any = None, *,
             timeout: Timeout = USE_DEFAULT) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) with ``{agent: one row per
        sub-env of env_ids}`` and return at once; ``recv`` collects the first to finish.
        As ``AsyncVectorEnv.send``: checked before anything is sent, ``timeout`` per sub-env.
        """
        ids = check_env_ids(env_ids, self.num_envs)
        self._env.send(self._full_actions(actions, ids), ids, timeout=timeout)

    async def recv(self, *, batch_size: int | None = None, min_size: int | None = None,
                   wait: float | None = None) -> ParallelStepBatch:
        """The per-agent results of the first sub-envs to finish since ``send``, at most
        ``batch_size``, within ``min_size`` and ``wait`` as ``AsyncVectorEnv.recv``;
        failures, timeouts and restarts as ``step`` reports them."""
        try:
            batch = await self._env.recv(batch_size=batch_size, min_size=min_size, wait=wait)
        except (SubEnvErrorGroup, EnvTimeoutError) as error:
            partial = error.partial_result
            if isinstance(partial, StepBatch):
                error.partial_result = ParallelStepBatch(
                    *self._unpack_step(partial, list(error.env_ids), partial.env_ids),
                    partial.env_ids)
            raise
        return ParallelStepBatch(*self._unpack_step(batch, env_ids=batch.env_ids),
                                 batch.env_ids)

    async def batches(self, *, batch_size: int | None = None, min_size: int | None = None,
                      wait: float | None = None, follow: bool = False,
                      ) -> AsyncIterator[ParallelStepBatch]:
        """``recv`` batches as they complete, until nothing sent is left to receive (with
        ``follow=True``, until the vector env closes); see ``AsyncVectorEnv.batches``."""
        env = self._env
        env._engine.check_not_closed("receive batches from")
        check_recv_bounds(batch_size, min_size, wait, default_batch_size=env.batch_size,
                          num_envs=env.num_envs)
        # Closed with this generator (left early, in aclosing): trio wants every one closed.
        async with aclosing(received_batches(
                functools.partial(self.recv, batch_size=batch_size, min_size=min_size,
                                  wait=wait), env._engine.owing,
                env._engine.until_owed if follow else None)) as received:
            async for batch in received:
                yield batch

    def abort(self, env_ids: Any) -> None:
        """Cancel sub-envs' outstanding first-ready steps; see ``AsyncVectorEnv.abort``."""
        self._env.abort(env_ids)

    @property
    def max_in_flight(self) -> int | None:
        """At most this many sub-envs step at once among first-ready sends; settable. See
        ``AsyncVectorEnv.max_in_flight``."""
        return self._env.max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._env.max_in_flight = value

    @property
    def num_stepping(self) -> int:
        """How many sub-envs sent an action are stepping now."""
        return self._env.num_stepping

    @property
    def num_queued(self) -> int:
        """How many sub-envs sent an action wait for room under ``max_in_flight``."""
        return self._env.num_queued

    @property
    def num_ready(self) -> int:
        """How many results landed and wait for ``recv``."""
        return self._env.num_ready

    def _ordered(self, by_agent: dict[AgentID, Any]) -> dict[AgentID, Any]:
        """``by_agent`` in ``possible_agents`` order (spaces.Dict sorts its keys)."""
        return {agent: by_agent[agent] for agent in self._started()}

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every ``ParallelEnv`` (or read it, if not callable)."""
        return await self._env.call(name, *args, **kwargs)

    async def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read attribute ``name`` of every ``ParallelEnv``."""
        return await self._env.get_attr(name)

    async def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` on every ``ParallelEnv``: one value each, or one for all."""
        await self._env.set_attr(name, values)

    async def render(self) -> tuple[Any, ...]:
        """Each sub-env's rendered frame."""
        return await self._env.render()

    # ------------------------------------------------------------------ actions

    def _full_actions(self, actions: Mapping[AgentID, Any],
                      env_ids: list[int] | None = None) -> dict[AgentID, Any]:
        """Every agent's batch (for the sub-envs ``env_ids``, default all): an agent acting
        in none of them may be left out (placeholders stand in)."""
        if not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a dict of agents, got {type(actions).__name__}")
        unknown = [agent for agent in actions if agent not in self._acting]
        if unknown:
            raise ValueError(f"actions for {unknown!r}, not in possible_agents "
                             f"{list(self._started())}")
        if len(actions) == len(self._acting):
            return dict(actions)
        full = dict(actions)
        rows: Any = slice(None) if env_ids is None else env_ids
        for agent, acting in self._acting.items():
            if agent not in full:
                if acting[rows].any():
                    where = np.flatnonzero(acting)
                    if env_ids is not None:
                        where = np.intersect1d(where, env_ids)
                    raise ValueError(f"actions: no actions for {agent!r}, which acts in "
                                     f"sub-envs {where.tolist()}")
                full[agent] = take_rows(self._idle_actions[agent], rows,
                                        self._agent_action_spaces[agent])
        return full


def _idle_batch(space: spaces.Space[Any], num_envs: int) -> Any:
    """A batch of actions that stands in for an agent that acts nowhere."""
    batched = batch_space(space, num_envs)
    if isinstance(batched, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.zeros(batched.shape, dtype=batched.dtype)
    return batched.sample()
