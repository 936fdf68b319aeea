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

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium.error import CustomSpaceError
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from aiovec._core._batching import concatenate_afresh, concatenate_into, copy_batch, take_rows
from aiovec._core._first_ready import StepBatch
from aiovec._core._infos import PackedInfos, merge_info, splice_infos
from aiovec._core._observations import copy_observations, misfit_failure, read_row
from aiovec._core._requests import BatchBuffers, Failure
from aiovec._core._spaces import VectorSpaces

__all__ = ["BatchResults", "Restarts"]

#: Restarted sub-envs: ``{env_index: (reset reply or None, why)}``.
Restarts = dict[int, tuple[Any, str]]


class BatchResults:
    """The reusable batch arrays of one vector env, filled from its sub-envs' replies."""

    def __init__(self, spaces: VectorSpaces, buffers: BatchBuffers | None,
                 num_envs: int, copy: bool = True) -> None:
        self.num_envs = num_envs
        self.space = spaces.single_observation_space
        #: First-ready batches hand the caller copies of the objects the sub-envs returned
        #: (the vector env's ``copy``; arrays are new in every batch anyway): ``copy_batch``.
        self.copy = copy
        self.in_place = buffers is not None
        #: Each sub-env's ``np_random_seed`` as of its last reset.
        self.np_random_seeds: list[int | None] = [None] * num_envs
        #: The sub-envs whose observation did not fit the batch in the last ``store_*`` (not
        #: in place: a worker refuses those itself), each failed by name.
        self.misfits: list[Failure] = []
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
            observations = list(self.env_obs)
            for position in healthy:
                observations[env_indices[position]] = replies[position][0]
            self._batch("reset", observations, [env_indices[p] for p in healthy], out)
            refused = {failure.env_index for failure in self.misfits}
            for position in healthy:
                env_index = env_indices[position]
                if env_index not in refused:
                    _, info, seeds[env_index] = replies[position]
                    merge_info(infos, info, env_index, n)
        done = [env_indices[position] for position in healthy]
        self.terminations[done] = False
        self.truncations[done] = False
        return infos

    def store_steps(self, replies: list[Any], broken: dict[int, str],
                    out: Any = None,
                    packed: Sequence[tuple[int, PackedInfos]] = ()) -> dict[str, Any]:
        """Batch the healthy step replies → the merged infos. Broken sub-envs keep their
        observation, with reward 0 and no episode end (a restart may then overwrite them);
        so do those whose observation does not fit the batch (``misfits``). ``out``: see
        ``batch_into``. ``packed``: infos merged by the hosts of runs of sub-envs (in place
        only), ``(first sub-env, infos)``, spliced in where those sub-envs come."""
        n = self.num_envs
        infos: dict[str, Any] = {}
        if self.in_place:  # results are in place; a reply is None or (info, final)
            runs = dict(packed) if packed else None
            for env_index, reply in enumerate(replies):
                if runs and env_index in runs:
                    splice_infos(infos, runs.pop(env_index), env_index, n)
                if reply is not None and env_index not in broken:
                    info, final = reply
                    if final is not None:
                        merge_info(infos, final, env_index, n)
                    if info:
                        merge_info(infos, info, env_index, n)
            if broken:
                self._zero(list(broken))
            return infos
        answered: Sequence[int]
        if broken:
            answered = [env_index for env_index in range(n) if env_index not in broken]
            kept = list(self.env_obs)
            for env_index in answered:
                kept[env_index], reward, terminated, truncated, *_ = replies[env_index]
                self.rewards[env_index] = reward
                self.terminations[env_index] = terminated
                self.truncations[env_index] = truncated
            env_infos = [replies[env_index][4:] for env_index in answered]
            self._zero(list(broken))
            observations: Sequence[Any] = kept
        else:  # every sub-env answered: a column at a time (the hot path of thousands)
            observations, rewards, terminations, truncations, infos_, finals = zip(*replies)
            self.rewards[:] = rewards
            self.terminations[:] = terminations
            self.truncations[:] = truncations
            answered = range(n)
            env_infos = list(zip(infos_, finals)) if (
                any(infos_) or finals.count(None) < n) else []
        if self._batch("step", observations, answered, out):
            refused = {failure.env_index for failure in self.misfits}
            self._zero(list(refused))
            env_infos = [pair for env_index, pair in zip(answered, env_infos)
                         if env_index not in refused]
            answered = [env_index for env_index in answered if env_index not in refused]
        for env_index, (info, final) in zip(answered, env_infos):
            if final is not None:
                merge_info(infos, final, env_index, n)
            if info:
                merge_info(infos, info, env_index, n)
        return infos

    def _batch(self, phase: str, observations: Sequence[Any], stored: Sequence[int],
               out: Any) -> bool:
        """Concatenate ``observations`` (one per sub-env) as ``batch_into`` does and keep
        them as ``env_obs`` → False. When some of the just ``stored`` ones do not fit the
        batch, refuse those (each keeps its previous observation and is listed in
        ``misfits``), batch the rest and → True. Costs nothing while every one fits."""
        if self.misfits:
            self.misfits = []
        try:
            self._concatenate(observations, out)
        except Exception as error:  # which ones? one at a time, off the hot path
            observations = self._without_misfits(phase, observations, stored, error)
            self._concatenate(observations, out)
        self.env_obs[:] = observations
        return bool(self.misfits)

    def _concatenate(self, observations: Sequence[Any], out: Any) -> None:
        if out is None:
            self.observations = concatenate_into(self.space, observations, self.observations)
        else:
            concatenate_into(self.space, observations, out)

    def _without_misfits(self, phase: str, observations: Sequence[Any], stored: Sequence[int],
                         error: Exception, env_ids: Sequence[int] | None = None) -> list[Any]:
        """``observations`` (of sub-envs ``env_ids``, default: all) with the ones at positions
        ``stored`` that do not fit replaced by the sub-env's previous one (listed in
        ``misfits``); ``error`` again if each fits alone."""
        kept = list(observations)
        row: Any = create_empty_array(self.space, 1, np.zeros)
        for position in stored:
            env_index = position if env_ids is None else env_ids[position]
            try:
                concatenate(self.space, [kept[position]], row)
            except Exception as misfit:
                self.misfits.append(misfit_failure(env_index, phase, kept[position],
                                                   self.space, misfit))
                kept[position] = self.env_obs[env_index]
        if not self.misfits:
            raise error
        return kept

    def _batch_of(self, env_ids: list[int], replies: list[Any], broken: dict[int, str],
                  restarted: Restarts) -> Any:
        """A first-ready batch's observations, in a fresh array; the fresh ones that do not
        fit are refused as ``_batch`` refuses them (``misfits``)."""
        if self.misfits:
            self.misfits = []
        env_obs = self.env_obs
        candidates: list[Any] = []
        fresh: Sequence[int]
        if broken or restarted:
            fresh = []
            for position, (env_index, reply) in enumerate(zip(env_ids, replies)):
                if env_index in restarted:
                    reset = restarted[env_index][0]
                    candidates.append(env_obs[env_index] if reset is None else reset[0])
                elif env_index in broken:
                    candidates.append(env_obs[env_index])
                else:
                    candidates.append(reply[0])
                    fresh.append(position)
        else:
            candidates, fresh = [reply[0] for reply in replies], range(len(replies))
        try:
            return concatenate_afresh(self.space, candidates)
        except Exception as error:  # which ones? one at a time, off the hot path
            kept = self._without_misfits("step", candidates, fresh, error, env_ids)
            return concatenate_afresh(self.space, kept)

    def batch_into(self, out: Any) -> None:
        """Not in place: concatenate the sub-envs' observations into the batch array, or
        straight into ``out`` (the caller's buffer, checked) so that it is the only copy;
        every full batch is concatenated afresh, so the batch array is never read stale."""
        self._concatenate(self.env_obs, out)

    def _store_rows(self, ids: np.ndarray[Any, np.dtype[np.intp]], replies: list[Any],
                    stepped: Sequence[int]) -> Iterable[tuple[Any, Any]]:
        """Keep the step outcomes at positions ``stepped`` of ``replies`` (for sub-envs
        ``ids``; not in place), a column at a time → each one's ``(info, final)``, once."""
        if len(stepped) < len(replies):
            replies, ids = [replies[position] for position in stepped], ids[list(stepped)]
        if not replies:
            return []
        observations, rewards, terminations, truncations, infos, finals = zip(*replies)
        self.rewards[ids] = rewards
        self.terminations[ids] = terminations
        self.truncations[ids] = truncations
        env_obs = self.env_obs
        for env_index, observation in zip(ids.tolist(), observations):
            env_obs[env_index] = observation
        return zip(infos, finals)

    def _zero(self, env_indices: list[int]) -> None:
        self.rewards[env_indices] = 0.0
        self.terminations[env_indices] = False
        self.truncations[env_indices] = False

    def row(self, env_index: int) -> Any:
        """A private copy of sub-env ``env_index``'s current observation."""
        if self.in_place:
            return read_row(self.observations, env_index)
        return copy_observations(self.env_obs[env_index])

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
        refused: set[int] = set()
        if not self.in_place:  # batched first: an observation that does not fit is refused
            observations = self._batch_of(env_ids, replies, broken, restarted)
            if self.copy:
                observations = copy_batch(self.space, observations)
            refused = {failure.env_index for failure in self.misfits}
        stepped: Sequence[int] = range(size)
        if broken or restarted or refused:
            stepped = [position for position, env_index in enumerate(env_ids)
                       if env_index not in restarted and env_index not in broken
                       and env_index not in refused]
        outcomes: Iterable[tuple[Any, Any]]
        if self.in_place:
            outcomes = [(None, None) if replies[position] is None else replies[position]
                        for position in stepped]
        else:
            outcomes = self._store_rows(ids, replies, stepped)
        for position, (info, final) in zip(stepped, outcomes):
            if final is not None:
                merge_info(infos, final, position, size)
            if info:
                merge_info(infos, info, position, size)
            if notes and env_ids[position] in notes:
                merge_info(infos, {"restart": notes.pop(env_ids[position])}, position, size)
        if broken or refused:
            self._zero([*broken, *refused])
        if restarted:
            positions = {env_index: position for position, env_index in enumerate(env_ids)}
            self.apply_restarts(restarted, previous, infos, positions)
        if self.in_place:
            observations = take_rows(self.observations, ids, self.space)
        return StepBatch(observations, self.rewards[ids], self.terminations[ids],
                         self.truncations[ids], infos, ids)
