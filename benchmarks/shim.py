"""The sync shim against ``await`` on the same backend: what a drop-in user pays for blocking calls.

CartPole-v1 on the inline and process backends at 8 and 32 envs. Each repeat measures, one
after the other, ``await envs.step()`` on uvloop, ``await envs.step()`` on asyncio and
``aiovec.VectorEnv.step()``; the report gives each one's median µs per vector step and the
shim's throughput as a fraction of each ``await`` (issue 19's target: ≥ 0.95), with the
per-repeat spread of those ratios.

Run: ``.venv/bin/python benchmarks/shim.py [--repeats 5] [--steps 2000]``.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

from harness import arguments, header
from overhead import cartpole, time_async, time_vector_env  # benchmarks/ is sys.path[0]

import aiovec


def time_shim(steps: int, backend: str, num_envs: int, warmup: int) -> float:
    return time_vector_env(steps, aiovec.VectorEnv([cartpole] * num_envs, backend=backend),
                           warmup)


def main() -> None:
    parser = arguments(__doc__, repeats=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    warmup = args.steps // 10
    print("\n".join(header("The sync shim against `await`",
                           f"median of {args.repeats} interleaved repeats of {args.steps} steps")))
    print("| backend | num_envs | await, uvloop (µs) | await, asyncio (µs) | shim (µs) "
          "| shim vs await uvloop (spread) | shim vs await asyncio (spread) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for backend in ("inline", "process"):
        for num_envs in (8, 32):
            measures: dict[str, Callable[[], float]] = {
                "uvloop": functools.partial(time_async, args.steps, backend, cartpole, "uvloop",
                                            num_envs, warmup),
                "asyncio": functools.partial(time_async, args.steps, backend, cartpole,
                                             "asyncio", num_envs, warmup),
                "shim": functools.partial(time_shim, args.steps, backend, num_envs, warmup),
            }
            samples: dict[str, list[float]] = {name: [] for name in measures}
            for _ in range(args.repeats):  # interleaved: drift hits all three alike
                for name, measure in measures.items():
                    samples[name].append(measure())
            cells = []
            for reference in ("uvloop", "asyncio"):
                ratios = [a / s for a, s in zip(samples[reference], samples["shim"])]
                spread = (max(ratios) - min(ratios)) / statistics.median(ratios)
                ratio = statistics.median(samples[reference]) / statistics.median(samples["shim"])
                cells.append(f"{ratio:.2f}x ({spread:.0%})")
            medians = [statistics.median(samples[name]) * 1e6 for name in measures]
            print(f"| {backend} | {num_envs} | {medians[0]:.1f} | {medians[1]:.1f} | "
                  f"{medians[2]:.1f} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
