"""The opt-in restart policy: how often, and how patiently, a broken sub-env is recreated."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aiovec._core._arguments import check_timeout

__all__ = ["RestartPolicy"]


@dataclass(frozen=True)
class RestartPolicy:
    """Recreate a sub-env that raised, hung past its deadline or died, instead of raising.

    The recreated sub-env comes back in the same batch, its episode cut (``truncated=True``)
    and ``infos["restart"]`` saying why. ``max_restarts`` caps each sub-env's restarts in a
    row: a step of its own completed between two restarts starts the count again, so a long
    run with rare faults never runs out, while a sub-env that breaks every time stops
    (``None``: no cap). Past it, the error is raised as without a policy, with a note naming
    the cap and its value. A sub-env that breaks again before completing a step waits
    ``backoff`` seconds, doubling (``backoff_factor``) up to ``max_backoff``, before its next
    attempt.
    ``make_timeout`` bounds each attempt to make (and, in same-step mode, reset) it.

    The failure budget of the whole vector env: past ``max_failures`` failures in all, or
    once more than ``max_failure_fraction`` of the last ``failure_window`` episodes to end
    were lost to failures, a failure is not restarted: ``FailureBudgetError`` is raised
    instead (an outage should stop a run, not be retried forever). ``None``: no such limit.
    """

    max_restarts: int | None = 10
    backoff: float = 0.1
    backoff_factor: float = 2.0
    max_backoff: float = 10.0
    make_timeout: float | None = 60.0
    max_failures: int | None = None
    max_failure_fraction: float | None = None
    failure_window: int = 100

    def __post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0 or None, got {self.max_restarts}")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if self.backoff_factor < 1:
            raise ValueError(f"backoff_factor must be >= 1, got {self.backoff_factor}")
        if self.max_failures is not None and self.max_failures < 0:
            raise ValueError(f"max_failures must be >= 0 or None, got {self.max_failures}")
        fraction = self.max_failure_fraction
        if fraction is not None and not (isinstance(fraction, (int, float))
                                         and 0 <= fraction < 1):
            raise ValueError(f"max_failure_fraction must be in [0, 1) or None, got {fraction!r}")
        if isinstance(self.failure_window, bool) or not (
                isinstance(self.failure_window, int) and self.failure_window >= 1):
            raise ValueError(f"failure_window must be a positive int, got "
                             f"{self.failure_window!r}")
        # A deadline like any other: the one rule (``True`` is not one second).
        object.__setattr__(self, "make_timeout", check_timeout(self.make_timeout, "make_timeout"))

    def budget_spent(self, failures: int, recent: Sequence[bool]) -> str | None:
        """Why ``failures`` failures in all, with ``recent`` the last episode ends (True:
        lost to a failure; the newest last), are past the failure budget; ``None``: within."""
        if self.max_failures is not None and failures > self.max_failures:
            return f"{failures} failures, max_failures={self.max_failures}"
        window = list(recent)[-self.failure_window:]
        if (self.max_failure_fraction is not None and len(window) == self.failure_window
                and sum(window) > self.max_failure_fraction * self.failure_window):
            return (f"{sum(window)} of the last {self.failure_window} episodes lost to "
                    f"failures, max_failure_fraction={self.max_failure_fraction:g}")
        return None

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
