"""Each episode's reset options: given to ``reset``, or drawn from ``episode_options``.

A trainer hands each episode a task (a dataset row) as its reset options. An explicit reset
takes them from the caller (``options=[...]``, one entry per sub-env) or, for the sub-envs
given none, from the vector env's ``episode_options(env_index)``. An automatic reset happens
where the sub-env runs, inside a step (in same-step mode, the very step that ends the
episode), so its options must be there before: the engine draws them ahead, once per episode,
and queues them at the sub-env's host (``Backend.queue_options``) just before the step that
may need them. So the options of a sub-env's next episode are drawn as its current one takes
its first step.

``EpisodeOptions`` mirrors each host's queue (drawn, not used yet), follows which episode each
sub-env plays from the results, and names each episode's options in the infos of the rows
that start and end it (``infos["episode_options"]``, the dicts themselves; in same-step mode
an ending episode's are in ``infos["final_info"]``). An episode lost to a restart ends in its
restart row, named there too, so the trainer can run its task again.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from aiovec._core._backend import Backend

__all__ = ["EPISODE_OPTIONS", "EpisodeOptions", "OptionsSource", "per_env_options"]

#: ``episode_options=``: the reset options of a sub-env's next episode (``None``: none).
OptionsSource = Callable[[int], "dict[str, Any] | None"]
#: The info key naming the reset options of the episode a row starts or ends.
EPISODE_OPTIONS = "episode_options"


def _checked(options: object, env_index: int, what: str) -> dict[str, Any] | None:
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"{what} for sub-env {env_index} must be None or a dict, got "
                        f"{type(options).__name__}")
    return options


def per_env_options(options: Sequence[Any], num_envs: int) -> list[dict[str, Any] | None]:
    """``reset(options=[...])``, checked: one entry per sub-env, each ``None`` or a dict."""
    if len(options) != num_envs:
        raise ValueError(f"options given per sub-env must be {num_envs} entries (one per "
                         f"sub-env), got {len(options)}")
    return [_checked(entry, index, "options") for index, entry in enumerate(options)]


def _name(infos: dict[str, Any], row: int, size: int, options: dict[str, Any],
          final: bool = False) -> None:
    """Put ``options`` in row ``row`` of ``infos["episode_options"]`` (of its ``final_info``
    with ``final``): a column of the dicts themselves, with its ``_episode_options`` mask."""
    if final:
        infos["_final_info"] = mask = infos.get("_final_info", np.zeros(size, np.bool_))
        mask[row] = True
        infos = infos.setdefault("final_info", {})
    column = infos.get(EPISODE_OPTIONS)
    if column is None:
        column = infos[EPISODE_OPTIONS] = np.full(size, None, dtype=object)
        infos[f"_{EPISODE_OPTIONS}"] = np.zeros(size, dtype=np.bool_)
    column[row] = options
    infos[f"_{EPISODE_OPTIONS}"][row] = True


class EpisodeOptions:
    """The reset options of every sub-env's episodes: drawn from ``source`` ahead of the
    automatic resets that use them, queued at the hosts, followed through the results."""

    def __init__(self, num_envs: int, source: OptionsSource | None,
                 autoreset_mode: AutoresetMode) -> None:
        self._same_step = autoreset_mode is AutoresetMode.SAME_STEP
        self._next_step = autoreset_mode is AutoresetMode.NEXT_STEP
        #: Per sub-env: options drawn for its next automatic resets, not used yet (oldest
        #: first); whether none are (the next are drawn before it steps); whether its host
        #: holds exactly these (else they are sent before it steps).
        self.queued: list[collections.deque[dict[str, Any] | None]] = [
            collections.deque() for _ in range(num_envs)]
        self._empty = np.ones(num_envs, dtype=np.bool_)
        self._ready = np.ones(num_envs, dtype=np.bool_)
        #: The options of the episode each sub-env plays.
        self.current: list[dict[str, Any] | None] = [None] * num_envs
        #: Next-step mode: the sub-envs whose next result is the reset that starts an episode.
        self._resetting = np.zeros(num_envs, dtype=np.bool_)
        #: The options of episodes lost to a restart, until named in its row (``stepped``).
        self._lost: dict[int, dict[str, Any] | None] = {}
        self.source: OptionsSource | None = None
        #: Episodes have options of their own: follow them and name them in the infos.
        self.active = False
        self.set_source(source)

    def set_source(self, source: OptionsSource | None) -> None:
        """Draw new episodes' options from ``source`` from now on (``None``: none)."""
        if source is not None and not callable(source):
            raise TypeError(f"episode_options must be a function of the sub-env's index, or "
                            f"None, got {type(source).__name__}")
        self.source = source
        self.active = self.active or source is not None

    def draw(self, env_index: int) -> dict[str, Any] | None:
        """The options of a new episode of ``env_index``, from the source (``None``: none)."""
        source = self.source
        if source is None:
            return None
        return _checked(source(env_index), env_index, "the options episode_options returned")

    # ------------------------------------------------------------------ before a call

    def draw_ahead(self, env_ids: Any) -> None:
        """Sub-envs ``env_ids`` (an array) were sent a step: those with no options left for
        their next episode get them now, from the source (raising, as the call that sent
        them, if it does)."""
        if self.source is None or not (self._same_step or self._next_step):
            return
        todo = env_ids[self._empty[env_ids]]
        if not todo.size:
            return
        queued = self.queued
        for env_index in todo.tolist():
            queued[env_index].append(self.draw(env_index))
            self._empty[env_index] = False
            self._ready[env_index] = False

    def ship(self, env_ids: Any, backend: Backend) -> None:
        """Sub-envs ``env_ids`` (an array) are about to be submitted a step: their hosts get
        what is queued for them where they may not hold it (``Backend.queue_options``; never
        while they are remade: the engine submits nothing then)."""
        if not self.active or not (self._same_step or self._next_step):
            return
        todo = env_ids[~self._ready[env_ids]]
        if not todo.size:
            return
        queued = self.queued
        backend.queue_options({env_index: tuple(queued[env_index])
                               for env_index in todo.tolist()})
        self._ready[todo] = True

    def reset_options(self, env_indices: Sequence[int],
                      given: Sequence[dict[str, Any] | None] | None) -> list[Any]:
        """The options of an explicit reset of ``env_indices``: the caller's (``given``, one
        per sub-env of the vector env), or, for those given none, new ones from the source."""
        chosen = []
        for env_index in env_indices:
            options = None if given is None else given[env_index]
            chosen.append(self.draw(env_index) if options is None else options)
        return chosen

    # ------------------------------------------------------------------ after a call

    def reset_sent(self, env_indices: Sequence[int], options: Sequence[Any]) -> None:
        """An explicit reset of ``env_indices`` with ``options`` (in order) was sent. Their
        hosts' queues are sent again before their next step (a step aborted earlier may have
        used an option unseen)."""
        self.active = True
        for env_index, chosen in zip(env_indices, options):
            self.current[env_index] = chosen
        indices = list(env_indices)
        self._resetting[indices] = False
        self._ready[indices] = False

    def name_reset(self, infos: dict[str, Any], env_indices: Sequence[int],
                   size: int) -> None:
        """Name the new episodes of an explicit reset in its ``infos`` (rows: env indices)."""
        current, lost = self.current, self._lost
        for env_index in env_indices:
            lost.pop(env_index, None)  # (a restart of the reset: its episode is this one)
            options = current[env_index]
            if options is not None:
                _name(infos, env_index, size, options)

    def stepped(self, env_ids: Any, terminations: Any, truncations: Any,
                infos: dict[str, Any], restarted: Mapping[int, Any] | None = None) -> None:
        """Results of ``env_ids`` came back (an array: row ``i`` is sub-env ``env_ids[i]``),
        ``restarted`` ones made afresh meanwhile: name the episodes that ended and began in
        ``infos``, and follow them (an automatic reset took the oldest options queued)."""
        if not self.active:
            return
        size, current, lost = len(env_ids), self.current, self._lost
        ended = terminations | truncations
        again = np.zeros(size, dtype=np.bool_)
        if restarted:
            again[[row for row, env_index in enumerate(env_ids.tolist())
                   if env_index in restarted]] = True
            ended &= ~again
        same_step = self._same_step
        for row in np.flatnonzero(ended).tolist():  # episodes that ended
            options = current[env_ids[row]]
            if options is not None:
                _name(infos, row, size, options, final=same_step)
        if lost and not again.all():  # lost with no row of their own (a restarted neighbour
            for env_index in set(lost).intersection(env_ids[~again].tolist()):  # of theirs)
                del lost[env_index]
        for row in np.flatnonzero(again).tolist():  # episodes lost to a restart
            env_index = int(env_ids[row])
            options = lost.pop(env_index, None)
            if options is not None:
                _name(infos, row, size, options, final=same_step)
            options = current[env_index]
            if same_step and options is not None:  # (its new episode: reset with these)
                _name(infos, row, size, options)
        if self._next_step:
            resetting = self._resetting
            began = resetting[env_ids] & ~again
            resetting[env_ids] = ended | again  # (a remade sub-env's next step is a reset)
        elif same_step:
            began = ended
        else:
            return
        queued, empty = self.queued, self._empty
        for row in np.flatnonzero(began).tolist():  # (the host took the same: still in step)
            env_index = int(env_ids[row])
            waiting = queued[env_index]
            options = current[env_index] = waiting.popleft() if waiting else None
            empty[env_index] = not waiting
            if options is not None:
                _name(infos, row, size, options)

    # ------------------------------------------------------------------ restarts

    def restart_options(self, env_index: int) -> dict[str, Any] | None:
        """A same-step restart resets ``env_index`` afresh: the options it takes (the oldest
        queued, else new ones from the source; on a second attempt within the restart, the
        same); the lost episode's are kept to be named."""
        if env_index in self._lost:  # (taken already by this restart's first attempt)
            return self.current[env_index]
        self._lost[env_index] = self.current[env_index]
        waiting = self.queued[env_index]
        options = self.current[env_index] = waiting.popleft() if waiting else self.draw(
            env_index)
        self._empty[env_index] = not waiting
        self._ready[env_index] = False
        return options

    def remade(self, env_indices: Sequence[int]) -> None:
        """``env_indices`` were made afresh (their hosts' queues are gone, sent again before
        their next step): their episodes are lost (kept to be named, unless
        ``restart_options`` kept them); not one that had ended already and waited for its
        reset (next-step mode: named then). In next-step mode their next step is a reset."""
        indices = list(env_indices)
        lost, resetting = self._lost, self._resetting
        for env_index in indices:
            if env_index not in lost:
                lost[env_index] = None if resetting[env_index] else self.current[env_index]
        self._ready[indices] = False
        if self._next_step:
            resetting[indices] = True
