"""A tiny client of the served envs: lease a session, play it over HTTP, then as a remote
vector env (aiovec.remote, over a WebSocket).

    python examples/serve/server.py --port 8000 &
    python examples/serve/client.py --url http://127.0.0.1:8000 --env-id CartPole-v1

It sends only data (an env id, a seed, actions): the server holds the environments and never
runs anything the client sends.
"""

from __future__ import annotations

import argparse
import random

import anyio
import httpx
import numpy as np

from aiovec.remote import AsyncRemoteVectorEnv


async def play_over_http(client: httpx.AsyncClient, env_id: str, num_envs: int,
                         steps: int, rng: random.Random) -> float:
    session = (await client.post("/sessions", json={"env_id": env_id,
                                                    "num_envs": num_envs})).json()
    session_id = session["session_id"]
    try:
        await client.post(f"/sessions/{session_id}/reset", json={"seed": 0})
        total = 0.0
        for _ in range(steps):
            actions = [rng.randrange(2) for _ in range(num_envs)]
            response = await client.post(f"/sessions/{session_id}/step",
                                         json={"actions": actions})
            response.raise_for_status()
            total += sum(response.json()["rewards"])
        return total
    finally:
        await client.delete(f"/sessions/{session_id}")


async def play_as_vector_env(url: str, env_id: str, num_envs: int, steps: int,
                             rng: random.Random) -> float:
    """The same session through aiovec.remote: a vector env whose sub-envs run on the server
    (one WebSocket; arrays travel as raw bytes)."""
    total = 0.0
    async with AsyncRemoteVectorEnv(url, env_id, num_envs) as envs:  # the connection is the lease
        await envs.reset(seed=1)
        for _ in range(steps):
            actions = np.array([rng.randrange(2) for _ in range(num_envs)])
            _, rewards, _, _, _ = await envs.step(actions)
            total += float(rewards.sum())
    return total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(0)
    async with httpx.AsyncClient(base_url=args.url, timeout=60) as client:
        print("server:", (await client.get("/healthz")).json())
        http_reward = await play_over_http(client, args.env_id, args.num_envs, args.steps, rng)
        print(f"http: {args.steps} steps of {args.num_envs} {args.env_id} envs, "
              f"total reward {http_reward:.0f}")
        remote_reward = await play_as_vector_env(args.url, args.env_id, args.num_envs,
                                                 args.steps, rng)
        print(f"remote vector env: {args.steps} steps of {args.num_envs} {args.env_id} envs, "
              f"total reward {remote_reward:.0f}")


if __name__ == "__main__":
    anyio.run(main)
