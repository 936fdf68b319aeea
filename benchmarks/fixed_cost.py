"""The fixed cost of a vector step: µs per step of CartPole x 8 on every local backend, through
the sync shim and through ``await`` (asyncio and uvloop), against Gymnasium's
``SyncVectorEnv``, interleaved.

CartPole's own step costs ~6 µs, so a vector step of 8 is mostly what the vectorizer adds:
this is where a drop-in can be slower than the plain loop it replaces. The async backend
hosts coroutine envs only; it runs CartPole wrapped in a coroutine env that does nothing
else (``AsyncCartPole``). Each repeat measures every contender once, in the same order;
the report gives the median µs per vector step with its range, the time against
``SyncVectorEnv`` (median of the per-repeat ratios) and their spread, and the targets:
the shim with ``backend="auto"`` at least as fast as ``SyncVectorEnv``, ``await`` on the
inline backend within 1.1x its time.

Run: ``.venv/bin/python benchmarks/fixed_cost.py [--repeats 7] [--steps 3000]``; writes
``results/fixed_cost.md`` after a full run.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from harness import Check, arguments, closing_sections, header, median_range, publish, spread_cell
from overhead import cartpole, time_async, time_vector_env  # benchmarks/ is sys.path[0]

import aiovec

NUM_ENVS = 8
RESULTS = Path(__file__).resolve().parent / "results" / "fixed_cost.md"
SYNC = "gymnasium SyncVectorEnv"


class AsyncCartPole(aiovec.AsyncEnv[Any, Any]):
    """CartPole as a coroutine env: each call awaits nothing, so only the backend's cost adds."""

    def __init__(self) -> None:
        self.env = cartpole()
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> Any:
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> Any:
        return self.env.step(action)

    async def close(self) -> None:
        self.env.close()


def time_shim(steps: int, backend: str, warmup: int) -> float:
    factory = AsyncCartPole if backend == "async" else cartpole
    return time_vector_env(steps, aiovec.VectorEnv([factory] * NUM_ENVS, backend=backend),
                           warmup)


def contenders(steps: int) -> dict[str, Callable[[], float]]:
    """Each contender's measure: seconds per vector step."""
    warmup = steps // 10
    measures: dict[str, Callable[[], float]] = {
        SYNC: functools.partial(time_vector_env, steps,
                                gym.vector.SyncVectorEnv([cartpole] * NUM_ENVS), warmup),
    }
    for backend in ("auto", "inline", "thread", "process", "async"):
        measures[f"shim, {backend}"] = functools.partial(time_shim, steps, backend, warmup)
        if backend == "auto":
            continue
        factory = AsyncCartPole if backend == "async" else cartpole
        for loop in ("asyncio", "uvloop"):
            measures[f"await, {backend}, {loop}"] = functools.partial(
                time_async, steps, backend, factory, loop, NUM_ENVS, warmup)
    return measures


def main() -> None:
    parser = arguments(__doc__, repeats=7, quick="1 repeat of 300 steps", output=RESULTS)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    repeats, steps = (1, 300) if args.quick else (args.repeats, args.steps)
    measures = contenders(steps)
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for repeat in range(repeats):  # interleaved: drift hits every contender alike
        for name, measure in measures.items():
            samples[name].append(measure())
        print(f"  repeat {repeat + 1}/{repeats} done", flush=True)
    with aiovec.VectorEnv([cartpole] * NUM_ENVS) as probe:
        auto_pick = probe.backend_name
    # Per repeat: a contender's time over SyncVectorEnv's in the same repeat.
    ratios = {name: [value / sync for value, sync in zip(values, samples[SYNC])]
              for name, values in samples.items()}
    lines = header("The fixed cost of a vector step",
                   f"CartPole-v1 x {NUM_ENVS}; {repeats} interleaved repeats of {steps} steps "
                   f"(after {steps // 10} untimed); medians, (min-max) over repeats",
                   packages=("uvloop",))
    lines += ["| contender | µs per vector step | time vs SyncVectorEnv | spread |",
              "|---|---:|---:|---:|"]
    for name, values in samples.items():
        lines.append(f"| {name} | {median_range(values, 1e6)} | "
                     f"{statistics.median(ratios[name]):.2f}x | {spread_cell(ratios[name])} |")
    checks = [
        Check("CartPole x 8, the shim with backend='auto' (throughput vs SyncVectorEnv)",
              statistics.median(1 / r for r in ratios["shim, auto"]), 1.0,
              per_repeat=[1 / r for r in ratios["shim, auto"]]),
        *(Check(f"CartPole x 8, await on the inline backend, {loop} (time vs SyncVectorEnv)",
                statistics.median(ratios[f"await, inline, {loop}"]), 1.1, at_most=True,
                per_repeat=ratios[f"await, inline, {loop}"])
          for loop in ("asyncio", "uvloop")),
    ]
    notes = [f"`auto` picked the {auto_pick} backend for these sub-envs.",
             "The shim runs an inline step in the caller's thread with no event loop; the "
             "other backends' shims run the step on their private event loop.",
             "Ray is left out: its actors are measured by `ray_overhead.py`."]
    lines += ["", *closing_sections(checks, notes)]
    publish("\n".join(lines), args.output, RESULTS, args.quick)


if __name__ == "__main__":
    main()
