"""What became of each episode, one rule for the rows a caller reads (``episode_outcomes``)
and for the counts in ``statistics().episodes`` (``EpisodeTally``), so the two always agree.

An episode ends exactly once, in one of four ways: the env ended it (``"finished"``, it
terminated; ``"truncated"``, it truncated itself), its ``episode_timeout`` ran out
(``"episode_timeout"``), or the infrastructure lost it (``"lost"``: the sub-env raised, hung
past a deadline or died, and was restarted or raised to the caller; or ``abort`` dropped its
step). A trainer keeps lost episodes out of its group baselines: they say nothing about the
policy.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FINISHED", "LOST", "OUTCOMES", "TIMED_OUT", "TRUNCATED", "EpisodeCounts",
           "EpisodeTally", "episode_outcomes"]

FINISHED = "finished"
TRUNCATED = "truncated"
TIMED_OUT = "episode_timeout"
LOST = "lost"
#: Every outcome, and "" for a row whose episode goes on.
OUTCOMES = ("", FINISHED, TRUNCATED, TIMED_OUT, LOST)


def _flagged(infos: dict[str, Any], key: str, size: int,
             says: Callable[[Any], bool]) -> np.ndarray[Any, Any]:
    """The rows whose ``infos[key]`` aiovec set: present (its ``_key`` mask) and saying so
    (``says``: an env may use the same key for something else)."""
    for where in (infos, infos.get("final_info")):  # same-step: the ended step's infos
        if isinstance(where, dict) and f"_{key}" in where:
            present: np.ndarray[Any, Any] = np.asarray(where[f"_{key}"], bool)
            said = np.fromiter((says(value) for value in where[key]), bool, size)
            flagged: np.ndarray[Any, Any] = present & said
            return flagged
    return np.zeros(size, bool)


def _is_note(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_true(value: Any) -> bool:
    return value is True or value is np.True_


def episode_outcomes(terminations: Any, truncations: Any,
                     infos: dict[str, Any]) -> np.ndarray[Any, np.dtype[np.str_]]:
    """How each row's episode ended in a step (or ``recv`` batch): ``"finished"``,
    ``"truncated"``, ``"episode_timeout"``, ``"lost"``, or ``""`` (it goes on).

    ``"lost"`` marks episodes the infrastructure cut (the row's sub-env was restarted:
    ``infos["restart"]`` says why, and ``truncated`` is set). Keep them out of group baselines, say
    ``valid = outcomes != "lost"``; ``statistics().episodes`` counts the same way.
    """
    terminations = np.asarray(terminations, bool)
    truncations = np.asarray(truncations, bool)
    size = terminations.shape[0]
    outcomes = np.full(size, "", dtype=f"<U{len(TIMED_OUT)}")
    outcomes[truncations] = TRUNCATED
    outcomes[truncations & _flagged(infos, "episode_timeout", size, _is_true)] = TIMED_OUT
    outcomes[terminations] = FINISHED
    # A restart cuts the row's episode short (truncated); a row noting a restart that
    # happened while its sub-env was idle starts a new episode (that loss was counted then).
    outcomes[(terminations | truncations) & _flagged(infos, "restart", size, _is_note)] = LOST
    return outcomes


@dataclass(frozen=True)
class EpisodeCounts:
    """Episodes ended so far, by how (``episode_outcomes``): each counted exactly once.
    ``lost`` includes ``aborted`` (dropped by ``abort``, which the failure budget does not
    count)."""

    finished: int = 0
    truncated: int = 0
    episode_timeout: int = 0
    lost: int = 0
    aborted: int = 0


class EpisodeTally:
    """The running counts behind ``EpisodeCounts``, and (with a ``window``) the last
    ``window`` ends, lost by a failure or not, for the restart policy's failure budget."""

    __slots__ = ("_counts", "aborted", "recent")

    def __init__(self, window: int | None) -> None:
        self._counts = dict.fromkeys(OUTCOMES[1:], 0)
        self.aborted = 0
        #: True for each of the last ``window`` episode ends that a failure lost.
        self.recent: collections.deque[bool] = collections.deque(maxlen=window or 0)

    def step(self, terminations: np.ndarray[Any, Any], truncations: np.ndarray[Any, Any],
             infos: dict[str, Any]) -> None:
        """Count the episodes that ended in a step's rows (the hot path: cheap when none
        did, and when none was cut or lost, which ``episode_outcomes`` then need not say)."""
        # (count_nonzero: a fifth of ``ndarray.any``'s cost on a few rows)
        if not (np.count_nonzero(terminations) or np.count_nonzero(truncations)):
            return
        if "_restart" in infos or "_episode_timeout" in infos or "final_info" in infos:
            self.outcomes(episode_outcomes(terminations, truncations, infos))
            return
        finished = int(np.count_nonzero(terminations))
        truncated = int(np.count_nonzero(truncations > terminations))  # and not terminated
        self._counts[FINISHED] += finished
        self._counts[TRUNCATED] += truncated
        if self.recent.maxlen:
            self.recent.extend(itertools.repeat(False, finished + truncated))

    def outcomes(self, outcomes: np.ndarray[Any, Any]) -> None:
        counts, recent = self._counts, self.recent
        for outcome in outcomes[outcomes != ""].tolist():
            counts[outcome] += 1
            recent.append(outcome == LOST)

    def failed(self, count: int) -> None:
        """``count`` episodes lost to failures that were raised to the caller."""
        self._counts[LOST] += count
        self.recent.extend(itertools.repeat(True, count))

    def abort(self, count: int) -> None:
        """``count`` episodes dropped by ``abort``: lost, but not to a failure."""
        self._counts[LOST] += count
        self.aborted += count

    def counts(self) -> EpisodeCounts:
        counts = self._counts
        return EpisodeCounts(counts[FINISHED], counts[TRUNCATED], counts[TIMED_OUT],
                             counts[LOST], self.aborted)
