"""Quickstart: step N CartPole envs concurrently, with the async API and with the sync shim.

Run it with ``make demo`` (or ``python examples/quickstart.py --num-envs 8 --steps 2000``).
"""

from __future__ import annotations

import argparse
import time

import anyio
import gymnasium as gym

import aiovec


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


async def async_demo(num_envs: int, steps: int, backend: str) -> float:
    """The async API: ``async with`` starts the sub-envs; every call is awaited."""
    async with aiovec.AsyncVectorEnv([make_cartpole] * num_envs, backend=backend) as envs:
        observations, infos = await envs.reset(seed=42)
        envs.action_space.seed(42)
        episodes, total_reward = 0, 0.0
        started = time.perf_counter()
        for _ in range(steps):
            actions = envs.action_space.sample()
            observations, rewards, terminations, truncations, infos = await envs.step(actions)
            episodes += int((terminations | truncations).sum())
            total_reward += float(rewards.sum())
        elapsed = time.perf_counter() - started
    print(f"  async  {backend:>6}: {num_envs * steps / elapsed:>9,.0f} steps/s, "
          f"{episodes} episodes finished, mean return {total_reward / max(episodes, 1):.1f}, "
          f"last batch {observations.shape} with {len(infos)} info keys")
    return elapsed


def sync_demo(num_envs: int, steps: int, backend: str) -> float:
    """The sync shim: a drop-in for gymnasium.vector.AsyncVectorEnv."""
    envs = aiovec.VectorEnv([make_cartpole] * num_envs, backend=backend)
    try:
        envs.reset(seed=42)
        envs.action_space.seed(42)
        started = time.perf_counter()
        for _ in range(steps):
            envs.step(envs.action_space.sample())
        elapsed = time.perf_counter() - started
    finally:
        envs.close()
    print(f"  sync   {backend:>6}: {num_envs * steps / elapsed:>9,.0f} steps/s")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2000, help="vector steps per run")
    args = parser.parse_args()
    print(f"aiovec {aiovec.__version__}: {args.num_envs} CartPole-v1 envs, "
          f"{args.steps} vector steps each run")
    for backend in ("inline", "thread", "process"):
        anyio.run(async_demo, args.num_envs, args.steps, backend)
        sync_demo(args.num_envs, args.steps, backend)


if __name__ == "__main__":
    main()
