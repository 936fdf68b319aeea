"""Which sub-envs can step: the one place that keeps "this sub-env needs a reset".

A sub-env moves between these states (the vector env's own lifecycle, created → running →
closed, is ``_engine.State``)::

                 reset ok                       step / recv ok
      NEEDS  ─────────────────▶  READY  ◀──────────────────────┐
      RESET  ◀─────────────────  (can   ──── step / send ──▶ IN FLIGHT
        ▲      failed, timed      step)                       │
        │      out, lost, cut                                 │ raised, timed out,
        │      short by a cancel,                             │ worker died, caller
        │      done (autoreset off)                           │ cancelled
        │                                                     ▼
        └──────────── remade (a restart or a reset of a lost sub-env) ◀── RESTARTING

    UNMADE: its factory failed when remade; the next reset makes it again first.

Every sub-env starts in NEEDS RESET (the first ``reset`` moves it to READY). IN FLIGHT is
the request itself (``_in_flight.InFlight``, or ``_first_ready.FirstReady`` for ``send``);
RESTARTING is a claim on the vector env (``_recovery``) that keeps other calls out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["Health"]


class Health:
    """Per sub-env: needs a reset or not; and the sub-envs whose last remake failed."""

    __slots__ = ("_needs_reset", "_ready", "has_reset", "unmade")

    def __init__(self, num_envs: int) -> None:
        self._needs_reset = np.ones(num_envs, dtype=np.bool_)
        # False whenever _needs_reset may hold a True: spares the hot path a numpy reduction.
        self._ready = False
        #: True once any reset succeeded (to tell "never reset" apart in messages).
        self.has_reset = False
        #: Sub-envs whose factory failed when remade: the next reset makes them first.
        self.unmade: set[int] = set()

    def all_ready(self) -> bool:
        """True when every sub-env can step (cheap when nothing changed since last asked)."""
        if not self._ready:
            if self._needs_reset.any():
                return False
            self._ready = True
        return True

    def need_reset(self, env_indices: Sequence[int] | Any) -> None:
        """These sub-envs cannot step until reset (an index list, array or boolean mask)."""
        self._needs_reset[env_indices] = True
        self._ready = False

    def reset_done(self, env_indices: Sequence[int] | Any) -> None:
        """These sub-envs were reset (or restarted into a new episode): they can step."""
        self._needs_reset[env_indices] = False

    def ended(self, terminations: Any, truncations: Any) -> None:
        """Autoreset is off: every sub-env whose episode just ended needs a reset (full-batch
        masks, combined in place)."""
        np.logical_or(self._needs_reset, terminations, out=self._needs_reset)
        np.logical_or(self._needs_reset, truncations, out=self._needs_reset)
        self._ready = False

    def remade(self, env_indices: Iterable[int], failed: set[int]) -> None:
        """Sub-envs made afresh (their factory failed for ``failed``): all need a reset."""
        env_indices = list(env_indices)
        for env_index in env_indices:
            if env_index in failed:
                self.unmade.add(env_index)
            else:
                self.unmade.discard(env_index)
        self.need_reset(env_indices)

    def needing_reset(self, env_indices: Sequence[int] | None = None) -> list[int]:
        """The sub-envs (of ``env_indices``, default all) that need a reset, in order."""
        if env_indices is None:
            return [int(index) for index in np.flatnonzero(self._needs_reset)]
        return [index for index in env_indices if self._needs_reset[index]]
