"""Foundation figures: the cost of ``await envs.step()`` and the thread backend's latency.

1. CartPole-v1, 8 envs: aiovec inline (async), aiovec shim (inline) and aiovec thread against
   ``gymnasium.vector.SyncVectorEnv``, interleaved, median of repeats → ratios from one run.
2. 8 envs that each sleep 5 ms per step: vector-step latency of the thread backend (ideal ≈ 5 ms).

Run: ``.venv/bin/python benchmarks/overhead.py [--repeats 7]``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from harness import arguments, header

import aiovec

NUM_ENVS = 8


class SleepEnv(gym.Env[np.ndarray, int]):
    """An I/O-bound env: every step sleeps ``delay`` seconds (the GIL is released)."""

    observation_space = gym.spaces.Box(0, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, delay: float = 0.005) -> None:
        self.delay = delay

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: int) -> Any:
        time.sleep(self.delay)
        return np.zeros(4, np.float32), 0.0, False, False, {}


def cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def time_vector_env(steps: int, envs: gym.vector.VectorEnv[Any, Any, Any],
                    warmup: int = 0) -> float:
    """Seconds per ``envs.step`` of a sync vector env, after ``warmup`` untimed steps
    (closed afterwards)."""
    try:
        envs.reset(seed=0)
        actions = np.zeros(envs.num_envs, np.int64)
        for _ in range(warmup):
            envs.step(actions)
        started = time.perf_counter()
        for _ in range(steps):
            envs.step(actions)
        return (time.perf_counter() - started) / steps
    finally:
        envs.close()


def time_async(steps: int, backend: str, factory: Callable[[], gym.Env[Any, Any]] = cartpole,
               loop: str = "asyncio", num_envs: int = NUM_ENVS, warmup: int = 0) -> float:
    """Seconds per ``await envs.step()``, after ``warmup`` untimed steps."""
    async def run() -> float:
        async with aiovec.AsyncVectorEnv([factory] * num_envs, backend=backend) as envs:
            await envs.reset(seed=0)
            actions = np.zeros(num_envs, np.int64)
            for _ in range(warmup):
                await envs.step(actions)
            started = time.perf_counter()
            for _ in range(steps):
                await envs.step(actions)
            return (time.perf_counter() - started) / steps

    options = {"use_uvloop": True} if loop == "uvloop" else {}
    return anyio.run(run, backend="asyncio", backend_options=options)


def main() -> None:
    parser = arguments(__doc__, repeats=7)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()

    contenders: dict[str, Callable[[], float]] = {
        "gymnasium SyncVectorEnv": lambda: time_vector_env(
            args.steps, gym.vector.SyncVectorEnv([cartpole] * NUM_ENVS)),
        "aiovec inline (await step)": lambda: time_async(args.steps, "inline"),
        "aiovec inline, uvloop": lambda: time_async(args.steps, "inline", loop="uvloop"),
        "aiovec VectorEnv shim (inline)": lambda: time_vector_env(
            args.steps, aiovec.VectorEnv([cartpole] * NUM_ENVS, backend="inline")),
        "aiovec thread (await step)": lambda: time_async(args.steps, "thread"),
    }
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for repeat in range(args.repeats):  # interleaved, so drift hits every contender alike
        for name, measure in contenders.items():
            samples[name].append(measure())
        print(f"  repeat {repeat + 1}/{args.repeats} done", flush=True)
    baseline = statistics.median(samples["gymnasium SyncVectorEnv"])
    print("\n".join(["", *header("The cost of `await envs.step()`",
                                 f"median of {args.repeats} interleaved runs")]))
    print(f"CartPole-v1, {NUM_ENVS} envs, median of {args.repeats} runs x {args.steps} steps")
    print("| vectorizer | µs per vector step | time vs SyncVectorEnv |")
    print("|---|---|---|")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1e6:.1f} | {median / baseline:.2f}x |")

    sleepy = [time_async(200, "thread", SleepEnv) for _ in range(args.repeats)]
    print(f"\n{NUM_ENVS} envs sleeping 5 ms per step, thread backend: vector-step latency "
          f"median {statistics.median(sleepy) * 1e3:.2f} ms (ideal ≈ 5 ms)")


if __name__ == "__main__":
    main()
