"""Multi-agent: PettingZoo parallel envs, vectorized, with agents that die mid-episode.

Knights and archers fight zombies (PettingZoo's ``knights_archers_zombies``); a zombie that
reaches a knight or an archer kills it, so agents drop out before the episode ends. Every
result is batched per agent, ``obs[agent]`` of shape ``(num_envs, *obs_shape)``, and
``infos["active"][agent]`` marks the sub-envs where that agent is present: an absent agent
reads as zeros, never as an old observation, and a random policy here only acts for the
agents that are there. The same loop then runs through the synchronous ``ParallelVectorEnv``.

    pip install 'pettingzoo[butterfly]'   # or: pip install pettingzoo pygame pymunk
    python examples/multiagent.py --num-envs 8 --steps 300
    python examples/multiagent.py --backend thread --loop trio
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import anyio
import numpy as np
import pettingzoo

import aiovec

ENV_ID = "butterfly/knights_archers_zombies-v11"


def make_env(max_cycles: int) -> Any:
    """One PettingZoo ``ParallelEnv`` (made where the sub-env lives: thread, worker, actor)."""
    return pettingzoo.make("parallel", ENV_ID, max_cycles=max_cycles, spawn_delay=3)


class RandomPolicy:
    """Uniform random actions for every agent (a real policy would look at ``obs``)."""

    def __init__(self, envs: aiovec.AsyncParallelVectorEnv, seed: int) -> None:
        self.spaces = {agent: envs.action_space(agent) for agent in envs.possible_agents}
        for offset, space in enumerate(self.spaces.values()):
            space.seed(seed + offset)

    def __call__(self, obs: dict[str, Any], active: dict[str, Any]) -> dict[str, Any]:
        # Absent agents' actions are ignored; agents absent from every sub-env may be left out.
        return {agent: space.sample() for agent, space in self.spaces.items()
                if active[agent].any()}


class Tally:
    """Episode returns per agent type, counted only where the agent was present."""

    def __init__(self, envs: aiovec.AsyncParallelVectorEnv) -> None:
        self.returns = {agent: np.zeros(envs.num_envs) for agent in envs.possible_agents}
        self.finished: list[dict[str, float]] = []
        self.absent_rows = 0
        self.present_rows = 0

    def add(self, rewards: dict[str, Any], terminations: dict[str, Any],
            truncations: dict[str, Any], active: dict[str, Any]) -> None:
        episode_over = np.ones_like(next(iter(active.values())))
        for agent, mask in active.items():
            self.returns[agent][mask] += rewards[agent][mask]
            self.present_rows += int(mask.sum())
            self.absent_rows += int((~mask).sum())
            # A sub-env's episode is over when every agent present has finished.
            episode_over &= ~mask | terminations[agent] | truncations[agent]
        for env_index in np.flatnonzero(episode_over):
            self.finished.append({agent: float(returns[env_index])
                                  for agent, returns in self.returns.items()})
            for returns in self.returns.values():
                returns[env_index] = 0.0

    def summary(self) -> str:
        if not self.finished:
            return "no episode finished yet"
        mean = {agent: np.mean([episode[agent] for episode in self.finished])
                for agent in self.returns}
        best = max(mean, key=mean.__getitem__)
        return (f"{len(self.finished)} episodes finished, best mean return {mean[best]:.2f} "
                f"({best}); {self.absent_rows:,} of {self.absent_rows + self.present_rows:,} "
                "agent rows were absent agents (zeros, masked out)")


async def run_async(args: argparse.Namespace) -> None:
    env_fns = [functools.partial(make_env, args.max_cycles)] * args.num_envs
    async with aiovec.AsyncParallelVectorEnv(env_fns, backend=args.backend,
                                             restart=True) as envs:
        print(f"{envs.num_envs} envs x {envs.num_agents} agents {list(envs.possible_agents)} "
              f"on the {envs.backend_name} backend; {envs.total_agents} agents in all")
        policy, tally = RandomPolicy(envs, args.seed), Tally(envs)
        obs, infos = await envs.reset(seed=args.seed)
        started = time.perf_counter()
        for _ in range(args.steps):
            obs, rewards, terminations, truncations, infos = await envs.step(
                policy(obs, infos["active"]))
            tally.add(rewards, terminations, truncations, infos["active"])
        elapsed = time.perf_counter() - started
        rate = args.steps * envs.total_agents / elapsed
        print(f"async:  {rate:,.0f} agent-steps/s; {tally.summary()}")


def run_sync(args: argparse.Namespace) -> None:
    env_fns = [functools.partial(make_env, args.max_cycles)] * args.num_envs
    with aiovec.ParallelVectorEnv(env_fns, backend=args.backend) as envs:
        policy, tally = RandomPolicy(envs.async_env, args.seed), Tally(envs.async_env)
        obs, infos = envs.reset(seed=args.seed)
        started = time.perf_counter()
        for _ in range(args.steps):
            obs, rewards, terminations, truncations, infos = envs.step(
                policy(obs, infos["active"]))
            tally.add(rewards, terminations, truncations, infos["active"])
        rate = args.steps * envs.total_agents / (time.perf_counter() - started)
        print(f"sync:   {rate:,.0f} agent-steps/s; {tally.summary()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--max-cycles", type=int, default=100, help="episode length cap")
    parser.add_argument("--backend", default="process",
                        choices=["inline", "thread", "process", "ray"])
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.backend == "ray":
        import ray
        ray.init(include_dashboard=False, log_to_driver=False)
    anyio.run(run_async, args, backend=args.loop)
    run_sync(args)


if __name__ == "__main__":
    main()
