"""Overlap policy inference with stepping: two halves of the envs, alternating.

Sample Factory's double-buffering idea on aiovec's async API. The envs are split in two
halves, A and B. While A steps (in the worker processes), the policy computes B's next actions
on its accelerator; then B steps while the policy works on A's observations. ``send`` returns
at once and ``recv`` collects a half, so one vector env does it all.

Here each env burns ``--env-ms`` of CPU per step (a simulator on this machine's cores) and the
policy is a remote or accelerator call that takes ``--inference-ms`` of wall time without
using these cores (modelled as an ``await``; the actions come from a small numpy MLP). By
default the inference time is set to the measured time of a vector step, the case
double-buffering is for: a plain loop pays inference + stepping, the double-buffered one
about the larger of the two. The script runs both loops and prints the speedup it measured.

    python examples/double_buffering.py --num-envs 16 --env-ms 1 --seconds 3
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

import aiovec

OBS_SIZE = 32


class CpuSimulator(gym.Env[np.ndarray, np.int64]):
    """Burns ``step_seconds`` of CPU per step, like a physics simulator."""

    def __init__(self, step_seconds: float) -> None:
        self.step_seconds = step_seconds
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (OBS_SIZE,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.steps = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        return self.np_random.uniform(-1, 1, OBS_SIZE).astype(np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        deadline = time.perf_counter() + self.step_seconds
        while time.perf_counter() < deadline:
            pass
        self.steps += 1
        obs = self.np_random.uniform(-1, 1, OBS_SIZE).astype(np.float32)
        return obs, float(action == self.steps % 4), False, self.steps >= 200, {}


class RemotePolicy:
    """A policy served elsewhere (a GPU, an inference server): ``await policy(obs)`` takes
    ``latency`` seconds of wall time and none of this machine's CPU."""

    def __init__(self, latency: float, seed: int = 0) -> None:
        self.latency = latency
        rng = np.random.default_rng(seed)
        self.weights = rng.standard_normal((OBS_SIZE, 4)).astype(np.float32)

    async def __call__(self, obs: np.ndarray) -> np.ndarray:
        await anyio.sleep(self.latency)
        return np.asarray((obs @ self.weights).argmax(axis=1), dtype=np.int64)


async def stepping_only(envs: aiovec.AsyncVectorEnv, seconds: float) -> float:
    """Seconds per vector step with no policy at all (to size the inference time)."""
    await envs.reset(seed=0)
    actions = np.zeros(envs.num_envs, dtype=np.int64)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        await envs.step(actions)
        steps += 1
    return (time.perf_counter() - started) / steps


async def sequential(envs: aiovec.AsyncVectorEnv, policy: RemotePolicy, seconds: float) -> float:
    """The plain loop: infer for every env, then step every env. Vector steps per second."""
    obs, _ = await envs.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        obs, *_ = await envs.step(await policy(obs))
        steps += 1
    return steps / (time.perf_counter() - started)


async def double_buffered(envs: aiovec.AsyncVectorEnv, policy: RemotePolicy,
                          seconds: float) -> float:
    """Infer for one half while the other steps. Full vector steps (both halves) per second.

    The halves interleave (even and odd sub-envs), so each worker process hosts envs of both
    and stepping one half keeps every core busy.
    """
    obs, _ = await envs.reset(seed=0)
    ids_a, ids_b = np.arange(0, envs.num_envs, 2), np.arange(1, envs.num_envs, 2)
    obs_b = obs[ids_b]
    envs.send(await policy(obs[ids_a]), ids_a)          # A starts stepping
    steps, started = 0, time.perf_counter()
    while True:
        actions_b = await policy(obs_b)                 # inference for B while A steps
        obs_a, *_, ids_a = await envs.recv(batch_size=len(ids_a))
        envs.send(actions_b, ids_b)                     # B steps ...
        actions_a = await policy(obs_a)                 # ... while the policy works on A
        obs_b, *_, ids_b = await envs.recv(batch_size=len(ids_b))
        steps += 1
        if time.perf_counter() - started >= seconds:
            break
        envs.send(actions_a, ids_a)
    return steps / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--env-ms", type=float, default=1.0, help="CPU time per env step")
    parser.add_argument("--inference-ms", type=float, default=0.0,
                        help="policy latency for a whole batch (default: one vector step)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--backend", default="process", choices=["process", "thread"])
    args = parser.parse_args()
    env_fns = [lambda: CpuSimulator(args.env_ms / 1000)] * args.num_envs
    async with aiovec.AsyncVectorEnv(env_fns, backend=args.backend) as envs:
        step_time = await stepping_only(envs, min(1.0, args.seconds))
        latency = args.inference_ms / 1000 or step_time
        # Inference for half the envs takes half as long (a batch-proportional cost).
        full, half = RemotePolicy(latency), RemotePolicy(latency / 2)
        print(f"{args.num_envs} envs ({args.backend} backend, {args.env_ms:g} ms of CPU per "
              f"env step): a vector step takes {step_time * 1e3:.2f} ms; policy inference "
              f"{latency * 1e3:.2f} ms per full batch")
        plain = await sequential(envs, full, args.seconds)
        overlapped = await double_buffered(envs, half, args.seconds)
    print(f"sequential (infer, then step all):      {plain:8.1f} vector steps/s")
    print(f"double-buffered (two halves alternate): {overlapped:8.1f} vector steps/s")
    print(f"speedup: {overlapped / plain:.2f}x")


if __name__ == "__main__":
    anyio.run(main)
