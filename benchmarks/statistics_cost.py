"""What per-sub-env step statistics cost: the inline backend with and without them, against
Gymnasium's ``SyncVectorEnv``, and one sub-env step (``EnvSlot``) with and without them.

1. CartPole-v1 at 8 and 32 envs. Each repeat times, one after the other, ``SyncVectorEnv``,
   ``await envs.step()`` on the inline backend (uvloop) with statistics on, the same with the
   sub-envs' step timing switched off through private attributes (``step_timer = None`` on
   each ``EnvSlot``, which every version of aiovec honours: the benchmark's switch, not an
   option), and inline on asyncio with statistics on. Reported: µs per vector step, time vs
   ``SyncVectorEnv`` (median and per-repeat), and what statistics cost per sub-env step
   (on - off, paired within a repeat, divided by ``num_envs``). Each measurement is the
   fastest of 5 chunks of its steps (a shared machine's bursts only slow chunks down).
2. One sub-env step alone: ``EnvSlot.run(Op.STEP, ...)`` on an env whose step does nothing,
   timing on and off, interleaved: ns per step and the difference.

Before/after: copy this file into an old checkout's ``benchmarks/`` and run
``benchmarks/compare.py --old OLD -- statistics_cost.py`` (it compares the "time vs
SyncVectorEnv" and "µs per sub-env step" columns), or run it in each checkout alternately.

Run: ``.venv/bin/python benchmarks/statistics_cost.py [--quick] [--repeats 7] [--steps 2000]``.
It ends with issue 19's targets as PASS/MISS lines (``run.py`` gathers them).
"""

from __future__ import annotations

import functools
import math
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from harness import Check, arguments, header

import aiovec
from aiovec._backends._slot import EnvSlot
from aiovec._core._requests import Op
from aiovec._core._statistics import LatencyLog


def cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


#: Each measurement is the fastest of this many chunks of its steps: the machine is shared,
#: and another process's burst only ever slows a chunk down.
CHUNKS = 5


