"""Failure-handling figures: how late a deadline fires, what a restart costs, a chaos run.

1. Timeout lateness: a sub-env hangs; ``step(timeout=0.2)`` raises ``EnvTimeoutError`` this
   long after the deadline (median and max of ``--repeats``), per backend.
2. Restart cost: the extra time of a vector step in which one sub-env raises (or dies) and is
   recreated under the restart policy, per backend and fault.
3. A chaos run: ``--steps`` vector steps of 16 ``FaultyEnv`` with random faults under the
   restart policy; faults injected (from the ledger), restarts, and what was lost (must be 0).

Run: ``.venv/bin/python benchmarks/failures.py [--repeats 10] [--steps 20000]``.
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
from harness import arguments, header

import aiovec
from aiovec.testing import Fault, FaultLedger, FaultyEnv, release_hangs

DEADLINE = 0.2
NUM_ENVS = 16


def factories(num_envs: int, faults: dict[int, list[Fault]], ledger: str | None = None,
              **options: Any) -> list[Callable[[], FaultyEnv]]:
    return [functools.partial(FaultyEnv, index, faults=faults.get(index, ()), ledger=ledger,
                              **options) for index in range(num_envs)]


async def timeout_lateness(backend: str, repeats: int) -> list[float]:
    late = []
    for _ in range(repeats):
        hang = {1: [Fault("hang", "step", instance=0)]}
        async with aiovec.AsyncVectorEnv(factories(4, hang), backend=backend,
                                         num_workers=4 if backend == "process" else None
                                         ) as envs:
            await envs.reset()
            started = time.perf_counter()
            try:
                await envs.step(np.ones(4), timeout=DEADLINE)
            except aiovec.EnvTimeoutError:
                late.append(time.perf_counter() - started - DEADLINE)
        release_hangs()
    return late


async def restart_cost(backend: str, kind: str, repeats: int) -> tuple[float, float]:
    """(median healthy step, median step with one restart), seconds."""
    healthy, restarting = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as ledger:
            fault = {1: [Fault(kind, "step", at=5, instance=0)]}
            async with aiovec.AsyncVectorEnv(
                factories(4, fault, ledger), backend=backend, restart=True,
                num_workers=4 if backend == "process" else None,
            ) as envs:
                await envs.reset()
                for step in range(6):
                    started = time.perf_counter()
                    await envs.step(np.ones(4))
                    (restarting if step == 5 else healthy).append(
                        time.perf_counter() - started)
    return statistics.median(healthy), statistics.median(restarting)


async def chaos(backend: str, steps: int, probabilities: dict[str, float]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        ledger = FaultLedger(directory)
        policy = aiovec.RestartPolicy(max_restarts=None, backoff=0.01)
        envs = aiovec.AsyncVectorEnv(
            factories(NUM_ENVS, {}, directory, probabilities=probabilities),
            backend=backend, restart=policy, timeout=1.5,
            num_workers=NUM_ENVS if backend == "process" else None)
        restarts_seen = 0
        started = time.perf_counter()
        async with envs:
            await envs.reset(seed=0)
            for step in range(steps):
                *_, infos = await envs.step(np.full(NUM_ENVS, float(step)))
                restarts_seen += int(infos.get("_restart", np.zeros(1, bool)).sum())
            stats = envs.statistics()
        elapsed = time.perf_counter() - started
        kinds: Counter[str] = Counter()
        for env in range(NUM_ENVS):
            kinds.update(line.split()[1] for line in ledger.events(env)
                         if line.startswith("fault"))
        release_hangs()
    injected = sum(kinds.values())
    return {"backend": backend, "steps": stats.steps, "faults": dict(kinds),
            "restarts": stats.restarts, "restarts in batches": restarts_seen,
            "lost": injected - restarts_seen, "seconds": round(elapsed, 1)}


async def main(repeats: int, steps: int) -> None:
    print("\n".join(header("Failures: deadline lateness, restart cost, chaos",
                           f"{repeats} repeats; a chaos run of {steps} steps")))
    print(f"1. timeout lateness after a {DEADLINE:g} s deadline ({repeats} repeats)")
    for backend in ("thread", "process"):
        late = await timeout_lateness(backend, repeats)
        print(f"   {backend:8s} median {statistics.median(late) * 1e3:6.1f} ms   "
              f"max {max(late) * 1e3:6.1f} ms")
    print("2. one step with a restart vs a healthy step (medians)")
    for backend, kind in (("inline", "raise"), ("thread", "raise"), ("process", "raise"),
                          ("process", "exit")):
        healthy, restarting = await restart_cost(backend, kind, max(3, repeats // 2))
        print(f"   {backend:8s} {kind:6s} healthy {healthy * 1e6:8.0f} us   "
              f"with restart {restarting * 1e3:7.1f} ms")
    print(f"3. chaos run: {steps} steps x {NUM_ENVS} envs")
    mixes = {"inline": {"raise": 1.2e-4}, "thread": {"raise": 1e-4, "hang": 1.5e-5},
             "process": {"raise": 5e-5, "exit": 3e-5, "kill": 3e-5, "hang": 1.5e-5}}
    for backend, mix in mixes.items():
        print("  ", await chaos(backend, steps, mix))


if __name__ == "__main__":
    parser = arguments(__doc__, repeats=10)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    anyio.run(main, args.repeats, args.steps)
