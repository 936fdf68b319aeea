"""Where the sub-envs' results land, and how replies become a batch.

Two ways in, one batch out:

- in place (the process backend): the workers wrote observations, rewards and episode ends
  straight into the shared ``BatchBuffers``; a reply carries only ``info`` (and a same-step
  autoreset's ``final``);
- copied (every other backend): a reply is the whole ``StepOutcome``; each observation is
  kept per sub-env (``env_obs``) and concatenated into the batch array.

Either way the batch arrays are reused from step to step; ``AsyncVectorEnv`` hands the
caller copies unless ``copy=False``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from gymnasium.error import CustomSpaceError
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from aiovec._core._first_ready import StepBatch
from aiovec._core._infos import merge_info
from aiovec._core._observations import read_row, take_rows
from aiovec._core._requests import BatchBuffers
from aiovec._core._spaces import VectorSpaces

__all__ = ["BatchResults", "Restarts"]

#: Restarted sub-envs: ``{env_index: (reset reply or None, why)}``.
Restarts = dict[int, tuple[Any, str]]


class BatchResults:
    """The reusable batch arrays of one vector env, filled from its sub-envs' replies."""

    def __init__(self, spaces: VectorSpaces, buffers: BatchBuffers | None,
                 num_envs: int) -> None:
        self.num_envs = num_envs
        self.space = spaces.single_observation_space
        self.in_place = buffers is not None
        #: Each sub-env's ``np_random_seed`` as of its last reset.
        self.np_random_seeds: list[int | None] = [None] * num_envs
        if buffers is not None:  # the backend's sub-envs write straight into these
            self.observations: Any = buffers.observations
            self.rewards = buffers.rewards
            self.terminations = buffers.terminations
            self.truncations = buffers.truncations
            return
        self.observations = create_empty_array(self.space, num_envs, np.zeros)
        try:  # never-reset sub-envs show zeros until their first reset
            self.env_obs: list[Any] = list(iterate(spaces.observation_space,
                                                   self.observations))
        except CustomSpaceError:  # a space Gymnasium cannot batch into arrays
            self.env_obs = [None] * num_envs
        self.rewards = np.zeros(num_envs, dtype=np.float64)
        self.terminations = np.zeros(num_envs, dtype=np.bool_)
        self.truncations = np.zeros(num_envs, dtype=np.bool_)

    def drop(self) -> None:
        """Let go of the batch arrays, so shared memory can be unmapped when closing."""
        for name in ("observations", "env_obs", "rewards", "terminations", "truncations"):
            self.__dict__.pop(name, None)

    # ------------------------------------------------------------------ full batches

    def store_resets(self, env_indices: list[int], replies: list[Any],
                     healthy: range | list[int], out: Any = None) -> dict[str, Any]:
        """Keep the reset replies at positions ``healthy`` → the merged infos. ``out``: see
        ``batch_into``."""
        n = self.num_envs
        infos: dict[str, Any] = {}
        seeds = self.np_random_seeds
        if self.in_place:  # observations are in place; the replies are the infos
            for position in healthy:
                info, seed = replies[position]
                merge_info(infos, info, env_indices[position], n)
                seeds[env_indices[position]] = seed
        else:
            env_obs = self.env_obs
            for position in healthy:
                obs, info, seed = replies[position]
                env_index = env_indices[position]
                env_obs[env_index] = obs
                merge_info(infos, info, env_index, n)
                seeds[env_index] = seed
            self.batch_into(out)
        done = [env_indices[position] for position in healthy]
        self.terminations[done] = False
        self.truncations[done] = False
        return infos

    def store_steps(self, replies: list[Any], broken: dict[int, str],
                    out: Any = None) -> dict[str, Any]:
        """Batch the healthy step replies → the merged infos. Broken sub-envs keep their
        observation, with reward 0 and no episode end (a restart may then overwrite them).
        ``out``: see ``batch_into``."""
        n = self.num_envs
        infos: dict[str, Any] = {}
        if self.in_place:  # results are in place; a reply is None or (info, final)
            for env_index, reply in enumerate(replies):
                if reply is not None and env_index not in broken:
                    info, final = reply
                    if final is not None:
                        merge_info(infos, final, env_index, n)
                    if info:
                        merge_info(infos, info, env_index, n)
        elif broken:
            store = self._store
            for env_index, reply in enumerate(replies):
                if env_index in broken:
                    continue
                info, final = store(env_index, reply)
                if final is not None:
                    merge_info(infos, final, env_index, n)
                if info:
                    merge_info(infos, info, env_index, n)
        else:  # every sub-env answered: a column at a time (the hot path of thousands)
            observations, rewards, terminations, truncations, env_infos, finals = zip(*replies)
            self.env_obs[:] = observations
            self.rewards[:] = rewards
            self.terminations[:] = terminations
            self.truncations[:] = truncations
            if any(env_infos) or finals.count(None) < n:
                for env_index, (info, final) in enumerate(zip(env_infos, finals)):
                    if final is not None:
                        merge_info(infos, final, env_index, n)
                    if info:
                        merge_info(infos, info, env_index, n)
        if broken:
            self._zero(list(broken))
        if not self.in_place:
            self.batch_into(out)
        return infos

    def batch_into(self, out: Any) -> None:
        """Not in place: concatenate the sub-envs' observations into the batch array, or
        straight into ``out`` (the caller's buffer, checked) so that it is the only copy;
        every full batch is concatenated afresh, so the batch array is never read stale."""
        if out is None:
            self.observations = concatenate(self.space, self.env_obs, self.observations)
        else:
            concatenate(self.space, self.env_obs, out)

    def _store(self, env_index: int, reply: Any) -> tuple[Any, Any]:
        """Keep a sub-env's step outcome (not in place) → its ``(info, final)``."""
        obs, reward, terminated, truncated, info, final = reply
        self.env_obs[env_index] = obs
        self.rewards[env_index] = reward
        self.terminations[env_index] = terminated
        self.truncations[env_index] = truncated
        return info, final

    def _zero(self, env_indices: list[int]) -> None:
        self.rewards[env_indices] = 0.0
        self.terminations[env_indices] = False
        self.truncations[env_indices] = False

    def row(self, env_index: int) -> Any:
        """A private copy of sub-env ``env_index``'s current observation."""
        if self.in_place:
            return read_row(self.observations, env_index)
        return copy.deepcopy(self.env_obs[env_index])

    def apply_restarts(self, restarted: Restarts, previous: dict[int, Any],
                       infos: dict[str, Any], positions: dict[int, int] | None = None,
                       out: Any = None) -> None:
        """Restarted sub-envs: episode cut (``truncated``), reward 0, ``infos["restart"]``;
        in same-step mode their new episode's first observation, the old one in ``final_obs``.

        ``positions`` maps each to its row in a first-ready batch (else rows are env indices);
        the full batch of observations is then left alone. ``out``: see ``batch_into``.
        """
        n = self.num_envs if positions is None else len(positions)
        for env_index, (reply, reason) in restarted.items():
            row = env_index if positions is None else positions[env_index]
            self.rewards[env_index] = 0.0
            self.terminations[env_index] = False
            self.truncations[env_index] = True
            extra: dict[str, Any] = {"restart": reason}
            if reply is not None:  # same-step mode: the sub-env was reset too
                info, self.np_random_seeds[env_index] = reply[-2:]
                if not self.in_place:
                    self.env_obs[env_index] = reply[0]
                extra = {"final_obs": previous.get(env_index), "final_info": {}, **extra}
                merge_info(infos, info, row, n)
            merge_info(infos, extra, row, n)
        if positions is None and not self.in_place and any(
                reply is not None for reply, _ in restarted.values()):
            self.batch_into(out)

    # ------------------------------------------------------------------ first-ready batches

    def batch(self, env_ids: list[int], replies: list[Any], broken: dict[int, str],
              restarted: Restarts, previous: dict[int, Any],
              notes: dict[int, str]) -> StepBatch:
        """The first-ready batch of sub-envs ``env_ids`` (row ``i`` for ``env_ids[i]``);
        ``notes`` are restarts to report on a sub-env's next result (taken from it)."""
        size = len(env_ids)
        ids = np.array(env_ids, dtype=np.intp)
        infos: dict[str, Any] = {}
        for position, (env_index, reply) in enumerate(zip(env_ids, replies)):
            if env_index in restarted or env_index in broken:
                continue
            if self.in_place:
                info, final = (None, None) if reply is None else reply
            else:
                info, final = self._store(env_index, reply)
            if final is not None:
                merge_info(infos, final, position, size)
            if info:
                merge_info(infos, info, position, size)
            if notes and env_index in notes:
                merge_info(infos, {"restart": notes.pop(env_index)}, position, size)
        if broken:
            self._zero(list(broken))
        if restarted:
            positions = {env_index: position for position, env_index in enumerate(env_ids)}
            self.apply_restarts(restarted, previous, infos, positions)
        if self.in_place:
            observations = take_rows(self.observations, ids)
        else:
            buffer: Any = create_empty_array(self.space, size, np.zeros)
            observations = concatenate(self.space, [self.env_obs[env] for env in env_ids],
                                       buffer)
        return StepBatch(observations, self.rewards[ids], self.terminations[ids],
                         self.truncations[ids], infos, ids)
