"""Factories of ``FaultyEnv`` sub-envs for the fault-injection tests."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from aiovec.testing import Fault, FaultLedger, FaultyEnv

BACKENDS = ["inline", "thread", "process", "ray"]
#: Backends on which a sub-env can miss a deadline (inline sub-envs block the loop instead).
DEADLINE_BACKENDS = ["thread", "process", "ray"]


def faulty(num_envs: int, ledger: FaultLedger | None = None,
           faults: dict[int, Sequence[Fault]] | None = None,
           **options: Any) -> list[Callable[[], FaultyEnv]]:
    """``num_envs`` factories; sub-env ``i`` gets ``faults[i]`` and the other ``options``."""
    directory = None if ledger is None else str(ledger.directory)
    return [functools.partial(FaultyEnv, index, ledger=directory,
                              faults=(faults or {}).get(index, ()), **options)
            for index in range(num_envs)]


def one_per_worker(backend: str, num_envs: int) -> dict[str, Any]:
    """Options giving each sub-env its own worker process or actor (so a fault hits only its
    env)."""
    return {"num_workers": num_envs} if backend in ("process", "ray") else {}
