"""Drop-in: an existing Gymnasium script that moves to aiovec by changing one line.

``collect`` below is ordinary Gymnasium code: a vector env wrapped in Gymnasium's own
``RecordEpisodeStatistics``, seeded, stepped with random actions, the episode returns
gathered from ``infos["episode"]``. ``make_envs`` builds it on
``gymnasium.vector.AsyncVectorEnv`` or on ``aiovec.VectorEnv`` (the one changed line); the
script runs both, checks that they produced the same trajectories, and prints their speed.

    python examples/dropin_gymnasium.py --num-envs 16 --steps 2000
"""

from __future__ import annotations

import argparse
import hashlib
import time
from typing import Any

import gymnasium as gym
import numpy as np

import aiovec


def make_envs(library: str, num_envs: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    env_fns = [lambda: gym.make("CartPole-v1")] * num_envs
    if library == "gymnasium":
        return gym.vector.AsyncVectorEnv(env_fns)
    return aiovec.VectorEnv(env_fns)  # <- the only change an existing script needs


def collect(envs: gym.vector.VectorEnv[Any, Any, Any], steps: int,
            seed: int) -> tuple[list[float], str, float]:
    """(episode returns, a digest of every observation, env steps per second)."""
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs.action_space.seed(seed)
    digest = hashlib.sha256()
    returns: list[float] = []
    obs, _ = envs.reset(seed=seed)
    started = time.perf_counter()
    for _ in range(steps):
        obs, _, _, _, infos = envs.step(envs.action_space.sample())
        digest.update(np.ascontiguousarray(obs).tobytes())
        if "episode" in infos:
            returns += infos["episode"]["r"][infos["_episode"]].tolist()
    rate = steps * envs.num_envs / (time.perf_counter() - started)
    envs.close()
    return returns, digest.hexdigest()[:16], rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = {}
    for library in ("gymnasium", "aiovec"):
        returns, digest, rate = collect(make_envs(library, args.num_envs), args.steps,
                                        args.seed)
        results[library] = (returns, digest)
        print(f"{library:>9}: {len(returns)} episodes, mean return {np.mean(returns):.2f}, "
              f"observations digest {digest}, {rate:,.0f} steps/s")
    same = results["gymnasium"] == results["aiovec"]
    print(f"identical trajectories: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
