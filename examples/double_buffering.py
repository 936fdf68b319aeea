"""Overlap policy inference with stepping: two halves of the envs, alternating.

Sample Factory's double-buffering idea on aiovec's async API. The envs are split in two
vector envs, A and B. While A steps (in its workers), the policy computes B's next actions;
then B steps while the policy works on A's observations. Inference and simulation overlap,
so when the two take similar time a vector step of all the envs costs about the larger of
the two instead of their sum.

The simulator here waits ``--env-ms`` per step (a remote or GPU-bound simulator: the time is
not this machine's CPU) and the policy is a small numpy MLP whose size sets its cost. The
script runs both loops for ``--seconds`` each and prints the speedup it measured.

    python examples/double_buffering.py --num-envs 16 --env-ms 4 --seconds 3
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


class RemoteSimulator(gym.Env[np.ndarray, np.int64]):
    """Waits ``step_seconds`` per step, like a simulator on another machine or a GPU."""

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
        time.sleep(self.step_seconds)
        self.steps += 1
        obs = self.np_random.uniform(-1, 1, OBS_SIZE).astype(np.float32)
        return obs, float(action == self.steps % 4), False, self.steps >= 200, {}


class Policy:
    """A two-layer MLP in numpy; ``hidden`` sets how long a forward pass takes."""

    def __init__(self, hidden: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = rng.standard_normal((OBS_SIZE, hidden)).astype(np.float32) / 8
        self.w2 = rng.standard_normal((hidden, hidden)).astype(np.float32) / 64
        self.w3 = rng.standard_normal((hidden, 4)).astype(np.float32) / 64

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        hidden = np.tanh(obs @ self.w1)
        hidden = np.tanh(hidden @ self.w2)
        return np.asarray((hidden @ self.w3).argmax(axis=1), dtype=np.int64)


def calibrate(policy: Policy, num_envs: int) -> float:
    """Seconds one forward pass over all the envs' observations takes."""
    obs = np.zeros((num_envs, OBS_SIZE), np.float32)
    policy(obs)
    started = time.perf_counter()
    for _ in range(20):
        policy(obs)
    return (time.perf_counter() - started) / 20


async def sequential(envs: aiovec.AsyncVectorEnv, policy: Policy, seconds: float) -> float:
    """The plain loop: infer for every env, then step every env. Vector steps per second."""
    obs, _ = await envs.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        obs, *_ = await envs.step(policy(obs))
        steps += 1
    return steps / (time.perf_counter() - started)


async def double_buffered(envs: aiovec.AsyncVectorEnv, policy: Policy,
                          seconds: float) -> float:
    """Infer for one half while the other steps (``send`` returns at once, ``recv`` collects).

    Full vector steps (both halves stepped once) per second.
    """
    obs, _ = await envs.reset(seed=0)
    half = envs.num_envs // 2
    ids_a, ids_b = np.arange(half), np.arange(half, envs.num_envs)
    obs_b = obs[half:]
    envs.send(policy(obs[:half]), ids_a)              # A starts stepping
    steps, started = 0, time.perf_counter()
    while True:
        actions_b = policy(obs_b)                     # inference for B while A steps
        obs_a, *_, ids_a = await envs.recv(batch_size=half)
        envs.send(actions_b, ids_b)                   # B steps ...
        actions_a = policy(obs_a)                     # ... while the policy works on A
        obs_b, *_, ids_b = await envs.recv(batch_size=envs.num_envs - half)
        steps += 1
        if time.perf_counter() - started >= seconds:
            break
        envs.send(actions_a, ids_a)
    return steps / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--env-ms", type=float, default=4.0, help="simulator time per step")
    parser.add_argument("--hidden", type=int, default=0,
                        help="policy width (default: sized so inference takes about as "
                             "long as a simulator step)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--backend", default="thread", choices=["thread", "process"])
    args = parser.parse_args()
    hidden = args.hidden or size_policy(args.num_envs, args.env_ms / 1000)
    policy = Policy(hidden)
    inference = calibrate(policy, args.num_envs)
    env_fns = [lambda: RemoteSimulator(args.env_ms / 1000)] * args.num_envs
    async with aiovec.AsyncVectorEnv(env_fns, backend=args.backend) as envs:
        print(f"{args.num_envs} envs ({args.backend} backend), simulator {args.env_ms:g} ms "
              f"per step, policy hidden={hidden}: {inference * 1e3:.2f} ms per forward pass "
              "over all envs")
        plain = await sequential(envs, policy, args.seconds)
        overlapped = await double_buffered(envs, policy, args.seconds)
    print(f"sequential (infer, then step all):      {plain:8.1f} vector steps/s")
    print(f"double-buffered (two halves alternate): {overlapped:8.1f} vector steps/s")
    print(f"speedup: {overlapped / plain:.2f}x")


def size_policy(batch: int, target_seconds: float) -> int:
    """A width (multiple of 32) whose forward pass over ``batch`` rows takes about
    ``target_seconds``: inference and simulation then cost the same, the case
    double-buffering is for."""
    hidden = 64
    while hidden < 8192 and calibrate(Policy(hidden), batch) < target_seconds:
        hidden = (int(hidden * 1.25) + 31) // 32 * 32
    return hidden


if __name__ == "__main__":
    anyio.run(main)
