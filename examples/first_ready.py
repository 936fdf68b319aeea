"""First-ready batches vs full-batch steps, on envs whose step times are heavy-tailed.

Each env's step awaits a time drawn from a log-normal clipped to 1-20 ms. ``await envs.step``
waits for the slowest of all; ``send``/``recv`` hand back the first ``--batch-size`` to finish
and keep the others working meanwhile.

    python examples/first_ready.py --num-envs 32 --batch-size 16 --seconds 3
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

import aiovec


class HeavyTailEnv(aiovec.AsyncEnv[np.ndarray, np.int64]):
    """Awaits 1-20 ms per step (log-normal, median ~3 ms): a remote service with a long tail."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.steps = 0

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        await super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1), {}

    async def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(float(np.clip(self.np_random.lognormal(np.log(0.003), 0.8),
                                        0.001, 0.020)))
        self.steps += 1
        return np.array([self.steps], dtype=np.float64), 1.0, self.steps >= 200, False, {}


async def full_batches(envs: aiovec.AsyncVectorEnv, seconds: float) -> float:
    """Sub-env steps per second with ``await envs.step``."""
    await envs.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        await envs.step(np.zeros(envs.num_envs, dtype=np.int64))
        steps += envs.num_envs
    return steps / (time.perf_counter() - started)


async def first_ready(envs: aiovec.AsyncVectorEnv, seconds: float) -> float:
    """Sub-env steps per second with ``send``/``recv``, in the ``async for`` form."""
    await envs.reset(seed=0)
    envs.send(np.zeros(envs.num_envs, dtype=np.int64))
    steps, started = 0, time.perf_counter()
    async for batch in envs.batches():
        steps += len(batch.env_ids)
        if time.perf_counter() - started < seconds:  # else: stop sending, the loop drains
            envs.send(np.zeros(len(batch.env_ids), dtype=np.int64), batch.env_ids)
    return steps / (time.perf_counter() - started)


async def main(num_envs: int, batch_size: int, seconds: float) -> None:
    async with aiovec.AsyncVectorEnv([HeavyTailEnv] * num_envs, batch_size=batch_size) as envs:
        full = await full_batches(envs, seconds)
        ready = await first_ready(envs, seconds)
    print(f"{num_envs} envs, 1-20 ms heavy-tailed steps, backend={envs.backend_name!r}")
    print(f"full-batch step:              {full:10,.0f} steps/s")
    print(f"first-ready, batch_size={batch_size:<4} {ready:10,.0f} steps/s  "
          f"({ready / full:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    anyio.run(main, args.num_envs, args.batch_size, args.seconds, backend=args.loop)
