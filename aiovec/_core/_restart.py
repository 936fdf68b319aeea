"""The opt-in restart policy: how often, and how patiently, a broken sub-env is recreated."""

from __future__ import annotations

import math
from dataclasses import dataclass

from aiovec._core._arguments import check_timeout

__all__ = ["RestartPolicy"]


@dataclass(frozen=True)
class RestartPolicy:
    """Recreate a sub-env that raised, hung past its deadline or died, instead of raising.

    The recreated sub-env comes back in the same batch, its episode cut (``truncated=True``)
    and ``infos["restart"]`` saying why. ``max_restarts`` caps the restarts of each sub-env
    over the vector env's life (``None``: no cap); past it, the error is raised as without a
    policy. A sub-env that breaks again before completing a step waits ``backoff`` seconds,
    doubling (``backoff_factor``) up to ``max_backoff``, before its next attempt.
    ``make_timeout`` bounds each attempt to make (and, in same-step mode, reset) it.
    """

    max_restarts: int | None = 10
    backoff: float = 0.1
    backoff_factor: float = 2.0
    max_backoff: float = 10.0
    make_timeout: float | None = 60.0

    def __post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0 or None, got {self.max_restarts}")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if self.backoff_factor < 1:
            raise ValueError(f"backoff_factor must be >= 1, got {self.backoff_factor}")
        # A deadline like any other: the one rule (``True`` is not one second).
        object.__setattr__(self, "make_timeout", check_timeout(self.make_timeout, "make_timeout"))

    def delay(self, consecutive: int) -> float:
        """Seconds to wait before the ``consecutive``-th attempt in a row (the first: none)."""
        if consecutive <= 1:
            return 0.0
        return min(self.max_backoff, self.backoff * self.backoff_factor ** (consecutive - 2))

    @classmethod
    def coerce(cls, restart: RestartPolicy | bool | int | None) -> RestartPolicy | None:
        """``restart=`` as users write it: a policy, ``True`` (defaults), an int (the cap),
        or ``None``/``False`` (no restarts)."""
        if restart is None or restart is False:
            return None
        if restart is True:
            return cls()
        if isinstance(restart, int):
            return cls(max_restarts=restart)
        if isinstance(restart, cls):
            return restart
        raise TypeError(f"restart must be a RestartPolicy, bool, int or None, got {restart!r}")
