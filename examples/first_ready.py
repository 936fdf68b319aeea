"""First-ready batches vs full-batch steps, on envs whose step times are heavy-tailed.

Each env's step waits a time drawn from a log-normal clipped to 1-20 ms: ``await envs.step``
waits for the slowest of all, while ``send``/``recv`` hand back the first ``--batch-size`` to
finish and keep the others working meanwhile. The first-ready loop is shown in both forms,
``batch = await envs.recv()`` and ``async for batch in envs.batches()``. ``--backend async``
(default) steps coroutine envs that ``await`` their delay; ``--backend thread`` steps plain
Gymnasium envs that ``time.sleep`` it, each on its own thread.

    python examples/first_ready.py --num-envs 32 --batch-size 16 --seconds 3
    python examples/first_ready.py --backend thread --loop trio
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

import aiovec

EPISODE_LENGTH = 200


def step_seconds(rng: np.random.Generator) -> float:
    """A step time with a long tail: log-normal, median 3 ms, clipped to 1-20 ms."""
    return float(np.clip(rng.lognormal(np.log(0.003), 0.8), 0.001, 0.020))


class HeavyTailEnv(aiovec.AsyncEnv[np.ndarray, np.int64]):
    """A coroutine env that awaits its step time, like a client of a slow remote service."""

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
        await anyio.sleep(step_seconds(self.np_random))
        self.steps += 1
        done = self.steps >= EPISODE_LENGTH
        return np.array([self.steps], dtype=np.float64), 1.0, done, False, {}


class BlockingHeavyTailEnv(gym.Env[np.ndarray, np.int64]):
    """The same env written the ordinary way: it blocks its (own) thread for the step time."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.steps = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(step_seconds(self.np_random))
        self.steps += 1
        done = self.steps >= EPISODE_LENGTH
        return np.array([self.steps], dtype=np.float64), 1.0, done, False, {}


def policy(observations: np.ndarray) -> np.ndarray:
    """Any batch of actions will do here: one per row of ``observations``."""
    return np.zeros(len(observations), dtype=np.int64)


async def full_batches(envs: aiovec.AsyncVectorEnv, seconds: float) -> float:
    """Sub-env steps per second with ``await envs.step``: every step waits for the slowest."""
    observations, _ = await envs.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        observations, *_ = await envs.step(policy(observations))
        steps += envs.num_envs
    return steps / (time.perf_counter() - started)


async def first_ready_recv(envs: aiovec.AsyncVectorEnv, seconds: float) -> float:
    """Sub-env steps per second with ``send`` and ``await recv()``, counting what is owed."""
    observations, _ = await envs.reset(seed=0)
    envs.send(policy(observations))
    owed, steps, started = envs.num_envs, 0, time.perf_counter()
    while owed:
        batch = await envs.recv()  # the first `batch_size` to finish, of those still owed
        owed -= len(batch.env_ids)
        steps += len(batch.env_ids)
        if time.perf_counter() - started < seconds:  # else: stop sending, receive what is owed
            envs.send(policy(batch.observations), batch.env_ids)
            owed += len(batch.env_ids)
    return steps / (time.perf_counter() - started)


async def first_ready_batches(envs: aiovec.AsyncVectorEnv, seconds: float) -> float:
    """The same loop in the ``async for`` form: it ends once nothing sent is left."""
    observations, _ = await envs.reset(seed=0)
    envs.send(policy(observations))
    steps, started = 0, time.perf_counter()
    async for batch in envs.batches():
        steps += len(batch.env_ids)
        if time.perf_counter() - started < seconds:
            envs.send(policy(batch.observations), batch.env_ids)
    return steps / (time.perf_counter() - started)


async def main(num_envs: int, batch_size: int, seconds: float, backend: str) -> None:
    env_fn = HeavyTailEnv if backend == "async" else BlockingHeavyTailEnv
    async with aiovec.AsyncVectorEnv([env_fn] * num_envs, backend=backend,
                                     batch_size=batch_size) as envs:
        full = await full_batches(envs, seconds)
        received = await first_ready_recv(envs, seconds)
        iterated = await first_ready_batches(envs, seconds)
    print(f"{num_envs} envs, 1-20 ms heavy-tailed steps, backend={envs.backend_name!r}, "
          f"{seconds:g} s per run")
    print(f"full-batch  await envs.step()            {full:10,.0f} steps/s")
    print(f"first-ready await envs.recv()            {received:10,.0f} steps/s  "
          f"({received / full:.2f}x, batch_size={batch_size})")
    print(f"first-ready async for envs.batches()     {iterated:10,.0f} steps/s  "
          f"({iterated / full:.2f}x, batch_size={batch_size})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each of the 3 runs")
    parser.add_argument("--backend", choices=["async", "thread"], default="async")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    anyio.run(main, args.num_envs, args.batch_size, args.seconds, args.backend,
              backend=args.loop)
