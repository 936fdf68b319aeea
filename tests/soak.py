"""How long the soaks run: compressed in the suite (``make test``, CI), full length under
``make soak``, which sets ``AIOVEC_SOAK=1``.

A compressed soak runs a quarter of the steps at four times the fault rate: the same number of
faults, each kind of fault still met, in a quarter of the time. The full length finds what only
a long run finds (a slow leak, a rare interleaving), at minutes a run.
"""

from __future__ import annotations

import os

#: True under ``make soak``.
FULL_LENGTH = os.environ.get("AIOVEC_SOAK") == "1"
#: By how much a compressed soak divides its length and multiplies its fault rates.
COMPRESSION = 1 if FULL_LENGTH else 4


def soak_length(full: int) -> int:
    """The number of steps (or cycles) a soak of ``full`` at full length runs now."""
    return max(1, full // COMPRESSION)


def soak_rates(rates: dict[str, float]) -> dict[str, float]:
    """Fault probabilities for a soak whose full-length rates are ``rates``."""
    return {fault: rate * COMPRESSION for fault, rate in rates.items()}
