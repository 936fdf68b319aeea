"""Sub-envs on a Ray cluster: placed by a custom resource, recovered when their node dies.

By default this builds a local two-node cluster on this machine (``ray.cluster_utils.Cluster``,
loopback only): a head node, and a "simulator" node offering a custom resource ``simulator``
that the sub-envs' actors ask for, as envs needing special hardware would. It steps CartPole on
the simulator node, then (``--kill-node``) kills that node mid-run, adds a replacement and
keeps stepping: with ``restart=True``, the episodes the dead node cut come back
``truncated=True`` and the sub-envs run on the replacement.

    python examples/ray_cluster.py --num-envs 8 --steps 200 --kill-node
    python examples/ray_cluster.py --address auto   # a cluster you started: needs a node
                                                    # with the "simulator" resource

Nothing else changes from a single-machine script: ``backend="ray"`` and ``actor_options``.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

import aiovec

SIMULATOR = "simulator"


class Located(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole that can say which node it runs on (``envs.call("node")`` runs this in the
    sub-env's actor)."""

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())[:8]


def make_env() -> gym.Env[Any, Any]:
    return Located(gym.make("CartPole-v1"))


async def rollout(envs: aiovec.AsyncVectorEnv, steps: int, rng: np.random.Generator) -> int:
    """Step with random actions; return how many episodes ended."""
    episodes = 0
    for _ in range(steps):
        _, _, terminations, truncations, _ = await envs.step(
            rng.integers(0, 2, envs.num_envs))
        episodes += int(np.logical_or(terminations, truncations).sum())
    return episodes


async def main(args: argparse.Namespace, cluster: Any) -> None:
    placement = {"num_cpus": 0, "resources": {SIMULATOR: 1}}
    rng = np.random.default_rng(0)
    async with aiovec.AsyncVectorEnv([make_env] * args.num_envs,
                                     backend="ray", num_workers=args.num_actors,
                                     actor_options=placement, restart=True) as envs:
        await envs.reset(seed=0)
        print(envs)
        nodes = collections.Counter(await envs.call("node"))
        print(f"sub-envs per node: {dict(nodes)}")
        started = time.perf_counter()
        episodes = await rollout(envs, args.steps, rng)
        rate = args.num_envs * args.steps / (time.perf_counter() - started)
        print(f"stepped {args.steps} times: {rate:,.0f} steps/s, {episodes} episodes ended")
        if not args.kill_node:
            return
        if cluster is None:
            raise SystemExit("--kill-node needs the local cluster this script builds")
        victim = cluster.list_all_nodes()[-1]
        cluster.remove_node(victim, allow_graceful=False)
        cluster.add_node(num_cpus=2, resources={SIMULATOR: args.num_envs})
        print("killed the simulator node, added a replacement")
        _, _, _, truncations, infos = await envs.step(rng.integers(0, 2, envs.num_envs))
        print(f"episodes cut by the node's death (truncated): {int(truncations.sum())}; "
              f"restarted sub-envs: {int(infos['_restart'].sum())}")
        print(f"first restart reason: {infos['restart'][infos['_restart']][0].splitlines()[0]}")
        await rollout(envs, args.steps, rng)
        nodes = collections.Counter(await envs.call("node"))
        print(f"sub-envs per node after recovery: {dict(nodes)}")
        print(f"statistics: restarts={envs.statistics().restarts}")


def local_cluster(num_envs: int) -> Any:
    """A head node and one simulator node, on loopback, noticing dead nodes in ~2 s."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # stay on 127.0.0.1
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False,
        "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                           "health_check_timeout_ms": 500, "health_check_failure_threshold": 3},
    })
    cluster.add_node(num_cpus=2, resources={SIMULATOR: num_envs})
    return cluster


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--kill-node", action="store_true")
    parser.add_argument("--address", help="an existing cluster (default: build a local one)")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    arguments = parser.parse_args()

    import ray

    local = None if arguments.address else local_cluster(arguments.num_envs)
    try:
        ray.init(address=arguments.address or local.address, log_to_driver=False,
                 configure_logging=False)
        anyio.run(main, arguments, local, backend=arguments.loop)
    finally:
        ray.shutdown()
        if local is not None:
            local.shutdown()