def time_sync_vector_env(steps: int, num_envs: int, warmup: int) -> float:
    """Seconds per ``SyncVectorEnv.step``: the fastest of ``CHUNKS`` chunks of ``steps``."""
    envs = gym.vector.SyncVectorEnv([cartpole] * num_envs)
    try:
        envs.reset(seed=0)
        actions = np.zeros(num_envs, np.int64)
        for _ in range(warmup):
            envs.step(actions)
        chunk = max(1, steps // CHUNKS)
        best = math.inf
        for _ in range(CHUNKS):
            started = time.perf_counter()
            for _ in range(chunk):
                envs.step(actions)
            best = min(best, (time.perf_counter() - started) / chunk)
        return best
    finally:
        envs.close()


def time_inline(steps: int, num_envs: int, warmup: int, *, timing: bool,
                loop: str = "uvloop") -> float:
    """Seconds per ``await envs.step()`` on the inline backend, as ``time_sync_vector_env``
    measures; ``timing=False`` switches the sub-envs' step timing off (private attributes:
    for this benchmark only)."""
    async def run() -> float:
        async with aiovec.AsyncVectorEnv([cartpole] * num_envs, backend="inline") as envs:
            if not timing:
                for slot in envs._engine.backend._slots:  # type: ignore[attr-defined]
                    slot.step_timer = None
            await envs.reset(seed=0)
            actions = np.zeros(num_envs, np.int64)
            for _ in range(warmup):
                await envs.step(actions)
            chunk = max(1, steps // CHUNKS)
            best = math.inf
            for _ in range(CHUNKS):
                started = time.perf_counter()
                for _ in range(chunk):
                    await envs.step(actions)
                best = min(best, (time.perf_counter() - started) / chunk)
            return best

    options = {"use_uvloop": True} if loop == "uvloop" else {}
    return anyio.run(run, backend="asyncio", backend_options=options)


class NoOpEnv(gym.Env[np.ndarray, int]):
    """A step that costs next to nothing, so the slot's own cost shows."""

    observation_space = gym.spaces.Box(0, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._obs, {}

    def step(self, action: int) -> Any:
        return self._obs, 0.0, False, False, {}


def time_slot_step(timing: bool, number: int) -> float:
    """Seconds per ``EnvSlot.run(Op.STEP, 0)`` on ``NoOpEnv``, best of 5."""
    log = LatencyLog.allocate(1)
    slot = EnvSlot(0, AutoresetMode.NEXT_STEP, log.timer(0) if timing else None)
    slot.run(Op.MAKE, NoOpEnv)
    slot.run(Op.RESET, (0, None))
    run = slot.run
    step = Op.STEP
    return min(timeit.repeat(lambda: run(step, 0), number=number, repeat=5)) / number


def spread(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


def main() -> None:
    parser = arguments(__doc__, repeats=7, quick="2 repeats of few steps (seconds)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--slot-steps", type=int, default=200_000)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.steps, args.slot_steps = 2, 200, 20_000
    checks: list[Check] = []
    warmup = args.steps // 10

    print("\n".join(header("What per-sub-env step statistics cost",
                           f"median of {args.repeats} interleaved repeats")))
    print(f"# Statistics cost, CartPole-v1, median of {args.repeats} interleaved repeats, each "
          f"the fastest of {CHUNKS} chunks of {args.steps // CHUNKS} steps\n")
    print("| contender | num_envs | µs per vector step | time vs SyncVectorEnv | per repeat |")
    print("|---|---:|---:|---:|---|")
    costs: dict[int, list[float]] = {}
    for num_envs in (8, 32):
        contenders: dict[str, Callable[[], float]] = {
            "gymnasium SyncVectorEnv": functools.partial(
                time_sync_vector_env, args.steps, num_envs, warmup),
            "aiovec inline, uvloop, statistics on": functools.partial(
                time_inline, args.steps, num_envs, warmup, timing=True),
            "aiovec inline, uvloop, sub-env timing off": functools.partial(
                time_inline, args.steps, num_envs, warmup, timing=False),
            "aiovec inline, asyncio, statistics on": functools.partial(
                time_inline, args.steps, num_envs, warmup, timing=True, loop="asyncio"),
        }
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.repeats):  # interleaved: drift hits every contender alike
            for name, measure in contenders.items():
                samples[name].append(measure())
        baseline = samples["gymnasium SyncVectorEnv"]
        for name, values in samples.items():
            ratios = [value / base for value, base in zip(values, baseline)]
            median = statistics.median(values)
            if name == "aiovec inline, uvloop, statistics on":
                checks.append(Check(f"CartPole-v1 n={num_envs}, aiovec inline with statistics "
                                    "vs SyncVectorEnv, time per vector step",
                                    median / statistics.median(baseline), 1.10, at_most=True,
                                    per_repeat=ratios))
            print(f"| {name} | {num_envs} | {median * 1e6:.1f} | "
                  f"{median / statistics.median(baseline):.2f}x | {spread(ratios)} |",
                  flush=True)
        costs[num_envs] = [
            (on - off) / num_envs * 1e6 for on, off in zip(
                samples["aiovec inline, uvloop, statistics on"],
                samples["aiovec inline, uvloop, sub-env timing off"])]

    print("\n# What statistics cost per sub-env step (inline, uvloop; on - off, paired "
          "within each repeat)\n")
    print("| num_envs | µs per sub-env step | per repeat |")
    print("|---:|---:|---|")
    for num_envs, values in costs.items():
        print(f"| {num_envs} | {statistics.median(values):.3f} | {spread(values)} |")

    slot_samples: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.repeats):
        for timing in (True, False):
            slot_samples[timing].append(time_slot_step(timing, args.slot_steps))
    differences = [(on - off) * 1e9 for on, off in zip(slot_samples[True], slot_samples[False])]
    print(f"\n# One sub-env step alone (EnvSlot.run(Op.STEP) on a no-op env, best of 5 x "
          f"{args.slot_steps}, {args.repeats} interleaved repeats)\n")
    print("| timing | ns per step | per repeat |")
    print("|---|---:|---|")
    for timing, values in slot_samples.items():
        label = "on" if timing else "off"
        print(f"| {label} | {statistics.median(values) * 1e9:.0f} | "
              f"{', '.join(f'{value * 1e9:.0f}' for value in values)} |")
    print(f"| on - off | {statistics.median(differences):.0f} | "
          f"{', '.join(f'{value:.0f}' for value in differences)} |")
    checks.append(Check("statistics cost per sub-env step (EnvSlot, on - off)",
                        statistics.median(differences) / 1000, 0.1, unit=" µs", at_most=True,
                        per_repeat=[value / 1000 for value in differences]))
    print("\n# Targets (reported, never asserted)\n")
    print("```", *(check.line() for check in checks), "```", sep="\n")


if __name__ == "__main__":
    main()
